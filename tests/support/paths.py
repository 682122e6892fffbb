"""Where the course's files are, for tests in any folder below tests/."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/support/paths.py -> the repository
