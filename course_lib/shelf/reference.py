"""The reference trainer: one device, the whole model, gradients summed over m (lessons 00, 02-04, 08).

This is the ground truth. Every pipeline engine and every schedule must give the same loss and the
same gradients as ``accumulate_gradients`` here (the tests check it).

    from course_lib.shelf.reference import TrainConfig, train
    result = train(TrainConfig(steps=50))       # result.losses, result.val_loss_start, ...

The toolkit every engine, the CLI and the tests use to compare themselves with it:
``train_batches`` (the same batches, in the same order), ``evaluate`` (the same held-out batches),
``reference_gradients`` (its loss and gradients on one batch) and ``max_grad_diff``::

    loss, want = reference_gradients(cfg, corpus)          # first batch, seeded weights
    max_grad_diff({n: p.grad for n, p in model.named_parameters()}, want)

Synchronous training: the m micro-batches of a batch each add their gradient (scaled by 1/m, so the
sum is the gradient of the batch's mean loss), and the optimizer steps once per batch, after all of
them. That is what GPipe and 1F1B compute too; only the order of the work differs.

Its ``TrainConfig`` is where a run's sizes enter, and ``check`` refuses bad ones before any work.

Two rules span the whole model, and every engine follows them the way this trainer defines them (its
last section, lesson 16):

- **Clipping by the whole model's gradient norm.** The norm is the square root of the sum of every
  gradient's squares over every stage (and every tensor-parallel slice). A stage alone sees only its
  share, so clipping per stage scales each stage by its own factor and turns the update (torchtitan
  issue #596, PyTorch issue #162638). The fix costs one number per rank: each adds its squares
  (``squared_norm``), the sum crosses the ranks, every rank scales by ``clip_coefficient``, which is
  torch.nn.utils.clip_grad_norm_'s documented rule (sums in float64, so the engines' norm equals
  torch's to float32 rounding).
- **Tied embeddings.** The head reuses the embedding's weight. Here that is one Parameter used twice;
  in a pipeline the first and last stage sit on different devices, so the last stage holds a copy
  (``copy_tied_weight``), and after the flush each copy's gradient becomes the sum of both
  (``sum_tied_grads``), so the copies take the same step and stay equal, bit for bit. Megatron-LM does
  the same (``share_embeddings_and_output_weights``, summed over an "embedding group" of the first and
  last ranks); leave the sum out and the copies drift apart (Megatron-LM issue #299). On one device
  (one rank, or a V shape's rank 0 holding stage 0 and stage 2p - 1) the sum is one add; across ranks
  an all-reduce of the two (``engines/whole_model.py``). The tied weight counts once in the norm.

One file of about 400 lines, read whole: the ground truth and what engines compare with it.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from course_lib.shelf.errors import is_number, require, shown, typed_fields, whole
from course_lib.shelf.first_schedules import LIMITS, within_limit
from course_lib.shelf.model import (
    Corpus,
    ModelConfig,
    ToyGPT,
    autocast,
    build_model,
    check_amp,
    check_microbatches,
    count_parameters,
    lm_loss,
    load_corpus,
    split_microbatches,
)
from course_lib.shelf.stage import resolve_device

# what refuses a config this machine's memory cannot hold: (config, micro-batches held per stage, the
# stages' layer counts, why) -> None. The room course_lib/engines/memory_fit.py registers its check when
# imported (course_lib.engines imports it)
MEMORY_CHECKS: list[Callable[[TrainConfig, Sequence[int], Sequence[int] | None, str], None]] = []


@dataclass
class TrainConfig:
    n_layers: int = 80
    d_model: int = 32
    n_heads: int = 4
    seq_len: int = 64
    batch_size: int = 16
    microbatches: int = 4
    steps: int = 80
    lr: float = 3e-3
    warmup_steps: int = 10  # linear learning-rate ramp; 80 narrow blocks train faster with it
    seed: int = 0
    eval_batches: int = 4  # held-out batches averaged for val loss
    data_path: str | None = None  # None: the corpus shipped in data/
    device: str = "cpu"  # cpu, cuda, cuda:N or auto (see course_lib/shelf/stage.py)
    precision: str = "float32"  # of the forward: float32, or autocast on a CUDA GPU (PRECISIONS)
    clip_grad_norm: float | None = None  # clip the whole model's gradient norm to this (below)
    tie_embeddings: bool = False  # the head reuses the embedding's weight (below)

    def __post_init__(self) -> None:
        """Types at the door: numpy numbers become Python's (a lesson's np.int64(4) is 4), and 2.5 or "4"
        for a count is refused now, naming the field, not deep inside torch; sizes are check()'s."""
        typed_fields(self)

    def check(self) -> None:
        """All bad input is refused here, before a model is built or data is read: wrong types, sizes
        over LIMITS, and sizes whose memory this machine does not have (``check_fits``)."""
        for f in fields(self):
            if f.type == "int":
                whole(f.name, getattr(self, f.name), low=None)
            elif f.type == "float":
                value = getattr(self, f.name)
                require(is_number(value), f"{f.name} must be a number, got {shown(value)}")
        # a batch of 0 was accepted, and 10**15 steps (the command line's --steps has the same bound);
        # sizes too large for memory are the memory check's, which says by how much (check_fits)
        whole("steps", self.steps, low=0, high=LIMITS["steps"])
        whole("batch_size", self.batch_size)
        whole("eval_batches", self.eval_batches, high=LIMITS["batch"])
        path, what = self.data_path, "data_path must be a path (str or pathlib.Path) or None"
        require(path is None or isinstance(path, str | os.PathLike), f"{what}, got {shown(path)}")
        require(0 < self.lr <= LIMITS["lr"], f"learning rate must be in (0, {LIMITS['lr']:g}], got {self.lr}")
        require(self.warmup_steps >= 0, f"warmup steps must be >= 0, got {self.warmup_steps}")
        require(0 <= self.seed <= LIMITS["seed"], f"seed must be in 0..2**63-1, got {self.seed}")
        check_microbatches(self.batch_size, self.microbatches)
        check_max_norm(self.clip_grad_norm)
        require(
            isinstance(self.tie_embeddings, bool),
            f"tie_embeddings must be True or False, got {shown(self.tie_embeddings)}",
        )
        check_amp(self.precision, resolve_device(self.device))
        self.model_config(vocab_size=ModelConfig.vocab_size)  # checks layers, width, heads, length
        within_limit("parameters", 12 * self.d_model**2 * self.n_layers, "12*d_model^2*n_layers")
        within_limit("layers", self.n_layers, "n_layers")  # the command line's --layers reads the same
        self.check_fits()

    def check_fits(
        self, peaks: Sequence[int] = (1,), sizes: Sequence[int] | None = None,
        why: str = "one micro-batch at a time",
    ) -> None:  # fmt: skip
        """Door: refuse, before any work, a config whose peak memory this machine does not have, with
        `peaks` micro-batches held at once on stages of `sizes` layers (the reference: one, on one
        stage): each of MEMORY_CHECKS asks (none: no check)."""
        for check in MEMORY_CHECKS:
            check(self, peaks, sizes, why)

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(
            self.n_layers, self.d_model, self.n_heads, vocab_size, self.seq_len,
            tie_embeddings=self.tie_embeddings,
        )  # fmt: skip


