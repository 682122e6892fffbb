"""StageRuntime on its own: I + W equal B, the stash is freed, checkpointing keeps only inputs, and
an interrupted batch neither loses the Ctrl-C nor blocks the next batch."""

from __future__ import annotations

import sys
import weakref

import pytest
import torch
from torch import nn

from course_lib.engines.idle_release import SpentGraphs
from course_lib.shelf.errors import CourseError
from course_lib.shelf.model import ModelConfig, build_model, stage_modules, uniform
from course_lib.shelf.schedule import Action
from course_lib.shelf.stage import StageRuntime

CFG = ModelConfig(n_layers=3, d_model=16, n_heads=2, vocab_size=8, seq_len=8)


def two_stages(checkpoint: str = "never", m: int = 2, track_memory: bool = True, split: bool = True):
    model = build_model(CFG, seed=0)
    stages = [
        StageRuntime(s, 2, mod, m, checkpoint, track_memory=track_memory, split_backward=split)
        for s, mod in enumerate(stage_modules(model.layers, uniform(5, 2)))
    ]
    return model, stages


def run_batch(stages, split: bool, m: int = 2) -> list[list[int]]:
    """One batch through two stages with ``run``, GPipe order; bytes held after each forward."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 8, (4, 8), generator=gen), torch.randint(0, 8, (4, 8), generator=gen)
    first, last = stages
    held = []
    for mb, (xm, ym) in enumerate(zip(x.chunk(m), y.chunk(m), strict=True)):
        last.run(Action.parse(f"1F{mb}"), first.run(Action.parse(f"0F{mb}"), xm), ym)
        held.append([s.saved_bytes() for s in stages])
    for mb in range(m):
        if split:
            first.run(Action.parse(f"0I{mb}"), last.run(Action.parse(f"1I{mb}"), None))
            last.run(Action.parse(f"1W{mb}"), None)
            first.run(Action.parse(f"0W{mb}"), None)
        else:
            first.run(Action.parse(f"0B{mb}"), last.run(Action.parse(f"1B{mb}"), None))
    return held


def run_two_stages(split: bool, checkpoint: str, m: int = 2, track_memory: bool = True):
    model, stages = two_stages(checkpoint, m, track_memory, split)
    return model, stages, run_batch(stages, split, m)


@pytest.mark.parametrize("checkpoint", ["never", "except_last", "always"])
def test_split_backward_gives_the_full_backward_gradients(checkpoint):
    full, stages_full, _ = run_two_stages(False, checkpoint)
    split, stages_split, _ = run_two_stages(True, checkpoint)
    assert stages_full[1].loss() == stages_split[1].loss()
    for a, b in zip(full.parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-8)
    assert all(s.saved_bytes() == 0 and s.inflight() == 0 for s in stages_full + stages_split)


def test_held_bytes_grow_per_microbatch_and_checkpointing_keeps_less():
    _, _, never = run_two_stages(False, "never")
    _, _, always = run_two_stages(False, "always")
    assert never[1][0] == pytest.approx(2 * never[0][0], rel=0.01)  # two micro-batches, twice the bytes
    assert always[1][1] < never[1][1] / 10  # only the inputs of stage 1 (two small activations)


@pytest.mark.parametrize("split", [False, True])
def test_without_memory_tracking_the_gradients_are_the_same_and_nothing_is_counted(split):
    tracked, _, _ = run_two_stages(split, "never")
    untracked, _, held = run_two_stages(split, "never", track_memory=False)
    for a, b in zip(tracked.parameters(), untracked.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert held[-1] == [0, 0]


def test_wrong_order_is_refused():
    model = build_model(CFG, seed=0)
    stage = StageRuntime(0, 2, torch.nn.Sequential(*model.layers[:2]), 2, split_backward=True)
    with pytest.raises(CourseError, match="W for micro-batch 0 before its I"):
        stage.backward_weight(0)
    with pytest.raises(CourseError, match="no forward of micro-batch 1"):
        stage.backward(1, torch.zeros(1))
    with pytest.raises(CourseError, match="unknown checkpoint mode 'sometimes'"):
        StageRuntime(0, 2, torch.nn.Sequential(*model.layers[:2]), 2, checkpoint="sometimes")
    with pytest.raises(CourseError, match="action 1F0 belongs to stage 1, not 0"):
        stage.run(Action.parse("1F0"), torch.zeros(1))


def test_an_interrupted_batch_keeps_the_ctrl_c_and_the_next_batch_starts_clean():
    model, stages = two_stages()
    first = stages[0]
    first.forward(0, torch.randint(0, 8, (2, 8)))

    def interrupt(*_):
        raise KeyboardInterrupt

    hook = first.module[1].register_forward_hook(interrupt)  # Ctrl-C in the middle of a forward
    with pytest.raises(KeyboardInterrupt):
        first.forward(1, torch.randint(0, 8, (2, 8)))
    hook.remove()
    assert first.saved_bytes() > 0 and first.inflight() == 1
    # freeing the stale graph runs no finalizer, where a Ctrl-C would be printed and lost
    calls = []
    sys.setprofile(lambda frame, event, _: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        for stage in stages:
            stage.start_batch()
    finally:
        sys.setprofile(None)
    assert "__del__" not in calls
    assert [(s.saved_bytes(), s.inflight(), s.peak_saved_bytes) for s in stages] == [(0, 0, 0)] * 2
    # and the next batch gives exactly the gradients of an undisturbed one
    run_batch(stages, split=True)
    fresh, fresh_stages = two_stages()
    run_batch(fresh_stages, split=True)
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_a_deferred_graph_release_keeps_the_spent_graph_until_asked_and_changes_no_gradient():
    def deferred_stages():
        model = build_model(CFG, seed=0)
        modules = stage_modules(model.layers, uniform(5, 2))
        stages = [StageRuntime(s, 2, mod, 2) for s, mod in enumerate(modules)]
        return model, stages, [SpentGraphs(stage) for stage in stages]

    _, (first, last), (_, kept) = deferred_stages()
    x, y = torch.randint(0, 8, (2, 8)), torch.randint(0, 8, (2, 8))
    last.run(Action.parse("1F0"), first.run(Action.parse("0F0"), x), y)
    loss = weakref.ref(last._stash[0].out)  # the graph lives as long as its output
    first.run(Action.parse("0B0"), last.run(Action.parse("1B0"), None))
    assert loss() is not None and last.saved_bytes() == 0  # kept, but nothing saved for backward in it
    kept.release_graphs()
    assert loss() is None
    plain, _, _ = run_two_stages(False, "never")
    model, stages, _ = deferred_stages()
    run_batch(stages, split=False)
    for a, b in zip(plain.parameters(), model.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_deferred_spent_graphs_stay_bounded_when_the_caller_never_releases_them():
    model = build_model(CFG, seed=0)
    layers = nn.Sequential(*model.layers)
    stage = StageRuntime(0, 1, layers, 2, split_backward=False)
    SpentGraphs(stage)
    x, y = torch.randint(0, 8, (2, 8)), torch.randint(0, 8, (2, 8))
    outs = []
    for _ in range(2):  # two batches
        stage.start_batch()
        for mb in range(2):
            stage.forward(mb, x, y)
            outs.append(weakref.ref(stage._stash[mb].out))
            stage.backward(mb, None)
    # four backwards, m = 2: the two oldest graphs went, the two newest are kept until released
    assert [o() is None for o in outs] == [True, True, False, False]


def test_a_stage_runs_full_backwards_unless_the_schedule_splits_them(monkeypatch):
    from course_lib.engines.split_backward import SplitBackwardStage
    from course_lib.shelf import stage as shelf_stage

    model = build_model(CFG, seed=0)
    plain = StageRuntime(0, 2, torch.nn.Sequential(*model.layers[:2]), 1)
    assert type(plain) is StageRuntime  # the shelf's runtime: F and B only
    plain.forward(0, torch.randint(0, 8, (2, 8)))
    with pytest.raises(CourseError, match="runs full backwards \\(B\\); I and W need the split-backward"):
        plain.run(Action.parse("0I0"), torch.zeros(2, 8, 16))
    split = StageRuntime(0, 2, torch.nn.Sequential(*model.layers[:2]), 1, split_backward=True)
    assert type(split) is SplitBackwardStage  # registered by the room on import
    split.close()
    monkeypatch.setattr(shelf_stage, "SPLIT_BACKWARD_RUNTIME", [])  # as if the room were never imported
    with pytest.raises(CourseError, match="course_lib.engines.split_backward: `import course_lib.engines`"):
        StageRuntime(0, 2, torch.nn.Sequential(*model.layers[:2]), 1, split_backward=True)
