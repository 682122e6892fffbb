"""The planner: memory against hand-computed cases, each cost term alone, the published runs, sec 5.4."""

from __future__ import annotations

import math

import pytest

from course_lib.network import ring_all_reduce_s
from course_lib.planner import plan
from course_lib.planner.clusters import CLUSTERS, cluster
from course_lib.planner.layout import Layout
from course_lib.planner.memory import memory_per_gpu, parameters_per_gpu
from course_lib.planner.published import CALIBRATION, ROWS, calibrate, predict, predicted_tflops
from course_lib.planner.shapes import model
from course_lib.planner.step_time import (
    boundary_link,
    dp_time,
    estimate,
    pipeline_timeline,
    played_microbatches,
    simulate_pipeline,
    tp_times,
)
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import CourseError

SELENE = cluster("a100-selene")
T1 = model("megatron-1t")


# --- shapes: Megatron-LM eq. 2 and eq. 3 -----------------------------------------------------------


@pytest.mark.parametrize("name", ["megatron-18b", "megatron-145b", "megatron-1t"])
def test_parameters_and_flops_are_megatrons_eq_2_and_3(name):
    shape = model(name)
    l, h, s, V, B = shape.layers, shape.hidden, shape.seq_len, shape.vocab, 512
    assert shape.parameters() == pytest.approx(12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)))
    eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert shape.step_flops(B, recompute=True) == pytest.approx(eq3)


def test_table_1_parameter_counts():
    billions = {name: round(model(name).parameters() / 1e9, 1) for name in ("megatron-145b", "megatron-1t")}
    assert billions == {"megatron-145b": 145.6, "megatron-1t": 1008.0}  # Table 1's first column
    assert model("llama3-405b").parameters() / 1e9 == pytest.approx(405, rel=0.01)


# --- memory, against hand-computed cases -------------------------------------------------------------


def test_memory_of_the_1t_model_at_its_published_layout_by_hand():
    layout = Layout(t=8, p=64, d=6, b=1, schedule="1f1b", recompute=True)
    # 2 layers of 12h^2 + 13h each, plus the embedding h(V + s), over t = 8 GPUs
    h = 25_600
    params = (2 * (12 * h * h + 13 * h) + h * (51_200 + 2_048)) / 8
    assert params == 2_136_556_800
    mem = memory_per_gpu(T1, layout, global_batch=3072)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2 * params, 2 * params, 12 * params)
    # 1F1B holds min(p, m) = 64 micro-batches; 2 layers each keep their input, 2*s*b*h bytes,
    # plus one layer's full activations while it is recomputed: s*b*h*(10 + 24/t + 5*a*s/(h*t))
    sbh = 2048 * 1 * h
    assert mem.activations == 64 * 2 * 2 * sbh + sbh * (10 + 24 / 8 + 5 * 160 * 2048 / (h * 8))
    assert mem.total == 16 * params + mem.activations  # 34.2 GB of states + 14.5 GB: 45.4 GiB


def test_zero1_shards_only_the_optimizer_states():
    plain = memory_per_gpu(T1, Layout(8, 64, 6, 1), 3072)
    sharded = memory_per_gpu(T1, Layout(8, 64, 6, 1, zero1=True), 3072)
    assert sharded.optimizer == plain.optimizer / 6
    assert (sharded.weights, sharded.gradients, sharded.activations) == (
        plain.weights, plain.gradients, plain.activations,
    )  # fmt: skip


def test_activations_follow_the_schedules_in_flight_count():
    small = model("megatron-18b")
    one_f = memory_per_gpu(small, Layout(1, 4, 1, 1, "1f1b", recompute=False), 64)  # m = 64
    gpipe = memory_per_gpu(small, Layout(1, 4, 1, 1, "gpipe", recompute=False), 64)
    assert gpipe.activations == pytest.approx(one_f.activations * 64 / 4)  # m against min(p, m)
    recomputed = memory_per_gpu(small, Layout(1, 4, 1, 1, "1f1b", recompute=True), 64)
    assert recomputed.activations < one_f.activations / 10


