"""The assignments as the tests read them: their source notebooks, the solution text a student must never
see, the "hard-coded" submissions, and a sandbox or a skip.

A hard-coded submission is what a student looking for a shortcut writes: the visible checks' answers and
the solution's printed outputs copied in as constants (a function that returns the one visible value, a
schedule written out for the one visible p and m). The hidden tests try other sizes, so it must score
at most 30% (tests/grading/test_assignments.py grades it with nbgrader).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from course_grading.sandbox import unavailable
from course_lib.balance import inflight_per_stage
from course_lib.shelf.first_schedules import build_schedule
from support.paths import REPO_ROOT

COURSE = REPO_ROOT / "notebooks" / "assignments"


ASSIGNMENTS = sorted(p.parent.name for p in (COURSE / "source").glob("*/*.ipynb"))


REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


def sandbox_or_skip() -> None:
    """Install bubblewrap if it is missing and we may (course_grading/ensure_sandbox.sh: autograde runs
    students' code in it); skip with its one line of why where it cannot be had."""
    script = COURSE.parent.parent / "course_grading" / "ensure_sandbox.sh"
    assert script.is_file(), f"{script} is missing: the sandbox's installer moved?"  # never skip in silence
    installer = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if reason := (installer.stdout.strip() if installer.returncode else unavailable()):
        pytest.skip(reason)


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def grade_info(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def errors(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def solution_secrets(name: str, solution: bool = True, hidden: bool = True) -> list[str]:
    """The distinctive lines of an assignment's solution (and/or hidden-test) regions: stripped, at
    least 12 characters, and not also written outside the regions (a closing bracket gives nothing away)."""
    (source,) = (COURSE / "source" / name).glob("*.ipynb")
    text = "\n".join("".join(c["source"]) for c in cells(source))
    outside = {line.strip() for line in REGION.sub("", text).splitlines()}
    wanted = {kind for kind, on in (("SOLUTION", solution), ("HIDDEN TESTS", hidden)) if on}
    secrets = [
        line.strip()
        for kind, body in REGION.findall(text) if kind in wanted
        for line in body.splitlines() if len(line.strip()) >= 12 and line.strip() not in outside
    ]  # fmt: skip
    assert secrets or not solution, f"{name}: no solution regions found"
    return secrets


def literal_schedule(name: str, p: int, m: int) -> str:
    """Python source that builds the library's schedule `name` for (p, m) action by action: a copy."""
    schedule = build_schedule(name, p, m)
    orders = [
        "[" + ", ".join(f"Action({a.stage}, Kind.{a.kind.name}, {a.microbatch})" for a in order) + "]"
        for order in schedule.orders
    ]
    return f"Schedule({name!r}, {p}, {m}, [{', '.join(orders)}], {list(range(p))})"


def _zb_orders_text() -> str:
    """ZB-H1's orders at the sizes the visible cells use, written out as a copying student would."""
    from course_lib.schedules.zero_bubble import zb_h1

    return repr(
        {(p, m): [[str(a) for a in order] for order in zb_h1(p, m).orders] for p, m in ((3, 6), (4, 4))}
    )


# A6 and A7: answers that satisfy every visible check and know nothing else
NEW_HARD_CODED = {
    "a6_counts": """
def tp_allreduces_per_step(n_layers, t, m, training=True):
    return {(3, 2, 3, True): 36, (3, 2, 1, False): 6, (5, 4, 2, True): 40}.get((n_layers, t, m, training), 0)

def pp_messages_per_step(p, m, training=True):
    return {(3, 5, True): 20, (3, 1, False): 2}.get((p, m, training), 0)
""",
    "a6_crossover": """
def first_m_pp_wins(link, devices):
    return 28
""",
    "a6_decide": """
def decide(link, devices, m):
    seen = {"NVLink 4": ("TP", "bubble"), "InfiniBand NDR": ("PP", "bandwidth"),
            "transatlantic": ("PP", "latency")}
    return seen.get(link.name, ("TP", "bubble"))
""",
    "a7_my_zb_h1": """
SEEN = {ZB_ORDERS}

def my_zb_h1(p, m):
    orders = [[Action.parse(a) for a in order] for order in SEEN.get((p, m), SEEN[(3, 6)])]
    return Schedule("copied", len(orders), max(a.microbatch for a in orders[0]) + 1, orders,
                    list(range(len(orders))), split_backward=True)
""",
    "a7_predict": """
def predicted_bubble(p, m, f, i, w):
    return 1 / 6
""",
}


def _rank_function_for_the_visible_case() -> str:
    """A04c's solution with the visible run's sizes (2 ranks, 4 micro-batches) written in for p and m."""
    (notebook,) = (COURSE / "source" / "a04c_write_the_pipeline").glob("*.ipynb")
    (cell,) = [c for c in cells(notebook) if grade_info(c).get("grade_id") == "a04c_one_f_one_b"]
    text = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", "".join(cell["source"]))
    return re.sub(r"rank\.m\b", "4", re.sub(r"rank\.p\b", "2", text))


HARD_CODED: dict[str, dict[str, str]] = {  # assignment -> answer cell's grade_id -> what replaces it
    "a03_bubble": {
        "a1_idle_fraction": "def idle_fraction(p, m):\n    return 3 / 11\n\n\n"
        "def bubble_over_ideal(p, m):\n    return 3 / 8",
        "a1_claim": "def smallest_m(p, limit):\n    return 118",
        "a1_my_gpipe": f"def my_gpipe(p, m):\n    return {literal_schedule('gpipe', 4, 8)}",
        "a1_simulated": "simulated_bubble = 0.2727272727",
    },
    "a04_one_f_one_b": {
        "a2_my_1f1b": f"def my_1f1b(p, m):\n    return {literal_schedule('1f1b', 4, 8)}",
        "a2_peak": "peak_stage0_1f1b = 4\npeak_stage0_gpipe = 8",
    },
    "a04c_write_the_pipeline": {"a04c_one_f_one_b": _rank_function_for_the_visible_case()},
    "a05_memory_budget": {
        "a3_stage_bytes": "def stage_bytes(profile, start, end, inflight):\n    return 25436160",
        "a3_inflight": "def held(schedule):\n"
        f"    return {inflight_per_stage(build_schedule('gpipe', 4, 8))} if schedule.name == 'gpipe' "
        f"else {inflight_per_stage(build_schedule('1f1b', 4, 8))}",
        "a3_fit_partition": "def fit_partition(profile, p, m, budget, schedule='1f1b'):\n"
        "    return [14, 16, 22, 30]",
        "a3_min_stages": "def min_stages(profile, m, budget, schedule):\n"
        "    return 12 if schedule == 'gpipe' else 4",
    },
    "a06_two_continents": {
        "a4_latency": "def one_way_latency_ms(west, east, route_factor):\n    return 48.156",
        "a4_extra": "def extra_needed(problem, p, m):\n    return 7",
        "a4_plan": "def choose_plan(problem):\n"
        "    return WanPlan(8, 64, 'latency-aware-1f1b', (10,) * 8, (0, 0, 0, 7, 0, 0, 0))\n\n\n"
        "my_plan = choose_plan(problem)",
        "a4_predict": "def predict_throughput(problem, plan):\n    return 55.08",
    },
    "a09_plan_a_run": {  # the values the solution prints for the visible cases
        "a5_states": "def model_states_gib(t, p):\n    return 34.97172546386719",
        "a5_bubble": "def bubble_share(p, global_batch, d, b):\n    return 7 / 103",
        "a5_layout": "def my_layout(gpus, global_batch):\n"
        "    return Layout(8, 8, 24, 1, 'interleaved-1f1b', 2, recompute=True)",
        "a5_flops": "def tflops_per_gpu(step_s, gpus, global_batch):\n    return 183.64850660966397",
    },
    "a01_tp_vs_pp": {k: v.strip() for k, v in NEW_HARD_CODED.items() if k.startswith("a6")},
    "a07_zero_bubble": {
        k: v.replace("{ZB_ORDERS}", _zb_orders_text()).strip()
        for k, v in NEW_HARD_CODED.items()
        if k.startswith("a7")
    },  # fmt: skip
}


def hard_coded_notebook(release: Path, dest: Path) -> None:
    """Copy the student version in `release` to `dest` with its answer cells replaced by HARD_CODED's."""
    shutil.copytree(release, dest)
    (notebook,) = dest.glob("*.ipynb")
    nb = json.loads(notebook.read_text())
    answers = HARD_CODED[release.name]
    for cell in nb["cells"]:
        grade_id = grade_info(cell).get("grade_id")
        if grade_info(cell).get("solution"):
            assert grade_id in answers, f"{release.name}: no hard-coded answer for {grade_id}"
            cell["source"] = answers[grade_id]
    notebook.write_text(json.dumps(nb))


def run_test_cell(assignment: str, grade_id: str, student_code: str) -> str:
    """Run a source notebook's imports, then `student_code`, then test cell `grade_id` (hidden tests
    included), in-process; return the AssertionError's message ('' if the test passed)."""
    (notebook,) = (COURSE / "source" / assignment).glob("*.ipynb")
    nb_cells = cells(notebook)
    namespace: dict = {}
    for cell in nb_cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and grade_info(cell).get("grade_id", "").endswith("_imports"):
            exec(source, namespace)
    exec(student_code, namespace)
    (test_cell,) = [c for c in nb_cells if grade_info(c).get("grade_id") == grade_id]
    try:
        exec("".join(test_cell["source"]), namespace)
    except AssertionError as err:
        return str(err)
    return ""
