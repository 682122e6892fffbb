"""The course's model on torch.distributed.pipelining gives the reference trainer's losses.

One launch (two spawned gloo processes) runs torch's own ScheduleGPipe and our 1F1B, ZB-H1 and ZB-V
exported as PyTorch CSV through torch's generic runtime; spawning is the slow part, so it is shared.
The spec and the result are the distributed engine's (``make_spec(..., runner=...)``, DistributedResult).
"""

from __future__ import annotations

import pytest
import torch

import course_lib.engines.torch_pipelining  # noqa: F401 (the room: adds runner= to make_spec)
import course_lib.tp.mesh  # noqa: F401 (adds tp=, refused with a torch runner below)
from course_lib.shelf.costs import Link
from course_lib.shelf.distributed_engine import launch, make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.reference import TrainConfig, train

pytest.importorskip("torch.distributed.pipelining", reason="torch without distributed pipelining")

CFG = TrainConfig(n_layers=2, steps=2, batch_size=4, seq_len=16, microbatches=2, d_model=16, n_heads=2)


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_torch_runtimes_match_the_reference_loss():
    torch.manual_seed(0)
    specs = [
        make_spec(CFG, "gpipe", 2, runner="torch"),
        make_spec(CFG, "1f1b", 2, runner="torch-csv"),
        make_spec(CFG, "zb-h1", 2, runner="torch-csv"),
        make_spec(CFG, "zb-v", 2, runner="torch-csv"),  # a V: stages 0 and 3 on rank 0, 1 and 2 on rank 1
    ]
    results = launch(specs)
    trained = train(CFG, progress=False)
    reference = trained.losses
    assert [r.runner_name for r in results] == [
        "ScheduleGPipe",
        "_PipelineScheduleRuntime + our CSV",
        "_PipelineScheduleRuntime + our CSV",
        "_PipelineScheduleRuntime + our CSV",
    ]
    assert specs[3].schedule.stage_to_device == [0, 1, 1, 0]  # the placement torch's stages follow
    for r in results:
        assert len(r.losses) == CFG.steps
        assert r.losses == pytest.approx(reference, abs=1e-5), r.schedule
        # the distributed engine's result: every rank's step times, a step lasting as long as its slowest
        assert [len(times) for times in r.rank_step_times_s] == [CFG.steps] * 2
        assert r.step_times_s == [max(times) for times in zip(*r.rank_step_times_s, strict=True)]
        assert r.n_params == trained.n_params and not r.timelines  # torch records no spans
    assert reference[1] < reference[0]  # it trains: the second step's loss is lower
    out = results[0].to_json()  # the same fields as our engine's, with no timeline to report
    assert (out["engine"], out["runner"], out["torch_class"]) == ("distributed", "torch", "ScheduleGPipe")
    assert out["bubble_fraction"] is None and out["rank_step_times_s"]
    with pytest.raises(CourseError, match="ScheduleGPipe recorded no spans"):
        results[0].timeline  # noqa: B018  (the property is what is checked)
    # what torch executed is our order, row by row
    assert results[1].csv_text.splitlines() == ["0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"]
    assert results[2].csv_text.splitlines()[0] == "0F0,0F1,0I0,0W0,0I1,0W1"


def test_bad_input_is_named_before_any_process_starts():
    with pytest.raises(CourseError, match="no class for schedule 'zb-h1'"):
        make_spec(CFG, "zb-h1", 2, runner="torch")
    with pytest.raises(CourseError, match="m=2, p=4"):
        make_spec(CFG, "1f1b", 4, runner="torch")
    with pytest.raises(CourseError, match="unknown schedule 'bogus'"):
        make_spec(CFG, "bogus", 2, runner="torch")
    with pytest.raises(CourseError, match="stages .* got 0"):
        make_spec(CFG, "gpipe", 0, runner="torch")
    with pytest.raises(CourseError, match="runner must be one of distributed, torch, torch-csv, got 'jax'"):
        make_spec(CFG, "gpipe", 2, runner="jax")
    with pytest.raises(CourseError, match="runner 'torch-csv' .* takes no links, tp: only the distributed"):
        make_spec(CFG, "gpipe", 2, runner="torch-csv", links=Link(latency_s=0.01), tp=2)
