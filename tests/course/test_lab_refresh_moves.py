"""`make lab-refresh` after the course renamed or split a lesson (course_assignments/kit.py: MOVED): the
student's copy of the old lesson is kept, and the refresh says where its sections went. The kit's files are
the lessons only here (no nbgrader run), so the test takes milliseconds."""

from __future__ import annotations

import json

import pytest
from support.paths import REPO_ROOT

from course_assignments import kit

README = (REPO_ROOT / "README.md").read_text()


@pytest.fixture
def lessons_only(monkeypatch):
    files = {p.name: p.read_bytes() for p in sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))}
    monkeypatch.setattr(kit, "kit_files", lambda root=kit.ROOT: dict(files))
    return files


def test_a_lesson_the_course_split_is_kept_and_the_refresh_says_where_it_went(tmp_path, lessons_only):
    lab = tmp_path / "lab"
    kit.build(lab)
    # the lab as an older course built it: 07 was one lesson, 04b did not exist
    old, mine = lab / "07_beyond_1f1b.ipynb", '{"cells": [], "metadata": {}, "note": "my work"}'
    old.write_text(mine)
    (lab / "04b_tp_or_pp.ipynb").unlink()
    manifest = json.loads((lab / ".kit.json").read_text())
    manifest["07_beyond_1f1b.ipynb"] = kit._digest(old)
    del manifest["04b_tp_or_pp.ipynb"]
    (lab / ".kit.json").write_text(json.dumps(manifest))

    lines = kit.build(lab, refresh=True)
    assert old.read_text() == mine  # kept, untouched
    assert "kept your 07_beyond_1f1b.ipynb: the course moved it to 07a_interleaving.ipynb, " \
        "07b_zero_bubble.ipynb, 07c_v_shapes.ipynb" in lines  # fmt: skip
    assert "added 04b_tp_or_pp.ipynb (sections that were in 01_tensor_vs_pipeline.ipynb)" in lines
    assert all((lab / name).exists() for name in kit.MOVED["07_beyond_1f1b.ipynb"])
    # said once: the old name leaves the manifest, so the next refresh has nothing to say
    assert "07_beyond_1f1b.ipynb" not in json.loads((lab / ".kit.json").read_text())
    assert kit.build(lab, refresh=True) == []


def test_a_dropped_file_the_student_deleted_is_not_mentioned(tmp_path):
    assert kit.no_longer_in_the_course({"gone.ipynb": "x"}, {}, tmp_path) == []
    (tmp_path / "gone.ipynb").write_text("{}")
    assert kit.no_longer_in_the_course({"gone.ipynb": "x"}, {}, tmp_path) == [
        "kept your gone.ipynb: the course no longer has it"
    ]


def test_every_move_points_at_lessons_that_exist_and_the_readme_lists_it():
    lessons = {p.name for p in (REPO_ROOT / "notebooks").glob("*.ipynb")}
    for old, new in kit.MOVED.items():
        assert old not in lessons and set(new) <= lessons, (old, new)
        assert f"`{old}`" in README and all(f"`{n}`" in README for n in new)
    for new, source in kit.SPLIT_FROM.items():
        assert {new, source} <= lessons


def test_the_readme_table_lists_every_lesson_once_in_course_order():
    # course order: the core path, then the electives (as the metadata says), each in file order
    paths = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    track = {p.name: json.loads(p.read_text())["metadata"]["course"]["track"] for p in paths}
    lessons = sorted(track, key=lambda name: (track[name] != "core", name))
    rows = [line for line in README.splitlines() if line.startswith("| ") and ".ipynb` |" in line]
    table = [row.split("`")[1] for row in rows]
    assert table == lessons
