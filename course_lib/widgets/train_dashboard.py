"""The lessons' dashboard with a "train for real" button: move the sliders, then run that pipeline.

The sliders simulate (answering within a blink); the button trains the 80-layer toy with the chosen
schedule, p, m (and v, link) on the local engine, shows its progress, then the run's loss and its
measured-compute Gantt chart above the simulated one, each labelled with its source.

Try it, in a notebook cell::

    from course_lib.widgets.train_dashboard import training_dashboard
    dash = training_dashboard("gpipe", p=4, m=8)
    dash                        # sliders, chart, and the "train for real" and "stop" buttons
    dash.train()                # what the button does, here and now (a few seconds on a laptop CPU)
    dash.last_run.losses, print(dash.train_text)

Stopping follows the course's one rule (course_lib/widgets/run_panel.py): the button trains on a
thread of its own, "stop" ends the run before its next action, and the run ends with one line,
"stopped after N of M steps", as a run started from a cell (``dash.train()``) does on Kernel >
Interrupt. The dashboard works on afterwards: sliders, a new run.

Each micro-batch holds ``samples_per_microbatch`` sequences, so the batch is m times that: any m
the schedule accepts can be trained. A setting the engine refuses (say, more stages than layers)
is explained in words under the chart, never as a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.lessons.runs import LessonRun, train_pipeline
from course_lib.shelf.costs import StageCosts, costs_from
from course_lib.shelf.errors import require, whole
from course_lib.widgets.dashboard import DashboardConfig, PipelineDashboard, scaled
from course_lib.widgets.run_panel import RunControl


@dataclass(frozen=True)
class TrainSettings:
    """What the button trains besides the dashboard's own choices (kept small: a few seconds)."""

    n_layers: int = 80
    steps: int = 3  # the first step warms up and is left out of the timeline, so at least 2 are useful
    samples_per_microbatch: int = 1
    seq_len: int = 32
    device: str = "auto"  # one GPU per stage when there are enough, else simulated devices

    def check(self) -> None:
        for name in ("n_layers", "steps", "samples_per_microbatch", "seq_len"):  # numpy's too; text refused
            whole(name, getattr(self, name), low=None)
        require(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        require(
            self.samples_per_microbatch >= 1,
            f"samples_per_microbatch must be >= 1, got {self.samples_per_microbatch}",
        )


def _slider_costs(run: LessonRun) -> StageCosts:
    """The run's F / I / W costs, the mean over every stage: one number each, for the sliders.

    A run whose schedule does a full backward (B) measures only i + w together. For the sliders'
    what-ifs with zero-bubble schedules that need the two apart, that measured B is split evenly
    (T_I = T_W, the Zero Bubble paper's own assumption); a zb-h1 run measures them separately."""
    costs = costs_from([run.measured], reduce="mean", equal_stages=True)
    return costs if costs.w else StageCosts(costs.f, costs.i / 2, costs.i / 2)


def run_summary(run: LessonRun, config: DashboardConfig | None = None) -> str:
    """A few lines on a real run: what ran, its losses, the two bubbles (each with its source)."""
    what = f"{run.result.schedule}, p={run.measured.n_devices}, m={run.result.config.get('microbatches')}"
    if config is not None and config.v > 1:
        what += f", v={config.v}"
    losses = ", ".join(f"{x:.3f}" for x in run.losses)
    return (
        f"trained {what} on {run.result.n_layers} blocks: loss per step {losses}\n"
        f"bubble: {run.measured.bubble_fraction:.1%} ({run.measured.source}) vs "
        f"{run.simulated.bubble_fraction:.1%} ({run.simulated.source}, every stage at this run's mean "
        "measured cost; the chart above now simulates with the same costs)\n"
        f"median step {run.result.step_time_s * 1e3:.0f} ms on this machine, all stages in one process"
    )


class TrainingDashboard(PipelineDashboard):
    """PipelineDashboard whose "train for real" button runs the local engine (see the module docstring).

    After a run: ``last_run`` (a LessonRun) and ``train_text`` (what was printed under the chart)."""

    def __init__(self, settings: TrainSettings | None = None, **kwargs):
        self.settings = settings if settings is not None else TrainSettings()
        self.settings.check()
        self.last_run: LessonRun | None = None
        super().__init__(on_train=self._train_locally, **kwargs)

    def train(self, c: DashboardConfig | None = None) -> LessonRun | None:
        """Train what the controls say (or `c`) here and now and show the run under the chart; the
        stop button or an interrupt ends it with one line. Returns the run (None: refused or stopped)."""
        return super().train(c)

    def _train_locally(self, c: DashboardConfig, control: RunControl) -> LessonRun:
        s = self.settings
        control.steps = s.steps
        return train_pipeline(
            c.schedule, c.p, c.m, steps=s.steps, n_layers=s.n_layers, virtual=c.v, links=c.link,
            batch_size=c.m * s.samples_per_microbatch, seq_len=s.seq_len, eval_batches=1,
            device=s.device, progress=False, stop=control,
        )  # fmt: skip

    def _shown(self, run: LessonRun, c: DashboardConfig) -> None:
        self.last_run = run
        # One setting, one simulated number: the sliders' chart adopts this run's measured costs (a
        # device's share is v stages' worth), so it shows the bubble the run's own simulated chart shows.
        self.use_costs(scaled(_slider_costs(run), c.v), c.p, max(run.measured.boundary_bytes, default=0))
        self.panel.say(run_summary(run, c), run.plot(pyplot=False))


def training_dashboard(
    schedule: str = "1f1b", p: int = 4, m: int = 8, v: int = 2, settings: TrainSettings | None = None,
    run: LessonRun | None = None, **kwargs,
) -> TrainingDashboard:  # fmt: skip
    """Build the dashboard; `run` (a lesson's real run) sets the sliders' costs to its measured mean
    over every stage (a device's share at the run's p; the model is held fixed as p moves), so the
    simulated chart is in this machine's milliseconds. Other keywords go to PipelineDashboard."""
    if run is not None:
        kwargs.setdefault("costs", _slider_costs(run))
        kwargs.setdefault("costs_p", run.measured.n_devices)
        kwargs.setdefault("boundary_bytes", max(run.measured.boundary_bytes, default=0))  # one size for all
    return TrainingDashboard(settings=settings, schedule=schedule, p=p, m=m, v=v, **kwargs)