# --- cost terms, one at a time -----------------------------------------------------------------------


def test_ring_all_reduce_alone():
    assert ring_all_reduce_s(1e9, 4, Link(0.0, 1e9)) == pytest.approx(1.5)  # 2(n-1)/n of 1 GB at 1 GB/s
    assert ring_all_reduce_s(0, 4, Link(1e-3, math.inf)) == pytest.approx(6e-3)  # 2(n-1) latencies
    assert ring_all_reduce_s(1e9, 1, Link(1.0, 1.0)) == 0.0


def test_compute_alone_is_the_step_flops_at_the_calibrated_rate():
    layout = Layout(1, 1, 1, 2)
    parts = estimate(T1, SELENE, layout, global_batch=8)
    rate = SELENE.peak_flops * SELENE.efficiency
    assert parts.compute_s == pytest.approx(T1.step_flops(8, recompute=True) / rate)
    assert parts.tp_s == parts.bubble_s == parts.boundary_s == parts.dp_s == 0.0


def test_tp_all_reduces_use_nvlink_inside_a_node_and_the_network_beyond():
    f8, b8 = tp_times(T1, SELENE, Layout(8, 1, 1, 1))
    one = ring_all_reduce_s(2 * 2048 * 25_600, 8, SELENE.nvlink)
    assert (f8, b8) == pytest.approx((2 * 128 * one, 4 * 128 * one))  # 2 a layer forward, 4 back
    f16, _ = tp_times(T1, SELENE, Layout(16, 1, 1, 1))
    assert f16 / 128 == pytest.approx(2 * ring_all_reduce_s(2 * 2048 * 25_600, 16, SELENE.network))


def test_bubble_alone_is_the_registry_closed_form():
    layout = Layout(1, 4, 1, 1, "1f1b", recompute=False)
    parts = estimate(model("megatron-18b"), SELENE, layout, global_batch=8)
    assert parts.bubble_s / (parts.compute_s + parts.tp_s) == pytest.approx(3 / 8)  # (p-1)/m


def test_boundary_messages_cross_nodes_with_scatter_gather():
    inside = boundary_link(SELENE, Layout(1, 8, 1, 1))
    assert inside == SELENE.nvlink
    across = boundary_link(SELENE, Layout(8, 4, 1, 1))
    assert across.bandwidth_Bps == 8 * SELENE.network.bandwidth_Bps  # each GPU sends 1/t
    one = estimate(T1, SELENE, Layout(8, 64, 1, 1, "interleaved-1f1b", v=2), 128)
    two = estimate(T1, SELENE, Layout(8, 64, 1, 1, "interleaved-1f1b", v=1 + 1), 128)
    assert one.boundary_s == two.boundary_s
    plain = estimate(T1, SELENE, Layout(8, 64, 1, 1, "1f1b"), 128)
    assert one.boundary_s > 1.9 * plain.boundary_s  # interleaving: v times the messages
    assert one.bubble_s < plain.bubble_s / 1.9  # ... for a bubble divided by v


def test_dp_all_reduce_alone():
    layout = Layout(8, 64, 6, 1)
    expected = ring_all_reduce_s(2 * parameters_per_gpu(T1, layout), 6, SELENE.network)
    assert dp_time(T1, SELENE, layout) == expected
    assert dp_time(T1, SELENE, Layout(8, 64, 1, 1)) == 0.0


def test_the_simulator_agrees_with_the_closed_form_on_fast_links():
    fast = CLUSTERS["a100-selene"]
    layout = Layout(8, 8, 1, 1, "1f1b")
    parts = estimate(T1, fast, layout, global_batch=64)
    simulated = simulate_pipeline(T1, fast, layout, 64, parts)
    assert simulated.simulated
    assert simulated.bubble_s == parts.bubble_s
    assert simulated.step_s == pytest.approx(parts.step_s, rel=0.01)


