"""TP x PP x DP in the distributed engine: the rank layout, bad input refused before any process
starts, and real runs (gloo) whose loss, gradients and weights are the single-device reference's.
Eight processes on two cores are slow: the model is tiny and each launch runs several schedules."""

from __future__ import annotations

import json

import pytest
import torch

import course_lib.engines.idle_release  # noqa: F401 (as the lessons run: graphs released while idle)
from course_lib.cli import main, torchrun
from course_lib.engines.faults import Fault
from course_lib.shelf.distributed_engine import MAX_LOCAL_RANKS, launch, make_spec
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import split_microbatches
from course_lib.shelf.reference import TrainConfig, reference_run
from course_lib.tp.mesh import Mesh, replica_share

TINY = dict(n_layers=4, d_model=16, n_heads=2, seq_len=16, batch_size=8, steps=2)
SIZE = ["--layers", "4", "--width", "16", "--heads", "2", "--seq-len", "16", "--batch-size", "8"]


# ---- the layout -----------------------------------------------------------------------------------
def test_megatron_rank_layout_tp_neighbours_then_stages_then_replicas():
    mesh = Mesh(t=2, p=2, d=2)
    assert [mesh.rank(*mesh.coords(r)) for r in range(8)] == list(range(8))
    assert mesh.coords(5) == (1, 0, 1)  # replica 1, stage 0, TP rank 1
    assert mesh.tp_group(dp=1, stage=0) == [4, 5]  # consecutive: one server's NVLink
    assert mesh.pipeline(dp=1, tp=1) == [5, 7]  # messages go between matching TP ranks
    assert mesh.dp_group(stage=1, tp=0) == [2, 6]
    assert sorted(r for pipe in mesh.pipelines() for r in pipe) == list(range(8))


def test_each_replica_takes_its_share_of_every_microbatch():
    x = torch.arange(8 * 3).view(8, 3)
    batch = split_microbatches(x, x + 100, 2)
    shares = [replica_share(batch, k, 2) for k in range(2)]
    for mb, (xm, ym) in enumerate(batch):
        torch.testing.assert_close(torch.cat([s[mb][0] for s in shares]), xm)
        torch.testing.assert_close(torch.cat([s[mb][1] for s in shares]), ym)


