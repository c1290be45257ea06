"""Per-step telemetry: per-quadrant statistics of a TokenBatch, reduced to floats for the tracker.

This is where tensors become Python floats (`.item()`), once per step, after the update.
"""

from __future__ import annotations

import torch
from torch import Tensor

from quadrants.objectives.batch import TokenBatch
from quadrants.ops.quadrants import Quadrant
from quadrants.ops.subsample import ratio_mean_se
from quadrants.tracking import keys


def quadrant_telemetry(
    batch: TokenBatch, dlogp_abs: Tensor | None = None, dlogp_rows: Tensor | None = None
) -> dict[str, float]:
    """token_frac, entropy_mean, adv_mass (Σ of the sequence advantage over the quadrant's tokens)
    and, when the post-update log-probs were measured, mean |Δ log-prob| for each quadrant with its
    standard error over the measured rows (ops.subsample: 0 when every row was measured).

    Args:
        batch: the step's full rollout batch.
        dlogp_abs: [n, T] float |logp_after − old_logp| of rows `dlogp_rows`, or None.
        dlogp_rows: [n] long, the batch rows measured; None = every row (n = B).

    Returns:
        flat metric dict; an empty quadrant reports zeros.
    """
    total = batch.response_mask.sum().clamp_min(1)
    adv = batch.advantages.float()[:, None].expand_as(batch.entropy)  # [B, T]
    out: dict[str, float] = {}
    rows = (
        torch.arange(batch.batch_size, device=batch.response_mask.device)
        if dlogp_rows is None
        else dlogp_rows
    )
    for q in Quadrant:
        mask = batch.quadrants[q]
        count = mask.sum()
        denom = count.clamp_min(1)
        out[keys.quadrant(q.value, "token_frac")] = (count / total).item()
        out[keys.quadrant(q.value, "entropy_mean")] = ((batch.entropy * mask).sum() / denom).item()
        out[keys.quadrant(q.value, "adv_mass")] = (adv * mask).sum().item()
        if dlogp_abs is not None:
            mean, se = ratio_mean_se(dlogp_abs, mask[rows], batch.batch_size)
            out[keys.quadrant(q.value, "dlogp_abs")] = mean.item()
            out[keys.quadrant(q.value, "dlogp_abs_se")] = se.item()
    return out


def mean_metrics(per_update: list[dict[str, Tensor]]) -> dict[str, float]:
    """Average each objective metric over the mini-batch updates of a step."""
    if not per_update:
        return {}
    names = sorted({name for m in per_update for name in m})
    return {
        name: torch.stack([m[name].float() for m in per_update if name in m]).mean().item()
        for name in names
    }
