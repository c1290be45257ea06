"""Hindsight-credit estimators: hand-computed cases, invariants, and a synthetic world with known p(r|s,v)."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.probe.credit import (
    bootstrap_interval,
    cluster_bootstrap_mean,
    cmi,
    correlation_interval,
    entropy,
    hindsight_advantage,
    jackknife_cmi,
    jackknife_outcome_entropy,
    outcome_counts,
    plugin_cmi,
    plugin_outcome_entropy,
    pointwise_credit,
    rest_cut_bound,
    sample_rest_tokens,
    sampled_branch,
    smoothed_outcome_probs,
    top_branches,
)

LN2 = math.log(2)


def binary(p: list[float]) -> torch.Tensor:
    """[M] success probabilities -> [M, 2] outcome distributions (class 0 = wrong, 1 = right)."""
    q = torch.tensor(p, dtype=torch.float64)
    return torch.stack([1 - q, q], -1)


def h(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -p * math.log(p) - (1 - p) * math.log(1 - p)


def test_cmi_by_hand():
    # π = [0.5, 0.5], p = [1, 0]: the token decides the outcome -> I = h(0.5) - 0 = ln 2
    assert cmi(
        torch.tensor([0.5, 0.5], dtype=torch.float64), binary([1.0, 0.0])
    ).item() == pytest.approx(LN2, abs=1e-12)
    # π = [0.75, 0.25], p = [0.5, 0.5]: the token says nothing -> 0
    assert cmi(
        torch.tensor([0.75, 0.25], dtype=torch.float64), binary([0.5, 0.5])
    ).item() == pytest.approx(0.0, abs=1e-12)
    # π = [0.5, 0.3, 0.2], p = [0.9, 0.4, 0.1]: mixture 0.45 + 0.12 + 0.02 = 0.59
    #   I = h(0.59) - (0.5 h(0.9) + 0.3 h(0.4) + 0.2 h(0.1))
    expected = h(0.59) - (0.5 * h(0.9) + 0.3 * h(0.4) + 0.2 * h(0.1))
    got = cmi(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), binary([0.9, 0.4, 0.1])).item()
    assert got == pytest.approx(expected, abs=1e-12)


def test_cmi_general_discrete_form_matches_mutual_information():
    # three outcome classes; I(v; r) from the joint table sum_{v,r} P(v,r) log P(v,r) / (P(v) P(r))
    torch.manual_seed(0)
    mass = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    probs = torch.softmax(torch.randn(3, 3, dtype=torch.float64), -1)
    joint = mass[:, None] * probs
    marginal = joint.sum(0)
    reference = (joint * (joint / (mass[:, None] * marginal[None, :])).log()).sum()
    torch.testing.assert_close(cmi(mass, probs), reference, rtol=0, atol=1e-12)


def test_cmi_is_bounded_by_branch_entropy_and_outcome_entropy():
    # invariant: 0 <= I <= min(H(π), H(r)) on random tables
    g = torch.Generator().manual_seed(1)
    mass = torch.softmax(torch.randn(200, 4, generator=g, dtype=torch.float64) * 2, -1)
    probs = torch.softmax(torch.randn(200, 4, 2, generator=g, dtype=torch.float64) * 3, -1)
    info = cmi(mass, probs)
    outcome = entropy((mass[..., None] * probs).sum(-2))
    assert (info >= -1e-12).all()
    assert (info <= torch.minimum(entropy(mass), outcome) + 1e-12).all()


def test_plugin_and_jackknife_by_hand():
    # π = [0.5, 0.5]; branch 0 saw [1, 0], branch 1 saw [0, 0] (K = 2 each)
    # plug-in: p̂ = [0.5, 0]; mixture 0.25; h(0.25) = 0.5623351, within 0.5 * ln 2 = 0.3465736 -> 0.2157616
    # leave-one-out in branch 0: drop the 1 -> p̂0 = 0 -> 0; drop the 0 -> p̂0 = 1 -> mixture 0.5, within 0 -> ln 2
    #   mean 0.3465736; branch 1: dropping a 0 changes nothing -> 0.2157616
    # jackknife: 0.2157616 - (2 - 1)(0.3465736 - 0.2157616) - 0 = 0.0849495
    mass = torch.tensor([0.5, 0.5], dtype=torch.float64)
    counts = torch.tensor([[1.0, 1.0], [2.0, 0.0]], dtype=torch.float64)  # [M, C]: (wrong, right)
    assert plugin_cmi(mass, counts).item() == pytest.approx(h(0.25) - 0.5 * LN2, abs=1e-12)
    assert jackknife_cmi(mass, counts).item() == pytest.approx(
        2 * (h(0.25) - 0.5 * LN2) - 0.5 * LN2, abs=1e-12
    )


def test_jackknife_matches_a_loop_over_continuations():
    # the closed form (C distinct leave-one-outs per branch) against deleting each continuation in turn
    g = torch.Generator().manual_seed(2)
    mass = torch.softmax(torch.randn(3, dtype=torch.float64, generator=g), -1)
    outcomes = torch.randint(3, (3, 5), generator=g)  # [M, K], 3 classes
    full = plugin_cmi(mass, outcome_counts(outcomes, 3).double())
    correction = 0.0
    for v in range(3):
        loo = []
        for k in range(5):
            kept = outcomes.clone()
            kept[v, k] = -1
            loo.append(plugin_cmi(mass, outcome_counts(kept, 3).double()))
        correction += 4 * (torch.stack(loo).mean() - full)
    torch.testing.assert_close(
        jackknife_cmi(mass, outcome_counts(outcomes, 3).double()),
        full - correction,
        rtol=0,
        atol=1e-12,
    )


def test_outcome_entropy_estimators():
    # branch counts (wrong, right) [[1, 3], [3, 1]], π = [0.5, 0.5] -> mixture 0.5 -> plug-in ln 2
    mass = torch.tensor([0.5, 0.5], dtype=torch.float64)
    counts = torch.tensor([[1.0, 3.0], [3.0, 1.0]], dtype=torch.float64)
    assert plugin_outcome_entropy(mass, counts).item() == pytest.approx(LN2, abs=1e-12)
    # at the maximum the leave-one-outs can only lower it, so the jackknife raises it
    assert jackknife_outcome_entropy(mass, counts).item() > LN2


def test_outcome_counts_skips_missing():
    outcomes = torch.tensor([[1, 1, 0], [-1, -1, -1]])
    torch.testing.assert_close(outcome_counts(outcomes, 2), torch.tensor([[1.0, 2.0], [0.0, 0.0]]))


def simulate(
    mass: list[float], success: list[float], k: int, repetitions: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcomes [R, M, K] of K continuations per branch drawn from known p(r = 1 | v), and [R, M] masses."""
    g = torch.Generator().manual_seed(seed)
    p = torch.tensor(success, dtype=torch.float64)
    outcomes = (
        torch.rand(repetitions, len(success), k, generator=g, dtype=torch.float64) < p[:, None]
    ).long()
    return torch.tensor(mass, dtype=torch.float64).expand(repetitions, -1), outcomes


