"""HAPO / EAPO: Â^CA = Â + α sign(Â) stopgrad(clip((H - µ_H)/σ_H, ±|Â|/φ))."""

import pytest
import torch

from quadrants.objectives.hapo import hapo_token_advantages
from quadrants.objectives.registry import resolve_objective

from .helpers import batch, close, grad_of, logp_for_ratios, run


def hapo_batch():
    """One group, 2 x 3 tokens; rewards [3, -3] -> Â = [+3, -3].

    entropy [[3, 1, 0], [0, 1, 1]]: µ_H = 6 / 6 = 1; deviations [2, 0, -1, -1, 0, 0],
    population σ_H = sqrt((4 + 1 + 1) / 6) = 1, so z = [[2, 0, -1], [-1, 0, 0]].
    Bound |Â| / φ = 3 / 2 = 1.5 -> Â^H = [[1.5 (clipped from 2), 0, -1], [-1, 0, 0]].
    α = 0.2: seq 0: 3 + 0.2 * [1.5, 0, -1] = [3.3, 3.0, 2.8]
             seq 1: -3 - 0.2 * [-1, 0, 0] = [-2.8, -3.0, -3.0]
    Quadrants (threshold µ_H = 1, H >= 1 high): seq 0 PHR PHR PLR, seq 1 NLR NHR NHR.
    """
    return batch(entropy=[[3.0, 1.0, 0.0], [0.0, 1.0, 1.0]], rewards=[3.0, -3.0], group_ids=[0, 0])


EXPECTED_CA = [[3.3, 3.0, 2.8], [-2.8, -3.0, -3.0]]


def token_adv(tb, apply_mask=None, **kw):
    apply_mask = tb.response_mask if apply_mask is None else apply_mask
    return hapo_token_advantages(
        tb.advantages,
        tb.entropy,
        tb.group_entropy_mean,
        tb.group_entropy_std,
        apply_mask,
        **{"alpha": 0.2, "phi": 2.0, **kw},
    )


def test_group_statistics_and_token_advantages_by_hand():
    tb = hapo_batch()
    close(tb.group_entropy_mean, [1.0, 1.0])
    close(tb.group_entropy_std, [1.0, 1.0])  # population std (÷6), not the sample std sqrt(6/5)
    assert tb.quadrants.PHR.tolist() == [[True, True, False], [False, False, False]]
    assert tb.quadrants.NLR.tolist() == [[False, False, False], [True, False, False]]
    close(token_adv(tb), EXPECTED_CA)


@pytest.mark.parametrize(
    "loss_agg, expected",
    [
        ("token-mean", -(9.1 - 8.8) / 6),  # ratio 1: loss = -Σ Â^CA / 6 = -0.05
        ("seq-mean-token-sum", (-9.1 + 8.8) / 2),  # -0.15
    ],
)
def test_hapo_loss_and_gradient_by_hand(loss_agg, expected):
    tb = hapo_batch()
    logp = logp_for_ratios(tb)
    loss, metrics = run("hapo", tb, logp, loss_agg=loss_agg)
    close(loss, expected)
    if loss_agg == "token-mean":
        # d/dlogp (-Â^CA r) at r = 1 is -Â^CA; / 6 tokens
        close(grad_of(loss, logp), -torch.tensor(EXPECTED_CA) / 6)
        close(metrics["modulated_frac"], 3 / 6)  # (0,0), (0,2), (1,0) moved
        close(metrics["adv_shift_rel"], (0.3 + 0.2 + 0.2) / 18)  # Σ|moves| / Σ|Â|
        close(metrics["sign_flip_frac"], 0.0)


def test_hapo_clips_the_modulated_advantage():
    # (0,0) Â^CA = 3.3 at r = 1.5 > 1.28: loss -3.3 * 1.28 = -4.224, no gradient; the rest at r = 1.
    # sum = -4.224 - 3.0 - 2.8 + 2.8 + 3.0 + 3.0 = -1.224 -> / 6 = -0.204
    tb = hapo_batch()
    logp = logp_for_ratios(tb, [[1.5, 1.0, 1.0], [1.0, 1.0, 1.0]])
    loss, _ = run("hapo", tb, logp)
    close(loss, -1.224 / 6)
    g = grad_of(loss, logp)
    close(g[0, 0], 0.0)
    close(g[0, 1:], [-3.0 / 6, -2.8 / 6])


