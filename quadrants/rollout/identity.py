"""The rollout identity guard (`rollout.identity_check`): at a weight push, does the engine sample
from the weights the trainer holds?

Runs that trained for days on rollouts from stale or initial weights are the field's most expensive
silent failure: a sleep level that dropped the pushed weights (TRL#5312: rollout-vs-trainer log-prob
gap 0.201 against 0.015 when healthy), an adapter that never reached the engine (verl#7495). Every
`every`-th push, the engine and the trainer score the same fixed probe batch (`probe_size` token
sequences of `probe_tokens` tokens, the second half scored; drawn once from a generator of its own,
so the run's sampling stream is untouched), and the run stops with `RolloutIdentityError` when

- **gap**: the mean |log p_engine - log p_trainer| over the probe's tokens exceeds `tolerance`
  (None: from the precision pair, `default_tolerance`), or
- **stale**: since the last check the trainer's log-probs moved by more than `tolerance` while the
  engine's moved by less than `STALE_FRACTION` of it (an engine's recompute of unchanged weights
  need not be bit-exact across calls: batching, kernels): the push did not reach it.

The figures of every check (`train/identity_gap`, `..._gap_max`, `..._engine_moved`,
`..._trainer_moved`) are the step's metrics (`push_figures`). The engine scores through its
`score(sequences, attention_mask, response_length)` (the HF engine and vLLM have one); an engine
without one is not checked, which the log says once.

Every rank checks its own engine at the same point (the push is a collective when sharded, and
the trainer's forward over the probe is one too); each rank raises on its own figures.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from quadrants.device import model_device
from quadrants.models.policy import response_logprobs
from quadrants.ops.precision import Precision

log = logging.getLogger(__name__)

# an engine whose mean |change| of log-prob is under this share of the tolerance "did not move"
STALE_FRACTION = 0.1
# the largest healthy mean gap per precision pair: float32 on both sides recomputes the same
# numbers to ~1e-6; any bf16 side rounds the weights and activations (TRL#5312 measured 0.015 for a
# healthy bf16 vLLM against a bf16 trainer)
TOLERANCE_FP32 = 1e-3
TOLERANCE_BF16 = 0.05


class RolloutIdentityError(RuntimeError):
    """The engine does not sample from the trainer's weights (a stale or lost weight push)."""


def default_tolerance(engine_dtype: torch.dtype, trainer_dtype: torch.dtype) -> float:
    """The gap tolerated between an engine computing in `engine_dtype` and a trainer computing in
    `trainer_dtype` (its precision's compute dtype)."""
    if engine_dtype == trainer_dtype == torch.float32:
        return TOLERANCE_FP32
    return TOLERANCE_BF16


def probe_batch(vocab_size: int, size: int, tokens: int, seed: int) -> tuple[Tensor, Tensor, int]:
    """(sequences [size, tokens], attention mask of ones, response length tokens // 2): token ids
    drawn uniformly from the vocabulary by a generator of its own."""
    generator = torch.Generator().manual_seed(seed)
    sequences = torch.randint(0, vocab_size, (size, tokens), generator=generator)
    return sequences, torch.ones_like(sequences, dtype=torch.bool), tokens // 2


@dataclass
class Judgement:
    gap: float  # mean |engine - trainer| over the probe's scored tokens
    gap_max: float
    engine_moved: float | None  # mean |change| since the last check (None at the first)
    trainer_moved: float | None


def judge(
    engine: Tensor,
    trainer: Tensor,
    before: tuple[Tensor, Tensor] | None,
    tolerance: float,
) -> Judgement:
    """The figures of one check (module docstring), raising RolloutIdentityError on a gap over
    `tolerance` or a stale engine. `before`: (engine, trainer) log-probs of the last check."""
    diff = (engine - trainer).abs()
    figures = Judgement(diff.mean().item(), diff.max().item(), None, None)
    if before is not None:
        figures.engine_moved = (engine - before[0]).abs().mean().item()
        figures.trainer_moved = (trainer - before[1]).abs().mean().item()
        unmoved = figures.engine_moved < STALE_FRACTION * tolerance
        if unmoved and figures.trainer_moved > tolerance:
            raise RolloutIdentityError(
                f"rollout identity check: the engine's log-probs of the probe moved by only "
                f"{figures.engine_moved:.2e} since the last check while the trainer's moved by "
                f"{figures.trainer_moved:.4f} (over the tolerance {tolerance:g}): the weight push "
                f"did not reach the engine, so rollouts come from stale weights. Gap now "
                f"{figures.gap:.4f} (max {figures.gap_max:.4f})"
            )
    if figures.gap > tolerance:
        raise RolloutIdentityError(
            f"rollout identity check: the engine's and the trainer's log-probs of the probe differ "
            f"by {figures.gap:.4f} on average (max {figures.gap_max:.4f}), over the tolerance "
            f"{tolerance:g} (rollout.identity_check.tolerance): the engine does not sample from "
            f"the trainer's weights (a lost or partial weight push, or a different model)"
        )
    return figures


