"""One registry of token objectives; an objective's keyword-only signature is its schema.

An objective is `fn(batch: TokenBatch, policy: PolicyOutput, *, <hyper-parameters>) ->
ObjectiveOutput`. `resolve_objective(name, params)` checks the name and the parameters against that
signature before any training starts, so a misspelled key fails at compose time with the list of
accepted keys.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from quadrants.config_ranges import Range
from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch
from quadrants.objectives.control import STATE_KEY, ObjectiveController

# The per-token signals an objective may declare in `needs=`, each with what a run needs to give
# it (the run plan names this in its refusal):
# - adapter_residual: ||h_adapted - h_base|| per token (objectives/batch.py `TokenBatch`), the LoRA
#   adapters' residual at `model.lora.residual_layer` (models/token_signals.py).
SIGNALS: dict[str, str] = {"adapter_residual": "model.lora.enabled=true"}


class TokenObjective(Protocol):
    def __call__(
        self, batch: TokenBatch, policy: PolicyOutput, **params: Any
    ) -> ObjectiveOutput: ...


@dataclass(frozen=True)
class ObjectiveSpec:
    """A registered objective.

    Attributes:
        name: registry name (the `objective.name` config value).
        fn: the objective function.
        needs_entropy: True, or a predicate of the full params, when the step must hand it the
            current policy's entropy (with gradient) in `PolicyOutput.entropy`.
        validate: optional check of hyper-parameter ranges; raises ValueError naming key and range.
        recomputed_old_logp: True when the gradient at logπ = logπ_old is not continuous (KL-Cov's
            |logπ − logπ_old|): there the old log-probs must come from the trainer's own forward,
            whose rounding matches the update's, never from the rollout engine
            (train.behaviour_pass).
        batch_denominator: True, or a predicate of the full params, when the objective's
            `denominator_mask` is a function of the batch and the params alone, never of the
            policy output (DAPO's constant groups): its rows outside the denominator carry no
            gradient, so the update runs them without grad (train/gradless_rows.py).
        zero_advantage_inert: True, or a predicate of the full params, when a token whose
            sequence advantage is exactly 0 adds exactly 0 to the objective's loss for every
            policy output, so no gradient either (a clipped surrogate of a token advantage that is
            0 wherever Â is: −0·r = 0 for every ratio r). Rows with Â = 0 (GRPO's constant groups)
            then run without grad when the step adds no KL (train/gradless_rows.py).
        controller: the objective's state across optimizer steps (objectives/control.py), or
            None for the stateless ones; its state reaches the objective as `state`.
        decomposable: True, or a predicate of the full params, when the loss of a mini-batch is
            the sum over its rows of terms that each read only that row (its policy output and
            the batch's per-row or rollout-level fields), given the mini-batch's normaliser:
            no statistic over the mini-batch's rows (a covariance, a quantile, a top-k, a count
            of the rows present) enters the per-token loss, and the denominator mask is the
            batch's alone (`batch_denominator`, or None). The update then runs each micro-batch
            as a loss of its own over the mini-batch's normaliser, and the rows that carry no
            gradient need no forward at all (train/update.py `backward_minibatch`).
        decomposition: why the objective is or is not decomposable, in a sentence (required:
            tests/unit/objectives/test_registry.py reads it for every built-in objective, and
            docs/performance.md lists them).
        nominal_rows: True, or a predicate of the full params, when the authors divide each
            mini-batch's loss by its nominal row count, not by the rows it keeps (Archer's and
            Skywork-OR1's verl trainers): the loss's normaliser is then multiplied by
            rows / kept rows (objectives/loss.py `nominal_scale`).
        skips_unmixed_steps: True, or a predicate of the full params, when a step whose groups
            are all constant is skipped: no optimizer step, no controller update (Skywork-OR1's
            trainer draws a new batch; train/step.py `train_step`).
        needs: the per-token signals beyond log-probs and entropy that the objective reads from
            its `TokenBatch`, each a name of `SIGNALS` (ARCA's `adapter_residual`): the run plan
            refuses a configuration that cannot give them (quadrants/run_plan) and the step
            computes them (run/settings.py `signal_settings`).
    """

    name: str
    fn: TokenObjective
    needs_entropy: bool | Callable[[Mapping[str, Any]], bool] = False
    validate: Callable[..., None] | None = None
    recomputed_old_logp: bool = False
    batch_denominator: bool | Callable[[Mapping[str, Any]], bool] = False
    zero_advantage_inert: bool | Callable[[Mapping[str, Any]], bool] = False
    controller: ObjectiveController | None = None
    decomposable: bool | Callable[[Mapping[str, Any]], bool] = False
    decomposition: str = ""
    nominal_rows: bool | Callable[[Mapping[str, Any]], bool] = False
    skips_unmixed_steps: bool | Callable[[Mapping[str, Any]], bool] = False
    needs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.needs) - set(SIGNALS))
        if unknown:
            raise ValueError(
                f"objective {self.name!r} needs unknown signal(s) {unknown}; known: {list(SIGNALS)}"
            )

    def scales_by_nominal_rows(self, params: Mapping[str, Any]) -> bool:
        flag = self.nominal_rows
        return flag(params) if callable(flag) else bool(flag)

    def skips_unmixed(self, params: Mapping[str, Any]) -> bool:
        flag = self.skips_unmixed_steps
        return flag(params) if callable(flag) else bool(flag)

    def wants_entropy(self, params: Mapping[str, Any]) -> bool:
        return (
            self.needs_entropy(params) if callable(self.needs_entropy) else bool(self.needs_entropy)
        )

    def denominator_from_batch(self, params: Mapping[str, Any]) -> bool:
        flag = self.batch_denominator
        return flag(params) if callable(flag) else bool(flag)

    def inert_at_zero_advantage(self, params: Mapping[str, Any]) -> bool:
        flag = self.zero_advantage_inert
        return flag(params) if callable(flag) else bool(flag)

    def decomposes(self, params: Mapping[str, Any]) -> bool:
        flag = self.decomposable
        return flag(params) if callable(flag) else bool(flag)

    def parameters(self) -> dict[str, inspect.Parameter]:
        sig = inspect.signature(self.fn)
        return {
            n: p
            for n, p in sig.parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and n != STATE_KEY  # not a config key
        }

    def defaults(self) -> dict[str, Any]:
        return {
            n: p.default
            for n, p in self.parameters().items()
            if p.default is not inspect.Parameter.empty
        }


_OBJECTIVES: dict[str, ObjectiveSpec] = {}


def register_objective(
    name: str,
    *,
    needs_entropy: bool | Callable[[Mapping[str, Any]], bool] = False,
    validate: Callable[..., None] | None = None,
    recomputed_old_logp: bool = False,
    batch_denominator: bool | Callable[[Mapping[str, Any]], bool] = False,
    zero_advantage_inert: bool | Callable[[Mapping[str, Any]], bool] = False,
    controller: ObjectiveController | None = None,
    decomposable: bool | Callable[[Mapping[str, Any]], bool] = False,
    decomposition: str = "",
    nominal_rows: bool | Callable[[Mapping[str, Any]], bool] = False,
    skips_unmixed_steps: bool | Callable[[Mapping[str, Any]], bool] = False,
    needs: tuple[str, ...] = (),
) -> Callable[[TokenObjective], TokenObjective]:
    """Decorator: register `fn` under `name`. A second registration of the same name is an error."""

    def add(fn: TokenObjective) -> TokenObjective:
        if name in _OBJECTIVES:
            raise ValueError(f"objective {name!r} is already registered")
        _OBJECTIVES[name] = ObjectiveSpec(
            name,
            fn,
            needs_entropy,
            validate,
            recomputed_old_logp,
            batch_denominator,
            zero_advantage_inert,
            controller,
            decomposable,
            decomposition,
            nominal_rows,
            skips_unmixed_steps,
            tuple(needs),
        )
        return fn

    return add


def known_objectives() -> list[str]:
    _load_builtins()
    return sorted(_OBJECTIVES)


def get_objective(name: str) -> ObjectiveSpec:
    """The spec registered under `name`; an unknown name lists the known ones."""
    _load_builtins()
    if name not in _OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; known objectives: {sorted(_OBJECTIVES)}")
    return _OBJECTIVES[name]


def resolve_objective(
    name: str, params: Mapping[str, Any] | None
) -> tuple[ObjectiveSpec, dict[str, Any]]:
    """Check `params` against the objective's signature and ranges; return (spec, full params).

    Raises:
        ValueError: unknown objective, unknown or missing parameter, or a value out of range.
    """
    spec = get_objective(name)
    accepted = spec.parameters()
    params = dict(params or {})
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"objective {name!r} got unknown parameter(s) {unknown}; accepted: {sorted(accepted)}"
        )
    full = {**spec.defaults(), **params}
    missing = sorted(set(accepted) - set(full))
    if missing:
        raise ValueError(f"objective {name!r} needs parameter(s) {missing}")
    if spec.validate is not None:
        spec.validate(**full)
    return spec, full


def _load_builtins() -> None:
    # Importing the package registers every built-in objective exactly once.
    import quadrants.objectives.builtin  # noqa: F401


def check_range(
    key: str,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError naming `key` and its allowed range when `value` falls outside it: the
    run configuration's one range type (quadrants/config_ranges.py), and so its one message."""
    Range(low, high, low_open=low_open, high_open=high_open).check(key, value)