@pytest.mark.parametrize(
    "apply_to, expected_adv, expected_loss",
    [
        # w/o PHR: (0,0) and (0,1) keep Â = 3 -> sums 8.8 and -8.8 -> loss 0
        (["PLR", "NHR", "NLR"], [[3.0, 3.0, 2.8], [-2.8, -3.0, -3.0]], 0.0),
        # w/o NLR: (1,0) keeps Â = -3 -> sums 9.1 and -9.0 -> loss -0.1 / 6
        (["PHR", "PLR", "NHR"], [[3.3, 3.0, 2.8], [-3.0, -3.0, -3.0]], -0.1 / 6),
        ([], [[3.0] * 3, [-3.0] * 3], 0.0),
    ],
)
def test_apply_to_excludes_quadrants(apply_to, expected_adv, expected_loss):
    tb = hapo_batch()
    close(token_adv(tb, tb.quadrants.union(apply_to) & tb.response_mask), expected_adv)
    logp = logp_for_ratios(tb)
    loss, _ = run("hapo", tb, logp, apply_to=apply_to)
    close(loss, expected_loss)
    close(grad_of(loss, logp), -torch.tensor(expected_adv) / 6)


def test_conserve_sequence_by_hand():
    # seq 0 modulation [0.3, 0, -0.2], mean 0.1/3 -> [0.266667, -0.033333, -0.233333]
    # seq 1 modulation [0.2, 0, 0],    mean 0.2/3 -> [0.133333, -0.066667, -0.066667]
    tb = hapo_batch()
    got = token_adv(tb, conserve="sequence")
    close(
        got, [[3 + 0.8 / 3, 3 - 0.1 / 3, 3 - 0.7 / 3], [-3 + 0.4 / 3, -3 - 0.2 / 3, -3 - 0.2 / 3]]
    )
    close(got.sum(-1), [9.0, -9.0], atol=2e-6)
    loss, _ = run("hapo", tb, logp_for_ratios(tb), conserve="sequence")
    close(loss, 0.0)


def test_zero_entropy_spread_is_plain_grpo():
    # σ_H = 0 (all entropies equal) -> Â^H = 0 -> HAPO == DAPO's clipped surrogate token for token
    tb = batch(entropy=[[0.7, 0.7], [0.7, 0.7]], rewards=[1.0, -1.0], group_ids=[0, 0])
    ratios = [[1.5, 0.9], [1.1, 0.6]]
    hapo_loss, _ = run("hapo", tb, logp_for_ratios(tb, ratios))
    dapo_loss, _ = run("dapo", tb, logp_for_ratios(tb, ratios))
    # (-1.28 - 0.9 + 1.1 + 0.8) / 4 = -0.07
    close(hapo_loss, -0.07)
    close(dapo_loss, -0.07)


def _random_case(g, *, conserve):
    b, length = (
        int(torch.randint(1, 6, (1,), generator=g)),
        int(torch.randint(1, 7, (1,), generator=g)),
    )
    adv = torch.randn(b, generator=g) * 3
    adv[torch.rand(b, generator=g) < 0.2] = 0.0
    adv = torch.where(
        adv.abs() < 1e-3, torch.zeros_like(adv), adv
    )  # avoid float32 underflow of tiny |Â|
    entropy = torch.rand(b, length, generator=g) * 5
    mean = torch.rand(b, generator=g) * 5
    std = torch.rand(b, generator=g) * 2
    std[torch.rand(b, generator=g) < 0.2] = 0.0
    response = torch.rand(b, length, generator=g) < 0.8
    apply_mask = (torch.rand(b, length, generator=g) < 0.7) & response
    limit = 0.5 if conserve == "sequence" else 1.0
    phi = float(torch.rand(1, generator=g)) * 4 + 0.1
    alpha = (
        float(torch.rand(1, generator=g)) * 0.999 * limit * phi
    )  # α/φ < limit, up to 0.999 of it
    if int(torch.randint(0, 4, (1,), generator=g)) == 0:
        alpha = 0.999 * limit * phi  # right at the edge
    out = hapo_token_advantages(
        adv, entropy, mean, std, apply_mask, alpha=alpha, phi=phi, conserve=conserve
    )
    return adv, response, apply_mask, out, alpha, phi