@dataclass
class TrainResult:
    losses: list[float]  # training loss per step (mean over the batch)
    val_loss_start: float
    val_loss_end: float
    step_times_s: list[float]
    n_layers: int
    n_params: int
    config: dict = field(default_factory=dict)

    @property
    def step_time_s(self) -> float:
        return statistics.median(self.step_times_s) if self.step_times_s else 0.0

    def to_json(self) -> dict:
        """TrainResult's fields as plain data (a subclass adds its own), the step times as their median."""
        data = {f.name: getattr(self, f.name) for f in fields(TrainResult) if f.name != "step_times_s"}
        return data | {"step_time_s": self.step_time_s}


def accumulate_gradients(model: nn.Module, x: Tensor, y: Tensor, m: int, precision: str = "float32") -> float:
    """Forward and backward m micro-batches one after another, summing gradients; returns the batch's
    mean loss. The gradients equal (up to float rounding) those of one backward over the whole batch."""
    total = 0.0
    for xm, ym in split_microbatches(x, y, m):
        with autocast(precision, x.device):  # the forward in cfg.precision (model.py)
            loss = lm_loss(model(xm), ym) / m  # 1/m: the sum over micro-batches is the batch mean
        loss.backward()
        total += loss.item()
    return total


def train_batches(
    corpus: Corpus, cfg: TrainConfig, steps: int | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """The reference trainer's training batches, in its order: `steps` of them (default cfg.steps).
    Every engine draws its batches here, so all see the same data in the same order."""
    gen = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.steps if steps is None else steps):
        yield corpus.batch("train", cfg.batch_size, cfg.seq_len, gen)


