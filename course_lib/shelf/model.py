"""The toy transformer, what it trains on, and where a pipeline cuts it (lessons 00, 02, 05).

    from course_lib.shelf.model import ModelConfig, build_model, load_corpus, uniform
    model = build_model(ModelConfig(n_layers=80), seed=0)   # 80 blocks, about 1M parameters
    model.layers        # [Embedding, Block x 80, Head]: a pipeline stage is a slice of this list
    corpus = load_corpus()                       # data/corpus.txt, 90% train / 10% held out
    x, y = corpus.batch("train", batch_size=16, seq_len=64, generator=torch.Generator().manual_seed(0))
    micro = split_microbatches(x, y, m=4)        # 4 pairs of (4, 64) tensors
    uniform(82, 4).sizes                         # (21, 21, 20, 20): 82 layers over 4 stages

**The model.** A GPT-style decoder built as a flat list of layers, each taking one tensor and
returning one, so a stage is just ``for layer in layers[a:b]: x = layer(x)`` and nothing else in
the course needs to know the model's insides. It trains at 80 layers thanks to pre-norm blocks
(LayerNorm before attention and MLP, so the residual stream is never squashed) and GPT-2's
initialisation, which scales every residual output projection by 1/sqrt(2 * n_layers) so that 160
residual additions do not blow the stream up.

**The data.** Characters of a text that ships in the repo (data/make_corpus.py says how it was
made; nothing is downloaded); the held-out split is the last 10%, never seen in training.

**The partition.** Contiguous cut points in the layer list: stage s runs layers[start:end]. Measuring
what each layer costs and cutting where the stages balance live in course_lib/balance.py (lesson 05).

One file over 300 lines, read whole: what a pipeline trains, and the list it cuts.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.shelf.errors import (
    LIMITS,
    CourseError,
    divisors,
    read_file,
    require,
    shown,
    typed_fields,
    whole,
    wholes,
)


@dataclass(frozen=True)
class ModelConfig:
    n_layers: int = 80  # transformer blocks (the embedding and head come on top)
    d_model: int = 32  # width of the residual stream
    n_heads: int = 4
    vocab_size: int = 64
    seq_len: int = 64  # longest context the position embedding knows
    mlp_ratio: int = 4
    tie_embeddings: bool = False  # the head's projection is the token embedding's weight (GPT-2's tie)

    def __post_init__(self) -> None:
        typed_fields(self)  # 32.0 is 32, numpy's 32 too; 2.5 or "32" is refused naming the field
        require(self.n_layers >= 1, f"n_layers must be >= 1, got {self.n_layers}")
        require(self.d_model >= 1, f"d_model (width) must be >= 1, got {self.d_model}")
        require(self.n_heads >= 1, f"n_heads must be >= 1, got {self.n_heads}")
        require(
            self.d_model % self.n_heads == 0,
            f"width d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
            f"choose a width that is a multiple of {self.n_heads}",
        )
        require(self.vocab_size >= 2, f"vocab_size must be >= 2, got {self.vocab_size}")
        require(self.seq_len >= 1, f"seq_len must be >= 1, got {self.seq_len}")


class Embedding(nn.Module):
    """Token ids (batch, time) -> vectors (batch, time, d_model): token plus position embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.seq_len, cfg.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.token(idx) + self.position(torch.arange(idx.shape[1], device=idx.device))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)  # residual output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(causal_attention(self.qkv(x), self.n_heads))