class IdentityCheckedEngine:
    """`engine` whose `sync_weights` is followed, every `every`-th push, by the identity check
    against the trainer's `model` (module docstring). Everything else reads through."""

    def __init__(self, engine: Any, settings: Any, precision: Precision, chunk_size: int) -> None:
        self.engine = engine
        self.every = int(settings.every)
        self.tolerance = settings.tolerance
        self.size, self.tokens, self.seed = (
            settings.probe_size,
            settings.probe_tokens,
            settings.seed,
        )
        self.precision = precision
        self.chunk_size = chunk_size
        self.pushes = 0
        self.figures: dict[str, float] = {}
        self._before: tuple[Tensor, Tensor] | None = None
        self._probe: tuple[Tensor, Tensor, int] | None = None

    def __getattr__(self, attribute: str) -> object:
        return getattr(self.engine, attribute)

    def sync_weights(self, model: nn.Module) -> None:
        self.engine.sync_weights(model)
        self.pushes += 1
        if (self.pushes - 1) % self.every == 0:
            self.check(model)

    @torch.no_grad()
    def check(self, model: nn.Module) -> Judgement:
        device = model_device(model)
        if self._probe is None:
            vocab = int(model.get_output_embeddings().weight.shape[0])
            self._probe = probe_batch(vocab, self.size, self.tokens, self.seed)
        sequences, mask, length = self._probe
        with self.precision.autocast(device):
            trainer, _ = response_logprobs(
                model,
                sequences.to(device),
                mask.to(device),
                length,
                temperature=1.0,
                chunk_size=self.chunk_size,
                with_entropy=False,
                share_prompts="never",
                max_buckets=1,
            )
        engine = self.engine.score(sequences, mask, length)
        trainer, engine = trainer.float().cpu(), engine.float().cpu()
        tolerance = self.tolerance
        if tolerance is None:
            tolerance = default_tolerance(self.engine.score_dtype(), self.precision.compute_dtype)
        figures = judge(engine, trainer, self._before, tolerance)
        self._before = (engine, trainer)
        self.figures = {
            "train/identity_gap": figures.gap,
            "train/identity_gap_max": figures.gap_max,
        }
        if figures.engine_moved is not None:
            self.figures["train/identity_engine_moved"] = figures.engine_moved
            self.figures["train/identity_trainer_moved"] = figures.trainer_moved
        log.info("rollout identity check at push %d: %s", self.pushes, self.figures)
        return figures


def identity_checked(engine: Any, cfg: Any, precision: Precision, model: nn.Module) -> Any:
    """`engine` under the identity check `cfg.rollout.identity_check` asks for (itself when the
    check is off, or when the engine cannot score a probe: said once in the log), checked once
    against the trainer's `model` right away: an engine started on other weights (another
    checkpoint, a failed first load) stops the run before any rollout, and the first push has a
    check to compare with."""
    settings = cfg.rollout.identity_check
    if settings.every <= 0:
        return engine
    if not callable(getattr(engine, "score", None)):
        log.warning(
            "rollout.identity_check: the %s engine cannot score a probe batch yet; its weight "
            "pushes are not checked",
            type(engine).__name__,
        )
        return engine
    checked = IdentityCheckedEngine(engine, settings, precision, cfg.train.entropy_chunk_size)
    checked.check(model)
    return checked


def push_figures(engine: Any) -> dict[str, float]:
    """The last identity check's figures ({} when the engine is not checked); a check's figures
    are reported once, by the step that made it."""
    if not isinstance(engine, IdentityCheckedEngine):
        return {}
    figures, engine.figures = engine.figures, {}
    return figures
