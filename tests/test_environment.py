"""pyproject.toml is the one source of truth; environment.yml must describe the same environment."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name, where they differ


def _split(requirement: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    assert match, requirement
    return match.group(1).lower(), match.group(2).replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(_split(r) for r in data["project"]["dependencies"])


def conda_requirements() -> dict[str, str]:
    deps, inside = {}, False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            inside = True
            continue
        if inside and line.startswith("  - "):
            name, spec = _split(line[4:])
            deps[name] = spec.replace("=", "==", 1) if re.match(r"^=[^=]", spec) else spec
    return deps


def test_environment_yml_lists_the_same_packages_and_versions_as_pyproject():
    conda = conda_requirements()
    for name, spec in pyproject_requirements().items():
        conda_name = CONDA_NAMES.get(name, name)
        assert conda_name in conda, f"{name} is in pyproject.toml but not in environment.yml"
        assert conda[conda_name] == spec, (
            f"{name}: pyproject says {spec!r}, environment.yml {conda[conda_name]!r}"
        )
    extra = set(conda) - {CONDA_NAMES.get(n, n) for n in pyproject_requirements()} - {"python", "pip"}
    assert not extra, f"environment.yml has packages pyproject.toml lacks: {sorted(extra)}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", ci, re.M)


def test_lab_keeps_token_authentication():
    makefile = (ROOT / "Makefile").read_text()
    lab = makefile[makefile.index("\nlab:") :].split("\n\n")[0]
    assert "127.0.0.1" in lab
    assert "token=''" not in lab and 'token=""' not in lab and "disable_check_xsrf" not in lab
