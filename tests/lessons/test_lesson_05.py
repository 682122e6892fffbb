"""The numbers lesson 05 (balancing stages) relies on, from the library itself.

Parameters and saved bytes are counted, so they are exact; layer times are measured and noisy, so the
ranking test gives the profile fixed times in the lesson's proportions (never asserts on wall-clock)."""

import re
from dataclasses import replace

import pytest
import torch
from support.committed import output_text, source

from course_lib.balance import OutOfMemory, balanced, check_memory, profile_layers, stage_memory, stage_totals
from course_lib.shelf.model import ModelConfig, build_model, uniform

P, M = 4, 8
BUDGET_FACTOR = 1.10


@pytest.fixture(scope="module")
def prof():
    torch.set_num_threads(1)
    model = build_model(ModelConfig(n_layers=80, vocab_size=2048), seed=0)
    return profile_layers(model, batch_size=2, seq_len=32, repeats=1)


def test_embedding_holds_about_five_blocks_of_parameters(prof):
    assert prof.params[0] / prof.params[1] == pytest.approx(5.32, abs=0.01)
    assert prof.params[-1] / prof.params[1] == pytest.approx(5.16, abs=0.01)


def test_last_stage_at_half_of_first_because_of_inflight_activations(prof):
    first, *_, last = stage_memory(uniform(prof.n_layers, P), prof, "1f1b", M)
    assert (first.inflight, last.inflight) == (4, 1)
    assert last.total_bytes / first.total_bytes == pytest.approx(0.505, abs=0.005)
    embedding = prof.static_bytes()[0]
    assert embedding / first.total_bytes < 0.07  # the embedding's share of stage 0 is small
    assert (first.total_bytes - embedding) / last.total_bytes > 1.8  # without it stage 0 still needs ~2x
    gpipe = [st.total_bytes for st in stage_memory(uniform(prof.n_layers, P), prof, "gpipe", M)]
    assert min(gpipe) / max(gpipe) > 0.85  # every stage holds all m: 24-28 MiB


def test_under_the_lessons_budget_only_the_memory_and_optimal_splits_fit(prof):
    uni = uniform(prof.n_layers, P)
    budget = int(sum(st.total_bytes for st in stage_memory(uni, prof, "1f1b", M)) / P * BUDGET_FACTOR)
    for too_big in (uni, balanced(prof, P, by="params")):
        with pytest.raises(OutOfMemory, match="simulated device 0"):
            check_memory(too_big, prof, "1f1b", M, budget)
    check_memory(balanced(prof, P, by="memory"), prof, "1f1b", M, budget)
    # fixed times in the lesson's proportions: embedding a third of a block, head (with loss) 1.4 blocks
    timed = replace(prof, time_s=[1 / 3] + [1.0] * (prof.n_layers - 2) + [1.4])
    best = balanced(timed, P, by="time", schedule="1f1b", microbatches=M, budget_bytes=budget)
    check_memory(best, timed, "1f1b", M, budget)
    slowest = {
        name: max(stage_totals(timed.time_s, part))
        for name, part in (("best", best), ("memory", balanced(timed, P, by="memory")))
    }
    assert slowest["best"] < 0.9 * slowest["memory"]
    assert best.sizes[0] < uni.sizes[0]  # the budget takes layers off stage 0


# ---- the widget of sec 5 (course_lib/widgets/budget_cuts.py) -----------------------------------------
def _step_of(prof):
    from course_lib.shelf.first_schedules import build_schedule
    from course_lib.shelf.simulator import StageCosts, simulate

    def step(part, p):  # as the lesson's simulated_step: stage cost = summed layer times, F:B = 1:2
        t = stage_totals(prof.time_s, part)
        costs = StageCosts.fused(f=[x / 3 for x in t], b=[2 * x / 3 for x in t])
        return simulate(build_schedule("1f1b", p, M), costs)

    return step


def test_budget_widget_redraws_once_per_change_and_keeps_its_chart_when_nothing_fits(prof):
    from course_lib.widgets.budget_cuts import budget_bytes, budget_cuts, cuts

    box = budget_cuts(prof, _step_of(prof), p=P, m=M, budget_factor=BUDGET_FACTOR)
    assert not box.budget_slider.continuous_update  # a drag sends one value, when the mouse lets go
    drawn = []
    box.image.observe(lambda change: drawn.append(change["new"]), names="value")
    box.budget_slider.value = 1.3
    assert len(drawn) == 1 and box.image.value[:4] == b"\x89PNG"
    assert box.drawn.startswith("p=4, budget 1.30x")
    best = cuts(prof, P, M, budget_bytes(prof, P, M, 1.3))["optimal under budget"]
    assert str(best.sizes) in box.text
    box.budget_slider.value = 0.9  # below about 0.94x no contiguous partition into 4 stages fits
    assert len(drawn) == 1 and box.image.value == drawn[0]  # the chart stays ...
    assert box.text.startswith("no partition into 4 stages fits")  # ... beside the reason
    assert "still the last setting that fits: p=4, budget 1.30x" in box.note.value
    box.budget_slider.value = 1.2  # and it recovers
    assert len(drawn) == 2 and box.drawn.startswith("p=4, budget 1.20x") and "still" not in box.note.value


# ---- the lesson's text against its committed outputs ----------------------------------------------
LESSON = "05_balancing_stages"


def test_the_verdict_quotes_the_printed_memory_and_says_where_it_holds():
    printed, verdict = output_text(LESSON, "f5ef29aa"), source(LESSON, "a1c05b01")
    total = re.search(r"stage 0 needs ([\d.]+) MiB", printed).group(1)
    emb = re.search(r"the embedding: ([\d.]+) MiB", printed).group(1)
    assert f"about {float(emb):.0f} MiB of stage 0's\n{float(total):.0f} MiB" in verdict
    without = float(re.search(r"still ([\d.]+)x stage 3", printed).group(1))
    assert 1.7 <= without < 2 and "almost twice" in verdict
    gpipe = [float(x) for x in re.findall(r"([\d.]+) MiB", printed.split("GPipe")[1])]
    assert f"{min(gpipe):.0f}-{max(gpipe):.0f} MiB each" in verdict
    assert "Verdict for this toy" in verdict and "In general, both" in verdict and "2407.21783" in verdict
    assert "seed of this course" not in source(LESSON, "8bd0c94d")


def test_where_the_embedding_and_where_the_warm_up_dominates():
    lines = output_text(LESSON, "b5where1").splitlines()
    assert len(lines) == 7
    assert lines[0].startswith("the toy above") and lines[0].endswith("warm-up dominates")
    assert all(line.endswith("warm-up dominates") for line in lines if line.startswith("llama3-405b"))
    assert all(line.endswith("embedding dominates") for line in lines if line.startswith("2B, 256k"))
