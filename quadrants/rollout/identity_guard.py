"""The rollout identity guard (`rollout.identity_check`): at a weight push, does the engine sample
from the weights the trainer holds?

Runs that trained for days on rollouts from stale or initial weights are the field's most expensive
silent failure: a sleep level that dropped the pushed weights (TRL#5312: rollout-vs-trainer log-prob
gap 0.201 against 0.015 when healthy), an adapter that never reached the engine (verl#7495).

**The probe: tokens the model itself samples.** When the engine starts, it samples `probe_size`
responses of `probe_tokens` tokens to the task's first held-out prompts (fixed prompts where the
task has none) at the run's temperature and top-p, with a seed of its own and the random state
restored afterwards (the run's sampling stream is untouched). Those sequences are the probe for the
whole run; at every check the engine and the trainer score the probe's response tokens, both at
temperature 1 over the full vocabulary (the same distribution on both sides: vLLM's processed
log-probs are those of the temperature-scaled, top-p/top-k-truncated distribution, so scoring at
the run's top-p 0.95 would add -log(nucleus mass) to every engine token; rollout/vllm.py `score`
asks for no truncation). Why not random token ids: a 16-bit forward rounds every logit by some
delta, and a token's log-prob moves by delta_t - sum_j p_j delta_j, which for a token of probability
~0 is its whole rounding error; on SmolLM2-135M in bf16, sdpa against eager attention, a uniformly
random probe differs by a mean 0.067-0.088 (issue 59), over any fixed tolerance a bf16 pair could
be given, while sampled tokens (probability far from 0) differ by a fraction of it.

**The start-up check calibrates the tolerance.** Right after the engine starts, engine and trainer
hold the same weights, so their gap on the probe is the pair's numerical floor (kernels, precision,
batching). Over `startup_limit` (None: `STARTUP_LIMIT_FP32` for float32 on both sides, else
`STARTUP_LIMIT_BF16`) the engine did not start on the trainer's weights (another checkpoint, a
failed first load) and the run stops before any rollout. The tolerance for the rest of the run is
`max(tolerance_multiple x start-up gap, tolerance_floor)` (or `tolerance` when set), logged once
with the gap it came from.

**At every `every`-th push** the run stops with `RolloutIdentityError` when
- **stale**: since the last check the engine's log-probs of the probe moved by at most
  `stale_threshold` (mean |change|: an engine recomputing unchanged weights on the same batch gives
  the same numbers, or numbers within that of them) while the trainer's moved by more than
  `STALE_MARGIN` x that: the push did not reach the engine. This rule does not depend on the
  tolerance: at lr 1e-6 one push moves sampled tokens' log-probs by ~1e-2 on SmolLM2-135M (issue
  59) and by 3e-5 to 1.3e-3 on the tiny model (tests/unit/rollout/test_identity_guard_bf16.py;
  8.4e-5 to 9.7e-4 on an AVX-512 CPU), while the bf16 replica engine moved by at least 1.2e-4 on
  every healthy push there and by exactly 0 on a dropped one;
- **gap**: the mean |log p_engine - log p_trainer| over the probe's tokens exceeds the tolerance
  (a partial push: some tensors arrived, the rest drift apart).

**Figures.** Every check's figures are the step's metrics (`push_figures`; MLflow keeps every
push's): `train/identity_gap` and `..._gap_max` (log-prob space), `..._prob_gap`,
`..._prob_gap_max` and `..._prob_corr` (verl's rollout-vs-actor probability-space figures on sampled
tokens: |p_engine - p_trainer| and the Pearson correlation of the two, volcengine/verl
verl/utils/debug/metrics.py `calculate_debug_metrics`, here on the probe, where both sides score the
same distribution), `..._engine_moved`, `..._trainer_moved` and `..._tolerance`; the first push's
also `..._startup_gap`. The log says the guard's decision once at start (the start-up gap, the
tolerance and how it was set) and then only when it changes (the error that stops the run); each
check's figures go to DEBUG.

The engine scores through its `score(sequences, attention_mask, response_length)` (the HF engine and
vLLM have one); an engine without one is not checked, which the log says once. Every rank checks its
own engine at the same point (the push is a collective when sharded, and the trainer's forward over
the probe is one too: one call per check on every rank); each rank raises on its own figures.
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
from quadrants.rollout.engine import Rollouts, SamplingSettings

log = logging.getLogger(__name__)

# the trainer "moved" when its mean |change| on the probe is over this multiple of stale_threshold:
# unchanged weights recompute the same numbers (0 on the CPU, within stale_threshold by its
# definition), so twice the threshold is a move and not recomputation noise. Not more: at lr 1e-6 a
# bf16-mixed trainer's per-push move on the tiny model's sampled tokens went as low as 8.4e-5 (an
# AVX-512 CPU) and 3e-5 (AVX2), so 10 x 1e-5 (the first margin) let a dropped push with such a
# move through as "nothing to miss" (tests/unit/rollout/test_identity_guard_bf16.py)
STALE_MARGIN = 2.0
# the largest start-up gap accepted per precision pair, engine and trainer on the same weights:
# float32 on both sides recomputes the same numbers to ~1e-6 (vLLM's CPU kernels against HF's:
# ~1e-5, tests/vllm/test_identity.py); a 16-bit side rounds the weights and activations (TRL#5312:
# 0.015 for a healthy bf16 vLLM against a bf16 trainer; SmolLM2-135M sdpa vs eager in bf16 on the
# probe: issue 59's 0.034-0.049 on sampled tokens), and an engine on other weights is far above it
STARTUP_LIMIT_FP32 = 1e-3
STARTUP_LIMIT_BF16 = 0.15
# the historical names: the float32 limit is also the default tolerance floor; a healthy bf16 pair's
# gap on sampled tokens stays under TOLERANCE_BF16 (the bound the bf16 tests hold the gap to)
TOLERANCE_FP32 = STARTUP_LIMIT_FP32
TOLERANCE_BF16 = 0.05
# the probe's prompts where the task has no held-out problems (plain text any tokenizer encodes)
FALLBACK_PROMPTS = (
    "What is 17 plus 25? Answer:",
    "Write the next number: 2, 4, 8, 16,",
    "A train travels 60 km in one hour. How far does it travel in 3 hours?",
    "Name the largest planet of the solar system.",
)


class RolloutIdentityError(RuntimeError):
    """The engine does not sample from the trainer's weights (a stale or lost weight push)."""


