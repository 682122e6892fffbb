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

Stopping: ipykernel 7 (checked in JupyterLab 4.6) runs a widget's click on the thread that last sent
that widget's state: the main shell at first, then the subshell all widgets share. A training inside
the click's callback would hold back every click on its thread until it ended, the stop click too, and
a kernel interrupt (SIGINT) never reaches a subshell. So the button trains on a thread of its own;
"stop" sets an Event the engine asks before every action, and the run ends with one line, "stopped
after N of M steps", as a run started from a cell (``dash.train()``) does on Kernel > Interrupt. The
dashboard works on afterwards: sliders, a new run.

Each micro-batch holds ``samples_per_microbatch`` sequences, so the batch is m times that: any m
the schedule accepts can be trained. A setting the engine refuses (say, more stages than layers)
is explained in words under the chart, never as a traceback.
"""

from __future__ import annotations

import base64
import io
import threading
from dataclasses import dataclass

from matplotlib.figure import Figure

from course_lib.costs import StageCosts, costs_from
from course_lib.errors import CourseError, require
from course_lib.lessons.runs import LessonRun, train_pipeline
from course_lib.widgets.dashboard import DashboardConfig, PipelineDashboard, scaled


@dataclass(frozen=True)
class TrainSettings:
    """What the button trains besides the dashboard's own choices (kept small: a few seconds)."""

    n_layers: int = 80
    steps: int = 3  # the first step warms up and is left out of the timeline, so at least 2 are useful
    samples_per_microbatch: int = 1
    seq_len: int = 32
    device: str = "auto"  # one GPU per stage when there are enough, else simulated devices

    def check(self) -> None:
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
        self.train_text = ""
        self._stop = threading.Event()  # set by the stop button, asked by the engine before every action
        self._one_run = threading.Lock()
        self._worker: threading.Thread | None = None
        super().__init__(on_train=self._start, on_stop=self.stop, **kwargs)

    # ---- the buttons ---------------------------------------------------------------------------
    def _start(self, c: DashboardConfig) -> None:
        """The train button: train on a thread and return at once, so the stop click can be handled."""
        if self.running:
            return
        self._worker = threading.Thread(target=self.train, args=(c,), name="train for real", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        """The stop button: the run going on stops before its next action."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._one_run.locked() or (self._worker is not None and self._worker.is_alive())

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a button-started run to end (at most `timeout` seconds); True when none is left."""
        if self._worker is not None:
            self._worker.join(timeout)
        return not self.running

    # ---- training ------------------------------------------------------------------------------
    def train(self, c: DashboardConfig | None = None) -> LessonRun | None:
        """Train what the controls say (or `c`) here and now and show the run under the chart; the
        stop button or an interrupt ends it with one line. Returns the run (None: refused or stopped)."""
        if not self._one_run.acquire(blocking=False):
            raise CourseError("a run is already going: press stop, or wait for it (dash.wait())")
        self._stop.clear()
        self.train_button.disabled, self.stop_button.disabled = True, False  # one run at a time
        try:
            return self._run(self.config() if c is None else c)
        finally:
            self.train_button.disabled, self.stop_button.disabled = False, True
            self._one_run.release()

    def _run(self, c: DashboardConfig) -> LessonRun | None:
        s, done = self.settings, 0
        going = f"training {c.schedule}, p={c.p}, m={c.m}: {{}} of {s.steps} steps done (stop ends it)"

        def should_stop(steps_done: int) -> bool:  # asked by the engine before every action
            nonlocal done
            if steps_done != done:
                done = steps_done
                self._say(going.format(done))
            return self._stop.is_set()

        self._say(going.format(0))
        try:
            run = train_pipeline(
                c.schedule, c.p, c.m, steps=s.steps, n_layers=s.n_layers, virtual=c.v, links=c.link,
                batch_size=c.m * s.samples_per_microbatch, seq_len=s.seq_len, eval_batches=1,
                device=s.device, progress=False, stop=should_stop,
            )  # fmt: skip
        except CourseError as err:
            self._say(f"cannot train this combination: {err}")
            return None
        except KeyboardInterrupt:  # the stop button (TrainingStopped) or a kernel interrupt: no traceback
            self._say(f"stopped after {done} of {s.steps} steps")
            return None
        except Exception as err:  # noqa: BLE001  (on the button's thread, a traceback would go unseen)
            self._say(f"the run failed: {type(err).__name__}: {err}")
            return None
        self.last_run = run
        # One setting, one simulated number: the sliders' chart adopts this run's measured costs (a
        # device's share is v stages' worth), so it shows the bubble the run's own simulated chart shows.
        self.use_costs(scaled(_slider_costs(run), c.v), c.p, max(run.measured.boundary_bytes, default=0))
        self._say(run_summary(run, c), run.plot(pyplot=False))
        return run

    def _say(self, text: str, fig: Figure | None = None) -> None:
        """Show `text` (and `fig`) under the chart, in place of what was there. Sets the Output widget's
        outputs directly, which works from the training thread; capturing prints (``with output:``)
        does not: JupyterLab files captured output under the click's message, closed by then."""
        self.train_text = text
        outputs = [{"output_type": "stream", "name": "stdout", "text": text + "\n"}]
        if fig is not None:
            png = io.BytesIO()
            fig.savefig(png, format="png", bbox_inches="tight")
            data = {"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure>"}
            outputs.append({"output_type": "display_data", "data": data, "metadata": {}})
        self.output.outputs = tuple(outputs)


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
