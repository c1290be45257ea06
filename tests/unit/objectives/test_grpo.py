"""GRPO: clipped surrogate with one advantage per sequence, under every loss aggregation."""

import pytest
import torch

from quadrants.objectives.registry import get_objective, known_objectives, resolve_objective

from .helpers import GRPO_RATIOS, batch, close, grad_of, grpo_batch, logp_for_ratios, run

# the objectives that clip the importance ratio (and so take verl's dual clip, clip_ratio_c)
CLIPPED = [
    "grpo",
    "arca",
    "dapo",
    "hapo",
    "entroreg",
    "forking",
    "entroadv",
    "clip_cov",
    "steer",
    "adaptive_entropy",
    "ktae",
]


def test_batch_statistics_of_the_shared_batch():
    tb = grpo_batch()
    close(tb.advantages, [2.0, -2.0])
    # padding entropy 9 is ignored: mean (1 + 0 + 0.5 + 1 + 0) / 5 = 0.5,
    # population var ((.5)^2 + (.5)^2 + 0 + (.5)^2 + (.5)^2) / 5 = 0.2
    close(tb.group_entropy_mean, [0.5, 0.5])
    close(tb.group_entropy_std, [0.2**0.5] * 2)
    assert tb.quadrants.PHR.tolist() == [[True, False, True], [False, False, False]]
    assert tb.quadrants.PLR.tolist() == [[False, True, False], [False, False, False]]
    assert tb.quadrants.NHR.tolist() == [[False, False, False], [True, False, False]]
    assert tb.quadrants.NLR.tolist() == [[False, False, False], [False, True, False]]


@pytest.mark.parametrize(
    "loss_agg, norm_length, expected",
    [
        ("token-mean", None, -1.6 / 5),  # -0.32
        # seq 0: (-2.4 - 1 - 2) / 3 = -1.8; seq 1: (2.2 + 1.6) / 2 = 1.9; mean 0.05
        ("seq-mean-token-mean", None, 0.05),
        # (-5.4 + 3.8) / 2 = -0.8
        ("seq-mean-token-sum", None, -0.8),
        # -1.6 / (2 sequences x T=3) and / (2 x 4)
        ("seq-mean-token-sum-norm", None, -1.6 / 6),
        ("seq-mean-token-sum-norm", 4, -0.2),
    ],
)
def test_grpo_loss_by_hand(loss_agg, norm_length, expected):
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, _ = run(
        "grpo", tb, logp, loss_agg=loss_agg, norm_length=norm_length, clip_low=0.2, clip_high=0.2
    )
    close(loss, expected)


def test_grpo_gradient_zero_on_clipped_tokens():
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, metrics = run("grpo", tb, logp)  # defaults clip 0.2 / 0.2
    # d loss / d logp = (-A r) / 5 on unclipped tokens, 0 on clipped ones and on padding
    close(grad_of(loss, logp), [[0.0, -1.0 / 5, -2.0 / 5], [2.2 / 5, 0.0, 0.0]])
    close(metrics["clip_frac"], 2 / 5)
    close(metrics["clip_frac_low"], 1 / 5)
    close(metrics["clip_frac_high"], 1 / 5)
    close(metrics["ratio_mean"], (1.5 + 0.5 + 1.0 + 1.1 + 0.7) / 5)


def test_grpo_with_std_normalised_advantages():
    # G = 4, rewards [1, 1, 0, 0]: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735,
    # A = +-0.5 / (0.57735 + 1e-6) = +-0.866024; one token each, ratio 1 -> loss = -(A1+A2+A3+A4)/4 = 0,
    # seq 0 gradient = -A / 4
    tb = batch(
        entropy=[[1.0]] * 4,
        rewards=[1.0, 1.0, 0.0, 0.0],
        group_ids=[7, 7, 7, 7],
        normalize_std=True,
    )
    a = 0.5 / (1.0 / 3**0.5 + 1e-6)
    close(tb.advantages, [a, a, -a, -a])
    logp = logp_for_ratios(tb)
    loss, _ = run("grpo", tb, logp)
    close(loss, 0.0)
    close(grad_of(loss, logp)[:, 0], [-a / 4, -a / 4, a / 4, a / 4])


