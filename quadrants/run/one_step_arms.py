"""Paired one-step counterfactuals: from one checkpoint, one rollout batch, one update per arm.

Every arm starts from the same weights and optimizer state (a snapshot, restored before each arm),
trains on the same rollout batch (collected and scored once) with the same draws (the batch's own
seeds, quadrants/seeds.py `counterfactual_batch`), and is measured on the same held-out responses
and sampling seeds. What differs between two arms is the mask alone, so their difference on one
batch is the effect of the mask, without the variance of separate training runs.

An arm is a keep set of the loss (objectives/loss.py): a quadrant (`PHR`, `PLR`, `NHR`, `NLR`),
`random` (the matched random-token control of ops/random_control.py, drawn on the batch), `all`
(the plain objective) or `null` (the empty keep set: no gradient at all); the run's threshold rule
and normaliser stay as they are. The update is one of `UPDATES`:
- `adam`: the run's own (train/update.py `update_policy`: its epochs, mini-batches, clipping, AdamW
  step from the checkpoint's moments). AdamW's first moment carries the run's past gradients
  (β₁ = 0.9 weights the arm's own gradient by 0.1), so every arm also takes the momentum step;
  the `null` arm takes that step alone, and an arm's effect minus `null`'s is its own;
- `sgd`: one plain SGD step θ − lr · g_arm from the checkpoint's weights, g_arm the sum of the
  update's mini-batch gradients at those weights (`update_gradient`), lr the run's learning rate
  at the checkpoint; no optimizer state, no clipping, no weight decay;
- `normalized`: θ − η · g_arm / ‖g_arm‖ with one η for every arm of a batch (`Plan.eta`, or
  lr · ‖g_all‖ of that batch: the length of the plain objective's SGD step), so the arms differ in
  their direction alone. An arm without gradient (`null`) does not move.
Each arm's ‖g_arm‖ (the 2-norm over the trainable parameters, before any clipping) is reported as
the metric `grad_norm`.

Per arm and batch, on the held-out problems (`HeldoutSet`, sampled once from the checkpoint):
- `logl`: the change in mean log-likelihood per token of the held-out responses graded correct
  (fixed responses: the same tokens before and after), at the training temperature;
- `entropy`: the change in mean token entropy along every held-out response (teacher-forced);
- `accuracy`: the change in sampled accuracy, resampled after the update with the seeds the
  fixed responses were drawn with (common random numbers: a sample changes only where the update
  moved the distribution enough to flip a draw);
- `logl_first_order`, `entropy_first_order`: the first-order effect of the arm's gradient,
  −lr · g_arm · ∇metric at the checkpoint's weights (`update_gradient`: the sum of the update's
  mini-batch gradients, no clipping): what plain SGD at the run's learning rate would change to
  first order. It is linear in the loss, so under `quadrant.denominator=all_response_tokens` the
  four quadrant arms' first-order effects sum to `all`'s (the four losses sum to the full loss);
  the actual step's effects do not (AdamW divides by the root of the second moment and clipping
  rescales the gradient: neither is linear in it).

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from quadrants import seeds
from quadrants.models.policy import response_logprobs
from quadrants.objectives.loss import gradient_tokens
from quadrants.ops.quadrants import Quadrant, QuadrantSettings, RandomControl
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import SamplingSettings, rollouts_to
from quadrants.tasks.base import Problem
from quadrants.train.blocks import concat_rollouts
from quadrants.train.collect import collect_rollouts
from quadrants.train.context import StepContext
from quadrants.train.forwards import no_grad_pass
from quadrants.train.refill import correctness
from quadrants.train.score import build_batch, draw_control, mismatch_weights
from quadrants.train.update import update_gradient, update_policy

QUADRANT_ARMS: tuple[str, ...] = tuple(q.value for q in Quadrant)
NULL = "null"
ARMS: tuple[str, ...] = (*QUADRANT_ARMS, "random", "all", NULL)
MEASURED = ("logl", "accuracy", "entropy")
FIRST_ORDER = ("logl_first_order", "entropy_first_order")
GRAD_NORM = "grad_norm"
METRICS: tuple[str, ...] = (*MEASURED, *FIRST_ORDER, GRAD_NORM)
UPDATES: tuple[str, ...] = ("adam", "sgd", "normalized")
"""How each arm steps from the checkpoint (the module docstring)."""


def check_update(update: str) -> str:
    """`update` if it is one of `UPDATES`, else ValueError naming the flag and the choices."""
    if update not in UPDATES:
        raise ValueError(
            f"--update {update!r} is unknown; choose one of {', '.join(UPDATES)} (e.g. --update "
            "sgd for one plain SGD step without the run's optimizer state)"
        )
    return update


def run_quadrant(settings: QuadrantSettings) -> QuadrantSettings:
    """The run's threshold rule and normaliser (its parsed quadrant settings,
    `RunPlan.quadrant_settings`), keeping every token: what each arm's keep set is put into."""
    return replace(settings, keep=None, control=None)


