"""Which devices the course runs on: one GPU per stage, one accelerator shared by every stage, or the CPU.

    from course_lib.shelf.devices import describe_devices, stage_devices
    print(describe_devices())          # "1 GPU (NVIDIA L4): all p stages share it as simulated devices"
    stage_devices(4)                   # one torch.device per pipeline stage

The rule for ``device="auto"`` and p stages:

- at least p CUDA GPUs: one GPU per stage (cuda:0 .. cuda:p-1);
- fewer (one laptop or cloud GPU is the common case): every stage on cuda:0;
- no CUDA GPU but Apple silicon: every stage on ``mps``;
- neither: every stage on the CPU.

When several stages share one real device they are *simulated devices*: the engines measure each
stage's compute on it (synchronising the accelerator, so a time covers the work and not its launch)
and simulate the concurrency between stages; figures say so ("measured compute + simulated links").
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from course_lib.shelf.errors import CourseError, require

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")


def gpu_count() -> int:
    """CUDA GPUs this process can use."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """Apple silicon's GPU, through torch's Metal (mps) backend."""
    return torch.backends.mps.is_available()


def accelerator() -> str | None:
    """The accelerator 'auto' picks: 'cuda', else 'mps', else None (the CPU)."""
    if gpu_count():
        return "cuda"
    return "mps" if mps_available() else None


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda:0, else mps, else the CPU; 'cpu'; 'mps'; 'cuda' or 'cuda:N' (must exist)."""
    key = name.strip().lower() if isinstance(name, str) else ""
    if key == "auto":
        kind = accelerator()
        return torch.device("cuda:0" if kind == "cuda" else kind or "cpu")
    if key == "cpu":
        return torch.device("cpu")
    if key == "mps":
        require(mps_available(), "device 'mps' is not available: it needs Apple silicon; use 'cpu' or 'auto'")
        return torch.device("mps")
    if key == "cuda" or (key.startswith("cuda:") and key[5:].isdigit()):
        index = int(key[5:]) if key != "cuda" else 0
        require(
            index < gpu_count(),
            f"device {name!r} is not available: this machine has {gpu_count()} CUDA GPU(s); "
            "use 'cpu' or 'auto'",
        )
        return torch.device(f"cuda:{index}")
    raise CourseError(f"unknown device {name!r}; expected one of {', '.join(DEVICE_CHOICES)}")


def stage_devices(n_stages: int, device: str = "auto") -> list[torch.device]:
    """One torch.device per pipeline stage, by the rule in the module docstring ('cuda' spreads the
    stages as 'auto' does; any other choice puts every stage on the device it names)."""
    require(
        isinstance(n_stages, int) and n_stages >= 1, f"n_stages must be a whole number >= 1, got {n_stages!r}"
    )
    shared = resolve_device(device)  # checks the name whatever the machine
    if device.strip().lower() in ("auto", "cuda") and gpu_count() >= n_stages:
        return [torch.device(f"cuda:{i}") for i in range(n_stages)]
    return [shared] * n_stages


def uses_simulated_devices(n_stages: int, device: str = "auto") -> bool:
    return len(set(stage_devices(n_stages, device))) < n_stages


def synchronize(devices: Iterable[torch.device]) -> None:
    """Wait until the accelerators among `devices` finish their queued work, so that a clock read just
    after covers the work itself (CUDA and mps run asynchronously; the CPU needs no wait)."""
    for d in set(devices):
        if d.type == "cuda":
            torch.cuda.synchronize(d)
        elif d.type == "mps":
            torch.mps.synchronize()


def describe_devices() -> str:
    """One line: what a pipeline of p stages runs on here (``lesson.setup()`` prints it)."""
    gpus = gpu_count()
    if gpus == 1:
        return f"1 GPU ({torch.cuda.get_device_name(0)}): all p stages share it as simulated devices"
    if gpus > 1:
        names = sorted({torch.cuda.get_device_name(i) for i in range(gpus)})
        return (
            f"{gpus} GPUs ({', '.join(names)}): one per stage for p <= {gpus}; "
            "more stages share cuda:0 as simulated devices"
        )
    if mps_available():
        return "1 Apple GPU (mps): all p stages share it as simulated devices"
    return "no GPU: simulated devices on the CPU"