MASS, SUCCESS = [0.5, 0.3, 0.2], [0.9, 0.4, 0.1]


def test_jackknife_converges_to_the_analytic_cmi_and_removes_the_plugin_bias():
    truth = cmi(torch.tensor(MASS, dtype=torch.float64), binary(SUCCESS)).item()  # 0.2474
    errors = {}
    for k in (8, 64):
        mass, outcomes = simulate(MASS, SUCCESS, k, repetitions=2000, seed=k)
        counts = outcome_counts(outcomes, 2).double()
        plug, jack = plugin_cmi(mass, counts), jackknife_cmi(mass, counts)
        stderr = jack.std().item() / math.sqrt(2000)
        errors[k] = (plug.mean().item() - truth, jack.mean().item() - truth, stderr)
    # the plug-in is biased upward by O(1/K): +0.06 at K = 8, +0.008 at K = 64
    assert errors[8][0] > 0.04 and errors[64][0] > 0.004
    # the jackknife's mean is within 4 standard errors of the truth at both K
    for k, (_, jack_error, stderr) in errors.items():
        assert abs(jack_error) < 4 * stderr, (k, jack_error, stderr)
    # and its single estimates concentrate: mean absolute error shrinks with K
    mass, outcomes = simulate(MASS, SUCCESS, 512, repetitions=200, seed=3)
    jack = jackknife_cmi(mass, outcome_counts(outcomes, 2).double())
    assert (jack - truth).abs().mean().item() < 0.02