def arm_quadrant(
    name: str, run: QuadrantSettings, control: RandomControl | None
) -> QuadrantSettings:
    """The run's quadrant settings with the keep set of arm `name`: one quadrant, the random
    control `control` (`random`), every token (`all`) or none (`null`); threshold and normaliser
    the run's."""
    if name == NULL:
        return replace(run, keep=(), control=None)
    if name == "all":
        return replace(run, keep=None, control=None)
    if name == "random":
        if control is None:
            raise ValueError("the random arm needs the arm it matches (--match)")
        return replace(run, keep=None, control=control)
    return replace(run, keep=(Quadrant.parse(name),), control=None)


@dataclass(frozen=True)
class Arm:
    """One arm: its label (as printed) and its keep set."""

    name: str
    quadrant: QuadrantSettings


class Snapshot:
    """The trainer's state at the checkpoint (weights, optimizer and scheduler states) on the host,
    put back before each arm. The optimizer state is copied again at every restore: torch's
    `Optimizer.load_state_dict` copies the dict shallowly (torch/optim/optimizer.py) and a tensor
    already on the parameter's device would be shared, so the next step would write into it."""

    def __init__(self, ctx: StepContext) -> None:
        self.model = {k: v.detach().to("cpu", copy=True) for k, v in ctx.model.state_dict().items()}
        self.optimizer = _to_host(ctx.optimizer.state_dict())
        self.scheduler = copy.deepcopy(ctx.scheduler.state_dict())

    def restore(self, ctx: StepContext) -> None:
        ctx.model.load_state_dict(self.model)
        ctx.optimizer.load_state_dict(_to_host(self.optimizer))
        ctx.scheduler.load_state_dict(copy.deepcopy(self.scheduler))
        ctx.optimizer.zero_grad(set_to_none=True)


def _to_host(value: Any) -> Any:
    """A deep copy of `value` with every tensor cloned onto the CPU."""
    if isinstance(value, Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_host(v) for v in value)
    return copy.deepcopy(value)


# --- the held-out responses -----------------------------------------------------------------


@dataclass(frozen=True)
class HeldoutSet:
    """The fixed held-out responses, sampled once from the checkpoint.

    Attributes:
        problems: the held-out problems, in generate-call chunks of `chunk` problems.
        sampling: how they were sampled (n per problem; the seed is per chunk, `seeds`).
        seeds: the seed of each chunk's call (stream `counterfactual_heldout`), reused after every
            arm's update.
        sequences: [B, P + T] long, prompt + response; attention_mask [B, P + T] bool.
        response_mask: [B, T] bool; correct: [B] bool (graded correct).
    """

    problems: list[Problem]
    sampling: SamplingSettings
    chunk: int
    seeds: tuple[int, ...]
    sequences: Tensor
    attention_mask: Tensor
    response_mask: Tensor
    correct: Tensor

    @property
    def length(self) -> int:
        return self.response_mask.shape[1]