def first_batch(corpus: Corpus, cfg: TrainConfig) -> tuple[Tensor, Tensor]:
    return next(train_batches(corpus, cfg, steps=1))


@torch.no_grad()
def evaluate(model: Callable[[Tensor], Tensor], corpus: Corpus, cfg: TrainConfig) -> float:
    """Mean held-out loss over a fixed set of batches (same batches every call). `model` maps token
    ids to logits: the whole model, or a pipeline's stages one after another."""
    gen = torch.Generator().manual_seed(cfg.seed + 12345)
    device = resolve_device(cfg.device)
    losses = []
    for _ in range(cfg.eval_batches):
        x, y = corpus.batch("val", cfg.batch_size, cfg.seq_len, gen)
        logits = model(x.to(device))
        losses.append(lm_loss(logits, y.to(logits.device)).item())
    return sum(losses) / len(losses)


def reference_gradients(
    cfg: TrainConfig, corpus: Corpus | None = None, weights: Mapping[str, Tensor] | None = None,
    batch: tuple[Tensor, Tensor] | None = None,
) -> tuple[float, dict[str, Tensor | None]]:  # fmt: skip
    """The reference trainer's loss and gradients (by parameter name) on one batch (default: the
    first training batch), from `weights` (a state dict; default: the seeded initial weights)."""
    corpus, model = corpus_and_model(cfg, corpus)
    device = resolve_device(cfg.device)
    if weights is not None:
        model.load_state_dict({name: w.to(device) for name, w in weights.items()})
    x, y = first_batch(corpus, cfg) if batch is None else batch
    loss = accumulate_gradients(model, x.to(device), y.to(device), cfg.microbatches, cfg.precision)
    clip(model, cfg)
    return loss, named_grads(model)


def clip(model: nn.Module, cfg: TrainConfig) -> None:
    """Clip the whole model's gradient norm to cfg.clip_grad_norm (None: leave it), as torch does."""
    if cfg.clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad_norm)


def named_grads(model: nn.Module) -> dict[str, Tensor | None]:
    """Gradients by parameter name; a tied weight under each of its names (the embedding and the head),
    as a pipeline holds it as two copies."""
    return {name: p.grad for name, p in model.named_parameters(remove_duplicate=False)}


def max_grad_diff(grads: Mapping[str, Tensor | None], reference: Mapping[str, Tensor | None]) -> float:
    """Largest |difference| between two sets of gradients, matched by parameter name. A gradient
    missing on one side (None, or no entry) counts as zeros, so a forgotten gradient shows."""
    diff = 0.0
    for name in grads.keys() | reference.keys():
        got, want = grads.get(name), reference.get(name)
        if got is None and want is None:
            continue
        got = torch.zeros_like(want) if got is None else got
        want = torch.zeros_like(got) if want is None else want
        diff = max(diff, (got.detach().cpu() - want.detach().cpu()).abs().max().item())
    return diff


class WarmupAdamW(torch.optim.AdamW):
    """AdamW whose learning rate ramps up linearly over the first `warmup_steps` steps. The ramp lives
    inside ``step()`` so that every engine, which only ever calls ``optimizer.step()`` once per batch,
    follows exactly the same learning-rate schedule as the reference trainer."""

    def __init__(self, params, lr: float, warmup_steps: int, **kwargs):
        super().__init__(params, lr=lr, **kwargs)
        self.base_lr, self.warmup_steps, self.steps_taken = lr, warmup_steps, 0

    @torch.no_grad()
    def step(self, closure=None):
        self.steps_taken += 1
        scale = min(1.0, self.steps_taken / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        for group in self.param_groups:
            group["lr"] = self.base_lr * scale
        return super().step(closure)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (beta2 = 0.95 as in GPT-3-style training) with a short warm-up; no weight decay."""
    return WarmupAdamW(
        model.parameters(), lr=cfg.lr, warmup_steps=cfg.warmup_steps, betas=(0.9, 0.95), weight_decay=0.0
    )


def corpus_and_model(cfg: TrainConfig, corpus: Corpus | None = None) -> tuple[Corpus, ToyGPT]:
    """Check the config, read the data (unless `corpus` is given), build the model: every trainer's start."""
    cfg.check()
    if corpus is None:
        corpus = load_corpus(cfg.data_path) if cfg.data_path else load_corpus()
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model_config(corpus.tokenizer.vocab_size), seed=cfg.seed)
    return corpus, model.to(resolve_device(cfg.device))


