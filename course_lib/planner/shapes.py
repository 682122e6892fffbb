"""Model shapes: the published presets, their parameter counts and the FLOPs of one training step.

    from course_lib.planner.shapes import model
    gpt = model("megatron-1t")
    gpt.parameters()                          # 1.008e12: Megatron-LM's eq. 2
    gpt.step_flops(3072, recompute=True)      # eq. 3: what its Table 1 counts per iteration

Parameters and FLOPs are counted layer by layer (attention, MLP, biases, embeddings), so the same code
covers a GPT with a 4h MLP (where it reduces to Megatron-LM's eq. 2 and 3 exactly) and Llama 3's
SwiGLU MLP with grouped-query attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from course_lib.shelf.errors import require

MEGATRON_TABLE_1 = "Narayanan et al. 2021, arXiv 2104.04473, Table 1 (vocabulary 51,200, sequence 2,048)"
LLAMA3 = "Llama Team 2024, The Llama 3 Herd of Models, arXiv 2407.21783, Table 3"


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer: `layers` blocks of width `hidden`, `heads` attention heads
    (`kv_heads` of them for keys and values: grouped-query attention), an MLP of width `ffn`
    (`mlp_matrices` 2 for GELU, 3 for SwiGLU) and a vocabulary of `vocab`, on sequences of `seq_len`."""

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq_len: int
    kv_heads: int = 0  # 0: as many as heads (no grouped-query attention)
    mlp_matrices: int = 2
    biases: bool = True  # GPT: biases and layer-norm gains (eq. 2's 13h per layer); Llama: none
    source: str = ""

    def __post_init__(self) -> None:
        for label in ("layers", "hidden", "heads", "ffn", "vocab", "seq_len"):
            value = getattr(self, label)
            whole = isinstance(value, int) and value >= 1
            require(whole, f"{label} must be a whole number >= 1, got {value!r}")
        require(self.hidden % self.heads == 0, f"hidden {self.hidden} must divide by heads {self.heads}")

    def layer_matmul_parameters(self) -> int:
        """Weights one block multiplies by: Q and O (h x h), K and V (h x h_kv), the MLP."""
        kv_width = self.hidden * (self.kv_heads or self.heads) // self.heads
        return 2 * self.hidden**2 + 2 * self.hidden * kv_width + self.mlp_matrices * self.hidden * self.ffn

    def layer_parameters(self) -> int:
        return self.layer_matmul_parameters() + (13 * self.hidden if self.biases else 2 * self.hidden)

    def embedding_parameters(self) -> int:
        """Token embeddings (tied to the output layer, as in Megatron-LM) plus learned positions (GPT)."""
        return self.hidden * (self.vocab + (self.seq_len if self.biases else 0))

    def parameters(self) -> int:
        """Megatron-LM eq. 2 for a GPT: 12*l*h^2 * (1 + 13/(12h) + (V+s)/(12*l*h))."""
        return self.layers * self.layer_parameters() + self.embedding_parameters()

    def layer_forward_flops(self, sequences: int) -> float:
        """One block's forward on `sequences` sequences: 2 FLOPs per weight per token, plus attention's
        two s x s products (Q K^T and scores x V), 2 * 2 * s^2 * h per sequence."""
        tokens = sequences * self.seq_len
        return 2.0 * tokens * self.layer_matmul_parameters() + self.attention_scores_forward_flops(sequences)

    def attention_scores_forward_flops(self, sequences: int) -> float:
        """The two s x s products of one block's forward (Q K^T and scores x V): what selective
        recomputation runs again (Korthikanti et al. 2022 sec 4.3)."""
        return 4.0 * sequences * self.seq_len * self.seq_len * self.hidden

    def recompute_flops(self, sequences: int, mode: str) -> float:
        """FLOPs one step spends again: "full" every block's forward, "selective" only its attention
        scores, "none" nothing (the logits are never recomputed)."""
        per_layer = {"none": 0.0, "selective": self.attention_scores_forward_flops(sequences),
                     "full": self.layer_forward_flops(sequences)}  # fmt: skip
        require(mode in per_layer, f"recompute mode must be one of {tuple(per_layer)}, got {mode!r}")
        return self.layers * per_layer[mode]

    def logits_forward_flops(self, sequences: int) -> float:
        return 2.0 * sequences * self.seq_len * self.hidden * self.vocab

    def step_flops(self, sequences: int, recompute: bool) -> float:
        """FLOPs of one step on `sequences` sequences: the backward costs two forwards, and full
        recomputation runs each block's forward once more (not the logits). With recompute this is
        Megatron-LM eq. 3, 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)), for a GPT; without, the model FLOPs
        an MFU counts."""
        passes = 4 if recompute else 3
        return passes * self.layers * self.layer_forward_flops(sequences) + 3 * self.logits_forward_flops(
            sequences
        )

    def with_seq_len(self, seq_len: int) -> ModelShape:
        return replace(self, seq_len=seq_len)


def _gpt(name: str, heads: int, hidden: int, layers: int) -> ModelShape:
    return ModelShape(name, layers, hidden, heads, 4 * hidden, 51_200, 2_048, source=MEGATRON_TABLE_1)


MODELS: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        _gpt("megatron-18b", 48, 6_144, 40),
        _gpt("megatron-39b", 64, 8_192, 48),
        _gpt("megatron-76b", 80, 10_240, 60),
        _gpt("megatron-145b", 96, 12_288, 80),
        _gpt("megatron-310b", 128, 16_384, 96),
        _gpt("megatron-530b", 128, 20_480, 105),
        _gpt("megatron-1t", 160, 25_600, 128),
        # sec 5.4 (Fig. 13): a GPT of 162.2 billion parameters on 64 GPUs. The figure gives only the
        # size; this shape (h 20480, 32 layers: eq. 2 gives 162.2B) is an assumption that matches it
        _gpt("megatron-162b", 128, 20_480, 32),
        ModelShape(
            "llama3-405b",
            126,
            16_384,
            128,
            53_248,
            128_256,
            8_192,
            kv_heads=8,
            mlp_matrices=3,
            biases=False,
            source=LLAMA3,
        ),  # fmt: skip
    )
}


def model(name: str) -> ModelShape:
    """The preset called `name` (see MODELS)."""
    key = str(name).strip().lower()
    require(key in MODELS, f"unknown model preset {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[key]
