"""The student kit: a working copy of the lessons and the *released* assignments, what `make lab` serves.

The repository is the instructor's copy: `notebooks/assignments/source/` holds every solution and hidden
test. A student's JupyterLab must not be able to open it, and running a lesson must not rewrite a tracked
file (or the next `git pull` conflicts). So `make lab` serves `lab/` (git-ignored), built here on first run:

- the lessons, `notebooks/*.ipynb`, and the notation card they link to (`notebooks/*.md`), copied as they
  are;
- every assignment's student version, `assignments/<assignment>/<notebook>.ipynb`, made by nbgrader's own
  `generate_assignment` in a throw-away course directory (solutions replaced by stubs, hidden tests cut,
  outputs cleared, test cells locked): the very file an instructor's `release/` would hold;
- `.kit.json`: a hash of every file as built, so a refresh can tell the student's work from an old copy.

``refresh`` (`make lab-refresh`) brings in a newer course: a file the student never changed is replaced; a
changed one is kept, and the new version is written beside it as ``<name>.updated.ipynb``. A lesson the
course renamed or split (``MOVED``) is kept too, and the refresh says where its sections went. Nothing the
student wrote is ever overwritten.

    python -m course_assignments.kit lab             # build lab/ if it is missing
    python -m course_assignments.kit lab --refresh   # bring lab/ up to date
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from course_lib.output_files import write_whole

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "notebooks"
COURSE = LESSONS / "assignments"
MANIFEST = ".kit.json"
# What no file in a student's lab may contain: nbgrader's markers of solutions and hidden tests
SECRET_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# Lessons the course renamed or split: old name -> the lessons its sections went to (README.md's "Moved"
# lists the same). A refresh keeps a student's copy of the old name and says where to go instead.
MOVED = {
    "07_beyond_1f1b.ipynb": ("07a_interleaving.ipynb", "07b_zero_bubble.ipynb", "07c_v_shapes.ipynb"),
}
# New lessons made of sections another lesson gave up: new name -> the lesson they were in
SPLIT_FROM = {"04b_tp_or_pp.ipynb": "01_tensor_vs_pipeline.ipynb"}


def _digest_of(name: str, data: bytes) -> str:
    """What makes a file the student's work: for a notebook its cells' sources, not its outputs or
    execution counts, so that a lesson the student only ran is still the course's (and is refreshed)."""
    if name.endswith(".ipynb"):
        try:
            cells = json.loads(data)["cells"]
            data = json.dumps([[c["cell_type"], "".join(c["source"])] for c in cells]).encode()
        except (ValueError, KeyError, TypeError):  # not a notebook we can read: its bytes decide
            pass
    return hashlib.sha256(data).hexdigest()


def _digest(path: Path) -> str:
    return _digest_of(path.name, path.read_bytes())


def released(course: Path = COURSE) -> dict[str, bytes]:
    """Every assignment's student version, {"<assignment>/<notebook>.ipynb": bytes}, made by nbgrader's
    generate_assignment in a temporary copy of the course directory (its gradebook thrown away)."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    with tempfile.TemporaryDirectory(prefix="course-kit-") as tmp:
        work = Path(tmp) / "course"
        shutil.copytree(course / "source", work / "source")
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        config.CourseDirectory.root = str(work)
        config.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
        config.Exchange.root = str(work / "exchange")  # never the system-wide exchange
        # nbgrader sets up its gradebook with the `alembic` command found on PATH
        path = os.environ.get("PATH", "")
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"
        try:
            api = NbGraderAPI(config=config)
            for name in sorted(p.name for p in (work / "source").iterdir() if p.is_dir()):
                result = api.generate_assignment(name, force=True)
                if not result["success"]:
                    raise RuntimeError(f"nbgrader could not generate {name}: {result.get('error', '')}")
        finally:
            os.environ["PATH"] = path
        return {
            str(p.relative_to(work / "release")): p.read_bytes() for p in (work / "release").glob("*/*.ipynb")
        }


def kit_files(root: Path = ROOT) -> dict[str, bytes]:
    """What a student's lab holds: {relative path: bytes} (lessons, then assignments/<name>/<notebook>)."""
    files = {p.name: p.read_bytes() for p in sorted((root / "notebooks").glob("*.ipynb"))}
    # the notation card every lesson links to (a lesson's link must work in lab/ too)
    files |= {p.name: p.read_bytes() for p in sorted((root / "notebooks").glob("*.md"))}
    files |= {
        f"assignments/{rel}": data for rel, data in released(root / "notebooks" / "assignments").items()
    }
    leaks = [rel for rel, data in files.items() if any(m.encode() in data for m in SECRET_MARKERS)]
    if leaks:  # a lesson quoting nbgrader's markers, or a generate that failed to cut a region
        raise RuntimeError(f"refusing to build the student kit: {leaks} hold solution or hidden-test markers")
    return files


def no_longer_in_the_course(built: Iterable[str], current: Iterable[str], dest: Path) -> list[str]:
    """One line for each file of the last build that the course no longer has and `dest` still holds: it
    is kept (it may hold the student's work), and the line says where its sections went, if they moved."""
    lines = []
    for rel in sorted(set(built) - set(current)):
        if (dest / rel).exists():
            where = MOVED.get(rel)
            said = f"the course moved it to {', '.join(where)}" if where else "the course no longer has it"
            lines.append(f"kept your {rel}: {said}")
    return lines


def build(dest: Path, refresh: bool = False, root: Path = ROOT) -> list[str]:
    """Create `dest` (or, with `refresh`, bring it up to date); return one line per thing done."""
    dest = Path(dest)
    manifest_path = dest / MANIFEST
    if manifest_path.exists() and not refresh:
        return []
    if dest.exists() and not manifest_path.exists() and any(dest.iterdir()):
        raise RuntimeError(f"{dest} exists and is not a student kit (no {MANIFEST}); move it away first")
    built = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    done, manifest, files = [], {}, kit_files(root)
    for rel, data in sorted(files.items()):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = _digest_of(rel, data)
        if target.exists() and _digest(target) not in (built.get(rel), fresh):  # the student's work: keep it
            beside = target.with_name(f"{target.stem}.updated{target.suffix}")
            write_whole(beside, lambda file, data=data: file.write(data))
            done.append(f"kept your {rel}; the course's new version is {beside.relative_to(dest)}")
            manifest[rel] = built.get(rel, fresh)
            continue
        if not target.exists() or _digest(target) != fresh:
            write_whole(target, lambda file, data=data: file.write(data))  # a full disk: the old copy
            origin = f" (sections that were in {SPLIT_FROM[rel]})" if rel in SPLIT_FROM and built else ""
            done.append(f"{'updated' if rel in built else 'added'} {rel}{origin}")
        manifest[rel] = fresh
    done += no_longer_in_the_course(built, files, dest)  # left out of the manifest: said once
    text = json.dumps(manifest, indent=1, sort_keys=True).encode()
    write_whole(manifest_path, lambda file: file.write(text))
    return done


def kit_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build (or refresh) the student's working copy of the course."
    )
    parser.add_argument("dest", type=Path, help="the folder to create, e.g. lab")
    parser.add_argument("--refresh", action="store_true", help="bring an existing kit up to date")
    args = parser.parse_args(argv)
    try:
        lines = build(args.dest, refresh=args.refresh)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    if lines:
        print(f"{args.dest}/: your copy of the lessons and assignments (`make lab-refresh` updates it)")
    return 0


if __name__ == "__main__":
    sys.exit(kit_main())