def causal_attention(qkv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """q, k, v packed as (b, t, 3w) -> (b, t, w): causal attention over `n_heads` heads of w / n_heads."""
    b, t, _ = qkv.shape
    # (b, t, w) -> (b, heads, t, head_dim), for each of q, k, v
    q, k, v = (z.view(b, t, n_heads, -1).transpose(1, 2) for z in qkv.chunk(3, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(b, t, -1)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.down = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)  # residual output projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Head(nn.Module):
    """Final LayerNorm and the projection to vocabulary logits."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class ToyGPT(nn.Module):
    """The whole model; ``layers`` is the flat list a partition cuts."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList([Embedding(cfg), *(Block(cfg) for _ in range(cfg.n_layers)), Head(cfg)])
        if cfg.tie_embeddings:  # one Parameter used twice: autograd adds both uses' gradients into it
            self.layers[-1].out.weight = self.layers[0].token.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = idx
        for layer in self.layers:
            x = layer(x)
        return x


def init_weights(model: ToyGPT, seed: int) -> None:
    """GPT-2 initialisation, deterministic from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2 * model.config.n_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # biases and LayerNorm: bias 0, gain 1
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                std = residual_std if (".proj." in name or ".down." in name) else 0.02
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def build_model(cfg: ModelConfig | None = None, seed: int = 0) -> ToyGPT:
    """A fresh model; the same `cfg` and `seed` give bit-identical weights on every machine."""
    require(cfg is None or isinstance(cfg, ModelConfig), f"cfg must be a ModelConfig, got {shown(cfg)}")
    model = ToyGPT(cfg or ModelConfig())
    init_weights(model, seed)
    return model


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def layer_names(model: ToyGPT) -> list[str]:
    return ["embedding", *(f"block {i}" for i in range(model.config.n_layers)), "head"]


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# the forward's compute dtype per TrainConfig.precision (None: the weights' float32). Weights, gradients
# and AdamW's moments stay float32 either way (mixed precision); float16 runs without loss scaling
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def precision_dtype(precision: object) -> torch.dtype | None:
    """The dtype autocast computes in for `precision` (None for float32: no autocast); refuses a name
    that is not in PRECISIONS."""
    known = isinstance(precision, str) and precision in PRECISIONS
    require(known, f"precision must be one of {', '.join(PRECISIONS)}, got {shown(precision)}")
    return PRECISIONS[precision]


def check_amp(precision: object, device: torch.device) -> None:
    """Refuse an unknown precision, or automatic mixed precision (autocast) anywhere but on a CUDA GPU:
    the CPU stays float32 (the config's rule: the engines and the reference train what it allows)."""
    require(
        precision_dtype(precision) is None or device.type == "cuda",
        f"precision {precision!r} is autocast on a CUDA GPU, but the device is {device.type!r}, which "
        "computes in float32: use precision='float32' there",
    )


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """Where a forward runs: as it is ("float32"), or under torch.autocast to PRECISIONS[precision] on
    `device` (the engines' stages, the reference and torch's pipelining alike)."""
    dtype = precision_dtype(precision)
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


# ---- the data ------------------------------------------------------------------------------------
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus.txt"


@dataclass(frozen=True)
class CharTokenizer:
    """Characters <-> ids; the vocabulary is the sorted set of characters in the corpus."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(index))
        require(not unknown, f"characters {unknown!r} are not in the vocabulary")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


@dataclass
class Corpus:
    tokenizer: CharTokenizer
    train: torch.Tensor  # token ids
    val: torch.Tensor

    def batch(
        self, split: str, batch_size: int, seq_len: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows: inputs x and next-token targets y, both (batch_size, seq_len)."""
        require(split in ("train", "val"), f"split must be 'train' or 'val', got {split!r}")
        require(batch_size >= 1, f"batch size must be >= 1, got {batch_size}")
        data = self.train if split == "train" else self.val
        require(
            len(data) > seq_len + 1,
            f"the {split} split has {len(data)} tokens, too few for seq_len={seq_len}",
        )
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=generator)
        x = torch.stack([data[s : s + seq_len] for s in starts.tolist()])
        y = torch.stack([data[s + 1 : s + seq_len + 1] for s in starts.tolist()])
        return x, y


def load_corpus(path: str | Path = DEFAULT_CORPUS, val_fraction: float = 0.1) -> Corpus:
    """Read a UTF-8 text file and split it; clear errors for a missing, empty, binary or non-UTF-8 file."""
    path = Path(path)
    expected = f"expected a UTF-8 text file such as {str(DEFAULT_CORPUS)!r} (made by data/make_corpus.py)"
    if not path.exists():
        raise CourseError(f"data file {str(path)!r} does not exist; {expected}")
    data = read_file(path, "data file", LIMITS["data_bytes"])  # a FIFO, /dev/zero, 1 GB: refused first
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:  # Latin-1 text, or binary
        byte = f"byte {err.start} is 0x{err.object[err.start]:02x}"
        raise CourseError(f"data file {str(path)!r} is not UTF-8 text ({byte}); {expected}") from None
    require("\x00" not in text, f"data file {str(path)!r} holds NUL bytes, so it is binary; {expected}")
    require(len(text) >= 1000, f"data file {str(path)!r} holds {len(text)} characters; need at least 1000")
    require(0 < val_fraction < 1, f"val_fraction must be between 0 and 1, got {val_fraction}")
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    cut = int(len(ids) * (1 - val_fraction))
    return Corpus(tokenizer, ids[:cut], ids[cut:])


def check_microbatches(batch_size: int, m: int) -> None:
    """Refuse an m that does not split the batch into equal micro-batches, before any work."""
    require(m >= 1, f"micro-batches must be >= 1, got {m}")
    if batch_size % m != 0:
        raise CourseError(
            f"{m} micro-batches do not divide the batch of {batch_size} samples; "
            f"choose m from {divisors(batch_size)} (or change the batch size)"
        )


def split_microbatches(x: torch.Tensor, y: torch.Tensor, m: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Cut a batch into m equal micro-batches along the batch dimension."""
    check_microbatches(x.shape[0], m)
    return list(zip(x.chunk(m), y.chunk(m), strict=True))


# ---- the partition -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partition:
    bounds: tuple[tuple[int, int], ...]  # half-open (start, end) per stage, covering 0..n_layers

    @property
    def n_stages(self) -> int:
        return len(self.bounds)

    @property
    def n_layers(self) -> int:
        return self.bounds[-1][1] if self.bounds else 0

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(end - start for start, end in self.bounds)

    @classmethod
    def from_sizes(cls, sizes: list[int] | tuple[int, ...]) -> Partition:
        """Stages of these many layers each (Python or numpy whole numbers), in order."""
        counts = wholes("partition sizes (layers per stage)", sizes, low=None)
        require(len(counts) >= 1, "a partition needs at least one stage")
        bad = [s for s in counts if s < 1]
        require(not bad, f"every stage needs at least one layer; got stage sizes {list(counts)}")
        ends = list(accumulate(counts))
        return cls(tuple(zip([0, *ends[:-1]], ends, strict=True)))

    def check(self, n_layers: int) -> None:
        """Raise unless this partition covers exactly `n_layers` layers."""
        require(
            self.n_layers == n_layers,
            f"partition sizes {list(self.sizes)} cover {self.n_layers} layers, but the model has "
            f"{n_layers} (embedding + blocks + head)",
        )


def uniform(n_layers: int, n_stages: int) -> Partition:
    """As equal as possible; earlier stages take the remainder, one layer each."""
    n_layers, n_stages = whole("n_layers", n_layers, low=0), whole("number of stages", n_stages, low=None)
    require(n_stages >= 1, f"number of stages must be >= 1, got {n_stages}")
    require(
        n_stages <= n_layers,
        f"{n_stages} stages cannot split {n_layers} layers: every stage needs at least one layer, "
        f"so use at most {n_layers} stages",
    )
    base, extra = divmod(n_layers, n_stages)
    return Partition.from_sizes([base + (1 if s < extra else 0) for s in range(n_stages)])


def stage_modules(layers: nn.ModuleList, partition: Partition) -> list[nn.Sequential]:
    """The layers of each stage as a Sequential (sharing the parameters, not copying them)."""
    partition.check(len(layers))
    return [nn.Sequential(*layers[start:end]) for start, end in partition.bounds]