def sample_chunks(
    ctx: StepContext, problems: list[Problem], sampling: SamplingSettings, chunk: int,
    call_seeds: Sequence[int],
) -> tuple[Any, Tensor]:  # fmt: skip
    """The policy's samples of `problems`, `chunk` problems per generate call, call c seeded with
    `call_seeds[c]`, in order (one Rollouts), and their correctness ([B] bool, on the CPU)."""
    parts, correct = [], []
    for c, start in enumerate(range(0, len(problems), chunk)):
        block = problems[start : start + chunk]
        rollouts = ctx.engine.generate(
            [p.prompt for p in block], replace(sampling, seed=call_seeds[c])
        )
        golds = [block[int(g)].answer for g in rollouts.group_ids]
        graded = ctx.grader.grade(rollouts.texts, golds)
        parts.append(rollouts)
        correct += [o == Outcome.correct for o in graded.outcomes]
    return concat_rollouts(parts, int(ctx.tokenizer.pad_token_id)), torch.tensor(correct)


def heldout_set(
    ctx: StepContext, problems: list[Problem], sampling: SamplingSettings, chunk: int, seed: int,
    step: int,
) -> HeldoutSet:  # fmt: skip
    """Sample and grade the fixed held-out responses from the current weights: call c seeded
    with stream `counterfactual_heldout` of (step, c) (quadrants/seeds.py)."""
    calls = -(-len(problems) // chunk)
    call_seeds = tuple(seeds.counterfactual_heldout(seed, step, c) for c in range(calls))
    rollouts, correct = sample_chunks(ctx, problems, sampling, chunk, call_seeds)
    rollouts = rollouts_to(rollouts, ctx.device)
    return HeldoutSet(
        problems,
        sampling,
        chunk,
        call_seeds,
        torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1),
        torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1),
        rollouts.response_mask.bool(),
        correct.to(ctx.device),
    )


def heldout_values(logp: Tensor, entropy: Tensor, held: HeldoutSet) -> dict[str, float]:
    """`logl`: mean log-prob per token over the correct responses (NaN when none is correct);
    `entropy`: mean entropy per token over every response. logp, entropy: [B, T]."""
    mask = held.response_mask
    right = mask & held.correct[:, None]
    tokens = int(right.sum())
    logl = float((logp * right).sum()) / tokens if tokens else math.nan
    return {"logl": logl, "entropy": float((entropy * mask).sum()) / max(int(mask.sum()), 1)}


def measure(ctx: StepContext, held: HeldoutSet) -> dict[str, float]:
    """The held-out values of the current weights: `logl` and `entropy` on the fixed responses,
    `accuracy` resampled with the fixed responses' seeds (common random numbers)."""
    logp, entropy = no_grad_pass(
        ctx.forwards, ctx.model, held.sequences, held.attention_mask, held.length
    )
    values = heldout_values(logp, entropy, held)
    _, correct = sample_chunks(ctx, held.problems, held.sampling, held.chunk, held.seeds)
    values["accuracy"] = float(correct.float().mean())
    return values


# --- first-order effects ----------------------------------------------------------------------


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer steps (all, or under LoRA the adapters), in model order."""
    return [p for p in model.parameters() if p.requires_grad]


def metric_gradients(ctx: StepContext, held: HeldoutSet) -> dict[str, list[Tensor]]:
    """∇logl and ∇entropy (the `heldout_values` of the current weights) over the trainable
    parameters, one host tensor per parameter, from `forwards.passes.batch_size` rows per
    backward. ∇logl is zero when no held-out response is correct."""
    model, forwards = ctx.model, ctx.forwards
    mask = held.response_mask
    right = mask & held.correct[:, None]
    scale = {"logl": max(int(right.sum()), 1), "entropy": max(int(mask.sum()), 1)}
    weights = {"logl": right, "entropy": mask}
    params = trainable(model)
    out: dict[str, list[Tensor]] = {}
    model.eval()  # as the no-grad passes measure it (no dropout in the measured function)
    for name in ("logl", "entropy"):
        for parameter in params:
            parameter.grad = None
        size = forwards.passes.batch_size
        for start in range(0, held.sequences.shape[0], size):
            rows = slice(start, start + size)
            with forwards.precision.autocast(forwards.device):
                logp, entropy = response_logprobs(
                    model,
                    held.sequences[rows],
                    held.attention_mask[rows],
                    held.length,
                    temperature=forwards.passes.temperature,
                    chunk_size=forwards.passes.chunk_size,
                    with_entropy=name == "entropy",
                )
            value = logp if name == "logl" else entropy
            ((value * weights[name][rows]).sum() / scale[name]).backward()
        out[name] = [_grad_on_host(p) for p in params]
    for parameter in params:
        parameter.grad = None
    return out


def _grad_on_host(parameter: nn.Parameter) -> Tensor:
    if parameter.grad is None:
        return torch.zeros(parameter.shape, dtype=torch.float32)
    return parameter.grad.detach().float().to("cpu", copy=True)


def grad_norm(params: Sequence[nn.Parameter]) -> float:
    """‖g‖₂ over the parameters' current `.grad` (None counts as zero), in float64."""
    total = 0.0
    for parameter in params:
        if parameter.grad is not None:
            total += float(parameter.grad.detach().double().pow(2).sum())
    return math.sqrt(total)


