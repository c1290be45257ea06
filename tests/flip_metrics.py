"""How two runs that differ only in float32 summation order compare the flip diagnostics
(train/telemetry.py `flip_telemetry`) and the within-step entropy correlations, shared by the
equivalence tests.

- `flip_frac*` is a sign count: a token the update barely moved (|Δ log-prob| within the runs'
  ~1e-5 of 0) can count as flipped in one run only, which moves the fraction by 1/n of the
  quadrant's few measured tokens. Only its range is compared; its arithmetic is checked by hand in
  tests/unit/train/test_telemetry.py.
- `dlogp_signed*` is a mean signed Δ log-prob (up to ~1.2 nats on the tiny policy): each run's
  update starts from log-probs ~1e-5 apart, so Δ carries that difference relative to its size
  (observed 1.6e-5 on 1.17): rel 1e-4 on top of the caller's absolute tolerance.
- `token_r` (train/quadrant/<Q>/token_r, train/entropy_token_r*) is a within-step correlation
  between a quadrant's token entropies and their applied weights: inputs ~1e-5 apart, divided by
  the spread of a few tokens, move it by a few 1e-5 (observed 2.0e-5, GRPO's NLR), and under
  Clip-Cov or KL-Cov a token whose selection flips between the runs changes its weight outright
  (observed 1.6e-4, Clip-Cov's NLR; 1.005e-3, ARCA's NLR in the default stage's order on an AMD
  EPYC without AVX-512, where the same test passes alone). It lies in [-1, 1]: abs 2e-3.
"""

from __future__ import annotations

import pytest


def flip_metric_agrees(key: str, got: float, want: float, abs_tol: float) -> bool | None:
    """Whether a flip diagnostic agrees; None when `key` is not one (compare it as usual)."""
    if "/flip_frac" in key:
        return 0.0 <= got <= 1.0 and 0.0 <= want <= 1.0
    if "/dlogp_signed" in key:
        return got == pytest.approx(want, rel=1e-4, abs=abs_tol)
    if key.endswith("/token_r") or "/entropy_token_r" in key:
        return got == pytest.approx(want, abs=max(abs_tol, 2e-3))
    return None
