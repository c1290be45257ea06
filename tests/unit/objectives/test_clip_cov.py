"""Clip-Cov: k = max(floor(fraction N), 1) random tokens among lb < cov < ub (not already clipped)
lose their gradient (and their loss term, as in the reference code's `corr`)."""

import pytest
import torch

from quadrants.objectives.registry import resolve_objective
from quadrants.ops.covariance import token_covariance

from .helpers import COV_EXPECTED, close, cov_batch, grad_of, run

# ratio 1 except (1,2): A = -2, r = 0.5 < 0.8 -> clipped (max(1.0, 1.6) = 1.6, no gradient).
# cov [[3, 1, -2], [2, -2, 2]] with lb 1, ub 5: (0,0) = 3 and (1,0) = 2 are candidates;
# (0,1) = 1 is not (strict lb), (1,2) = 2 is already clipped; N = 6.
RATIOS = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.5, 1.0]]
CANDIDATES = {(0, 0), (1, 0)}


def test_covariance_by_hand():
    tb, logp = cov_batch(RATIOS)
    close(
        token_covariance(tb.advantages[:, None].expand(2, 4).float(), logp, tb.response_mask),
        COV_EXPECTED,
    )


def test_fraction_above_candidates_detaches_all_candidates():
    # fraction 0.5 -> k = 3 > 2 candidates -> both detached.
    # per-token: (0,0) 0, (0,1) -2, (0,2) -2 | (1,0) 0, (1,1) +2, (1,2) 1.6 -> -0.4 / 6
    tb, logp = cov_batch(RATIOS)
    torch.manual_seed(0)
    loss, metrics = run("clip_cov", tb, logp, fraction=0.5)
    close(loss, -0.4 / 6)
    close(metrics["selected_frac"], 2 / 6)
    close(metrics["candidate_frac"], 2 / 6)
    close(metrics["clip_frac"], 1 / 6)
    # gradient -A r / 6 on the three free tokens; 0 on the detached pair, the clipped token, padding
    close(grad_of(loss, logp), [[0.0, -2 / 6, -2 / 6, 0.0], [0.0, 2 / 6, 0.0, 0.0]])


@pytest.mark.parametrize("fraction", [0.2, 2e-4])  # floor(1.2) = 1 and max(floor(0.0012), 1) = 1
def test_exactly_one_random_candidate_is_detached(fraction):
    seen = set()
    for seed in range(16):
        tb, logp = cov_batch(RATIOS)
        torch.manual_seed(seed)
        loss, metrics = run("clip_cov", tb, logp, fraction=fraction)
        close(metrics["selected_frac"], 1 / 6)
        g = grad_of(loss, logp)
        free = {(0, 1), (0, 2), (1, 1)}  # never detached: not candidates, but unclipped
        for i, j in free:
            assert g[i, j] != 0
        zero_candidates = {c for c in CANDIDATES if g[c] == 0}
        assert len(zero_candidates) == 1
        (chosen,) = zero_candidates
        seen.add(chosen)
        # (0,0) detached: -2 - 2 + 2 + 2 + 1.6 = 1.6;  (1,0) detached: -2 - 2 - 2 + 2 + 1.6 = -2.4
        close(loss, 1.6 / 6 if chosen == (0, 0) else -2.4 / 6)
        # same seed -> same draw
        tb2, logp2 = cov_batch(RATIOS)
        torch.manual_seed(seed)
        close(run("clip_cov", tb2, logp2, fraction=fraction)[0], loss)
    assert seen == CANDIDATES  # the draw is random over the candidates, not a fixed top-k


def test_no_candidates_is_the_clipped_surrogate():
    # lb 10 > every cov: nothing detached; loss = -2 -2 -2 + 2 + 2 + 1.6 = -0.4 -> / 6, as GRPO
    tb, logp = cov_batch(RATIOS)
    loss, metrics = run("clip_cov", tb, logp, fraction=0.5, cov_lb=10.0, cov_ub=20.0)
    close(metrics["selected_frac"], 0.0)
    close(loss, -0.4 / 6)
    grpo_loss, _ = run("grpo", *cov_batch(RATIOS))
    close(loss, grpo_loss)


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"fraction": 2.0}, r"fraction=2.0 is out of range; allowed: \[0, 1\]"),
        ({"fraction": -0.1}, r"fraction=-0.1 is out of range"),
        ({"cov_lb": 5.0, "cov_ub": 1.0}, r"cov_lb=5.0 must be < cov_ub=1.0"),
        ({"clip_high": -0.1}, r"clip_high=-0.1 is out of range"),
    ],
)
def test_clip_cov_validation(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective("clip_cov", params)
