"""Which devices the course runs on: real GPUs when there are enough, otherwise simulated devices.

    from course_lib.devices import describe_devices, stage_devices
    print(describe_devices())          # "2 CUDA GPUs: ..." or "no GPU: simulated devices on the CPU"
    stage_devices(4)                   # one torch.device per pipeline stage

Simulated devices: when there are fewer GPUs than stages, every stage runs on the same real device
(the CPU, or the one GPU) and the course *simulates* the concurrency between them. Figures made that way
say so ("measured compute + simulated links").
"""

from __future__ import annotations

import torch

from course_lib.errors import CourseError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> first GPU if any, else CPU; 'cpu'; 'cuda' or 'cuda:N' (must exist)."""
    name = name.strip().lower()
    if name == "auto":
        return torch.device("cuda:0") if gpu_count() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        index = 0 if name == "cuda" else name.split(":", 1)[1]
        if not str(index).isdigit():
            raise CourseError(f"unknown device {name!r}; expected one of {DEVICE_CHOICES} or 'cuda:N'")
        if int(index) >= gpu_count():
            raise CourseError(
                f"device {name!r} is not available: this machine has {gpu_count()} CUDA GPU(s); "
                "use 'cpu' or 'auto'"
            )
        return torch.device(f"cuda:{index}")
    raise CourseError(f"unknown device {name!r}; expected one of {DEVICE_CHOICES} or 'cuda:N'")


def stage_devices(n_stages: int, device: str = "auto") -> list[torch.device]:
    """One GPU per stage when there are enough GPUs (and device is auto/cuda); otherwise every stage
    on the same device, and the pipeline's devices are simulated."""
    gpus = gpu_count()
    if device in ("auto", "cuda") and gpus >= n_stages:
        return [torch.device(f"cuda:{i}") for i in range(n_stages)]
    return [resolve_device(device)] * n_stages


def uses_simulated_devices(n_stages: int, device: str = "auto") -> bool:
    return len(set(stage_devices(n_stages, device))) < n_stages


def describe_devices() -> str:
    gpus = gpu_count()
    if gpus:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(gpus))
        return (
            f"{gpus} CUDA GPU(s): {names}. A pipeline of up to {gpus} stages gets one GPU per stage; "
            "more stages share them as simulated devices."
        )
    return (
        "no GPU found: every pipeline stage runs on the CPU as a simulated device. Compute times are "
        "measured; the concurrency between devices and the links are simulated, and figures say so."
    )