def startup_limit(engine_dtype: torch.dtype, trainer_dtype: torch.dtype) -> float:
    """The largest start-up gap accepted between an engine computing in `engine_dtype` and a
    trainer computing in `trainer_dtype` (its precision's compute dtype)."""
    if engine_dtype == trainer_dtype == torch.float32:
        return STARTUP_LIMIT_FP32
    return STARTUP_LIMIT_BF16


def calibrated_tolerance(startup_gap: float, multiple: float, floor: float) -> float:
    """The tolerance a start-up gap calibrates: `multiple` x the gap, at least `floor`."""
    return max(multiple * startup_gap, floor)


@dataclass(frozen=True)
class Probe:
    """Sequences the engine sampled, in the rollout layout (rollout/engine.py): `sequences` [B, P+T]
    = left-padded prompt + right-padded response, `attention_mask` [B, P+T] bool over both, and
    `response_mask` [B, T] bool, the response tokens scored."""

    sequences: Tensor
    attention_mask: Tensor
    response_mask: Tensor

    @property
    def response_length(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def tokens(self) -> int:
        return int(self.response_mask.sum())


def probe_from_rollouts(rollouts: Rollouts) -> Probe:
    """The probe of sampled `rollouts`: each prompt with its response, the response's real tokens
    (up to and including a stop token) scored."""
    return Probe(
        sequences=torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1).cpu(),
        attention_mask=torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1).cpu(),
        response_mask=rollouts.response_mask.bool().cpu(),
    )