@pytest.mark.slow
def test_bootstrap_interval_covers_the_analytic_cmi_at_about_the_nominal_rate():
    # 300 repetitions of K = 32 continuations per branch; nominal 0.9, measured 0.84 with these seeds
    # (0.87 with others; below K ~ 16 the bootstrap under-covers, see bootstrap_interval).
    # Binomial sd of a 0.9 rate over 300 repetitions: 0.017, so [0.82, 0.96] is about -5 / +3.5 sd.
    truth = cmi(torch.tensor(MASS, dtype=torch.float64), binary(SUCCESS)).item()
    mass, outcomes = simulate(MASS, SUCCESS, 32, repetitions=300, seed=11)
    low, high = bootstrap_interval(
        mass,
        outcomes,
        num_classes=2,
        resamples=200,
        confidence=0.9,
        pseudocount=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    coverage = ((low <= truth) & (truth <= high)).double().mean().item()
    assert 0.82 <= coverage <= 0.96, coverage
    # a 0.5 interval is narrower and covers less
    low50, high50 = bootstrap_interval(
        mass,
        outcomes,
        num_classes=2,
        resamples=200,
        confidence=0.5,
        pseudocount=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert ((high50 - low50) < (high - low)).all()
    assert ((low50 <= truth) & (truth <= high50)).double().mean().item() < coverage


def test_bootstrap_interval_with_a_missing_branch_is_finite():
    # a branch without continuations (mass 0, all -1) neither breaks the resampling nor moves the estimate
    mass = torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64)
    outcomes = torch.tensor([[[1, 1, 0, 1], [0, 0, 1, 0], [-1, -1, -1, -1]]])
    low, high = bootstrap_interval(
        mass,
        outcomes,
        num_classes=2,
        resamples=50,
        confidence=0.9,
        pseudocount=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.isfinite(low).all() and torch.isfinite(high).all() and (low <= high).all()


def test_pointwise_credit_by_hand():
    # π = [0.5, 0.5]; counts (wrong, right): branch 0 [1, 3], branch 1 [3, 1]; α = 0.5
    #   p̂(right|0) = 3.5 / 5 = 0.7, p̂(right|1) = 1.5 / 5 = 0.3, p̂(right) = 0.5
    #   token 0, right: log(0.7 / 0.5) = 0.3364722;  token 1, right: log(0.3 / 0.5) = -0.5108256
    #   token 0, wrong: log(0.3 / 0.5) = -0.5108256
    mass = torch.tensor([[0.5, 0.5]] * 3, dtype=torch.float64)
    counts = torch.tensor([[[1.0, 3.0], [3.0, 1.0]]] * 3, dtype=torch.float64)
    credit = pointwise_credit(
        mass, counts, torch.tensor([0, 1, 0]), torch.tensor([1, 1, 0]), pseudocount=0.5
    )
    expected = torch.tensor([math.log(1.4), math.log(0.6), math.log(0.6)], dtype=torch.float64)
    torch.testing.assert_close(credit, expected, rtol=0, atol=1e-12)


def test_hindsight_advantage_by_hand_and_its_sign_against_pointwise_credit():
    # the pointwise-credit case above: p̂(right|0) = 0.7, p̂(right|1) = 0.3, p̂(right) = 0.5, rewards (0, 1)
    #   token 0: 0.7 - 0.5 = +0.2; token 1: 0.3 - 0.5 = -0.2, whatever the realised outcome
    mass = torch.tensor([[0.5, 0.5]] * 2, dtype=torch.float64)
    counts = torch.tensor([[[1.0, 3.0], [3.0, 1.0]]] * 2, dtype=torch.float64)
    values = torch.tensor([0.0, 1.0], dtype=torch.float64)
    gap = hindsight_advantage(mass, counts, torch.tensor([0, 1]), values, pseudocount=0.5)
    torch.testing.assert_close(
        gap, torch.tensor([0.2, -0.2], dtype=torch.float64), rtol=0, atol=1e-12
    )
    # the harmful token 1 in a wrong response: c_t = log(0.7 / 0.5) > 0 although its advantage is < 0
    credit = pointwise_credit(
        mass[:1], counts[:1], torch.tensor([1]), torch.tensor([0]), pseudocount=0.5
    )
    assert credit.item() == pytest.approx(math.log(1.4), abs=1e-12)


def test_pointwise_credit_stays_finite_on_zero_counts():
    # π = [0.9, 0.1]; branch 0 always right [0, 4], branch 1 always wrong [4, 0]; α = 0.5
    #   p̂(wrong|0) = 0.5 / 5 = 0.1, p̂(wrong|1) = 0.9; p̂(wrong) = 0.9*0.1 + 0.1*0.9 = 0.18
    #   token 0 under a wrong outcome: log(0.1 / 0.18) = -0.5877867 (finite; unsmoothed it is -inf)
    mass = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    counts = torch.tensor([[[0.0, 4.0], [4.0, 0.0]]], dtype=torch.float64)
    credit = pointwise_credit(mass, counts, torch.tensor([0]), torch.tensor([0]), pseudocount=0.5)
    assert credit.item() == pytest.approx(math.log(0.1 / 0.18), abs=1e-12)


def test_pointwise_credit_averages_to_the_smoothed_cmi():
    # invariant: E_{v~π, r~p̂(.|v)} c = I at the smoothed distributions
    g = torch.Generator().manual_seed(4)
    mass = torch.softmax(torch.randn(1, 4, generator=g, dtype=torch.float64), -1)
    counts = torch.randint(0, 6, (1, 4, 3), generator=g).double()
    probs = smoothed_outcome_probs(counts, pseudocount=0.5)
    expected = 0.0
    for v in range(4):
        for r in range(3):
            c = pointwise_credit(
                mass, counts, torch.tensor([v]), torch.tensor([r]), pseudocount=0.5
            )
            expected += mass[0, v] * probs[0, v, r] * c
    torch.testing.assert_close(expected[0], cmi(mass, probs)[0], rtol=0, atol=1e-12)


def test_top_branches_cover_and_rest_mass():
    # probs [0.5, 0.3, 0.15, 0.05]: coverage 0.75 -> top 2 (0.5 < 0.75, 0.8 >= 0.75), rest 0.2
    # coverage 0.95 with at most 2 branches -> still top 2 (the cap binds), rest 0.2
    # coverage 0.96 with 4 -> top 3 (0.95 < 0.96 before the 4th? 0.95 < 0.96 -> 4 tokens), rest 0
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    b = top_branches(probs, coverage=0.75, max_branches=3)
    assert b.token_ids.tolist() == [[1, 3, -1]]
    torch.testing.assert_close(b.mass, torch.tensor([[0.5, 0.3, 0.0, 0.2]]))
    b = top_branches(probs, coverage=0.95, max_branches=2)
    assert b.token_ids.tolist() == [[1, 3]]
    torch.testing.assert_close(b.mass, torch.tensor([[0.5, 0.3, 0.2]]))
    b = top_branches(probs, coverage=0.96, max_branches=4)
    assert b.token_ids.tolist() == [[1, 3, 0, 2]]
    torch.testing.assert_close(
        b.mass, torch.tensor([[0.5, 0.3, 0.15, 0.05, 0.0]]), rtol=0, atol=1e-7
    )
    # a (near-)deterministic position: one branch
    b = top_branches(torch.tensor([[1.0, 0.0, 0.0]]), coverage=0.9, max_branches=2)
    assert b.token_ids.tolist() == [[0, -1]] and b.mass[0, -1].item() == 0.0


def test_rest_tokens_avoid_the_top_branches_and_sampled_branch():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [1.0, 0.0, 0.0, 0.0]])
    b = top_branches(probs, coverage=0.75, max_branches=3)
    rest = sample_rest_tokens(probs, b, 400, generator=torch.Generator().manual_seed(0))
    assert set(rest[0].tolist()) == {2, 3}  # only non-top tokens, in proportion 0.15 : 0.05
    assert 0.65 < (rest[0] == 2).double().mean().item() < 0.85
    assert (rest[1] == -1).all()  # no rest mass
    # sampled token 1 is branch 1; token 2 falls in the rest column (index 3)
    assert sampled_branch(torch.tensor([0, 2]), b).tolist() == [0, 3]
    assert sampled_branch(torch.tensor([1, 0]), b).tolist() == [1, 0]