@pytest.mark.parametrize("conserve", ["none", "sequence"])
def test_sign_never_flips_for_allowed_alpha_over_phi(conserve):
    g = torch.Generator().manual_seed(1234)
    for _ in range(500):
        adv, _, _, out, alpha, phi = _random_case(g, conserve=conserve)
        assert torch.equal(torch.sign(out), torch.sign(adv)[:, None].expand_as(out)), (
            alpha,
            phi,
            adv,
            out,
        )
        # and the move never exceeds (α/φ)|Â| (twice that with conserve=sequence)
        factor = alpha / phi * (2 if conserve == "sequence" else 1)
        assert bool(
            ((out - adv[:, None]).abs() <= factor * adv.abs()[:, None] * (1 + 1e-5) + 1e-6).all()
        )


def test_conserve_sequence_keeps_each_response_sum():
    g = torch.Generator().manual_seed(99)
    for _ in range(500):
        adv, response, _, out, _, _ = _random_case(g, conserve="sequence")
        sums = (out * response).sum(-1)
        expected = response.sum(-1) * adv  # |o_i| Â_i
        torch.testing.assert_close(
            sums, expected, rtol=0, atol=1e-5 * (1 + adv.abs().max().item()) * 6
        )


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"alpha": 2.0, "phi": 2.0}, r"alpha/phi = 2.0/2.0 = 1 .*allowed: alpha/phi < 1"),
        ({"alpha": 0.5, "phi": 0.25}, r"alpha/phi = 0.5/0.25 = 2 .*allowed: alpha/phi < 1"),
        (
            {"alpha": 0.5, "phi": 1.0, "conserve": "sequence"},
            r"alpha/phi = 0.5/1.0 = 0.5 .*allowed: alpha/phi < 0.5 \(2\*alpha/phi < 1 with conserve=sequence\)",
        ),
        ({"alpha": -0.1}, r"alpha=-0.1 is out of range"),
        ({"phi": 0.0}, r"phi=0.0 is out of range; allowed: \(0, inf\)"),
        ({"conserve": "group"}, r"conserve='group' is unknown"),
        ({"apply_to": ["PHR", "XHR"]}, r"unknown quadrant 'XHR'"),
        ({"clip_low": 1.0}, r"clip_low=1.0 is out of range; allowed: \[0, 1\)"),
    ],
)
def test_hapo_validation(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective("hapo", params)


def test_hapo_validation_accepts_the_allowed_side():
    resolve_objective("hapo", {"alpha": 0.99, "phi": 1.0})
    resolve_objective("hapo", {"alpha": 0.49, "phi": 1.0, "conserve": "sequence"})
    _, full = resolve_objective("hapo", {})
    assert (full["alpha"], full["phi"], full["conserve"]) == (0.2, 2.0, "none")


def test_alpha_zero_is_the_dapo_loss():
    # group 0 rewards [2, -2] (A = +-2), group 1 rewards [1, 1] (constant, A = 0); 1 token each
    # ratios [1.1, 1, 1, 1]: terms -2.2, +2, 0, 0 -> DAPO (group 1 dropped) -0.2 / 2 = -0.1;
    # hapo with α = 0 currently gives -0.2 / 4 = -0.05
    tb = batch(
        entropy=[[1.0], [0.0], [0.5], [0.2]], rewards=[2.0, -2.0, 1.0, 1.0], group_ids=[0, 0, 1, 1]
    )
    ratios = [[1.1], [1.0], [1.0], [1.0]]
    dapo_loss, _ = run("dapo", tb, logp_for_ratios(tb, ratios))
    close(dapo_loss, -0.1)
    hapo_loss, _ = run("hapo", tb, logp_for_ratios(tb, ratios), alpha=0.0)
    close(hapo_loss, dapo_loss)