def test_grpo_kl_to_reference_by_hand():
    # ratio 1, A = [+2, -2], 2 x 2 tokens: the surrogate part is (-2 - 2 + 2 + 2) / 4 = 0.
    # logp = -1 everywhere; ref = [[-2, -1], [-1, -0.5]]; delta = ref - logp = [[-1, 0], [0, 0.5]]
    # k3 = exp(d) - 1 - d: [[e^-1 = 0.367879, 0], [0, e^0.5 - 1.5 = 0.148721]]
    # k1 = -d:            [[1, 0], [0, -0.5]]
    tb = batch(
        entropy=[[1.0, 0.0], [1.0, 0.0]],
        rewards=[2.0, -2.0],
        group_ids=[0, 0],
        old_logp=[[-1.0, -1.0], [-1.0, -1.0]],
        ref_logp=[[-2.0, -1.0], [-1.0, -0.5]],
    )
    k3 = torch.tensor([[torch.e**-1, 0.0], [0.0, torch.e**0.5 - 1.5]])
    logp = logp_for_ratios(tb)
    loss, metrics = run("grpo", tb, logp, kl_coef=0.1, kl_estimator="k3")
    close(loss, 0.1 * k3.sum() / 4)  # 0.1 * 0.516600 / 4 = 0.012915
    close(metrics["kl_ref"], k3.sum() / 4)
    # d k3 / d logp = 1 - exp(d): [[1 - e^-1, 0], [0, 1 - e^0.5]]; surrogate grad -A/4
    expected = (
        torch.tensor([[-2.0, -2.0], [2.0, 2.0]]) / 4
        + 0.1 * (1 - torch.exp(torch.tensor([[-1.0, 0.0], [0.0, 0.5]]))) / 4
    )
    close(grad_of(loss, logp), expected)
    loss1, _ = run("grpo", tb, logp_for_ratios(tb), kl_coef=0.5, kl_estimator="k1")
    close(loss1, 0.5 * (1.0 - 0.5) / 4)


def test_kl_without_reference_logp_is_an_error():
    tb = grpo_batch()
    with pytest.raises(ValueError, match="ref_logp"):
        run("grpo", tb, logp_for_ratios(tb, GRPO_RATIOS), kl_coef=0.1)


@pytest.mark.parametrize("name", CLIPPED)
def test_dual_clip_on_every_clipped_objective(name):
    # one group, rewards [2, -2] -> A = [+2, -2]; 1 token each, ratios [4, 4]; clip 0.2/0.2, c = 3
    # A = +2, r 4: max(-8, -2.4) = -2.4 (no dual clip for A >= 0)
    # A = -2, r 4: max(8, 2.4) = 8 -> min(-A c = 6, 8) = 6; without the dual clip 8
    # token-mean over 2 tokens: (-2.4 + 6) / 2 = 1.8 (off: (-2.4 + 8) / 2 = 2.8); dual_clip_frac 1/2
    # The entropy-based objectives see entropy 0 everywhere, so their advantages are plain A.
    tb = batch(entropy=[[0.0], [0.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    extra = {
        "entroreg": {"beta": 0.0},
        "forking": {"rho": 1.0},
        "clip_cov": {"fraction": 0.0},
        "steer": {"weight_min": 1.0, "weight_max": 1.0},  # weights 1: the plain clipped loss
    }.get(name, {})
    common = dict(clip_low=0.2, clip_high=0.2, **extra)
    entropy = torch.zeros(2, 1)
    loss, metrics = run(
        name, tb, logp_for_ratios(tb, [[4.0], [4.0]]), entropy, clip_ratio_c=3.0, **common
    )
    close(loss, 1.8)
    close(metrics["dual_clip_frac"], 0.5)
    # off (null; STEER's default is the authors' c = 10, so it is switched off by name)
    loss, metrics = run(
        name, tb, logp_for_ratios(tb, [[4.0], [4.0]]), entropy, clip_ratio_c=None, **common
    )
    close(loss, 2.8)
    assert "dual_clip_frac" not in metrics


NOT_TOKEN_RATIO_CLIP = {"gspo", "cispo"}
# two clip ranges (low_/high_clip_*) and a dual clip; tests/unit/objectives/test_archer.py has its own
TWO_CLIP_RANGES = {"archer"}


def test_clipped_objectives_are_the_ones_with_a_dual_clip():
    # every registered objective with PPO's token-ratio clip (has clip_low) has clip_ratio_c, a new one
    # included; GSPO clips one ratio per response and CISPO a detached weight, and neither the papers
    # nor verl's losses give those a dual clip
    with_c = {n for n in known_objectives() if "clip_ratio_c" in get_objective(n).parameters()}
    clipping = {n for n in known_objectives() if "clip_low" in get_objective(n).parameters()}
    assert with_c - TWO_CLIP_RANGES == clipping - NOT_TOKEN_RATIO_CLIP == set(CLIPPED)
    assert NOT_TOKEN_RATIO_CLIP <= clipping
    assert not {"kl_cov", "w_reinforce"} & with_c


@pytest.mark.parametrize("c", [1.0, 0.5, -3.0])
def test_dual_clip_constant_must_exceed_one(c):
    for name in CLIPPED:
        with pytest.raises(
            ValueError, match=rf"^clip_ratio_c={c} is out of range; allowed: \(1, inf\)$"
        ):
            resolve_objective(name, {"clip_ratio_c": c})
