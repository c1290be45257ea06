"""HAPO / EAPO (arXiv 2604.11056 v1 §5): entropy-modulated token advantages on the DAPO loss.

    Â^H_t  = clip((H_t − µ_H) / σ_H, −|Â|/φ, +|Â|/φ)
    Â^CA_t = Â + α · sign(Â) · stopgrad(Â^H_t)          defaults α = 0.2, φ = 2

µ_H, σ_H are the mean and (population) std of the behaviour-policy token entropies over all response
tokens of the prompt's group, taken on the full rollout batch. Â^CA replaces Â in the clipped
surrogate; nothing else changes. Because |α · Â^H| <= (α/φ)|Â| the sign cannot flip when α/φ < 1,
which `validate` enforces. A group with σ_H = 0 gets Â^H = 0 (plain GRPO).

Options beyond the formula:
- `dynamic_sampling` (default on, as in the DAPO recipe the paper builds on): constant-reward groups
  leave the normaliser, as in `dapo`.
- `apply_to`: the quadrants the modulation touches; tokens of the others keep Â (the paper's
  "w/o PHR" ablation is apply_to = [PLR, NHR, NLR]).
- `conserve="sequence"` (not in the paper; the v2 "reallocation" reading): subtract each response's
  mean modulation over its modulated tokens, so Σ_t Â^CA_t = Σ_t Â for every response. The shift can
  double the modulation, so it needs 2α/φ < 1 to keep signs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch, fraction
from quadrants.objectives.common import ppo_token_loss, validate_clip
from quadrants.objectives.registry import check_range, register_objective
from quadrants.ops.quadrants import Quadrant

ALL_QUADRANTS = ("PHR", "PLR", "NHR", "NLR")
CONSERVE_MODES = ("none", "sequence")


def hapo_token_advantages(
    advantages: Tensor,
    entropy: Tensor,
    group_entropy_mean: Tensor,
    group_entropy_std: Tensor,
    apply_mask: Tensor,
    *,
    alpha: float,
    phi: float,
    conserve: Literal["none", "sequence"] = "none",
    std_eps: float = 1e-8,
) -> Tensor:
    """Â^CA per token (pure tensor math, no gradient flows through the entropy term).

    Args:
        advantages: [B] float, GRPO advantages Â.
        entropy: [B, T] float, behaviour entropy H_t.
        group_entropy_mean: [B] float µ_H of the sequence's group.
        group_entropy_std: [B] float σ_H of the sequence's group.
        apply_mask: [B, T] bool, tokens the modulation applies to (response tokens of
            the chosen quadrants).
        alpha, phi: the paper's α and φ.
        conserve: "none" or "sequence" (see module docstring).
        std_eps: σ_H below this counts as zero (Â^H = 0).

    Returns:
        [B, T] float token advantages Â^CA (Â on tokens outside apply_mask).
    """
    adv = advantages.float()[:, None]  # [B, 1]
    std = group_entropy_std.float()[:, None]  # [B, 1]
    z = (entropy.float() - group_entropy_mean.float()[:, None]) / std.clamp_min(std_eps)  # [B, T]
    z = torch.where(std > std_eps, z, torch.zeros_like(z))
    bound = adv.abs() / phi  # [B, 1]
    entropy_adv = torch.maximum(torch.minimum(z, bound), -bound).detach()  # clip to ±|Â|/φ, [B, T]
    modulation = alpha * torch.sign(adv) * entropy_adv * apply_mask  # [B, T]
    if conserve == "sequence":
        count = apply_mask.sum(-1, keepdim=True).clamp_min(1)  # [B, 1]
        modulation = (modulation - modulation.sum(-1, keepdim=True) / count) * apply_mask
    return adv + modulation  # [B, T]


def parse_apply_to(apply_to: str | Sequence[str]) -> tuple[Quadrant, ...]:
    """`apply_to` as quadrants: a list, or a string "PHR" / "PHR,NHR"; errors name the key."""
    names = apply_to.split(",") if isinstance(apply_to, str) else list(apply_to)
    try:
        return tuple(Quadrant.parse(str(n).strip()) for n in names if str(n).strip())
    except ValueError as err:
        raise ValueError(f"apply_to: {err}") from None


def validate_hapo(
    *,
    alpha: float,
    phi: float,
    apply_to: Sequence[str],
    conserve: str,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float | None = None,
    **_: object,
) -> None:
    validate_clip(clip_low=clip_low, clip_high=clip_high, clip_ratio_c=clip_ratio_c)
    check_range("alpha", alpha, low=0.0)
    check_range("phi", phi, low=0.0, low_open=True)
    if conserve not in CONSERVE_MODES:
        raise ValueError(f"conserve={conserve!r} is unknown; choose one of {list(CONSERVE_MODES)}")
    limit = 0.5 if conserve == "sequence" else 1.0
    if alpha / phi >= limit:
        raise ValueError(
            f"alpha/phi = {alpha}/{phi} = {alpha / phi:.3g} would let the entropy term flip an "
            f"advantage's sign; allowed: alpha/phi < {limit}"
            + (" (2*alpha/phi < 1 with conserve=sequence)" if limit < 1 else "")
        )
    parse_apply_to(apply_to)


@register_objective(
    "hapo",
    validate=validate_hapo,
    batch_denominator=True,
    zero_advantage_inert=True,
    decomposable=True,
    decomposition=(
        "token advantages from the row's behaviour entropy and its group's entropy mean and std, "
        "computed on the full rollout batch and carried on each row (conserve=sequence recentres "
        "within the row)"
    ),
)
def hapo(
    batch: TokenBatch,
    policy: PolicyOutput,
    *,
    alpha: float = 0.2,
    phi: float = 2.0,
    apply_to: Sequence[str] = ALL_QUADRANTS,
    conserve: str = "none",
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    dynamic_sampling: bool = True,
) -> ObjectiveOutput:
    mask = batch.response_mask
    apply_mask = batch.quadrants.union(parse_apply_to(apply_to)) & mask
    token_adv = hapo_token_advantages(
        batch.advantages,
        batch.entropy,
        batch.group_entropy_mean,
        batch.group_entropy_std,
        apply_mask,
        alpha=alpha,
        phi=phi,
        conserve=conserve,  # type: ignore[arg-type]
    )
    base = batch.advantages.float()[:, None].expand_as(token_adv)
    moved = (token_adv - base).abs()
    metrics = {
        "modulated_frac": fraction(apply_mask & (moved > 0), mask),
        "adv_shift_rel": (
            (moved * mask).sum() / (base.abs() * mask).sum().clamp_min(1e-12)
        ).detach(),
        "sign_flip_frac": fraction((token_adv * base) < 0, mask),
    }
    return ppo_token_loss(
        batch,
        policy,
        token_adv,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_ratio_c=clip_ratio_c,
        dynamic_sampling=dynamic_sampling,
        metrics=metrics,
    )
