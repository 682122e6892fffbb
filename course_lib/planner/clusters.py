"""Cluster presets: the GPU (peak FLOP/s, memory), the node, and the links inside and between nodes.

    from course_lib.planner.clusters import cluster
    selene = cluster("a100-selene")
    selene.tp_link(8), selene.tp_link(16)   # NVLink inside a node; across nodes, the InfiniBand link

Links are :class:`~course_lib.shelf.costs.Link`s taken from ``course_lib.network.PRESETS`` where a preset
exists (H100: NVLink 4, 400 Gb/s per GPU); the A100's NVLink 3 and HDR InfiniBand are not presets
there, so they are defined here with their sources. Inter-node bandwidth is per GPU: a node has one
network port per GPU (8 x 200 Gb/s HDR on Selene, 8 x 400 Gb/s on Llama 3's cluster).

Each GPU's peak FLOP/s comes from the one table of datasheet peaks, ``CARD_PEAKS`` (``card_peak``
finds a CUDA device's entry by name, for an MFU). `efficiency` is the one compute-efficiency factor
per GPU type: the share of peak FLOP/s its matrix multiplications reach inside a stage. It is
calibrated on one published run (``published.py`` says which, and ``published.calibrate`` recomputes
it); everything else the planner predicts follows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from course_lib.network import PRESETS, Gbit
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require

GiB = 2**30
NVLINK3 = Link(latency_s=10e-6, bandwidth_Bps=300e9, name="NVLink 3")  # 600 GB/s bidirectional per A100
IB_HDR = Link(latency_s=5e-6, bandwidth_Bps=200 * Gbit, name="InfiniBand HDR")  # 200 Gb/s per port


@dataclass(frozen=True)
class CardPeak:
    name: str
    fp32_flops: float  # FP32 on the CUDA cores (not TF32)
    bf16_flops: float | None  # dense BF16 tensor-core peak (datasheets print it doubled, "with sparsity")
    source: str


_SHEET = "NVIDIA {} Tensor Core GPU datasheet ({})"
_H100 = _SHEET.format("H100", "BF16 1,979 / 1,671 / 1,513 TFLOPS with sparsity, halved")
_H200 = _SHEET.format("H200", "BF16 1,979 / 1,671 TFLOPS with sparsity, halved")
_ADA = "NVIDIA Ada GPU Architecture whitepaper, Appendix A"

# first match wins: the more specific names come first (an "H100 PCIe" is also an "H100")
CARD_PEAKS: tuple[tuple[str, CardPeak], ...] = (
    (r"h200 nvl", CardPeak("H200 NVL", 60e12, 835e12, _H200)),
    (r"h200", CardPeak("H200 SXM", 67e12, 989e12, _H200)),
    (r"h100 nvl", CardPeak("H100 NVL", 60e12, 835e12, _H100)),
    (r"h100 pcie", CardPeak("H100 PCIe", 51e12, 756e12, _H100)),
    (r"h100", CardPeak("H100 SXM", 67e12, 989e12, _H100)),
    (r"a100", CardPeak("A100", 19.5e12, 312e12, _SHEET.format("A100", "BF16 312 TFLOPS dense"))),
    (r"l4", CardPeak("L4", 30.3e12, 121e12, _SHEET.format("L4", "BF16 242 with sparsity, halved"))),
    (r"t4", CardPeak("T4", 8.1e12, None, _SHEET.format("T4", "no BF16; FP16 mixed 65 TFLOPS"))),
    (r"rtx 4090", CardPeak("GeForce RTX 4090", 82.6e12, 165.2e12, _ADA)),
)


def card_peak(device_name: str) -> CardPeak | None:
    """The table's entry for a CUDA device name (``torch.cuda.get_device_name``), or None."""
    name = device_name.lower()
    for pattern, peak in CARD_PEAKS:
        if re.search(rf"\b{pattern}\b", name):  # whole words: an L40S is not an L4
            return peak
    return None


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
        card_peak("A100 80GB").bf16_flops,
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
        card_peak("H100 80GB HBM3").bf16_flops,
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
