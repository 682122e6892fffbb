"""What each assignment's graded functions may not reach: the library's (and the lessons') answers, by name.

For each assignment, {student function: {name: why}}. While a student's function is graded it runs in a
sandbox whose library is the grading edition (``course_grading.edition``) that leaves these names out:
every definition of that name, wherever it is in course_lib or course_assignments, and in the notebook's
own locked cells (tools that measure the answer), is replaced by a stub that raises "<name> is not
available while grading: <why>". The student's cells run in the edition that leaves out every name of the
assignment. A name is a function, a class or ``Class.method``; never a module path, so the library may
move.

This table is the one place to read what each assignment allows: add a line when a lesson or the
library grows a function that answers a task.
"""

from __future__ import annotations

OWN_FORMULA = "derive the formula yourself"
OWN_SCHEDULE = "this task asks you to build the schedule yourself"
OWN_COUNT = "a graded function may not call the course's counting tools: write the rule itself"

_A1_FORMULA = {
    "gpipe_bubble": OWN_FORMULA,
    "megatron": OWN_FORMULA,
    "_gpipe_idle": OWN_FORMULA,
    "_smallest_m": OWN_FORMULA,
}
_A3_CUT = {
    "balanced": "find the cut yourself (course_lib.balance.optimal is allowed)",
    "_best": "find the cut yourself",
}
_A6_COUNTS = {
    "tp_allreduces": OWN_COUNT,
    "pp_sends": OWN_COUNT,
    "pp_log_from_schedule": OWN_COUNT,
    "messages": OWN_COUNT,
    "build_schedule": OWN_COUNT,
    "SimulatedTP.from_seed": OWN_COUNT,
    "measured_tp_allreduces": OWN_COUNT,
    "counted_pp_messages": OWN_COUNT,
}
_ZB = "write ZB-H1 yourself, not take the course library's"
_A7_BUILD = {
    "zb_h1": _ZB,
    "_zb_h1": _ZB,
}
_A7_PREDICT = _A7_BUILD | {
    "simulate": "predict before simulating: the simulator is off",
}
_A5_FLOPS = {
    f"ModelShape.{name}": "count the FLOPs with eq. 3 yourself"
    for name in ("step_flops", "layer_forward_flops", "logits_forward_flops")
}

_A5_STATES = "work the model states out from the shape yourself"

_OWN_LOOP = "write the rank's loop yourself, with its own sends and receives"
_A04C_LOOP = {  # the course's rank loop, its engines and the schedule builders: no answer to call
    "run_schedule": _OWN_LOOP,
    "PipelineRank": _OWN_LOOP,
    "RankComm": _OWN_LOOP,
    "run_distributed": _OWN_LOOP,
    "LocalPipelineTrainer": _OWN_LOOP,
    "one_f_one_b": _OWN_LOOP,
    "gpipe": _OWN_LOOP,
    "naive": _OWN_LOOP,
    "build_schedule": _OWN_LOOP,
}

SWITCHED_OFF: dict[str, dict[str, dict[str, str]]] = {
    "a03_bubble": {
        "idle_fraction": _A1_FORMULA,
        "bubble_over_ideal": _A1_FORMULA,
        "smallest_m": _A1_FORMULA,
        "my_gpipe": {"gpipe": OWN_SCHEDULE + ", in my_gpipe"},
    },
    "a04_one_f_one_b": {
        "my_1f1b": {"one_f_one_b": OWN_SCHEDULE + ", in my_1f1b"},
    },
    "a04c_write_the_pipeline": {
        "one_f_one_b": _A04C_LOOP,
    },
    "a05_memory_budget": {
        "stage_bytes": {"stage_memory": "add up the profile's bytes yourself"},
        "held": {"inflight_per_stage": "count the micro-batches in flight yourself"},
        "fit_partition": _A3_CUT,
        "min_stages": _A3_CUT,
    },
    "a06_two_continents": {
        "one_way_latency_ms": {
            "fiber_latency_s": "work it out from the distance and the speed of light",
            "site_link": "work it out from the distance and the speed of light",
        },
        "extra_needed": {"extra_in_flight": "count the round trip yourself"},
        "choose_plan": {"strongest_throughput": "search the plans yourself"},
        "predict_throughput": {
            "simulate": "predict from the plan's numbers, before any simulation",
            "flush_bound": "predict from the plan's numbers yourself",
        },
    },
    "a09_plan_a_run": {
        "model_states_gib": {
            "memory_per_gpu": _A5_STATES,
            "parameters_per_gpu": _A5_STATES,
        },
        "bubble_share": {
            "gpipe_bubble": "derive the bubble from p, the batch, d and b",
            "simulate": "derive the bubble from p, the batch, d and b",
        },
        "my_layout": {
            "plan": "this part asks you to choose the layout yourself",
            "predicted_step_s": "choose the layout from the takeaways, not by timing every one",
            "simulate_pipeline": "choose the layout from the takeaways",
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
    """{student function: {name left out: why}} for `assignment` (its new name or its old one)."""
    return SWITCHED_OFF.get(RENAMED.get(assignment, assignment), {})


def everything(assignment: str) -> dict[str, str]:
    """Every name `assignment` leaves out of the edition its students' cells run in: {name: why}."""
    return {name: why for off in table(assignment).values() for name, why in off.items()}