def reference_run(cfg: TrainConfig) -> tuple[list[float], dict[str, Tensor], dict[str, Tensor]]:
    """What every engine's run is held against: the single-device trainer's loss per step, its last
    step's gradients and its final weights, by parameter name."""
    corpus, model = corpus_and_model(cfg)
    optimizer = make_optimizer(model, cfg)
    losses = []
    for x, y in train_batches(corpus, cfg):
        optimizer.zero_grad(set_to_none=True)
        losses.append(accumulate_gradients(model, x, y, cfg.microbatches, cfg.precision))
        clip(model, cfg)
        optimizer.step()
    return losses, named_grads(model), dict(model.named_parameters(remove_duplicate=False))


def train(cfg: TrainConfig, progress: bool = True) -> TrainResult:
    """Train the whole model on one device; one optimizer step per batch of m micro-batches."""
    corpus, model = corpus_and_model(cfg)
    optimizer = make_optimizer(model, cfg)
    device = resolve_device(cfg.device)
    val_start = evaluate(model, corpus, cfg)
    losses, times = [], []
    bar = tqdm(train_batches(corpus, cfg), total=cfg.steps, desc="reference", disable=not progress)
    for x, y in bar:
        x, y = x.to(device), y.to(device)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = accumulate_gradients(model, x, y, cfg.microbatches, cfg.precision)
        clip(model, cfg)
        optimizer.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        bar.set_postfix(loss=f"{loss:.3f}")
    return TrainResult(
        losses=losses, val_loss_start=val_start, val_loss_end=evaluate(model, corpus, cfg),
        step_times_s=times, n_layers=cfg.n_layers, n_params=count_parameters(model), config=asdict(cfg),
    )  # fmt: skip


# The whole-model rules (the module docstring): clipping by the whole model's norm, tied embeddings.

CLIP_EPSILON = 1e-6  # torch.nn.utils.clip_grad_norm_'s: no division by zero when every gradient is zero
EMBEDDING_WEIGHT = "layers.0.token.weight"  # the token embedding, as the whole model names it


def check_max_norm(value: object) -> None:
    """Refuse a clipping norm that is not None or a number > 0."""
    require(
        value is None or (is_number(value) and math.isfinite(value) and value > 0),
        f"clip_grad_norm must be None (no clipping) or a number > 0, got {shown(value)}",
    )


@torch.no_grad()
def squared_norm(grads: Iterable[Tensor | None]) -> float:
    """The sum of the squares of every entry of `grads` (None: a weight with no gradient, zero)."""
    return float(sum(g.detach().double().pow(2).sum().item() for g in grads if g is not None))


def clip_coefficient(total_squared: float, max_norm: float) -> float:
    """The factor every gradient is multiplied by: min(1, max_norm / (norm + CLIP_EPSILON))."""
    return min(1.0, max_norm / (math.sqrt(total_squared) + CLIP_EPSILON))


@torch.no_grad()
def scale_grads(params: Iterable[nn.Parameter], coefficient: float) -> None:
    """Multiply every gradient by `coefficient` (1.0: left as it is)."""
    if coefficient >= 1.0:
        return
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coefficient)


def head_weight(n_blocks: int) -> str:
    """The name of the head's projection (the tied copy) in a model of `n_blocks` blocks."""
    return f"layers.{n_blocks + 1}.out.weight"


def copy_tied_weight(layers: nn.ModuleList) -> None:
    """Give the head its own Parameter, equal to the embedding's (a tied model shares one): what the
    last stage holds in a pipeline. A model that is not tied is left as it is."""
    embedding, head = layers[0].token, layers[-1].out
    if head.weight is embedding.weight:
        head.weight = nn.Parameter(embedding.weight.detach().clone())


@torch.no_grad()
def sum_tied_grads(embedding: nn.Parameter, head: nn.Parameter) -> None:
    """Both copies' gradients become their sum (on one device: the all-reduce of two is one add)."""
    if embedding.grad is None or head.grad is None:
        return
    total = embedding.grad + head.grad.to(embedding.grad.device)
    embedding.grad.copy_(total)
    head.grad.copy_(total.to(head.grad.device))
