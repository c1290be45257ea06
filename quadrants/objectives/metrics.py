"""Detached metric tensors shared by the surrogate-based objectives."""

from __future__ import annotations

from torch import Tensor

from quadrants.objectives.batch import fraction
from quadrants.ops.aggregation import masked_mean
from quadrants.ops.surrogate import SurrogateTerms


def surrogate_metrics(
    terms: SurrogateTerms, response_mask: Tensor, *, dual_clip: bool = False
) -> dict[str, Tensor]:
    """Clip fractions and mean ratio over response tokens (detached scalars).

    `dual_clip_frac` (verl's `pg_clipfrac_lower`: negative-advantage tokens whose loss the dual clip
    capped at -A c) is reported only when the dual clip is on (`clip_ratio_c` set).
    """
    metrics = {
        "clip_frac": fraction(terms.clipped_mask, response_mask),
        "clip_frac_low": fraction(terms.clipped_low_mask, response_mask),
        "clip_frac_high": fraction(terms.clipped_high_mask, response_mask),
        "ratio_mean": masked_mean(terms.ratio.detach(), response_mask),
    }
    if dual_clip:
        metrics["dual_clip_frac"] = fraction(terms.dual_clipped_mask, response_mask)
    return metrics