def test_correlation_interval():
    # perfectly linear -> r = 1; independent noise -> r near 0 with an interval containing 0
    x = torch.arange(10.0)
    r, low, high = correlation_interval(x, 2 * x + 1, confidence=0.95)
    assert r == pytest.approx(1.0) and high == pytest.approx(1.0, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    r, low, high = correlation_interval(
        torch.randn(400, generator=g), torch.randn(400, generator=g), confidence=0.95
    )
    # Fisher z: half width 1.96 / sqrt(397) = 0.0984 around atanh(r)
    assert low < 0 < high and high - low == pytest.approx(2 * 0.0984, abs=0.01)
    assert all(math.isnan(v) for v in correlation_interval(x, torch.ones(10), confidence=0.9))


def test_rest_mass_is_exactly_the_non_top_tokens_sum():
    # a top-p truncated π: every token with mass is a top branch -> the rest is exactly 0, not the
    # float rounding of 1 - (0.6 + 0.3 + 0.1); with one token left out, it is that token's mass
    probs = torch.softmax(torch.tensor([[2.0, 1.3, 0.2, -float("inf")]]), -1)
    b = top_branches(probs, coverage=1.0, max_branches=3)
    assert b.token_ids.tolist() == [[0, 1, 2]] and b.mass[0, -1].item() == 0.0
    b = top_branches(probs, coverage=1.0, max_branches=2)
    assert b.mass[0, -1].item() == probs[0, 2].item()


def test_rest_cut_bound_by_hand():
    # π_rest = 0.001, C = 2: h(0.001) = -0.001 ln 0.001 - 0.999 ln 0.999 = 0.0069078 + 0.0009995
    # = 0.0079073; + 0.001 ln 2 = 0.0006931 -> 0.0086004 (the mass * ln C alone: 0.0006931, 12x less)
    # π_rest = 0.5, C = 3: h(0.5) = ln 2 = 0.6931472; + 0.5 ln 3 = 0.5493061 -> 1.2424533
    bound = rest_cut_bound(torch.tensor([0.001, 0.5, 0.0], dtype=torch.float64), 2)
    torch.testing.assert_close(
        bound[:1], torch.tensor([0.0086004], dtype=torch.float64), atol=1e-7, rtol=0
    )
    assert bound[2].item() == 0.0
    three = rest_cut_bound(torch.tensor([0.5], dtype=torch.float64), 3)
    assert three.item() == pytest.approx(1.2424533, abs=1e-7)
    # it bounds the world: top token p = 0.999 always right (p 0.9), rest 0.001 always wrong
    # (p 0): I = h(0.8991) - 0.999 h(0.9) = 0.0023 nats, all of it hidden when the rest is cut
    truth = cmi(torch.tensor([0.999, 0.001], dtype=torch.float64), binary([0.9, 0.0])).item()
    assert truth == pytest.approx(h(0.999 * 0.9) - 0.999 * h(0.9), abs=1e-12)
    assert 0.001 * LN2 < truth <= bound[0].item()


def test_weighted_correlation_equals_duplicating_the_weighted_points():
    # weights [2, 1, 1, 1] = the first point twice: x [1, 1, 2, 3, 4], y [1, 1, 3, 2, 4], means 2.2;
    # dx = dy on the first two (-1.2), then dx [-0.2, 0.8, 1.8], dy [0.8, -0.2, 1.8]
    # sxy = 1.44 + 1.44 - 0.16 - 0.16 + 3.24 = 5.8; sxx = syy = 1.44 + 1.44 + 0.04 + 0.64 + 3.24 = 6.8
    # r = 5.8 / 6.8 = 0.8529412; n_eff = 5^2 / (4 + 1 + 1 + 1) = 3.571 < 4 -> no interval
    x, y = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 3.0, 2.0, 4.0])
    r, low, high = correlation_interval(x, y, confidence=0.9, weights=torch.tensor([2.0, 1, 1, 1]))
    assert math.isnan(r)  # n_eff 3.57 < 4
    x2 = torch.cat([x, x + 10])  # two copies shifted: weights [2, 1, 1, 1] twice, n_eff 7.14
    y2 = torch.cat([y, y + 10])
    w2 = torch.tensor([2.0, 1, 1, 1, 2, 1, 1, 1])
    dup_x = torch.cat([x2[:1], x2[:5], x2[4:]])  # the weight-2 points twice
    dup_y = torch.cat([y2[:1], y2[:5], y2[4:]])
    r, low, high = correlation_interval(x2, y2, confidence=0.9, weights=w2)
    r_dup, _, _ = correlation_interval(dup_x, dup_y, confidence=0.9)
    assert r == pytest.approx(r_dup, abs=1e-12)
    # Fisher z with n_eff = 10^2 / 14 = 7.142857: half width 1.6448536 / sqrt(4.142857) = 0.8081
    z = math.atanh(r)
    assert low == pytest.approx(math.tanh(z - 0.80812), abs=1e-4)
    assert high == pytest.approx(math.tanh(z + 0.80812), abs=1e-4)
    # equal weights give the unweighted correlation
    assert correlation_interval(x2, y2, confidence=0.9, weights=torch.full((8,), 3.0))[0] == (
        pytest.approx(correlation_interval(x2, y2, confidence=0.9)[0], abs=1e-12)
    )
    # the hand numbers: the 5 duplicated points, unweighted
    r5 = correlation_interval(
        torch.tensor([1.0, 1, 2, 3, 4]), torch.tensor([1.0, 1, 3, 2, 4]), confidence=0.9
    )[0]
    assert r5 == pytest.approx(5.8 / 6.8, abs=1e-12)