# ---- bad input: refused by make_spec, before any process starts ---------------------------------
@pytest.mark.parametrize(
    "options, words",
    [
        (dict(tp=3), ["t=3", "does not divide", "d_model=16"]),
        (dict(tp=4), ["t=4", "n_heads=2"]),  # divides the width, not the heads
        (dict(tp=0), ["t must be", "got 0"]),
        (dict(dp=3), ["dp=3", "4 samples", "1, 2, 4"]),
        (dict(dp=8), ["dp=8", "4 samples"]),
        (
            dict(tp=2, dp=32, stages=2, cfg=TrainConfig(**TINY | dict(batch_size=64), microbatches=2)),
            ["2 x 2 x 32 = 128 ranks", f"limit of {MAX_LOCAL_RANKS}"],
        ),  # fmt: skip
        (dict(tp=2, dp=2, fault=Fault(rank=8)), ["fault.rank", "0..7", "8"]),
    ],
)
def test_bad_mesh_is_refused_with_the_value_named(options, words):
    args = dict(cfg=TrainConfig(**TINY, microbatches=2), stages=2) | options
    with pytest.raises(CourseError) as err:
        make_spec(args.pop("cfg"), "1f1b", args.pop("stages"), **args)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_the_largest_mesh_under_the_limit_is_accepted():
    spec = make_spec(TrainConfig(**TINY | dict(batch_size=64), microbatches=2), "1f1b", 4, tp=2, dp=8)
    assert spec.world == MAX_LOCAL_RANKS and spec.extras["mesh"] == Mesh(t=2, p=4, d=8)


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--engine", "local", "--tp", "2"], ["--engine local does not use --tp", "--engine distributed"]),
        (["--engine", "reference", "--dp", "2"], ["--engine reference does not use --dp"]),
        (["--engine", "distributed", "--tp", "3"], ["t=3"]),
        (["--engine", "distributed", "--dp", "3", "--microbatches", "2"], ["dp=3", "4 samples"]),
    ],
)
def test_the_command_line_refuses_a_bad_mesh_before_any_process(flags, words, capsys):
    assert main(["train", *SIZE, "--steps", "1", *flags]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, (word, err)


def test_under_torchrun_the_ranks_are_t_x_p_x_d():
    args = torchrun.torchrun_parser().parse_args(["--tp", "2", "--dp", "2", *SIZE])
    spec = torchrun.spec_from_flags(args, world=8)
    assert (spec.extras["tp"], spec.ranks, spec.extras["dp"], spec.world) == (2, 2, 2, 8)
    with pytest.raises(CourseError, match="started 6 ranks.*--tp 2 x --dp 2 = 4 does not divide"):
        torchrun.spec_from_flags(args, world=6)
    args.stages = 4
    with pytest.raises(CourseError, match="--stages 4 but torchrun started 8 ranks.* x 2 stages"):
        torchrun.spec_from_flags(args, world=8)


def test_a_tp_or_dp_that_is_not_a_whole_number_is_refused_by_argparse(capsys):
    for value in ("0", "1.5"):
        with pytest.raises(SystemExit, match="2"):
            main(["train", "--engine", "distributed", "--dp", value])
        err = capsys.readouterr().err
        assert "argument --dp: must be a whole number >= 1 and <= " in err and f"got '{value}'" in err


# ---- real runs --------------------------------------------------------------------------------------
# (schedule, virtual, m, options): any schedule of the registry runs on the mesh; m = 2 keeps 2
# samples per micro-batch, so d = 2 replicas get one each. Checkpointing re-runs a forward, and its
# all-reduces, on every TP rank alike; direction groups are the message plumbing NCCL gets (one
# group per direction of each pipeline's pairs), checked here with gloo
JOBS = {
    (2, 2, 1): [("1f1b", 1, 2, {}), ("gpipe", 1, 2, {"checkpoint": "always"}), ("zb-h1", 1, 2, {}),
                ("interleaved-1f1b", 2, 2, {})],
    (1, 2, 2): [("1f1b", 1, 2, {}), ("gpipe", 1, 4, {})],
    (2, 2, 2): [("1f1b", 1, 2, {}), ("gpipe", 1, 2, {"direction_groups": True}), ("zb-h1", 1, 2, {})],
}  # fmt: skip


@pytest.mark.processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("tpd", list(JOBS), ids=lambda m: "t{}-p{}-d{}".format(*m))
def test_tp_pp_dp_give_the_reference_loss_gradients_and_weights(tpd):
    t, p, d = tpd
    jobs = JOBS[tpd]
    specs = [
        make_spec(TrainConfig(**TINY, microbatches=m), s, p, virtual=v, tp=t, dp=d, return_grads=True,
                  threads=1, **options)
        for s, v, m, options in jobs
    ]  # fmt: skip
    for (name, v, m, _), r in zip(jobs, launch(specs), strict=True):
        losses, grads, params = reference_run(TrainConfig(**TINY, microbatches=m))
        assert (r.tp, r.ranks, r.dp) == tpd
        assert r.losses == pytest.approx(losses, rel=1e-5), name
        assert sorted(r.grads) == sorted(grads), name  # every weight of the full model, glued back
        for key, g in grads.items():
            # TP sums each row's partial products in another order (and the CPU's kernels pick their own
            # blocking): float32 rounding of up to ~5e-5 of the tensor's largest entry, seen on AVX-512
            # machines; a lost micro-batch or a wrong scale is off by tens of percent of it
            scale = 1e-4 * float(g.abs().max())
            torch.testing.assert_close(r.grads[key], g, rtol=1e-5, atol=max(1e-7, scale), msg=f"{name} {key}")
            # AdamW divides by sqrt(v): where a gradient is near zero (a rare token's embedding row), the
            # replicas' different order of summation moves a weight by up to ~1% of one step (lr 3e-3,
            # warm-up: 3e-4 then 6e-4); atol 1e-5 is 3% of the first step's move
            torch.testing.assert_close(r.params[key], params[key].detach(), rtol=1e-5, atol=1e-5)
        assert r.replica_weight_diff == 0.0  # the replicas stepped with the same averaged gradients
        assert len(r.grad_sync_s) == TINY["steps"] and all(s >= 0 for s in r.grad_sync_s)
        # the measured timeline is rank 0's pipeline: every action of the schedule, once
        tl = r.timeline
        assert tl.source == "measured" and tl.n_devices == p
        assert sorted(map(str, (s.action for s in tl.spans))) == sorted(
            map(str, build_schedule(name, p, m, v).actions())
        )
        assert len(r.rank_step_times_s) == t * p * d  # one entry per rank of all
        assert r.n_params == sum(g.numel() for g in grads.values())


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_train_command_with_tp_and_stages_checks_the_reference(capsys):
    flags = ["--engine", "distributed", "--tp", "2", "--stages", "2", "--microbatches", "2", "--steps", "1"]
    assert main(["train", *SIZE, *flags, "--check-reference", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["tp"], out["pipeline_ranks"], out["dp"], out["world"]) == (2, 2, 1, 4)
    assert out["max_grad_diff_vs_reference"] < 1e-5
    assert out["timeline_source"] == "measured" and 0 < out["bubble_fraction"] < 1
    assert out["grad_sync_s"] == [0.0]  # one replica: nothing to average
