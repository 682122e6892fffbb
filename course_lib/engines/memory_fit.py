"""What a training run will hold in memory at its peak, counted before anything is allocated, and the
refusal of a run this machine cannot hold.

A room beside the shelf's ``TrainConfig`` (``course_lib/shelf/reference.py``): importing it
(``course_lib.engines`` does, so ``course_lib.lesson``, the command line and torchrun load it) registers
:func:`check_fits` in ``reference.MEMORY_CHECKS``, which ``TrainConfig.check`` and the local engine's
plan ask with the micro-batches a schedule holds at once (``local_engine.make_plan``: GPipe holds all
m). It refuses with a sentence naming the parts that do not fit and by how much, before torch's
allocator does it with a traceback. Without the room a config too large for the machine is not refused:
it fails when the allocator runs out, minutes in, or the machine swaps. The parts, for the toy model of
one process (the reference trainer, or the local engine running every stage)::

    training_memory(cfg, vocab_size=40, held=Held(4.0, 4)).parts
    # {'torch at work': ..., 'the corpus': ..., 'the vocabulary's embedding and head': ...,
    #  'the blocks' weights': ..., 'activations held for backward': ..., 'logits': ...}

- **torch at work**: what the first kernels add to a process that has imported torch (code pages,
  thread pools, allocator caches), about 120 MiB whatever the size (measured: a 2-layer, 16-wide run).
- **the corpus**: its text, and its token ids (8 B each, and Python's list of them on the way).
- **parameters with AdamW**: 16 B each (weights, gradients, two moments), split into the vocabulary's
  share (the token embedding and the head: 2 x vocabulary x width, one if they are tied) and the rest.
- **activations held for backward**: what each block saves per token, times the micro-batches each
  stage holds at once (`Held`: GPipe all m, 1F1B up to p; the reference one).
- **logits**: per token and vocabulary entry, what the head saves for each held micro-batch (its
  log-softmax) plus the backward of one (the logits' gradient and softmax), or the held-out evaluation
  of a whole batch at once (no gradient, but every sample): whichever is larger.

The figures per token are measured on this toy (bench/bench_memory_estimate.py), and held within 20%
of the peak resident memory of a fresh process on the CPU (tests/test_memory_estimate.py). The
vocabulary is the corpus's: `corpus_vocabulary` reads it (bounded, through the file door) once per
file version, so an 8.7 MB text of a million distinct characters is refused before its embedding is.
What the run has is the device's free memory (:func:`memory_bytes` for the CPU and Apple's shared
memory, the GPU's own for CUDA).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

import torch

from course_lib.shelf.errors import LIMITS, CourseError, read_file
from course_lib.shelf.model import DEFAULT_CORPUS, ModelConfig
from course_lib.shelf.reference import MEMORY_CHECKS, TrainConfig
from course_lib.shelf.stage import resolve_device

_MIB = 2**20
RUNTIME_BYTES = 120 * _MIB  # torch's first forward and backward in a fresh process, at any size
CORPUS_BYTES_PER_CHAR = 26  # the text (1-4 B), its ids (8 B) and the list encode builds (8 B + ints)
PARAMETER_BYTES = 16  # AdamW: weight, gradient, two moments, float32 each
BLOCK_BYTES_PER_TOKEN = 64  # saved for backward per token, per unit of width, per block (measured)
HEAD_HELD_BYTES = 10  # per token and vocabulary entry, each held micro-batch: its log-softmax and more
HEAD_BACKWARD_BYTES = 20  # per token and vocabulary entry, the micro-batch in its backward: gradients
EVAL_BYTES = 8  # per token and vocabulary entry of a whole held-out batch: logits and log-softmax


class RunSizes(Protocol):
    """What the count reads of a TrainConfig."""

    n_layers: int
    d_model: int
    seq_len: int
    batch_size: int
    microbatches: int
    data_path: str | None
    tie_embeddings: bool


class Held(NamedTuple):
    """Micro-batches held for backward at once: averaged over the blocks (by their stage's count) and
    on the head's stage (the logits are the largest activation when the vocabulary is large)."""

    blocks: float = 1.0
    head: float = 1.0

    @classmethod
    def of(cls, peaks: list[int], sizes: tuple[int, ...] | list[int]) -> Held:
        """From each stage's most micro-batches in flight and its layer count (the head is the last)."""
        layers = sum(sizes)
        return cls(sum(k * n for k, n in zip(peaks, sizes, strict=True)) / layers, float(peaks[-1]))


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes a run needs at its peak, by what holds them (in the order they are allocated)."""

    parts: dict[str, float]
    vocab_size: int  # the corpus's characters, counted in the embedding, the head and the logits

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def refusal(self, why: str, have: float, largest: str) -> str:
        """One sentence: the need, by how much it is over `have`, the largest parts, what would fit."""
        over = self.total - have
        big = sorted(self.parts.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{name} {_gib(b)}" for name, b in big)
        return (
            f"training this config ({why}) needs about {_gib(self.total)}, {_gib(over)} more than the "
            f"{_gib(have)} of memory this machine has free; the most: {parts}; the largest that fits: "
            f"{largest}"
        )


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 / 10 else f"{n / _MIB:,.0f} MiB"


def training_memory(cfg: RunSizes, vocab_size: int | None = None, held: Held | None = None) -> TrainingMemory:
    """What training `cfg` holds at its peak (module docstring), on `vocab_size` characters (None: its
    corpus's, or ModelConfig's default where the corpus cannot be read) with `held` micro-batches."""
    vocab = vocab_size or corpus_vocabulary(cfg.data_path) or ModelConfig.vocab_size
    held = held or Held()
    d, layers = cfg.d_model, cfg.n_layers
    mb_tokens = cfg.batch_size // max(1, cfg.microbatches) * cfg.seq_len  # of one micro-batch
    vocab_params = (1 if cfg.tie_embeddings else 2) * vocab * d
    block_params = (12 * d * d + 13 * d) * layers + (cfg.seq_len + 2) * d  # + positions, final norm
    logits = max(
        (held.head * HEAD_HELD_BYTES + HEAD_BACKWARD_BYTES) * mb_tokens * vocab,
        EVAL_BYTES * cfg.batch_size * cfg.seq_len * vocab,
    )
    parts = {
        "torch at work": RUNTIME_BYTES,
        "the corpus": CORPUS_BYTES_PER_CHAR * _corpus_chars(cfg.data_path),
        f"the embedding and head of {vocab:,} characters, with AdamW": PARAMETER_BYTES * vocab_params,
        "the blocks' weights with AdamW": PARAMETER_BYTES * block_params,
        f"activations held for backward ({held.blocks:g} micro-batches)": (
            held.blocks * mb_tokens * BLOCK_BYTES_PER_TOKEN * d * layers
        ),
        f"logits ({vocab:,} per token)": logits,
    }  # fmt: skip
    return TrainingMemory(parts, vocab)


def _corpus_chars(path: str | None) -> int:
    """About how many characters the corpus holds (its size in bytes: 1 B each or more); a file over
    the data limit counts as the limit, since ``load_corpus`` refuses it before reading a byte more."""
    try:
        return min(os.stat(path or DEFAULT_CORPUS).st_size, LIMITS["data_bytes"])
    except OSError:
        return 0


def corpus_vocabulary(path: str | None) -> int | None:
    """The vocabulary of the corpus at `path` (None: the shipped one), read once per file version;
    None when it cannot be read as text, which ``load_corpus`` then refuses, naming why."""
    target = str(path or DEFAULT_CORPUS)
    try:
        info = os.stat(target)
    except OSError:
        return None
    return _vocabulary(target, info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _vocabulary(path: str, size: int, mtime_ns: int) -> int | None:
    try:
        return len(set(read_file(path, "data file", LIMITS["data_bytes"]).decode("utf-8")))
    except (CourseError, UnicodeDecodeError):
        return None


def check_fits(
    cfg: TrainConfig, peaks: Sequence[int] = (1,), sizes: Sequence[int] | None = None,
    why: str = "one micro-batch at a time",
) -> None:  # fmt: skip
    """Refuse, before any work, a config whose training memory, with `peaks` micro-batches held at once on
    stages of `sizes` layers, exceeds the free memory of its device: the message names the largest
    parts, by how much, and the largest batch size, length and width that would fit."""
    one_stage = Held(float(max(peaks)), float(peaks[-1]))  # sizes unknown: the most held, everywhere
    held = Held.of(list(peaks), list(sizes)) if sizes is not None else one_stage
    have, need = _free_bytes(resolve_device(cfg.device)), training_memory(cfg, None, held)
    if have is None or need.total <= have:  # None: a GPU that cannot say (the first CUDA call fails)
        return

    def fits(name: str, value: int) -> bool:
        return training_memory(replace(cfg, **{name: value}), need.vocab_size, held).total <= have

    names = ("batch_size", "seq_len", "d_model")
    largest = {n: _largest(functools.partial(fits, n), getattr(cfg, n)) for n in names}
    said = ", ".join(f"{name} {value:,}" if value else f"no {name}" for name, value in largest.items())
    raise CourseError(need.refusal(why, have, f"{said} (each with the rest as given)"))


def memory_bytes() -> int:
    """This machine's memory a run may use: what Linux calls MemAvailable (RAM not needed by others,
    page cache included), else the physical total (macOS has no /proc)."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _free_bytes(device: torch.device) -> int | None:
    """Free memory of `device`: a CUDA GPU's own; the machine's for the CPU and Apple's shared memory."""
    if device.type != "cuda":
        return memory_bytes()
    try:
        return torch.cuda.mem_get_info(device)[0]
    except (AssertionError, RuntimeError):
        return None


def _largest(fits: Callable[[int], bool], above: int) -> int:
    """The largest v in 1..above for which fits(v) holds (0: none), by bisection: fits grows false."""
    low, high = 0, above
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


if check_fits not in MEMORY_CHECKS:
    MEMORY_CHECKS.append(check_fits)
