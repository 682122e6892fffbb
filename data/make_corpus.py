"""Make data/corpus.txt: the course's training text, generated here so its licence is ours (CC0).

    python data/make_corpus.py            # writes data/corpus.txt (about 1 MB, seed 0)

A seeded probabilistic grammar writes short English sentences about the things this course is about:
stages, micro-batches, links between datacenters, gradients. The text has real structure at several
scales (spelling, word order, agreement between numbers), so a small model's loss falls quickly and
keeps falling; and every run of this script writes the same bytes, so every laptop trains on the same
data. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

CITIES = [
    "london",
    "frankfurt",
    "new york",
    "los angeles",
    "tokyo",
    "singapore",
    "sydney",
    "paris",
    "dublin",
    "chicago",
    "seoul",
    "mumbai",
    "amsterdam",
    "sao paulo",
    "oslo",
    "toronto",
]
DEVICES = ["the gpu", "the first device", "the last device", "every worker", "the head node", "a rank"]
THINGS = ["activations", "gradients", "weights", "micro-batches", "tokens", "losses", "messages"]
LINKS = ["nvlink", "infiniband", "the metro fiber", "the transatlantic cable", "ethernet", "the wan"]
ADJ = ["slow", "fast", "idle", "busy", "patient", "careful", "hungry", "quiet", "late", "early"]
VERBS = ["sends", "receives", "stores", "computes", "waits for", "forgets", "checks", "averages"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
SCHEDULES = ["gpipe", "one forward one backward", "the interleaved schedule", "zero bubble"]


def sentence(rng: random.Random) -> str:
    n = rng.randrange(1, len(NUMBERS))
    stage = rng.randrange(0, 9)
    kind = rng.randrange(8)
    if kind == 0:
        return (
            f"stage {stage} {rng.choice(VERBS)} the {rng.choice(THINGS)} of micro-batch "
            f"{rng.randrange(32)} and passes them to stage {stage + 1}."
        )
    if kind == 1:
        a, b = rng.sample(CITIES, 2)
        return f"the link from {a} to {b} is {rng.choice(ADJ)}, so {rng.choice(DEVICES)} waits."
    if kind == 2:
        plural = "s" if n > 1 else ""
        return (
            f"with {NUMBERS[n]} stage{plural} and {NUMBERS[rng.randrange(1, 11)]} micro-batches, "
            f"{rng.choice(SCHEDULES)} keeps {rng.choice(DEVICES)} {rng.choice(ADJ)}."
        )
    if kind == 3:
        what = f"{NUMBERS[n]} {rng.choice(THINGS)}"
        return f"{rng.choice(DEVICES)} {rng.choice(VERBS)} {what} over {rng.choice(LINKS)}."
    if kind == 4:
        x, y = rng.randrange(10), rng.randrange(10)
        return f"{NUMBERS[x]} plus {NUMBERS[y]} is {x + y}, and the bubble shrinks as m grows."
    if kind == 5:
        return (
            f"in {rng.choice(CITIES)} the {rng.choice(ADJ)} {rng.choice(['rack', 'server', 'campus'])} "
            f"trains layer {rng.randrange(80)} of eighty."
        )
    if kind == 6:
        return f"the optimizer steps once, after all {NUMBERS[n]} micro-batches have flushed."
    return (
        f"{rng.choice(DEVICES)} is {rng.choice(ADJ)} because {rng.choice(DEVICES)} "
        f"{rng.choice(VERBS)} the {rng.choice(THINGS)}."
    )


def make_corpus(n_bytes: int, seed: int) -> str:
    rng = random.Random(seed)
    lines, size = [], 0
    while size < n_bytes:
        paragraph = " ".join(sentence(rng) for _ in range(rng.randrange(2, 6)))
        lines.append(paragraph)
        size += len(paragraph) + 1
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("corpus.txt"))
    args = parser.parse_args()
    args.out.write_text(make_corpus(args.bytes, args.seed), encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, seed {args.seed})")


if __name__ == "__main__":
    main()