def test_the_leaders_keep_the_timeline_their_step_came_from():
    result = plan("megatron-145b", SELENE, gpus=512, global_batch=512)
    leaders, rest = result.layouts[:3], result.layouts[3:]
    assert all(x.parts.simulated and x.timeline is not None for x in leaders)
    assert all(not x.parts.simulated and x.timeline is None for x in rest)
    best = leaders[0]
    m = played_microbatches(best.layout, 512)
    assert m == min(best.layout.microbatches(512), 2 * best.p) and best.timeline.n_microbatches == m
    again = pipeline_timeline(result.shape, SELENE, best.layout, m)
    assert best.timeline.makespan == again.makespan and len(best.timeline.spans) == len(again.spans)
    closed = estimate(result.shape, SELENE, best.layout, 512)
    assert simulate_pipeline(result.shape, SELENE, best.layout, 512, closed) == best.parts


def test_a_timeline_of_another_pipeline_is_refused():
    layout, other = Layout(8, 8, 1, 1, "1f1b"), Layout(8, 4, 2, 1, "1f1b")
    wrong = pipeline_timeline(T1, SELENE, other, played_microbatches(other, 64))
    with pytest.raises(CourseError, match="plays 8 micro-batches on 4 devices; .* plays 16 on p = 8"):
        simulate_pipeline(T1, SELENE, layout, 64, estimate(T1, SELENE, layout, 64), timeline=wrong)


# --- published runs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CALIBRATION))
def test_efficiency_factors_are_the_calibrated_ones(name):
    assert CLUSTERS[name].efficiency == calibrate(CALIBRATION[name])


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r not in CALIBRATION.values()], ids=lambda r: f"{r.model}"
)
def test_every_other_published_row_within_15_percent(row):
    got = predicted_tflops(row, predict(row))
    assert got == pytest.approx(row.tflops_per_gpu, rel=0.15)


@pytest.mark.parametrize("index", [2, 3, 4, 5, 6, 7])  # 76B .. 1T and Llama 3 on 8,192 GPUs
def test_top_layout_is_published_or_within_5_percent(index):
    row = ROWS[index]
    result = plan(row.model, row.cluster, row.gpus, row.global_batch, recompute=(True,), zero1=row.zero1)
    published = next(x for x in result.layouts if (x.t, x.p, x.d) == (row.t, row.p, row.d))
    assert result.best.step_s >= published.step_s / 1.05


def test_the_1t_plan_picks_the_published_layout():
    best = plan("megatron-1t", "a100-selene", 3072, 3072, recompute=(True,)).best
    assert (best.t, best.p, best.d) == (8, 64, 6)


@pytest.mark.parametrize("batch", [32, 128])
def test_sec_5_4_tp_within_the_node_beats_tp_only_and_pp_heavy(batch):
    """162B on 64 GPUs (Fig. 13): (t, p) = (8, 8) beats every other split of the 64 GPUs."""
    speed = {}
    for t, p in [(1, 32), (2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (64, 1)]:
        result = plan("megatron-162b", "a100-selene", 64, batch, recompute=(True,), only=(t, p))
        if result.layouts:  # (1, 32) does not fit: PP-only runs out of memory
            speed[t, p] = result.best.tflops_per_gpu
    assert max(speed, key=speed.get) == (8, 8)
    assert (1, 32) not in speed
    assert speed[8, 8] > 3 * speed[64, 1]  # TP-only: all-reduces over InfiniBand


# --- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"shape": "gpt-9"}, "unknown model preset 'gpt-9'"),
        ({"cluster_": "tpu"}, "unknown cluster preset 'tpu'"),
        ({"gpus": 12}, "gpus must be a multiple of 8"),
        ({"global_batch": 0}, "global batch must be a whole number >= 1"),
        ({"schedules": ("zb-h1",)}, "the planner models the schedules"),
    ],
)
def test_bad_requests_name_the_value(kwargs, words):
    args = {"shape": "megatron-145b", "cluster_": "a100-selene", "gpus": 64, "global_batch": 64} | kwargs
    with pytest.raises(CourseError, match=words):
        plan(**args)
