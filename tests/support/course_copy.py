"""A temp copy of the course directory with its own HOME, Jupyter dirs, exchange and gradebook
(nbgrader's)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

from support.assignments import (
    COURSE,
)  # fmt: skip


def hermetic_env(tmp: Path) -> dict[str, str]:
    """The variables that keep nbgrader, Jupyter and IPython inside `tmp`: HOME and their own dirs."""
    dirs = {
        "HOME": "home", "JUPYTER_CONFIG_DIR": "jupyter-config", "JUPYTER_DATA_DIR": "jupyter-data",
        "JUPYTER_RUNTIME_DIR": "jupyter-runtime", "IPYTHONDIR": "ipython",
    }  # fmt: skip
    return {key: str(tmp / name) for key, name in dirs.items()}


def _hermetic_env(tmp: Path) -> dict[str, str | None]:
    env = hermetic_env(tmp)
    saved = {k: os.environ.get(k) for k in [*env, "PATH"]}
    for key, value in env.items():
        Path(value).mkdir()
        os.environ[key] = value
    # nbgrader runs its database migrations with the `alembic` command found on PATH
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return saved


def _course_config(course: Path, exchange: Path):
    """The course's own nbgrader_config.py (the feedback preprocessor is in it), rooted in the temp copy."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    config.Exchange.root = str(exchange)
    config.CollectApp.check_owner = False  # every "student" here is this test's user
    # a04c: a rank that waits this long is named (the engines' 10 s, shortened: a test's submission that
    # deadlocks or misses a message costs this per run; a correct run never waits a second)
    config.SandboxedExecute.rank_stall_s = 5.0
    config.SandboxedExecute.rank_cases = 2  # of its hidden matrix: one run of each kind, within the budget
    return config


@contextlib.contextmanager
def course_copy(tmp: Path):
    """A temp copy of the course directory, its own HOME, Jupyter dirs, exchange and gradebook, as the
    working directory: yields (course, config, nbgrader's API); puts everything back afterwards."""
    from nbgrader.apps import NbGraderAPI

    course, exchange = tmp / "course", tmp / "exchange"
    shutil.copytree(
        COURSE, course, ignore=shutil.ignore_patterns("release", "submitted", "autograded", "*.db")
    )
    exchange.mkdir()
    saved, cwd = _hermetic_env(tmp), Path.cwd()
    os.chdir(course)
    try:
        config = _course_config(course, exchange)
        yield course, config, NbGraderAPI(config=config)
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
