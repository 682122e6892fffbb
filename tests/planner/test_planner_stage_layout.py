"""The planner takes a Megatron-core layout string: only layouts with p x v = its stages are ranked, each
costed by its busiest stage (activations) and busiest GPU (weights, compute), stage s on GPU s % p."""

from __future__ import annotations

import pytest

from course_lib.planner import plan
from course_lib.planner.layout import Layout
from course_lib.planner.memory import layers_per_gpu, layers_per_stage
from course_lib.planner.shapes import model
from course_lib.shelf.errors import CourseError

REQUEST = dict(gpus=1536, global_batch=2304, schedules=("1f1b", "interleaved-1f1b"))
EVEN = "E(t*5|)*15t*5L"  # megatron-145b's 80 blocks, 5 a stage over 16 stages


def test_an_even_layout_costs_what_the_even_split_costs() -> None:
    base = plan("megatron-145b", "a100-selene", only=(8, 16), **(REQUEST | {"schedules": ("1f1b",)}))
    even = plan("megatron-145b", "a100-selene", only=(8, 16), layout=EVEN, **REQUEST)
    assert {x.layout.v for x in even.layouts} == {1}  # 16 stages on p = 16: no virtual stages
    assert even.best.step_s == pytest.approx(base.best.step_s)


def test_a_heavier_stage_costs_more_and_virtual_stages_follow_megatrons_order() -> None:
    heavy = "Et*4|(t*5|)*14t*6L"  # stage 0 one block lighter, stage 15 one heavier
    result = plan("megatron-145b", "a100-selene", layout=heavy, **REQUEST)
    assert {(x.layout.p, x.layout.v) for x in result.layouts} <= {(16, 1), (8, 2), (4, 4), (2, 8)}
    even = plan("megatron-145b", "a100-selene", only=(8, 16), layout=EVEN, **REQUEST).best.step_s
    mine = [x for x in result.layouts if (x.layout.t, x.layout.p) == (8, 16)]
    assert min(x.step_s for x in mine) > even
    blocks = (4,) + (5,) * 14 + (6,)
    shape, v2 = model("megatron-145b"), Layout(8, 8, 24, 1, "interleaved-1f1b", 2, stage_blocks=blocks)
    assert layers_per_stage(shape, v2) == 6
    assert layers_per_gpu(shape, v2) == 11  # GPU 7 holds stages 7 and 15: 5 + 6 blocks


def test_a_layout_that_drops_a_block_is_refused() -> None:
    with pytest.raises(CourseError, match="places 79 blocks .* has 80: 1 would be silently dropped"):
        plan("megatron-145b", "a100-selene", layout="Et*4|(t*5|)*14t*5L", **REQUEST)
