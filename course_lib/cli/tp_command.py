"""``python -m course_lib tp``: tensor against pipeline parallelism, in numbers.

    python -m course_lib tp counts --layers 80 --devices 8        # messages per step and per token
    python -m course_lib tp sweep --scenario train                 # latency sweep + crossover (model)
    python -m course_lib tp measure --devices 2                    # real TP and PP runs, injected latency

``counts`` also runs the toy model split t ways in one process and prints what its f / g operators
logged next to the formula.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from course_lib.cli.flags import BATCH, LAYERS, number_type
from course_lib.shelf.errors import LIMITS
from course_lib.shelf.model import ModelConfig, lm_loss
from course_lib.tp.accounting import Workload, comparison, tp_allreduces
from course_lib.tp.cost import Scenario, describe_sweep, sweep


def tp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["counts", "sweep", "measure"])
    parser.add_argument("--layers", type=LAYERS, default=80, help="transformer blocks (default 80)")
    parser.add_argument(
        "--devices",
        type=number_type(low=2, high=LIMITS["stages"]),
        default=8,
        help="t for TP and p for PP (default 8)",
    )
    parser.add_argument("--microbatches", type=BATCH, default=8, help="micro-batches per step (default 8)")
    parser.add_argument(
        "--scenario",
        choices=["train", "decode"],
        default="train",
        help="sweep: 70B-class training step or one generated token on H200s (sources: REFERENCES.md)",
    )


def _counts(args: argparse.Namespace) -> None:
    print(comparison(Workload(n_layers=args.layers, microbatches=args.microbatches), args.devices))
    cfg = ModelConfig(n_layers=args.layers, d_model=32, n_heads=4, vocab_size=64, seq_len=16)
    from course_lib.tp.simulated import SimulatedTP  # imported here: builds a model, only for this command

    t = args.devices if cfg.n_heads % args.devices == 0 else 2
    tp = SimulatedTP.from_seed(cfg, t, seed=0)
    x = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tp(x)
    print(
        f"\ncounted on the toy model ({args.layers} blocks, t={t}, one forward pass = one generated token): "
        f"{tp.log.count('all_reduce', 'forward')} all-reduces; formula 2L = "
        f"{tp_allreduces(args.layers, t, 1, backward=False)}"
    )
    tp.log.clear()
    lm_loss(tp(x), x).backward()
    print(f"forward + backward: {tp.log.count()} all-reduces; formula 4L = {tp_allreduces(args.layers, t)}")


def _measure(args: argparse.Namespace) -> None:
    import course_lib.engines  # noqa: F401  (the room that injects the links' latency between ranks)
    from course_lib.shelf.costs import Link
    from course_lib.shelf.distributed_engine import launch, make_spec
    from course_lib.shelf.reference import TrainConfig
    from course_lib.tp.distributed import run_tensor_parallel

    ways = args.devices
    cfg = ModelConfig(n_layers=min(args.layers, 4), vocab_size=64, seq_len=32)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 64, (4, 32), generator=gen), torch.randint(0, 64, (4, 32), generator=gen)
    alphas = (0.0, 1e-5, 1e-4, 1e-3, 3e-3)
    res = run_tensor_parallel(cfg, ways, x, y, microbatches=2, alphas_s=alphas, repeats=7)
    n = res.step_log.count()
    print(
        f"TP over {ways} processes ({res.backend}), {cfg.n_layers} blocks, m=2, {n} all-reduces per step; "
        "fastest of 7 steps +- std (source: measured), model = T(0) + 2(t-1) * all-reduces * alpha"
    )
    _table(res.timings, alphas, 2 * (ways - 1) * n)
    pp_cfg = TrainConfig(n_layers=cfg.n_layers, seq_len=32, batch_size=4, microbatches=2, steps=7)
    pp_alphas = (1e-3, 0.0, 3e-3, 1e-2)  # the first run also warms the processes up
    runs = launch([make_spec(pp_cfg, "gpipe", ways, links=Link(latency_s=a), threads=1) for a in pp_alphas])
    print(
        f"\nPP (distributed engine, GPipe) over {ways} processes, same model and m; "
        "model = T(0) + 2(p-1) * alpha"
    )
    pp_times = {a: r.step_times() for a, r in zip(pp_alphas, runs, strict=True)}
    _table(pp_times, sorted(pp_alphas), 2 * (ways - 1))


def _table(times: dict, alphas, slope: float) -> None:
    from course_lib.tp.distributed import noise

    base = float(np.min(times[0.0]))
    for a in alphas:
        best = float(np.min(times[a]))
        print(
            f"alpha {a * 1e6:>7.0f} us: measured {best * 1e3:8.2f} ms +- {noise(times[a]) * 1e3:6.2f}"
            f"   model {(base + slope * a) * 1e3:8.2f} ms"
        )


def tp_command(args: argparse.Namespace) -> int:
    if args.what == "counts":
        _counts(args)
    elif args.what == "sweep":
        make = Scenario.h200_70b_decode if args.scenario == "decode" else Scenario.h200_70b_training
        sc = make(args.devices) if args.scenario == "decode" else make(args.devices, args.microbatches)
        print(describe_sweep(sweep(sc)))
    else:
        _measure(args)
    return 0
