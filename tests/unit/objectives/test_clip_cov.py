"""Clip-Cov: k = max(floor(fraction N), 1) random tokens among lb < cov < ub (not already clipped)
lose their gradient (and their loss term, as in the reference code's `corr`)."""

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import resolve_objective
from quadrants.ops.covariance import random_subset_mask, token_covariance

from .helpers import COV_EXPECTED, close, cov_batch, grad_of, run

# ratio 1 except (1,2): A = -2, r = 0.5 < 0.8 -> clipped (max(1.0, 1.6) = 1.6, no gradient).
# cov [[3, 1, -2], [2, -2, 2]] with lb 1, ub 5: (0,0) = 3 and (1,0) = 2 are candidates;
# (0,1) = 1 is not (strict lb), (1,2) = 2 is already clipped; N = 6.
RATIOS = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.5, 1.0]]
CANDIDATES = {(0, 0), (1, 0)}


def draws(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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
    loss, metrics = run("clip_cov", tb, logp, fraction=0.5, generator=draws(0))
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
        loss, metrics = run("clip_cov", tb, logp, fraction=fraction, generator=draws(seed))
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
        close(run("clip_cov", tb2, logp2, fraction=fraction, generator=draws(seed))[0], loss)
    assert seen == CANDIDATES  # the draw is random over the candidates, not a fixed top-k


def test_no_candidates_is_the_clipped_surrogate():
    # lb 10 > every cov: nothing detached; loss = -2 -2 -2 + 2 + 2 + 1.6 = -0.4 -> / 6, as GRPO
    tb, logp = cov_batch(RATIOS)
    loss, metrics = run(
        "clip_cov", tb, logp, fraction=0.5, cov_lb=10.0, cov_ub=20.0, generator=draws(0)
    )
    close(metrics["selected_frac"], 0.0)
    close(loss, -0.4 / 6)
    grpo_loss, _ = run("grpo", *cov_batch(RATIOS))
    close(loss, grpo_loss)


def test_the_draw_is_the_generators_and_leaves_the_default_ones_alone():
    """The detached token is a function of the generator's state alone. Flattened, the
    candidates (0,0) and (1,0) sit at positions 0 and 4 of the [2, 4] batch; k = 1 (fraction 0.2:
    floor(0.2 x 6) = 1), so the detached one is candidate randperm(2)[0] of [(0,0), (1,0)], drawn
    from the generator as handed in. The loss then is 1.6 / 6 or -2.4 / 6 (by hand in
    test_exactly_one_random_candidate_is_detached). torch's default generator is not drawn from:
    its state after the loss is its state before, whatever it was seeded with."""
    spec, params = resolve_objective("clip_cov", {"fraction": 0.2})
    for seed in range(8):
        first = int(torch.randperm(2, generator=draws(seed))[0])  # the draw's rule, by hand
        expected = 1.6 / 6 if first == 0 else -2.4 / 6  # (0,0) detached, else (1,0)
        for global_seed in (0, 1):
            torch.manual_seed(global_seed)
            state = torch.get_rng_state()
            tb, logp = cov_batch(RATIOS)
            loss, _ = compute_loss(
                spec, params, tb, PolicyOutput(logp), LossSettings(), generator=draws(seed)
            )
            close(loss, expected)
            assert torch.equal(torch.get_rng_state(), state)


def test_the_same_generator_state_draws_the_same_subset():
    """random_subset_mask on 12 candidates of 20 tokens, k = 5: two generators in one state draw
    one mask and end in one state, another than their start; the mask holds k candidates and
    nothing else; k above the candidates takes them all."""
    candidates = torch.zeros(4, 5, dtype=torch.bool)
    candidates.view(-1)[torch.tensor([0, 1, 3, 4, 6, 8, 9, 11, 13, 15, 17, 19])] = True
    one, two = draws(3), draws(3)
    mask = random_subset_mask(candidates, 5, one)
    assert torch.equal(random_subset_mask(candidates, 5, two), mask)
    assert int(mask.sum()) == 5 and not bool((mask & ~candidates).any())
    assert torch.equal(one.get_state(), two.get_state())
    assert not torch.equal(one.get_state(), draws(3).get_state())  # it drew: the state moved on
    assert torch.equal(random_subset_mask(candidates, 20, draws(0)), candidates)


def test_clip_cov_refuses_to_draw_without_a_generator():
    tb, logp = cov_batch(RATIOS)
    spec, params = resolve_objective("clip_cov", {"fraction": 0.5})
    with pytest.raises(ValueError, match=r"clip_cov draws its subset from the generator"):
        compute_loss(spec, params, tb, PolicyOutput(logp), LossSettings())


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
