"""What every notebook's first cell calls, so all lessons start the same way.

    %matplotlib inline
    from course_lib import lesson
    lesson.setup()

It seeds every random generator, picks a colour-blind-safe plotting style, and prints which versions
and devices this run uses (``describe_devices``: course_lib/shelf/stage.py's rule), so that a screenshot
of any lesson says where its numbers came from. ``train_config()`` gives the model size to train here:
the CPU toy, or ``accelerator_config()``'s wider model when there is a GPU.

The stop rule for a run started from a cell: Kernel > Interrupt ends it with one line, never a
traceback from deep inside torch. ``setup()`` tells IPython (when there is one) to show an interrupt
as ``stopped(...)``'s line; the cell still counts as failed, so "Run All" stops there instead of
running on into cells that need what was cut short. A multi-process run ends its processes first
(course_lib/engines/launch.py) and its line says so. Runs started by a widget's button run on a thread
an interrupt cannot reach: those stop with the widget's Stop button (course_lib/widgets/run_panel.py).
"""

from __future__ import annotations

import random
import sys
import traceback

import matplotlib as mpl
import numpy as np
import torch

import course_lib
import course_lib.engines  # noqa: F401  (the rooms the lessons run: the split backward registers itself)
import course_lib.engines.torch_pipelining  # noqa: F401  (a room: adds runner= to make_spec, lesson 08)
import course_lib.schedules  # noqa: F401  (registers every schedule by name in the shelf's registry)
import course_lib.stage_layout  # noqa: F401  (a room: partition= takes a Megatron layout string)
from course_lib.charts.bubble_and_memory import SERIES_COLORS
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.stage import accelerator, gpu_count
from course_lib.tp import mesh  # noqa: F401 (a room: adds tp= and dp= to run_distributed)


def accelerator_config(**overrides) -> TrainConfig:
    """The size the lessons train on a GPU (CUDA or mps): still 80 layers, 16x wider than the CPU toy,
    whose 32-wide matmuls are launch-bound on a GPU. Sized for a 16 GB card holding all p=4 stages:
    252M parameters take 4.0 GB (weights, gradients, AdamW's two moments: 16 B each); a micro-batch of
    2 x 128 tokens saves 8.4 MB per block for backward (64 B per token per unit of width, measured), so
    GPipe at m=8 holds 5.4 GB and 1F1B at p=4 1.7 GB. lr: GPT-3 Small's (Brown et al. 2020, Table 2.1)."""
    preset = dict(d_model=512, n_heads=8, seq_len=128, batch_size=16, microbatches=8, lr=6e-4, device="auto")
    return TrainConfig(**(preset | overrides))


def train_config(**overrides) -> TrainConfig:
    """The TrainConfig a lesson trains: the CPU toy (TrainConfig's defaults) when there is no GPU; with
    one (CUDA or Apple's mps), ``accelerator_config()``'s wider model on device 'auto'. `overrides`
    (steps=40, microbatches=8, ...) win either way."""
    return accelerator_config(**overrides) if accelerator() else TrainConfig(**overrides)


def setup(seed: int = 0, quiet: bool = False, threads: int = 1) -> None:
    """Seed, style the plots, and print what this machine is (``run_line()``). Returns nothing, so that a
    notebook's first cell shows the line once, not a second time as the cell's value.

    One CPU thread by default: the toy model's matrices are 32 wide, far too small for threads to
    help, and on a busy or small machine extra threads make every step many times slower. It also
    keeps floating-point sums in the same order on every laptop, so everyone sees the same numbers."""
    random.seed(seed)  # every generator a lesson might draw from
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    mpl.rcParams["axes.prop_cycle"] = mpl.cycler(color=SERIES_COLORS)  # Okabe-Ito, as the course's own plots
    mpl.rcParams["figure.dpi"] = 90
    mpl.rcParams["axes.grid"] = True
    mpl.rcParams["grid.alpha"] = 0.3
    stop_on_interrupt()
    wrap_between_words()
    if not quiet:
        print(run_line(seed))


# JupyterLab breaks a long output line at any letter ("per d / evice"); wrap between words instead, and
# inside a word only where one word is wider than the page
READABLE_OUTPUT = ".jp-OutputArea-output pre { word-break: normal; overflow-wrap: break-word; }"


def wrap_between_words() -> bool:
    """In a notebook, style every cell's printed text to wrap between words. False outside one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "kernel"):  # a terminal IPython would print the object
        return False
    from IPython.display import HTML, display

    display(HTML(f"<style>{READABLE_OUTPUT}</style>"))
    return True


INTERRUPTED = "stopped by Kernel > Interrupt; what this cell computed is lost: run it again to start over"


def stopped(err: BaseException) -> str:
    """The one line an interrupted cell shows: what stopped, plus what the run said (its processes ended)."""
    said = str(err).strip()
    return f"{INTERRUPTED} ({said})" if said else INTERRUPTED


def _one_line(shell, etype, value, tb, tb_offset=None) -> list[str]:
    # IPython's custom exception handler: the error output is this one line (no frames, no "%tb" hint);
    # _showtraceback is what ipykernel overrides to send an error message to the notebook
    line = f"KeyboardInterrupt: {stopped(value)}"
    shell._showtraceback(etype, value, [line])
    # IPython keeps the exception (its last result's error), and with it every frame's locals: the stopped
    # run's tensors, and a multi-process run's queue, whose named semaphores sit in /dev/shm until they
    # are freed. What was computed is lost anyway, so free it now: a kernel killed later leaves nothing.
    seen, error = set(), value
    while error is not None and id(error) not in seen:  # and the errors it was raised from, or during
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    traceback.clear_frames(tb)
    return [line]


def stop_on_interrupt() -> bool:
    """In a notebook (IPython), show a KeyboardInterrupt from any cell as one line (``stopped``).
    Returns False outside IPython, where Ctrl-C keeps Python's usual traceback."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    shell.set_custom_exc((KeyboardInterrupt,), _one_line)
    return True


def run_line(seed: int = 0) -> str:
    """Versions, seed, threads and devices: what a screenshot of a lesson needs to say."""
    return (
        f"course_lib {course_lib.__version__} | torch {torch.__version__} | seed {seed} | "
        f"{torch.get_num_threads()} CPU thread(s)\n{describe_devices()}"
    )


def describe_devices() -> str:
    """One line: what a pipeline of p stages runs on here (``lesson.setup()`` prints it)."""
    gpus = gpu_count()
    if gpus == 1:
        return f"1 GPU ({torch.cuda.get_device_name(0)}): all p stages share it as simulated devices"
    if gpus > 1:
        names = sorted({torch.cuda.get_device_name(i) for i in range(gpus)})
        return f"{gpus} GPUs ({', '.join(names)}): one per stage for p <= {gpus}; more stages share cuda:0"
    if accelerator() == "mps":
        return "1 Apple GPU (mps): all p stages share it as simulated devices"
    return "no GPU: simulated devices on the CPU"
