"""Every library function that computes a graded answer, per assignment and per student function.

While the grader calls a student's function (in the sandbox, ``course_lib.grading.execute``), the
functions listed for it refuse to answer, with the reason given here. They are gated before any
student code runs, so a copy a student keeps (another name, ``types.FunctionType(f.__code__, ...)``,
a partial) refuses too. A key is ``module:name``; ``__main__:name`` is a function the notebook's own
locked cells define (lesson tools that measure the answer), gated as soon as it exists.

This table is the one place to read what each assignment allows: add a line when a lesson or the
library grows a function that answers a task.
"""

from __future__ import annotations

OWN_FORMULA = "derive the formula yourself"
OWN_SCHEDULE = "this task asks you to build the schedule yourself"
OWN_COUNT = "a graded function may not call the course's counting tools: write the rule itself"

_A1_FORMULA = {
    "course_lib.schedules.closed_forms:gpipe_bubble": OWN_FORMULA,
    "course_lib.schedules.closed_forms:megatron": OWN_FORMULA,
    "course_lib.grading.schedule_checks:_gpipe_idle": OWN_FORMULA,
    "course_lib.grading.schedule_checks:_smallest_m": OWN_FORMULA,
}
_A3_CUT = {
    "course_lib.balance:balanced": "find the cut yourself (course_lib.balance.optimal is allowed)",
    "course_lib.grading.memory_checks:_best": "find the cut yourself",
}
_A6_COUNTS = {
    "course_lib.tp.accounting:tp_allreduces": OWN_COUNT,
    "course_lib.tp.accounting:pp_sends": OWN_COUNT,
    "course_lib.tp.accounting:pp_log_from_schedule": OWN_COUNT,
    "course_lib.shelf.schedule:messages": OWN_COUNT,
    "course_lib.shelf.first_schedules:build_schedule": OWN_COUNT,
    "course_lib.tp.simulated:SimulatedTP.from_seed": OWN_COUNT,
    "__main__:measured_tp_allreduces": OWN_COUNT,
    "__main__:counted_pp_messages": OWN_COUNT,
}
_ZB = "write ZB-H1 yourself, not take the course library's"
_A7_BUILD = {
    "course_lib.schedules.zero_bubble:zb_h1": _ZB,
    "course_lib.schedules.closed_forms:_zb_h1": _ZB,
}
_A7_PREDICT = _A7_BUILD | {
    "course_lib.shelf.simulator:simulate": "predict before simulating: the simulator is off",
}
_A5_FLOPS = {
    f"course_lib.planner.shapes:ModelShape.{name}": "count the FLOPs with eq. 3 yourself"
    for name in ("step_flops", "layer_forward_flops", "logits_forward_flops")
}

_A5_STATES = "work the model states out from the shape yourself"

SWITCHED_OFF: dict[str, dict[str, dict[str, str]]] = {
    "a03_bubble": {
        "idle_fraction": _A1_FORMULA,
        "bubble_over_ideal": _A1_FORMULA,
        "smallest_m": _A1_FORMULA,
        "my_gpipe": {"course_lib.shelf.first_schedules:gpipe": OWN_SCHEDULE + ", in my_gpipe"},
    },
    "a04_one_f_one_b": {
        "my_1f1b": {"course_lib.shelf.first_schedules:one_f_one_b": OWN_SCHEDULE + ", in my_1f1b"},
    },
    "a05_memory_budget": {
        "stage_bytes": {"course_lib.balance:stage_memory": "add up the profile's bytes yourself"},
        "held": {"course_lib.balance:inflight_per_stage": "count the micro-batches in flight yourself"},
        "fit_partition": _A3_CUT,
        "min_stages": _A3_CUT,
    },
    "a06_two_continents": {
        "one_way_latency_ms": {
            "course_lib.network:fiber_latency_s": "work it out from the distance and the speed of light",
            "course_lib.network:site_link": "work it out from the distance and the speed of light",
        },
        "extra_needed": {
            "course_lib.schedules.latency_aware:extra_in_flight": "count the round trip yourself"
        },
        "choose_plan": {"course_lib.grading.wan_checks:strongest_throughput": "search the plans yourself"},
        "predict_throughput": {
            "course_lib.shelf.simulator:simulate": "predict from the plan's numbers, before any simulation",
            "course_lib.schedules.latency_aware:flush_bound": "predict from the plan's numbers yourself",
        },
    },
    "a09_plan_a_run": {
        "model_states_gib": {
            "course_lib.planner.memory:memory_per_gpu": _A5_STATES,
            "course_lib.planner.memory:parameters_per_gpu": _A5_STATES,
        },
        "bubble_share": {
            "course_lib.schedules.closed_forms:gpipe_bubble": "derive the bubble from p, the batch, d and b",
            "course_lib.shelf.simulator:simulate": "derive the bubble from p, the batch, d and b",
        },
        "my_layout": {
            "course_lib.planner.enumerate:plan": "this part asks you to choose the layout yourself",
            "__main__:predicted_step_s": "choose the layout from the takeaways, not by timing every one",
            "course_lib.planner.step_time:simulate_pipeline": "choose the layout from the takeaways",
        },
        "tflops_per_gpu": _A5_FLOPS,
    },
    "a01_tp_vs_pp": {
        "tp_allreduces_per_step": _A6_COUNTS,
        "pp_messages_per_step": _A6_COUNTS,
    },
    "a07_zero_bubble": {
        "my_zb_h1": _A7_BUILD,
        "predicted_bubble": _A7_PREDICT,
    },
}


# The assignments' names before they were numbered after their lessons: a gradebook (or an exchange) that
# still uses one gets the same switch-offs
RENAMED = {
    "a1_bubble": "a03_bubble", "a2_one_f_one_b": "a04_one_f_one_b", "a3_memory_budget": "a05_memory_budget",
    "a4_two_continents": "a06_two_continents", "a5_plan_a_run": "a09_plan_a_run",
    "a6_tp_vs_pp": "a01_tp_vs_pp", "a7_zero_bubble": "a07_zero_bubble",
}  # fmt: skip


def table(assignment: str) -> dict[str, dict[str, str]]:
    """{student function: {library function: why}} for `assignment` (its new name or its old one)."""
    return SWITCHED_OFF.get(RENAMED.get(assignment, assignment), {})


def gates(assignment: str) -> tuple[str, ...]:
    """Every function to gate in `assignment`'s sandbox (before any student code runs)."""
    return tuple(sorted({key for off in table(assignment).values() for key in off}))