@torch.no_grad()
def gradient_step(params: Sequence[nn.Parameter], scale: float) -> None:
    """θ ← θ − scale · g for every parameter with a `.grad` (plain SGD with step `scale`)."""
    for parameter in params:
        if parameter.grad is not None:
            parameter.add_(parameter.grad.to(parameter.dtype), alpha=-scale)


def directional(params: Sequence[nn.Parameter], direction: Sequence[Tensor]) -> float:
    """Σ_i g_i · d_i over the parameters' current `.grad` g and `direction` d, in float64."""
    total = 0.0
    for parameter, d in zip(params, direction, strict=True):
        if parameter.grad is not None:
            total += float((parameter.grad.detach().double().cpu() * d.double()).sum())
    return total


# --- the arms on one batch --------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What to measure: the checkpoint's `step` (the step the batches are drawn at), the run
    `seed`, `batches` rollout batches, the held-out `problems` sampled as `sampling` in calls of
    `chunk` problems; each arm steps by `update` (`UPDATES`), `eta` the normalized step's length
    (None: lr · ‖g_all‖ of each batch)."""

    step: int
    seed: int
    batches: int
    problems: list[Problem]
    sampling: SamplingSettings
    chunk: int
    update: str = "adam"
    eta: float | None = None

    def __post_init__(self) -> None:
        check_update(self.update)
        if self.eta is not None and not self.eta > 0:
            raise ValueError(f"--eta {self.eta}: the normalized step's length must be > 0")


@dataclass(frozen=True)
class Outcomes:
    """The checkpoint's held-out values (`before`: logl, entropy, accuracy; `correct` and
    `responses`: how many held-out responses, and how many graded correct) and, per batch and
    arm, each metric's effect (after − before, or the first-order effect) and the arm's gradient
    norm; `etas`: the normalized update's step length per batch (empty for the other updates)."""

    before: dict[str, float]
    correct: int
    responses: int
    effects: dict[int, dict[str, dict[str, float]]]  # batch -> arm -> metric -> effect
    etas: dict[int, float] = field(default_factory=dict)


