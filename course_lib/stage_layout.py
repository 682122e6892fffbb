"""Megatron-core's layout strings: which pieces of the model each pipeline stage holds, written out.

    from course_lib.stage_layout import parse_layout
    layout = parse_layout("Et*3|(tt|)*2,t|L")   # E embedding, t block, L head and loss, | between stages
    layout.stages                                # ('Ettt', 'tt', 'tt', 't', 'L')
    layout.partition(n_blocks=8).sizes           # (4, 2, 2, 1, 1): layers per stage, as the engines take
    parse_layout("E|tt|tt|L").rank_of(2, ranks=2)  # 0: stage s sits on rank s % p (virtual stages)

The syntax is Megatron-core's ``--pipeline-model-parallel-layout`` (its documentation, "Custom
Pipeline Model Parallel Layout", https://docs.nvidia.com/megatron-core/developer-guide/latest/
user-guide/features/pipeline_parallel_layout.html): ``E`` the embedding, ``t`` one transformer block,
``L`` the loss with the head before it, ``|`` the cut between two stages; ``X*N`` repeats one symbol
and ``(...)*N`` a group (its example for DeepSeek-V3 on 16 ranks with 2 virtual stages each is
``Et*3|(tt|)*29,m|L``); commas (and spaces) are there to read it and mean nothing; an empty stage
(``E||t|L``) holds no layer and passes its input straight on. Megatron's ``m`` (a multi-token
prediction layer) is refused by name: the course's model has none.

**Where the stages sit.** A string with more stages than ranks gives each rank several (virtual
stages), in Megatron's order: the string lists virtual stage 0 of every rank, then virtual stage 1,
and so on, so stage s sits on rank s % p. Schedules whose own order differs (the V shapes put stage
2p - 1 on rank 0) refuse a layout with virtual stages (``check_placement``).

**What is refused, before any work.** A string that is not the syntax (an unknown symbol, a ``*``
without a count, unbalanced brackets), and a layout that does not build the model exactly once: no
``E`` or two of them, ``E`` anywhere but at the start of the first stage, the same for ``L`` at the end
of the last, and a count of ``t`` that differs from the model's blocks. That last one is the quiet
failure of uneven splits (Megatron-LM issue #1304: 30 layers on 4 pipeline ranks built 28): here a
missing or repeated block is an error naming how many.

A room beside the shelf: importing it lets the engines take a layout string as their partition
(``shelf.local_engine.make_plan``'s ``partition="Et|tt|L"``; ``course_lib.lesson`` and the command line
import it), through ``read_layout``, which builds the schedule for the layout's stages, checks where
they sit, and hands the shelf a plain partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from course_lib.shelf.errors import CourseError, require, shown
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.local_engine import LAYOUT_READERS
from course_lib.shelf.model import Partition
from course_lib.shelf.reference import TrainConfig
from course_lib.shelf.schedule import Schedule
from course_lib.shelf.validate import validate

SYMBOLS = {"E": "the embedding", "t": "a transformer block", "L": "the head and the loss"}
CUT = "|"
COSMETIC = ", \t\n"  # readability only (Megatron ignores commas; spaces are read the same way here)
MAX_PIECES = 100_000  # the longest expanded layout accepted: "(t*1000)*1000" is refused, not built


@dataclass(frozen=True)
class StageLayout:
    """A parsed layout: `stages` holds each stage's symbols in order ("" for an empty stage)."""

    text: str  # as written
    stages: tuple[str, ...]

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    @property
    def n_blocks(self) -> int:
        return sum(stage.count("t") for stage in self.stages)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Layers per stage, the embedding and the head each counted as one (as ``Partition`` counts)."""
        return tuple(len(stage) for stage in self.stages)

    def check(self, n_blocks: int) -> None:
        """Refuse a layout that would drop or repeat a block of a model with `n_blocks` blocks."""
        have = self.n_blocks
        if have < n_blocks:
            raise CourseError(
                f"layout {self.text!r} places {have} blocks (t) but the model has {n_blocks}: "
                f"{n_blocks - have} would be silently dropped (as in Megatron-LM issue #1304, where 30 "
                f"layers on 4 pipeline ranks built 28); write {n_blocks} t's in all"
            )
        require(
            have == n_blocks,
            f"layout {self.text!r} places {have} blocks (t) but the model has {n_blocks}: "
            f"{have - n_blocks} would be built twice; write {n_blocks} t's in all",
        )

    def partition(self, n_blocks: int) -> Partition:
        """The engines' partition (half-open layer ranges per stage), after ``check(n_blocks)``. An
        empty stage is the empty range (start, start): it runs no layer and passes its input on."""
        self.check(n_blocks)
        ends = list(accumulate(self.sizes))
        return Partition(tuple(zip([0, *ends[:-1]], ends, strict=True)))

    def virtual(self, ranks: int) -> int:
        """Stages per rank when `ranks` ranks run this layout (Megatron's VPP size)."""
        require(
            isinstance(ranks, int) and ranks >= 1 and self.n_stages % ranks == 0,
            f"layout {self.text!r} has {self.n_stages} stages, which {shown(ranks)} ranks cannot share "
            f"evenly; choose a number of ranks that divides {self.n_stages}",
        )
        return self.n_stages // ranks

    def rank_of(self, stage: int, ranks: int) -> int:
        """The rank that holds `stage` (Megatron's order: s % p)."""
        self.virtual(ranks)
        return stage % ranks

    def describe(self, ranks: int) -> list[str]:
        """One line per rank: its stages' pieces, virtual stage 0 first (Megatron's table)."""
        v = self.virtual(ranks)
        return [
            f"rank {r}: " + " | ".join(_pieces(self.stages[k * ranks + r]) for k in range(v))
            for r in range(ranks)
        ]


def _pieces(stage: str) -> str:
    """'Ettt' -> 'embedding + 3 blocks'; '' -> 'empty'."""
    parts = ["embedding"] if "E" in stage else []
    if (n := stage.count("t")) > 0:
        parts.append(f"{n} block{'s' if n > 1 else ''}")
    if "L" in stage:
        parts.append("head + loss")
    return " + ".join(parts) or "empty"


def parse_layout(text: str) -> StageLayout:
    """Parse a Megatron-core layout string and check its shape (see the module doc); the count of
    blocks is checked against a model by ``StageLayout.check``."""
    require(isinstance(text, str), f"a layout must be a string such as 'E|tt|tt|L', got {shown(text)}")
    expanded, _ = _sequence(text, 0, depth=0)
    stages = tuple(expanded.split(CUT))
    _check_ends(text, stages)
    return StageLayout(text, stages)


def _sequence(text: str, i: int, depth: int) -> tuple[str, int]:
    """Expand symbols from position i up to a ')' closing depth (or the end); (expansion, position)."""
    out: list[str] = []
    while i < len(text):
        char = text[i]
        if char in COSMETIC:
            i += 1
            continue
        if char == ")":
            require(depth > 0, f"layout {text!r}: ')' at position {i} closes no '('")
            return "".join(out), i
        if char == "(":
            group, close = _sequence(text, i + 1, depth + 1)
            require(close < len(text), f"layout {text!r}: '(' at position {i} is never closed")
            atom, i = group, close + 1
        elif char in SYMBOLS or char == CUT:
            atom, i = char, i + 1
        elif char == "m":
            raise CourseError(
                f"layout {text!r}: 'm' at position {i} is Megatron's multi-token prediction (MTP) layer, "
                "and the course's model has none: use E, t, L and |"
            )
        elif char == "*":
            raise CourseError(f"layout {text!r}: '*' at position {i} follows nothing to repeat")
        else:
            raise CourseError(
                f"layout {text!r}: {char!r} at position {i} is not a layout symbol; use E (embedding), "
                "t (block), L (head and loss), | between stages, X*N or (...)*N to repeat, commas to read"
            )
        count, i = _count(text, i)
        require(
            len(atom) * count + sum(map(len, out)) <= MAX_PIECES,
            f"layout {text!r} expands to more than {MAX_PIECES:,} pieces; the course's model is far smaller",
        )
        out.append(atom * count)
    require(depth == 0, f"layout {text!r}: a '(' is never closed")
    return "".join(out), i


def _count(text: str, i: int) -> tuple[int, int]:
    """The repeat count after position i ('*N'), or 1 when none follows; (count, next position)."""
    j = i
    while j < len(text) and text[j] in COSMETIC:
        j += 1
    if j >= len(text) or text[j] != "*":
        return 1, i
    k = j + 1
    while k < len(text) and text[k].isdigit():
        k += 1
    digits = text[j + 1 : k]
    require(
        digits.isdigit() and int(digits) >= 1,
        f"layout {text!r}: '*' at position {j} needs a whole count >= 1 after it, got "
        f"{digits or text[j + 1 : j + 2] or 'nothing'!r}",
    )
    return int(digits), k


def _check_ends(text: str, stages: tuple[str, ...]) -> None:
    """Exactly one E, opening the first stage; exactly one L, closing the last."""
    for symbol, where, index, edge in (("E", "first", 0, "start"), ("L", "last", -1, "end")):
        found = [s for s, stage in enumerate(stages) for c in stage if c == symbol]
        require(found, f"layout {text!r} has no {symbol}: {SYMBOLS[symbol]} would be dropped")
        require(
            len(found) == 1,
            f"layout {text!r} has {len(found)} {symbol}'s (in stages {found}): {SYMBOLS[symbol]} would be "
            "built more than once; write it once",
        )
        stage = stages[index]
        at_edge = stage.startswith(symbol) if edge == "start" else stage.endswith(symbol)
        require(
            at_edge,
            f"layout {text!r} puts {symbol} ({SYMBOLS[symbol]}) in stage {found[0]}, but it must stand at "
            f"the {edge} of the {where} stage (stage {len(stages) - 1 if index else 0}), where the model's "
            "order puts it",
        )


def layout_ranks(layout: StageLayout, stages: int | None, virtual: int | None) -> tuple[int, int]:
    """(ranks, stages per rank) that run `layout`: `stages` ranks if given (virtual = its stages / ranks),
    else its stages over `virtual` ranks' worth (default 1: one stage per rank)."""
    if stages is None:
        v = 1 if virtual is None else virtual
        require(
            layout.n_stages % v == 0,
            f"layout {layout.text!r} has {layout.n_stages} stages, which {v} virtual stages per rank do not "
            "divide; give the ranks (stages) instead",
        )
        return layout.n_stages // v, v
    v = layout.virtual(stages)
    require(
        virtual in (None, v),
        f"layout {layout.text!r} has {layout.n_stages} stages: on {stages} ranks that is {v} virtual stages "
        f"each, not virtual={virtual}; leave virtual out",
    )
    return stages, v


def check_placement(layout: StageLayout, device_of: list[int], schedule_name: str) -> None:
    """Refuse a schedule that places the layout's stages otherwise than Megatron's s % p (a V shape
    with virtual stages): the layout would say one rank and the run would use another."""
    ranks = max(device_of) + 1
    megatron = [s % ranks for s in range(len(device_of))]
    require(
        device_of == megatron,
        f"layout {layout.text!r} puts stage s on rank s % {ranks} (Megatron's order: {megatron}), but "
        f"schedule {schedule_name!r} places its stages on ranks {device_of}; use a schedule with "
        "Megatron's order (1f1b, gpipe, interleaved-1f1b) or give a partition instead",
    )


def read_layout(
    cfg: TrainConfig, schedule: str | Schedule, stages: int | None, virtual: int | None, text: str
) -> tuple[Schedule, Partition]:
    """The schedule (built here for a name: a layout may have more stages than layers) and the partition
    that `text` says, its placement checked against the schedule's; what ``make_plan`` asks for."""
    layout = parse_layout(text)
    if not isinstance(schedule, Schedule):
        ranks, v = layout_ranks(layout, stages, virtual)
        schedule = build_schedule(schedule, ranks, cfg.microbatches, v)
    validate(schedule)
    check_placement(layout, [schedule.device_of(s) for s in range(schedule.n_stages)], schedule.name)
    return schedule, layout.partition(cfg.n_layers)


if read_layout not in LAYOUT_READERS:
    LAYOUT_READERS.append(read_layout)
