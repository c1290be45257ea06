"""Per-token KL estimators between the current policy and a frozen reference (Schulman's k1/k2/k3).

With δ = ref_logp - logp (log π_ref/π on the sampled token):
- k1: -δ                      (unbiased, can be negative)
- k2: δ² / 2                  (biased, low variance)
- k3: exp(δ) - 1 - δ          (unbiased, non-negative; GRPO's choice, "low_var_kl" in verl)

k3 is computed as verl's low_var_kl: δ clamped to ±20 before the exponential, and the estimate
itself clamped to at most 10 (verl clamps it to [-10, 10]; k3 is never negative). So one token whose
log-prob fell far below the reference's adds at most 10 to the KL and, past that, no gradient:
unclamped, δ = 20 would add e^20 ≈ 4.9e8.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[str, ...] = get_args(KLEstimator)
K3_MAX = 10.0  # verl's low_var_kl bound


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token KL(π || π_ref) estimate. [B, T] -> [B, T] (differentiable in logp)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"kl estimator {estimator!r} is unknown; choose one of {list(KL_ESTIMATORS)}"
        )
    delta = ref_logp - logp
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta**2
    delta = delta.clamp(-20.0, 20.0)
    return (torch.exp(delta) - 1.0 - delta).clamp(max=K3_MAX)
