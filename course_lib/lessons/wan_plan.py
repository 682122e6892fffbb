"""Planning a pipeline across two continents: the problem, a plan, and what the simulator says it does.

    from course_lib.lessons.wan_plan import WanProblem, WanPlan, check_plan, simulate_plan, throughput
    problem = WanProblem()                                  # 4 GPUs in Ashburn VA, 4 in Frankfurt
    plan = WanPlan(p=8, m=32, schedule="1f1b", sizes=(10,) * 8)
    check_plan(problem, plan)                               # [] or the reasons it cannot run
    throughput(problem, plan)                               # sequences per second, simulated

The model is the course's 80 blocks; a plan cuts them into p contiguous stages, the first p/2 in the
west site and the rest in the east, so exactly one stage boundary crosses the ocean. A micro-batch of
b sequences costs b times the per-sequence block costs, so more micro-batches mean smaller ones: a
smaller bubble, but the link's latency weighs more against each one. Memory: every micro-batch a stage
holds keeps b sequences' activations for each of its blocks; the total must fit the device.

All compute costs and sizes here are *given* numbers (a made-up but plausible GPU), so everything this
module returns is simulated, and the Timeline says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.balance import inflight_per_stage
from course_lib.network import Gbit, site_link
from course_lib.schedules.latency_aware import latency_aware_1f1b
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.model import uniform
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.simulator import StageCosts, simulate
from course_lib.shelf.timeline import Timeline

MiB = 2**20
PLAN_SCHEDULES = ("gpipe", "1f1b", "latency-aware-1f1b")


@dataclass(frozen=True)
class WanProblem:
    """The sites, the links and the cost of the work (per sequence, per transformer block)."""

    west: str = "Ashburn VA"
    east: str = "Frankfurt"
    devices_per_site: int = 4
    n_blocks: int = 80
    batch: int = 64  # sequences per optimizer step
    f_s: float = 0.5e-3  # forward of one sequence through one block
    b_s: float = 1.0e-3  # full backward of one sequence through one block
    boundary_bytes: int = 1 * MiB  # activation one sequence sends across a stage boundary
    stash_bytes: int = 2 * MiB  # activations one sequence keeps per block until its backward
    device_budget_bytes: int = 320 * MiB  # activation memory each device may use
    route_factor: float = 1.5  # the cable is 1.5x the great circle
    wan_bandwidth_Bps: float = 100 * Gbit

    def sites(self, p: int) -> list[str]:
        """Stage s's site: the first half of the stages in the west, the rest in the east."""
        return [self.west] * (p // 2) + [self.east] * (p - p // 2)

    def links(self, p: int) -> list[Link]:
        sites = self.sites(p)
        pairs = zip(sites, sites[1:], strict=False)
        return [site_link(a, b, self.route_factor, self.wan_bandwidth_Bps) for a, b in pairs]


@dataclass(frozen=True)
class WanPlan:
    """p stages (even, at most the devices there are), m micro-batches, a schedule, blocks per stage.

    ``extra_per_link`` only matters for "latency-aware-1f1b": more micro-batches in flight per link
    (one number for every link, or one per link)."""

    p: int
    m: int
    schedule: str
    sizes: tuple[int, ...]
    extra_per_link: int | tuple[int, ...] = 0


def _schedule(plan: WanPlan) -> Schedule:
    if plan.schedule == "latency-aware-1f1b":
        extra = plan.extra_per_link if isinstance(plan.extra_per_link, int) else list(plan.extra_per_link)
        return latency_aware_1f1b(plan.p, plan.m, extra)
    return build_schedule(plan.schedule, plan.p, plan.m)


def check_plan(problem: WanProblem, plan: WanPlan) -> list[str]:
    """Everything that makes `plan` impossible, as sentences; [] when it can run."""
    problems = []
    most = 2 * problem.devices_per_site
    if not (isinstance(plan.p, int) and 2 <= plan.p <= most and plan.p % 2 == 0):
        problems.append(
            f"p={plan.p!r}: use an even number of stages from 2 to {most}, half on each continent "
            f"({problem.devices_per_site} devices per site)"
        )
    if not (isinstance(plan.m, int) and 1 <= plan.m <= problem.batch and problem.batch % plan.m == 0):
        problems.append(
            f"m={plan.m!r}: the batch of {problem.batch} sequences must split into m equal micro-batches"
        )
    if plan.schedule not in PLAN_SCHEDULES:
        problems.append(f"schedule {plan.schedule!r}: choose one of {PLAN_SCHEDULES}")
    sizes = tuple(plan.sizes)
    if len(sizes) != plan.p or any(not isinstance(s, int) or s < 1 for s in sizes):
        problems.append(f"sizes {sizes}: give p={plan.p} whole numbers >= 1, blocks per stage")
    elif sum(sizes) != problem.n_blocks:
        problems.append(f"sizes {sizes} cover {sum(sizes)} blocks; the model has {problem.n_blocks}")
    if problems:
        return problems
    try:
        held = inflight_per_stage(_schedule(plan))
    except ValueError as err:  # a bad extra_per_link, named by the schedule builder
        return [str(err)]
    per_mb, budget = problem.batch // plan.m, problem.device_budget_bytes
    for s, blocks in enumerate(plan.sizes):
        need = held[s] * per_mb * blocks * problem.stash_bytes  # peak activation bytes of stage s
        if need > budget:
            problems.append(
                f"stage {s} is out of memory: it holds {need / MiB:.0f} MiB of activations at its peak "
                f"({held[s]} micro-batches of {per_mb} sequences x {blocks} blocks x "
                f"{problem.stash_bytes / MiB:.0f} MiB), budget {budget / MiB:.0f} MiB"
            )
    return problems


def simulate_plan(problem: WanProblem, plan: WanPlan) -> Timeline:
    """One training step of `plan`, simulated (raises CourseError naming what is impossible)."""
    problems = check_plan(problem, plan)
    require(not problems, "this plan cannot run: " + "; ".join(problems))
    per_mb = problem.batch // plan.m
    blocks = [per_mb * n for n in plan.sizes]  # sequence-blocks per stage and micro-batch
    costs = StageCosts.fused(f=[n * problem.f_s for n in blocks], b=[n * problem.b_s for n in blocks])
    return simulate(
        _schedule(plan), costs, boundary_bytes=per_mb * problem.boundary_bytes, links=problem.links(plan.p)
    )


def throughput(problem: WanProblem, plan: WanPlan) -> float:
    """Sequences per second: the batch over the simulated step time."""
    return problem.batch / simulate_plan(problem, plan).makespan


def even_sizes(n_blocks: int, p: int) -> tuple[int, ...]:
    return uniform(n_blocks, p).sizes
