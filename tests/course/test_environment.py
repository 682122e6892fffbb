"""pyproject.toml is the one source of truth; environment.yml must describe the same environment; the
lessons ask for the kernel that `make` installs."""

from __future__ import annotations

import json
import re
import tomllib

from support.paths import REPO_ROOT

ROOT = REPO_ROOT
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


def makefile_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"the Makefile sets no {name}"
    return match.group(1).strip()


def test_every_notebook_asks_for_the_kernel_that_make_installs_inside_the_venv():
    makefile = (ROOT / "Makefile").read_text()
    assert "ipykernel install --sys-prefix --name $(KERNEL)" in makefile and "--user" not in makefile
    wanted = {"name": makefile_variable("KERNEL"), "display_name": makefile_variable("KERNEL_TITLE")}
    # the lessons and the assignments' sources (not nbgrader's generated copies or Jupyter's checkpoints)
    lessons = ROOT / "notebooks"
    notebooks = [*lessons.glob("*.ipynb"), *(lessons / "assignments" / "source").glob("*/*.ipynb")]
    assert len(notebooks) >= 13
    for path in notebooks:
        spec = json.loads(path.read_text())["metadata"]["kernelspec"]
        assert {k: spec[k] for k in wanted} == wanted, path.relative_to(ROOT)
