"""The course's model on torch.distributed.pipelining gives the reference trainer's losses.

One launch (two spawned gloo processes) runs torch's own ScheduleGPipe and our 1F1B, ZB-H1 and ZB-V
exported as PyTorch CSV through torch's generic runtime; spawning is the slow part, so it is shared.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.errors import CourseError
from course_lib.reference import TrainConfig, train

tp = pytest.importorskip("course_lib.engines.torch_pipelining")
pytest.importorskip("torch.distributed.pipelining", reason="torch without distributed pipelining")

CFG = TrainConfig(n_layers=2, steps=2, batch_size=4, seq_len=16, microbatches=2, d_model=16, n_heads=2)


@pytest.mark.processes
@pytest.mark.timeout(240)
def test_torch_runtimes_match_the_reference_loss():
    torch.manual_seed(0)
    specs = [
        tp.make_spec(CFG, "gpipe", 2),
        tp.make_spec(CFG, "1f1b", 2, from_csv=True),
        tp.make_spec(CFG, "zb-h1", 2, from_csv=True),
        tp.make_spec(CFG, "zb-v", 2, from_csv=True),  # a V: stages 0 and 3 on rank 0, 1 and 2 on rank 1
    ]
    results = tp.launch(specs)
    reference = train(CFG, progress=False).losses
    assert [r.runner for r in results] == [
        "ScheduleGPipe",
        "_PipelineScheduleRuntime + our CSV",
        "_PipelineScheduleRuntime + our CSV",
        "_PipelineScheduleRuntime + our CSV",
    ]
    assert specs[3].placement == (0, 1, 1, 0)
    for r in results:
        assert len(r.losses) == CFG.steps
        assert r.losses == pytest.approx(reference, abs=1e-5), r.schedule
    assert reference[1] < reference[0]  # it trains: the second step's loss is lower
    # what torch executed is our order, row by row
    assert results[1].csv_text.splitlines() == ["0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"]
    assert results[2].csv_text.splitlines()[0] == "0F0,0F1,0I0,0W0,0I1,0W1"


def test_bad_input_is_named_before_any_process_starts():
    with pytest.raises(CourseError, match="no class for schedule 'zb-h1'"):
        tp.make_spec(CFG, "zb-h1", 2)
    with pytest.raises(CourseError, match="m=2, p=4"):
        tp.make_spec(CFG, "1f1b", 4)
    with pytest.raises(CourseError, match="unknown schedule 'bogus'"):
        tp.make_spec(CFG, "bogus", 2)
    with pytest.raises(CourseError, match="stages .* got 0"):
        tp.make_spec(CFG, "gpipe", 0)
