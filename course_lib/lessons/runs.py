"""Real runs for the lessons: train with a schedule; the measured and the simulated timeline side by side.

    from course_lib.lessons.runs import train_pipeline
    run = train_pipeline("gpipe", stages=4, microbatches=8, steps=20, n_layers=16)
    run.losses                    # the loss per step (equal to the reference trainer's)
    run.measured.bubble_fraction  # measured compute + simulated links (what this machine did)
    run.simulated.bubble_fraction # the textbook model: every stage the same, the same links
    run.plot()                    # the two Gantt charts, one above the other

The simulated timeline gives every stage the *mean* of the measured costs, so the two charts differ
only where the real stages differ (uneven partitions, the embedding and the head, noise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from course_lib.shelf.costs import Link, costs_from
from course_lib.shelf.local_engine import LocalPipelineTrainer, PipelineResult
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.simulator import simulate
from course_lib.shelf.timeline import Timeline


@dataclass
class LessonRun:
    result: PipelineResult
    measured: Timeline  # measured compute + simulated links
    simulated: Timeline  # equal stages at the mean measured cost

    @property
    def losses(self) -> list[float]:
        return self.result.losses

    def plot(self, pyplot: bool = True):
        """Measured-compute Gantt chart above the simulated one, on one time axis; returns the figure.
        pyplot=False: a Figure pyplot does not know of (safe to draw on a thread; shown only where sent)."""
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure

        from course_lib.charts.gantt import plot_timeline

        size = (11, 2 + 0.9 * self.measured.n_devices)
        fig = plt.figure(figsize=size) if pyplot else Figure(figsize=size)
        top, bottom = fig.subplots(2, 1)
        extent = max(self.measured.makespan, self.simulated.makespan)
        plot_timeline(self.measured, ax=top, extent_s=extent)
        plot_timeline(self.simulated, ax=bottom, extent_s=extent)
        fig.tight_layout()
        return fig


def train_pipeline(
    schedule: str = "1f1b", stages: int = 4, microbatches: int = 8, steps: int = 20, *, n_layers: int = 80,
    virtual: int | None = None, links: Link | None = None, checkpoint: str = "never", progress: bool = True,
    stop: Callable[[int], bool] | None = None, **config,
) -> LessonRun:  # fmt: skip
    """Train the toy model with the local engine; other TrainConfig fields may be given by name.
    `virtual` None: the schedule's own default (1, or 2 for the V shapes, which take only 2).
    `stop(steps_done)`, asked before every action, stops the run (TrainingStopped) by returning True."""
    cfg = replace(TrainConfig(), n_layers=n_layers, microbatches=microbatches, steps=steps, **config)
    trainer = LocalPipelineTrainer(cfg, schedule, stages, virtual=virtual, checkpoint=checkpoint, links=links)
    result = trainer.train(progress=progress, stop=stop)
    tl = result.timeline
    equal = costs_from([tl], reduce="mean", equal_stages=True)
    simulated = simulate(trainer.schedule, equal, boundary_bytes=tl.boundary_bytes, links=trainer.plan.links)
    return LessonRun(result=result, measured=tl, simulated=simulated)
