"""Tiny hand-checkable batches for the objective tests.

Advantages are made exact by building batches with `normalize_std=False` (Dr. GRPO centring):
rewards [2, -2] in one group give advantages exactly [+2, -2].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from quadrants.objectives.batch import PolicyOutput, TokenBatch, make_token_batch
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import resolve_objective
from quadrants.ops.quadrants import QuadrantSettings

PAD = 0.0  # value put on padding positions of old_logp / ratios (never read)


def t(
    rows: Sequence[Sequence[float]] | Sequence[float], dtype: torch.dtype = torch.float32
) -> Tensor:
    return torch.tensor(rows, dtype=dtype)


def batch(
    entropy: Sequence[Sequence[float]],
    rewards: Sequence[float],
    group_ids: Sequence[int],
    response_mask: Sequence[Sequence[int]] | None = None,
    old_logp: Sequence[Sequence[float]] | None = None,
    *,
    normalize_std: bool = False,
    ref_logp: Sequence[Sequence[float]] | None = None,
) -> TokenBatch:
    """A TokenBatch with a 1-token prompt; response_mask defaults to all True, old_logp to -1."""
    ent = t(entropy)
    b, length = ent.shape
    mask = (
        torch.ones(b, length, dtype=torch.bool)
        if response_mask is None
        else t(response_mask, torch.bool)
    )
    old = torch.full((b, length), -1.0) if old_logp is None else t(old_logp)
    return make_token_batch(
        sequences=torch.zeros(b, length + 1, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(b, 1, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=old,
        entropy=ent,
        rewards=t(rewards),
        group_ids=torch.tensor(group_ids, dtype=torch.long),
        normalize_std=normalize_std,
        ref_logp=None if ref_logp is None else t(ref_logp),
    )


def logp_for_ratios(tb: TokenBatch, ratios: Sequence[Sequence[float]] | None = None) -> Tensor:
    """A leaf logp with grad such that exp(logp - old_logp) = ratios (1 everywhere when None)."""
    r = torch.ones_like(tb.old_logp) if ratios is None else t(ratios)
    return (tb.old_logp + torch.log(r)).detach().requires_grad_(True)


def run(
    name: str,
    tb: TokenBatch,
    logp: Tensor,
    entropy: Tensor | None = None,
    *,
    keep: tuple | None = None,
    quadrant_denominator: str = "all_response_tokens",
    loss_agg: str = "token-mean",
    norm_length: int | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    generator: torch.Generator | None = None,
    **params: object,
) -> tuple[Tensor, dict[str, Tensor]]:
    """resolve_objective + compute_loss, the way the train step calls them.

    `keep` / `quadrant_denominator` go to QuadrantSettings, `loss_agg` / `kl_*` to LossSettings;
    `generator`: an objective's draws (Clip-Cov's; None: a generator seeded 0, the same draw
    every call, as the step always hands one), the rest are objective params.
    """
    spec, full = resolve_objective(name, params)
    settings = LossSettings(
        quadrant=QuadrantSettings(keep=keep, denominator=quadrant_denominator),  # type: ignore[arg-type]
        loss_agg=loss_agg,
        norm_length=norm_length,  # type: ignore[arg-type]
        kl_coef=kl_coef,
        kl_estimator=kl_estimator,
    )
    policy = PolicyOutput(logp=logp, entropy=entropy)
    draws = torch.Generator().manual_seed(0) if generator is None else generator
    return compute_loss(spec, full, tb, policy, settings, generator=draws)


def grad_of(loss: Tensor, leaf: Tensor) -> Tensor:
    (g,) = torch.autograd.grad(loss, leaf)
    return g


def close(actual: Tensor | float, expected: Tensor | float | Sequence, atol: float = 1e-6) -> None:
    actual = torch.as_tensor(actual, dtype=torch.float32)
    expected = torch.as_tensor(expected, dtype=torch.float32)
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


LOG2 = math.log(2.0)


def random_batch(
    seed: int, *, groups: int = 2, group_size: int = 4, length: int = 6, with_ref: bool = True
) -> tuple[TokenBatch, Tensor, Tensor]:
    """Seeded random batch (0/1 rewards, ragged responses, ratios around 1 so some tokens clip).

    Returns (batch, logp leaf with grad, current entropy leaf with grad).
    """
    g = torch.Generator().manual_seed(seed)
    b = groups * group_size
    lengths = torch.randint(1, length + 1, (b,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    rewards = torch.randint(0, 2, (b,), generator=g).float()
    if seed % 3 == 0:  # one all-equal group now and then (DAPO drops it, HAPO/GRPO give it 0)
        rewards[:group_size] = 1.0
    entropy = torch.rand(b, length, generator=g) * 2.0
    old_logp = -torch.rand(b, length, generator=g) * 3.0
    ref_logp = -torch.rand(b, length, generator=g) * 3.0 if with_ref else None
    tb = make_token_batch(
        sequences=torch.zeros(b, length + 2, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(b, 2, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=old_logp,
        entropy=entropy,
        rewards=rewards,
        group_ids=torch.arange(groups).repeat_interleave(group_size),
        ref_logp=ref_logp,
    )
    logp = (old_logp + 0.3 * torch.randn(b, length, generator=g)).requires_grad_(True)
    current_entropy = (
        (entropy + 0.1 * torch.randn(b, length, generator=g)).abs().requires_grad_(True)
    )
    return tb, logp, current_entropy


def grpo_batch() -> TokenBatch:
    """The shared hand-checkable batch: one group, 2 sequences x 3 tokens, the last one padded.

    rewards [2, -2] -> advantages [+2, -2]
    entropy [[1, 0, 0.5], [1, 0, pad 9]] -> group mean over the 5 response tokens 2.5 / 5 = 0.5
    quadrants (H >= 0.5 is high, zero-or-positive advantage is positive):
        seq 0 (A = +2): PHR, PLR, PHR      seq 1 (A = -2): NHR, NLR, pad
    """
    return batch(
        entropy=[[1.0, 0.0, 0.5], [1.0, 0.0, 9.0]],
        rewards=[2.0, -2.0],
        group_ids=[0, 0],
        response_mask=[[1, 1, 1], [1, 1, 0]],
        old_logp=[[-1.0, -0.5, -2.0], [-0.3, -1.5, PAD]],
    )


# Ratios for grpo_batch; with clip 0.2/0.2 the per-token surrogate max(-A r, -A clip(r)) is
#   (0,0) A=+2 r=1.5: max(-3.0, -2.4) = -2.4  clipped (high)   -> no gradient
#   (0,1) A=+2 r=0.5: max(-1.0, -1.6) = -1.0  unclipped        -> d/dlogp = -A r = -1.0
#   (0,2) A=+2 r=1.0: -2.0                    unclipped        -> -2.0
#   (1,0) A=-2 r=1.1: max( 2.2,  2.2) =  2.2  unclipped        -> +2.2
#   (1,1) A=-2 r=0.7: max( 1.4,  1.6) =  1.6  clipped (low)    -> no gradient
# sum = -2.4 - 1 - 2 + 2.2 + 1.6 = -1.6 over N = 5 response tokens
GRPO_RATIOS = [[1.5, 0.5, 1.0], [1.1, 0.7, 1.0]]


# Shared by the Clip-Cov / KL-Cov tests: one group, 2 x 3 response tokens plus a padded column
# (logp 50 there: it must not enter the means). rewards [2, -2] -> A = +-2, token-mean of A = 0.
# logp over the 6 response tokens: mean (-0.5 - 1.5 - 3 - 3 - 1 - 3) / 6 = -2
#   centred logp [[1.5, 0.5, -1], [-1, 1, -1]]
#   cov_t = A_t * centred = [[3, 1, -2], [2, -2, 2]]
COV_LOGP = [[-0.5, -1.5, -3.0, 50.0], [-3.0, -1.0, -3.0, 50.0]]
COV_EXPECTED = [[3.0, 1.0, -2.0, 0.0], [2.0, -2.0, 2.0, 0.0]]


def cov_batch(ratios: Sequence[Sequence[float]]) -> tuple[TokenBatch, Tensor]:
    """(batch, logp leaf) with logp exactly COV_LOGP and old_logp = logp - log(ratio)."""
    logp = t(COV_LOGP)
    old = logp - torch.log(t(ratios))
    tb = batch(
        entropy=[[1.0, 0.5, 0.2, 0.0], [0.3, 0.9, 0.1, 0.0]],
        rewards=[2.0, -2.0],
        group_ids=[0, 0],
        response_mask=[[1, 1, 1, 0], [1, 1, 1, 0]],
        old_logp=old.tolist(),
    )
    return tb, logp.clone().requires_grad_(True)
