"""Metrics shared by the surrogate-based objectives: they read the current policy (the ratio), so
they are PolicyMetrics (objectives/batch.py), reduced by the loss layer over the rows that carry
gradient."""

from __future__ import annotations

from torch import Tensor

from quadrants.objectives.batch import PolicyMetric, token_mean, token_share
from quadrants.ops.surrogate import SurrogateTerms


def surrogate_metrics(
    terms: SurrogateTerms, response_mask: Tensor, *, dual_clip: bool = False
) -> dict[str, PolicyMetric]:
    """Clip fractions and mean ratio over the `response_mask` tokens.

    `dual_clip_frac` (verl's `pg_clipfrac_lower`: negative-advantage tokens whose loss the dual clip
    capped at -A c) is reported only when the dual clip is on (`clip_ratio_c` set).
    """
    metrics = {
        "clip_frac": token_share(terms.clipped_mask, response_mask),
        "clip_frac_low": token_share(terms.clipped_low_mask, response_mask),
        "clip_frac_high": token_share(terms.clipped_high_mask, response_mask),
        "ratio_mean": token_mean(terms.ratio, response_mask),
    }
    if dual_clip:
        metrics["dual_clip_frac"] = token_share(terms.dual_clipped_mask, response_mask)
    return metrics
