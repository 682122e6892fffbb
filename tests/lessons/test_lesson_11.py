"""Lesson 11: activation recomputation measured on the toy, and priced in the cost model."""

import pytest

from course_lib.lessons.recompute import at_scale, checkpoint_cpu_ms, measure_checkpointing
from course_lib.planner.layout import Layout
from course_lib.planner.memory import activation_bytes, activation_bytes_per_layer, memory_per_gpu
from course_lib.planner.shapes import model
from course_lib.shelf.errors import CourseError


def test_bytes_per_layer_follow_korthikanti_table_2():
    gpt = model("megatron-145b")  # h 12288, a 96, s 2048
    sbh = gpt.seq_len * gpt.hidden
    scores = 5 * 96 * 2048 / (12288 * 8)  # 5as/(ht)
    assert activation_bytes(gpt, 1, 8, "none") == pytest.approx(sbh * (10 + 24 / 8 + scores))
    assert activation_bytes(gpt, 1, 8, "selective") == pytest.approx(sbh * (10 + 24 / 8))
    assert activation_bytes(gpt, 2, 8, "full") == pytest.approx(2 * 2 * sbh)
    # with t = 1 and nothing recomputed it is eq. 1, 34 + 5as/h
    assert activation_bytes(gpt, 1, 1, "none") == pytest.approx(sbh * (34 + 5 * 96 * 2048 / 12288))
    assert activation_bytes_per_layer(gpt, 1, 8, True) == activation_bytes(gpt, 1, 8, "full")
    with pytest.raises(CourseError, match="recompute mode must be one of .* got 'some'"):
        activation_bytes(gpt, 1, 8, "some")


def test_full_recomputation_runs_a_third_of_the_block_flops_again_and_selective_under_a_percent():
    rows = {row.mode: row for row in at_scale("megatron-145b", t=8, b=1)}
    gpt = model("megatron-145b")
    blocks = 3 * gpt.layers * gpt.layer_forward_flops(1)
    assert rows["full"].flops_again_share * gpt.step_flops(1, False) == pytest.approx(blocks / 3)
    # selective: attention's two s x s products, 4 s^2 h per sequence and layer, against the whole step
    assert rows["selective"].flops_again_share == pytest.approx(
        gpt.layers * 4 * 2048**2 * 12288 / gpt.step_flops(1, False))
    assert rows["selective"].flops_again_share < 0.01 < 0.3 < rows["full"].flops_again_share
    assert rows["none"].bytes_per_layer > rows["selective"].bytes_per_layer > rows["full"].bytes_per_layer
    # eq. 3 of Megatron-LM: the step with recomputation is the step without plus the blocks' forwards
    assert gpt.step_flops(1, True) == pytest.approx(gpt.step_flops(1, False) + gpt.recompute_flops(1, "full"))


def test_gpipe_needs_recomputation_where_1f1b_does_not():
    gpt = model("megatron-145b")
    gib = {(s, rc): memory_per_gpu(gpt, Layout(8, 16, 1, 1, s, 1, recompute=rc), 64).total / 2**30
           for s in ("gpipe", "1f1b") for rc in (False, True)}  # fmt: skip
    assert gib["gpipe", False] > 80 > gib["1f1b", False] > gib["gpipe", True] > gib["1f1b", True]


def test_checkpointing_brings_gpipe_down_to_1f1b_but_for_the_stage_inputs():
    runs = measure_checkpointing(p=2, m=4, n_layers=4, repeats=3)
    never_g, always_g = runs["gpipe", "never"].peak_bytes, runs["gpipe", "always"].peak_bytes
    never_o, always_o = runs["1f1b", "never"].peak_bytes, runs["1f1b", "always"].peak_bytes
    boundary = runs["gpipe", "always"].last.measured.boundary_bytes[0]
    assert never_g[0] > never_o[0] > always_o[0]  # 1F1B holds fewer micro-batches; checkpointing fewer bytes
    assert always_g[0] < never_o[0]
    assert abs(always_g[0] - always_o[0]) <= (4 - 2) * boundary * 1.5 + 64 * 1024
    losses = {key: r.last.losses for key, r in runs.items()}
    assert all(v == pytest.approx(losses["gpipe", "never"], rel=1e-5) for v in losses.values())


def test_stage_cpu_time_has_a_spread_per_mode():
    cpu = checkpoint_cpu_ms(n_blocks=2, repeats=3, passes=2)
    assert set(cpu) == {"never", "always"}
    assert all(len(s.values) == 3 and s.low > 0 for s in cpu.values())