def sample_probe(
    engine: Any,
    prompts: list[str],
    tokens: int,
    seed: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> Probe:
    """The engine's own samples: one response of up to `tokens` tokens per prompt, at the run's
    `temperature` and `top_p`, drawn with `seed`. The engine may seed torch's global generators (the
    HF engine does): their states are restored afterwards, so the run draws what it would have."""
    sampling = SamplingSettings(
        n=1, temperature=temperature, top_p=top_p, max_new_tokens=tokens, seed=seed
    )
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        rollouts = engine.generate(list(prompts), sampling)
    return probe_from_rollouts(rollouts)


@dataclass
class Figures:
    """One comparison of the engine's and the trainer's log-probs on the probe's tokens."""

    gap: float  # mean |log p_engine - log p_trainer|
    gap_max: float
    prob_gap: float  # mean |p_engine - p_trainer| (verl's rollout_probs_diff_mean)
    prob_gap_max: float
    prob_corr: float | None  # Pearson correlation of p_engine and p_trainer (None: undefined)
    engine_moved: float | None = None  # mean |change| since the last check (None at start)
    trainer_moved: float | None = None


def compare(engine: Tensor, trainer: Tensor, mask: Tensor) -> Figures:
    """The gap figures of `engine` and `trainer` log-probs [B, T] over `mask`'s tokens [B, T]."""
    e, t = engine[mask].double(), trainer[mask].double()
    diff = (e - t).abs()
    pe, pt = e.exp(), t.exp()
    prob_diff = (pe - pt).abs()
    corr = None
    if e.numel() >= 2 and float(pe.std()) > 0 and float(pt.std()) > 0:
        corr = float(torch.corrcoef(torch.stack([pe, pt]))[0, 1])
    return Figures(
        gap=float(diff.mean()),
        gap_max=float(diff.max()),
        prob_gap=float(prob_diff.mean()),
        prob_gap_max=float(prob_diff.max()),
        prob_corr=corr,
    )


def mean_change(now: Tensor, before: Tensor, mask: Tensor) -> float:
    """Mean |now - before| over `mask`'s tokens."""
    return float((now[mask].double() - before[mask].double()).abs().mean())


def judge(
    engine: Tensor,
    trainer: Tensor,
    mask: Tensor,
    before: tuple[Tensor, Tensor] | None,
    tolerance: float,
    stale_threshold: float,
) -> Figures:
    """The figures of one check (module docstring), raising RolloutIdentityError on a stale engine
    or a gap over `tolerance`. `before`: (engine, trainer) log-probs of the last check."""
    figures = compare(engine, trainer, mask)
    if before is not None:
        figures.engine_moved = mean_change(engine, before[0], mask)
        figures.trainer_moved = mean_change(trainer, before[1], mask)
        if (
            figures.engine_moved <= stale_threshold
            and figures.trainer_moved > STALE_MARGIN * stale_threshold
        ):
            raise RolloutIdentityError(
                f"rollout identity check: the engine's log-probs of the probe moved by only "
                f"{figures.engine_moved:.2e} since the last check (at most "
                f"rollout.identity_check.stale_threshold={stale_threshold:g}) while the "
                f"trainer's moved by {figures.trainer_moved:.2e}: the weight push did not reach "
                f"the engine, so rollouts come from stale weights. Gap now {figures.gap:.4f} "
                f"(max {figures.gap_max:.4f})"
            )
    if figures.gap > tolerance:
        raise RolloutIdentityError(
            f"rollout identity check: the engine's and the trainer's log-probs of the probe differ "
            f"by {figures.gap:.4f} on average (max {figures.gap_max:.4f}), over the tolerance "
            f"{tolerance:.4g} (rollout.identity_check): the engine does not sample from the "
            f"trainer's weights (a lost or partial weight push, or a different model)"
        )
    return figures


def metric_figures(figures: Figures, tolerance: float) -> dict[str, float]:
    """The step metrics of one check."""
    out = {
        "train/identity_gap": figures.gap,
        "train/identity_gap_max": figures.gap_max,
        "train/identity_prob_gap": figures.prob_gap,
        "train/identity_prob_gap_max": figures.prob_gap_max,
        "train/identity_tolerance": tolerance,
    }
    if figures.prob_corr is not None:
        out["train/identity_prob_corr"] = figures.prob_corr
    if figures.engine_moved is not None:
        out["train/identity_engine_moved"] = figures.engine_moved
        out["train/identity_trainer_moved"] = figures.trainer_moved
    return out


class IdentityCheckedEngine:
    """`engine` whose `sync_weights` is followed, every `every`-th push, by the identity check
    against the trainer's `model` (module docstring). Everything else reads through.

    `start(model, prompts)` samples the probe and makes the start-up check (it calibrates the
    tolerance); `identity_checked` calls it."""

    def __init__(
        self,
        engine: Any,
        settings: Any,
        precision: Precision,
        chunk_size: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.every = int(settings.every)
        self.precision = precision
        self.chunk_size = chunk_size
        self.sampling = (temperature, top_p)
        self.pushes = 0
        self.figures: dict[str, float] = {}
        self.tolerance: float | None = None
        self.startup_gap: float | None = None
        self.probe: Probe | None = None
        self._before: tuple[Tensor, Tensor] | None = None
        self._startup_figures: dict[str, float] = {}

    def __getattr__(self, attribute: str) -> object:
        return getattr(self.engine, attribute)

    def sync_weights(self, model: nn.Module) -> None:
        self.engine.sync_weights(model)
        self.pushes += 1
        if (self.pushes - 1) % self.every == 0:
            self.check(model)

    @torch.no_grad()
    def scores(self, model: nn.Module) -> tuple[Tensor, Tensor]:
        """(engine, trainer) log-probs [B, T] (float32, CPU) of the probe's response positions."""
        assert self.probe is not None, "start() samples the probe first"
        probe = self.probe
        device = model_device(model)
        with self.precision.autocast(device):
            trainer, _ = response_logprobs(
                model,
                probe.sequences.to(device),
                probe.attention_mask.to(device),
                probe.response_length,
                temperature=1.0,
                chunk_size=self.chunk_size,
                with_entropy=False,
                share_prompts="never",
                max_buckets=1,
            )
        engine = self.engine.score(probe.sequences, probe.attention_mask, probe.response_length)
        return engine.float().cpu(), trainer.float().cpu()

    def start(self, model: nn.Module, prompts: list[str] | None = None) -> Figures:
        """Sample the probe (`prompts`, or `FALLBACK_PROMPTS`, the first `probe_size`), score it on
        both sides while they hold the same weights, refuse a gap over the start-up limit, set the
        tolerance and say all of it once in the log."""
        settings = self.settings
        chosen = list(prompts or FALLBACK_PROMPTS)[: settings.probe_size]
        if len(chosen) < settings.probe_size:  # a task with fewer held-out prompts than asked for
            chosen += list(FALLBACK_PROMPTS)[: settings.probe_size - len(chosen)]
        temperature, top_p = self.sampling
        self.probe = sample_probe(
            self.engine,
            chosen,
            settings.probe_tokens,
            settings.seed,
            temperature=temperature,
            top_p=top_p,
        )
        engine, trainer = self.scores(model)
        figures = compare(engine, trainer, self.probe.response_mask)
        limit = settings.startup_limit
        if limit is None:
            limit = startup_limit(self.engine.score_dtype(), self.precision.compute_dtype)
        if figures.gap > limit:
            raise RolloutIdentityError(
                f"rollout identity check at start: the engine's and the trainer's log-probs of "
                f"the probe differ by {figures.gap:.4f} on average (max {figures.gap_max:.4f}) "
                f"while both should hold the same weights, over the start-up limit {limit:g} "
                f"(rollout.identity_check.startup_limit): the engine does not sample from the "
                f"trainer's weights (another checkpoint, or a failed first load)"
            )
        self.startup_gap = figures.gap
        if settings.tolerance is not None:
            self.tolerance, how = float(settings.tolerance), "rollout.identity_check.tolerance"
        else:
            multiple, floor = settings.tolerance_multiple, settings.tolerance_floor
            self.tolerance = calibrated_tolerance(figures.gap, multiple, floor)
            how = f"max({multiple:g} x start-up gap, floor {floor:g})"
        self._before = (engine, trainer)
        self._startup_figures = {"train/identity_startup_gap": figures.gap}
        log.info(
            "rollout identity guard: probe of %d sampled tokens (%d sequences); start-up gap %.3g "
            "(max %.3g, probability gap %.3g) under the limit %g; tolerance %.3g = %s; a push is "
            "stale when the engine's log-probs move by <= %g while the trainer's move by > %g; "
            "checked every %d push(es)",
            self.probe.tokens,
            self.probe.sequences.shape[0],
            figures.gap,
            figures.gap_max,
            figures.prob_gap,
            limit,
            self.tolerance,
            how,
            settings.stale_threshold,
            STALE_MARGIN * settings.stale_threshold,
            self.every,
        )
        return figures

    def check(self, model: nn.Module) -> Figures:
        """One check after a push (module docstring): raises on a stale push or a gap over the
        tolerance (the decision's only change), keeps the figures for the step (DEBUG in the
        log)."""
        assert self.tolerance is not None, "start() calibrates the tolerance first"
        engine, trainer = self.scores(model)
        figures = judge(
            engine,
            trainer,
            self.probe.response_mask,
            self._before,
            self.tolerance,
            self.settings.stale_threshold,
        )
        self._before = (engine, trainer)
        self.figures = {**self._startup_figures, **metric_figures(figures, self.tolerance)}
        self._startup_figures = {}
        log.debug("rollout identity check at push %d: %s", self.pushes, self.figures)
        return figures


def identity_checked(
    engine: Any,
    cfg: Any,
    precision: Precision,
    model: nn.Module,
    prompts: list[str] | None = None,
) -> Any:
    """`engine` under the identity check `cfg.rollout.identity_check` asks for (itself when the
    check is off, or when the engine cannot score a probe: said once in the log), started against
    the trainer's `model` right away (`IdentityCheckedEngine.start`: the probe sampled from
    `prompts`, the task's held-out prompts; an engine started on other weights stops the run before
    any rollout; the tolerance calibrated)."""
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
    checked = IdentityCheckedEngine(
        engine,
        settings,
        precision,
        cfg.train.entropy_chunk_size,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
    )
    checked.start(model, prompts)
    return checked


def push_figures(engine: Any) -> dict[str, float]:
    """The last identity check's figures ({} when the engine is not checked); a check's figures
    are reported once, by the step that made it."""
    if not isinstance(engine, IdentityCheckedEngine):
        return {}
    figures, engine.figures = engine.figures, {}
    return figures
