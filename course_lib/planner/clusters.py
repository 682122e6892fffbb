"""Cluster presets: the GPU (peak FLOP/s, memory), the node, and the links inside and between nodes.

    from course_lib.planner.clusters import cluster
    selene = cluster("a100-selene")
    selene.tp_link(8), selene.tp_link(16)   # NVLink inside a node; across nodes, the InfiniBand link

Links are :class:`~course_lib.links.Link`s taken from ``course_lib.network.PRESETS`` where a preset
exists (H100: NVLink 4, 400 Gb/s per GPU); the A100's NVLink 3 and HDR InfiniBand are not presets
there, so they are defined here with their sources. Inter-node bandwidth is per GPU: a node has one
network port per GPU (8 x 200 Gb/s HDR on Selene, 8 x 400 Gb/s on Llama 3's cluster).

`efficiency` is the one compute-efficiency factor per GPU type: the share of peak FLOP/s its matrix
multiplications reach inside a stage. It is calibrated on one published run (``published.py`` says
which, and ``published.calibrate`` recomputes it); everything else the planner predicts follows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from course_lib.errors import require
from course_lib.links import Link
from course_lib.network import PRESETS, Gbit

GiB = 2**30
NVLINK3 = Link(latency_s=10e-6, bandwidth_Bps=300e9, name="NVLink 3")  # 600 GB/s bidirectional per A100
IB_HDR = Link(latency_s=5e-6, bandwidth_Bps=200 * Gbit, name="InfiniBand HDR")  # 200 Gb/s per port


@dataclass(frozen=True)
class Cluster:
    name: str
    gpu: str
    peak_flops: float  # dense BF16/FP16 tensor-core FLOP/s per GPU
    memory_bytes: float  # per GPU
    gpus_per_node: int
    nvlink: Link  # between two GPUs of a node, one direction
    network: Link  # between nodes, per GPU, one direction
    efficiency: float  # share of peak a stage's matmuls reach (calibrated: see published.py)
    source: str = ""
    site_link: Link | None = None  # between two sites: the pipeline's middle boundary crosses it

    def tp_link(self, t: int) -> Link:
        """The link a TP group of `t` GPUs all-reduces over: NVLink while it fits in a node."""
        return self.nvlink if t <= self.gpus_per_node else self.network

    def with_efficiency(self, efficiency: float) -> Cluster:
        require(0 < efficiency <= 1, f"efficiency must be in (0, 1], got {efficiency!r}")
        return replace(self, efficiency=efficiency)


CLUSTERS: dict[str, Cluster] = {
    "a100-selene": Cluster(
        "a100-selene",
        "A100 80GB",
        312e12,
        80 * GiB,
        8,
        NVLINK3,
        IB_HDR,
        efficiency=0.592,
        source="Narayanan et al. 2021 (arXiv 2104.04473) sec 5: Selene, DGX A100 nodes of 8 x A100 80GB "
        "(NVLink/NVSwitch), 8 x 200 Gb/s HDR InfiniBand per node; A100 datasheet: 312 TFLOP/s "
        "BF16 dense, NVLink 3 600 GB/s bidirectional per GPU",
    ),  # fmt: skip
    "h100-llama3": Cluster(
        "h100-llama3",
        "H100 80GB",
        989e12,
        80 * GiB,
        8,
        PRESETS["nvlink4"].link,
        PRESETS["400gbe"].link,
        efficiency=0.829,
        source="Llama Team 2024 (arXiv 2407.21783) sec 3.3.1: H100 80GB, 8 per server over NVLink, "
        "400 Gb/s RoCE between GPUs; H100 SXM datasheet: 989 TFLOP/s BF16 dense",
    ),  # fmt: skip
}


def cluster(name: str) -> Cluster:
    """The preset called `name` (see CLUSTERS)."""
    key = str(name).strip().lower()
    require(key in CLUSTERS, f"unknown cluster preset {name!r}; choose one of: {', '.join(CLUSTERS)}")
    return CLUSTERS[key]
