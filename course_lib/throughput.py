"""How fast the toy trains against what the card could do: model FLOPs per step, peaks, MFU.

    from course_lib.throughput import card_peak, model_flops_per_step
    flops = model_flops_per_step(cfg, n_params=result.n_params, vocab_size=40)
    peak = card_peak("NVIDIA H100 80GB HBM3")          # None for a card not in the table
    flops / result.step_time_s / peak.fp32_flops        # model FLOPs utilisation (MFU)

MFU counts the FLOPs the model needs, not what the kernels happened to do (no recomputation, no
padding), divided by the card's datasheet peak. The toy trains in FP32 (TF32 matmuls are off by
default in torch), so its MFU is against the FP32 peak; the dense BF16 peak is what LLM papers quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from course_lib.reference import TrainConfig


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


def model_flops_per_step(cfg: TrainConfig, n_params: int, vocab_size: int) -> float:
    """Training FLOPs of one batch, counted as in PaLM (Chowdhery et al. 2022, Appendix B): per token
    6N for the weights (2N forward, 4N backward) plus 12 L d T for attention's scores and mixing, where
    N leaves out the embedding tables (a lookup, not a matmul)."""
    n_matmul = n_params - (vocab_size + cfg.seq_len) * cfg.d_model
    per_token = 6 * n_matmul + 12 * cfg.n_layers * cfg.d_model * cfg.seq_len
    return float(per_token * cfg.batch_size * cfg.seq_len)