def test_cluster_bootstrap_resamples_prompts_not_positions():
    # prompt A: two positions with value 0 (weight 1 each); prompt B: one position, value 1, weight 2.
    # mean = (0 + 0 + 2 * 1) / 4 = 0.5. A resample draws 2 prompts: AA -> 0 (prob 1/4), BB -> 1
    # (1/4), AB -> 0.5 (1/2): the 5 % and 95 % quantiles of 400 resamples are 0 and 1. A position
    # bootstrap would see 3 positions and give other values (1/3 etc.); these are the only three.
    values = torch.tensor([0.0, 0.0, 1.0])
    weights = torch.tensor([1.0, 1.0, 2.0])
    mean, low, high = cluster_bootstrap_mean(
        values,
        weights,
        torch.tensor([7, 7, 9]),
        resamples=400,
        confidence=0.9,
        generator=torch.Generator().manual_seed(0),
    )
    assert (mean, low, high) == (0.5, 0.0, 1.0)
    # one prompt: no interval; a constant value: a zero-width interval at it
    assert math.isnan(
        cluster_bootstrap_mean(
            values, weights, torch.zeros(3, dtype=torch.long), resamples=50, confidence=0.9
        )[1]
    )
    assert cluster_bootstrap_mean(
        torch.full((3,), 0.25), weights, torch.tensor([0, 1, 2]), resamples=50, confidence=0.9
    ) == (0.25, 0.25, 0.25)
    # a non-negative quantity's interval is clipped at 0; the mean is not
    neg = torch.tensor([-0.02, 0.01, -0.01, 0.0])
    mean, low, high = cluster_bootstrap_mean(
        neg,
        torch.ones(4),
        torch.arange(4),
        resamples=200,
        confidence=0.9,
        floor=0.0,
        generator=torch.Generator().manual_seed(1),
    )
    assert mean == pytest.approx(-0.005) and low == 0.0 and high >= 0.0
