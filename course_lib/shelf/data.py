"""Training text, a character tokenizer, batches, and the split of a batch into m micro-batches.

    from course_lib.shelf.data import load_corpus
    corpus = load_corpus()                       # data/corpus.txt, 90% train / 10% held out
    x, y = corpus.batch("train", batch_size=16, seq_len=64, generator=torch.Generator().manual_seed(0))
    micro = split_microbatches(x, y, m=4)        # 4 pairs of (4, 64) tensors

The corpus ships in the repo (data/make_corpus.py says how it was made); nothing is downloaded.
The held-out split is the last 10% of the text, never seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from course_lib.shelf.errors import CourseError, divisors, require

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
    require(path.is_file(), f"data file {str(path)!r} does not exist; {expected}")
    try:
        text = path.read_bytes().decode("utf-8")
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