def run_arms(
    ctx: StepContext,
    arms: Sequence[Arm],
    plan: Plan,
    progress: Callable[[str], None] = lambda _: None,
) -> Outcomes:
    """Every arm on each of `plan.batches` batches, from the current weights and optimizer state
    (restored before each arm and left restored). Batch b is collected, graded and scored once, as
    a training step at `plan.step` would with the run seed replaced by
    `counterfactual_batch(seed, step, b)` (quadrants/seeds.py), and every arm trains on it."""
    snapshot = Snapshot(ctx)
    held = heldout_set(ctx, plan.problems, plan.sampling, plan.chunk, plan.seed, plan.step)
    before = measure(ctx, held)
    gradients = metric_gradients(ctx, held)
    lr = float(ctx.optimizer.param_groups[0]["lr"])
    params = trainable(ctx.model)
    progress(
        f"held-out: {len(plan.problems)} problems x {plan.sampling.n}, "
        f"{int(held.correct.sum())} of {held.correct.numel()} responses correct; "
        + ", ".join(f"{k} {v:.4f}" for k, v in before.items())
    )
    effects: dict[int, dict[str, dict[str, float]]] = {}
    etas: dict[int, float] = {}
    for b in range(plan.batches):
        base = seeds.counterfactual_batch(plan.seed, plan.step, b)
        batch, is_weights = score_batch(ctx, base, plan.step)
        update = replace(ctx.update, seed=base)
        # the control's draw as the run's step draws it: matched on the full objective's
        # gradient-carrying tokens, per mini-batch of this update (train/step.py train_step)
        carrying = gradient_tokens(ctx.objective.spec, ctx.objective.params, batch)

        def objective_of(quadrant: QuadrantSettings):  # noqa: ANN202 - objectives.Objective
            return replace(ctx.objective, loss=replace(ctx.objective.loss, quadrant=quadrant))

        if plan.update == "normalized":
            if plan.eta is None:  # the plain objective's SGD step length on this batch
                quadrant = arm_quadrant("all", run_quadrant_of(arms), None)
                update_gradient(
                    ctx.model, objective_of(quadrant), ctx.forwards, update,
                    draw_control(
                        batch, quadrant, base, plan.step, carrying=carrying, update=update
                    ),
                    plan.step, is_weights,
                )  # fmt: skip
                etas[b] = lr * grad_norm(params)
                ctx.optimizer.zero_grad(set_to_none=True)
            else:
                etas[b] = plan.eta
        effects[b] = {}
        for arm in arms:
            objective = objective_of(arm.quadrant)
            drawn = draw_control(
                batch, arm.quadrant, base, plan.step, carrying=carrying, update=update
            )
            update_gradient(
                ctx.model, objective, ctx.forwards, update, drawn, plan.step, is_weights
            )
            first = {
                f"{name}_first_order": -lr * directional(params, gradients[name])
                for name in ("logl", "entropy")
            }
            if math.isnan(before["logl"]):  # no correct held-out response: no likelihood to move
                first["logl_first_order"] = math.nan
            norm = grad_norm(params)
            if plan.update == "adam":
                update_policy(
                    ctx.model, ctx.optimizer, ctx.scheduler, objective, ctx.forwards, update,
                    drawn, plan.step, is_weights,
                )  # fmt: skip
            elif plan.update == "sgd":
                gradient_step(params, lr)  # the summed gradient of update_gradient, as is
            elif norm > 0.0:  # normalized: the same length etas[b] for every arm
                gradient_step(params, etas[b] / norm)
            ctx.optimizer.zero_grad(set_to_none=True)
            ctx.engine.sync_weights(ctx.model)
            after = measure(ctx, held)
            effects[b][arm.name] = {
                **{name: after[name] - before[name] for name in MEASURED},
                **first,
                GRAD_NORM: norm,
            }
            snapshot.restore(ctx)
            ctx.engine.sync_weights(ctx.model)
            shown = effects[b][arm.name]
            progress(
                f"batch {b + 1}/{plan.batches} {arm.name}: "
                + ", ".join(f"Δ{k} {v:+.5f}" for k, v in shown.items())
            )
    return Outcomes(before, int(held.correct.sum()), int(held.correct.numel()), effects, etas)


def run_quadrant_of(arms: Sequence[Arm]) -> QuadrantSettings:
    """The run's threshold rule and normaliser, read off the first arm (every arm carries them)."""
    return run_quadrant(arms[0].quadrant)


def score_batch(ctx: StepContext, seed: int, step: int) -> tuple[Any, Tensor | None]:
    """One rollout batch collected and scored as train/step.py `train_step` does at `step` with
    run seed `seed`: the TokenBatch (quadrants by the run's threshold rule) and the mismatch
    correction's weights (None when off)."""
    forwards = ctx.forwards
    collected = collect_rollouts(
        ctx.engine, ctx.grader, ctx.task, forwards.placement, replace(ctx.collect, seed=seed),
        step, pad_id=int(ctx.tokenizer.pad_token_id),
    )  # fmt: skip
    ctx.engine.release_memory()  # vLLM sleeps through the update, as in a training step
    rollouts = rollouts_to(collected.rollouts, forwards.device)
    rewards = collected.rewards.to(forwards.device)
    correct = correctness(collected.outcomes, forwards.device)
    batch = build_batch(
        ctx.model, ctx.ref_model, forwards, ctx.score, ctx.objective.quadrant, rollouts, rewards,
        correct,
    )  # fmt: skip
    return batch, mismatch_weights(ctx.score, rollouts, batch)
