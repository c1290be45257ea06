"""compute_loss: quadrant isolation as a mask, the two named denominators, aggregation, invariants."""

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.loss import LossSettings, compute_loss, objective_output
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.ops.aggregation import LOSS_AGGREGATIONS, aggregate_loss
from quadrants.ops.quadrants import Quadrant, QuadrantSettings, parse_keep

from .helpers import (
    GRPO_RATIOS,
    batch,
    close,
    grad_of,
    grpo_batch,
    logp_for_ratios,
    random_batch,
    run,
)

PHR, PLR, NHR, NLR = Quadrant.PHR, Quadrant.PLR, Quadrant.NHR, Quadrant.NLR


def test_masked_tokens_stay_in_denominator():
    # one group of 2 sequences x 2 tokens; entropy [[1, 0], [0, 0]] -> group mean 0.25
    # advantages [+2, -2], ratio 1: only token (0, 0) is PHR, its term is -2; 4 response tokens -> -0.5
    tb = batch(entropy=[[1.0, 0.0], [0.0, 0.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    logp = logp_for_ratios(tb)
    loss, metrics = run("grpo", tb, logp, keep=(PHR,), quadrant_denominator="all_response_tokens")
    close(loss, -0.5)
    close(metrics["kept_frac"], 0.25)
    close(metrics["denominator_tokens"], 4.0)
    close(grad_of(loss, logp), [[-0.5, 0.0], [0.0, 0.0]])
    # kept_tokens renormalises over the 1 kept token: -2
    loss, metrics = run(
        "grpo", tb, logp_for_ratios(tb), keep=(PHR,), quadrant_denominator="kept_tokens"
    )
    close(loss, -2.0)
    close(metrics["denominator_tokens"], 1.0)


# grpo_batch with GRPO_RATIOS: per-token [[-2.4, -1, -2], [2.2, 1.6, pad]]
# quadrants [[PHR, PLR, PHR], [NHR, NLR, pad]]
@pytest.mark.parametrize(
    "keep, all_tokens, kept_tokens",
    [
        ("PHR", (-2.4 - 2.0) / 5, (-2.4 - 2.0) / 2),  # -0.88 | -2.2
        ("PLR", -1.0 / 5, -1.0),  # -0.2 | -1
        ("NHR", 2.2 / 5, 2.2),  # 0.44 | 2.2
        ("NLR", 1.6 / 5, 1.6),  # 0.32 | 1.6
        (["PHR", "NHR"], (-4.4 + 2.2) / 5, (-4.4 + 2.2) / 3),  # -0.44 | -0.733333
        ("PHR,NHR", (-4.4 + 2.2) / 5, (-4.4 + 2.2) / 3),
        ("all", -1.6 / 5, -1.6 / 5),  # plain GRPO: -0.32 both ways
        (["PHR", "PLR", "NHR", "NLR"], -1.6 / 5, -1.6 / 5),
    ],
)
def test_quadrant_isolation_by_hand(keep, all_tokens, kept_tokens):
    for denominator, expected in (
        ("all_response_tokens", all_tokens),
        ("kept_tokens", kept_tokens),
    ):
        tb = grpo_batch()
        loss, _ = run(
            "grpo",
            tb,
            logp_for_ratios(tb, GRPO_RATIOS),
            keep=parse_keep(keep),
            quadrant_denominator=denominator,
        )
        close(loss, expected)


def test_isolation_gradient_only_on_kept_tokens():
    # PHR tokens (0,0) (clipped: 0) and (0,2) (-A r / 5 = -0.4); everything else masked
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, _ = run("grpo", tb, logp, keep=(PHR,))
    close(grad_of(loss, logp), [[0.0, 0.0, -0.4], [0.0, 0.0, 0.0]])
    # NHR with kept_tokens: (1,0) alone, +2.2 / 1
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, _ = run("grpo", tb, logp, keep=(NHR,), quadrant_denominator="kept_tokens")
    close(grad_of(loss, logp), [[0.0, 0.0, 0.0], [2.2, 0.0, 0.0]])


def test_isolation_with_seq_mean_token_mean():
    # PHR under seq-mean-token-mean, all_response_tokens: seq 0 (-2.4 - 2) / 3, seq 1 0 / 2 -> mean -0.733333
    # kept_tokens: only seq 0 has kept tokens: (-4.4) / 2 = -2.2 over 1 sequence
    tb = grpo_batch()
    loss, _ = run(
        "grpo", tb, logp_for_ratios(tb, GRPO_RATIOS), keep=(PHR,), loss_agg="seq-mean-token-mean"
    )
    close(loss, -4.4 / 3 / 2)
    loss, _ = run(
        "grpo",
        tb,
        logp_for_ratios(tb, GRPO_RATIOS),
        keep=(PHR,),
        loss_agg="seq-mean-token-mean",
        quadrant_denominator="kept_tokens",
    )
    close(loss, -2.2)


@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("denominator", ["all_response_tokens", "kept_tokens"])
def test_empty_quadrant_gives_finite_zero(loss_agg, denominator):
    # entropy [[1, 1], [0, 0]], mean 0.5: the negative response is all low-entropy -> NHR is empty
    tb = batch(entropy=[[1.0, 1.0], [0.0, 0.0]], rewards=[2.0, -2.0], group_ids=[0, 0])
    assert not tb.quadrants.NHR.any()
    logp = logp_for_ratios(tb, [[1.5, 0.5], [1.1, 0.7]])
    loss, metrics = run(
        "grpo", tb, logp, keep=(NHR,), quadrant_denominator=denominator, loss_agg=loss_agg
    )
    assert torch.isfinite(loss)
    close(loss, 0.0)
    close(grad_of(loss, logp), torch.zeros(2, 2))
    close(metrics["kept_frac"], 0.0)


def test_parse_keep():
    assert parse_keep(None) is None
    assert parse_keep("all") is None
    assert parse_keep(["ALL"]) is None
    assert parse_keep(["PHR", "PLR", "NHR", "NLR"]) is None  # the four together are plain GRPO
    assert parse_keep("PHR") == (PHR,)
    assert parse_keep("PHR, NHR") == (PHR, NHR)
    assert parse_keep(["nhr", "PHR", "NHR"]) == (NHR, PHR)  # case-insensitive, de-duplicated
    with pytest.raises(ValueError, match="cannot be combined"):
        parse_keep(["all", "PHR"])
    with pytest.raises(
        ValueError, match=r"unknown quadrant 'PXR'; known: \['PHR', 'PLR', 'NHR', 'NLR'\]"
    ):
        parse_keep("PXR")
    with pytest.raises(ValueError, match="is empty"):
        parse_keep([])


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"loss_agg": "sum"}, r"objective.loss_agg='sum' is unknown"),
        ({"kl_estimator": "k4"}, r"objective.kl_estimator='k4' is unknown"),
        ({"kl_coef": -0.1}, r"objective.kl_coef=-0.1 is out of range"),
    ],
)
def test_loss_settings_validation(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        LossSettings(**kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"denominator": "selected_tokens"}, r"quadrant.denominator='selected_tokens' is unknown"),
        ({"threshold": "median"}, r"quadrant.threshold: entropy threshold rule 'median'"),
        ({"threshold": "fixed"}, r"quadrant.threshold: .*fixed needs threshold_value tau"),
        ({"threshold_value": 0.5}, r"quadrant.threshold: .*group_mean takes no threshold_value"),
    ],
)
def test_quadrant_settings_validation(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        QuadrantSettings(**kwargs)


# ---- invariants on seeded random batches, for every registered objective -------------------------

# non-default parameters that make each mechanism bite on an 8 x 6 batch (defaults select ~nothing)
OVERRIDES = {
    "entroreg": {"beta": 0.05},
    "forking": {"rho": 0.3},
    "clip_cov": {"fraction": 0.1, "cov_lb": 0.0, "cov_ub": 10.0},
    "kl_cov": {"fraction": 0.1},
}
VARIANTS = [(name, OVERRIDES.get(name, {})) for name in known_objectives()] + [
    ("hapo", {"conserve": "sequence", "alpha": 0.4, "phi": 1.0}),
    ("hapo", {"apply_to": ["PHR", "NLR"]}),
    ("dapo", {"dynamic_sampling": False}),
    ("forking", {"rho": 0.3, "scope": "mini_batch", "denominator": "all_response_tokens"}),
    ("forking", {"rho": 0.3, "scope": "mini_batch", "entropy_source": "current"}),
    ("gspo", {"clip_low": 0.2, "clip_high": 0.2}),  # wide enough that responses keep gradient
    ("cispo", {"clip_low": 0.2}),
    ("archer", {"entropy_source": "behaviour", "scope": "mini_batch"}),
    ("archer", {"high_entropy_kl_scale": 0.5, "kl_normaliser": "response_tokens"}),
    ("steer", {"mapping": "exponential", "weight_max": 1.0}),
    (
        "adaptive_entropy",
        {"coef_init": 0.004, "dynamic_sampling": True},
    ),  # the bonus on from step 0
]


def _loss(name, params, tb, logp, entropy, keep, loss_agg, kl_coef):
    spec, full = resolve_objective(name, params)
    policy = PolicyOutput(logp=logp, entropy=entropy if spec.wants_entropy(full) else None)
    settings = LossSettings(
        quadrant=QuadrantSettings(keep=keep), loss_agg=loss_agg, kl_coef=kl_coef
    )
    # clip_cov draws from the generator it is given: the same draw for every call
    return compute_loss(spec, full, tb, policy, settings, generator=draws())


def draws() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def test_every_registered_objective_is_covered():
    assert {name for name, _ in VARIANTS} == set(known_objectives())
    assert set(known_objectives()) >= {
        "grpo",
        "dapo",
        "hapo",
        "entroreg",
        "forking",
        "entroadv",
        "clip_cov",
        "kl_cov",
        "w_reinforce",
    }


@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
@pytest.mark.parametrize(
    "name, params", VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_four_quadrant_losses_sum_to_the_full_loss(name, params, loss_agg):
    for seed in range(3):  # seed 0 has an all-equal group; odd seeds add a reference KL
        tb, logp, entropy = random_batch(seed)
        kl_coef = 0.05 if seed % 2 else 0.0
        full, metrics = _loss(name, params, tb, logp, entropy, None, loss_agg, kl_coef)
        assert torch.isfinite(full)
        parts = [
            _loss(name, params, tb, logp, entropy, (q,), loss_agg, kl_coef)[0] for q in Quadrant
        ]
        torch.testing.assert_close(
            sum(parts), full, rtol=0, atol=1e-5
        )  # a few float32 sums of O(1) terms
        pair, _ = _loss(name, params, tb, logp, entropy, (PHR, NHR), loss_agg, kl_coef)
        torch.testing.assert_close(pair, parts[0] + parts[2], rtol=0, atol=1e-5)
        if name in ("clip_cov", "kl_cov"):
            assert metrics["selected_frac"] > 0  # the invariant is exercised with a real selection


def test_quadrant_gradients_sum_to_the_full_gradient():
    for name, params in VARIANTS:
        tb, logp, entropy = random_batch(5)
        full, _ = _loss(name, params, tb, logp, entropy, None, "token-mean", 0.05)
        g_full = grad_of(full, logp)
        g_sum = sum(
            grad_of(_loss(name, params, tb, logp, entropy, (q,), "token-mean", 0.05)[0], logp)
            for q in Quadrant
        )
        torch.testing.assert_close(g_sum, g_full, rtol=0, atol=1e-6, msg=name)


# ---- tokens outside the denominator carry nothing, for every registered objective --------------------


def _with_dynamic_sampling(name, params):
    """The variant's params with dynamic sampling on where the objective has it (so a group is dropped)."""
    spec, _ = resolve_objective(name, params)
    return (
        {**params, "dynamic_sampling": True} if "dynamic_sampling" in spec.parameters() else params
    )


@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
@pytest.mark.parametrize(
    "name, params", VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)]
)
def test_tokens_outside_the_denominator_carry_no_loss(name, params, loss_agg):
    # The objective list comes from the registry (VARIANTS), so a new objective is covered unasked.
    # On seed 0 and 3 the first group is all-equal: objectives with dynamic sampling drop it. The loss
    # must be the aggregate of the objective's own per-token terms on its denominator only, and no
    # gradient (logp or current entropy) may reach a token outside it.
    params = _with_dynamic_sampling(name, params)
    spec, full = resolve_objective(name, params)
    dropped_somewhere = False
    for seed in (0, 3):
        tb, logp, entropy = random_batch(seed)
        policy = PolicyOutput(logp=logp, entropy=entropy if spec.wants_entropy(full) else None)
        out = objective_output(spec, full, tb, policy, draws())
        denominator = (
            tb.response_mask
            if out.denominator_mask is None
            else out.denominator_mask & tb.response_mask
        )
        expected = aggregate_loss(out.per_token_loss * denominator, denominator, loss_agg)
        loss, _ = _loss(name, params, tb, logp, entropy, None, loss_agg, 0.05)
        expected = expected + 0.05 * _kl_term(tb, logp, denominator, loss_agg, out.kl_weight)
        if spec.scales_by_nominal_rows(full):  # Archer's, Skywork's: over the nominal rows
            expected = expected * denominator.any(1).sum() / tb.batch_size
        torch.testing.assert_close(loss, expected, rtol=0, atol=1e-6)
        leaves = (logp, entropy) if spec.wants_entropy(full) else (logp,)
        for grad in torch.autograd.grad(
            loss, leaves, allow_unused=True
        ):  # forking detaches the entropy
            assert grad is None or torch.all(grad[~denominator] == 0), name
        dropped_somewhere |= bool((tb.response_mask & ~denominator).any())
    if "dynamic_sampling" in spec.parameters():
        assert dropped_somewhere  # the invariant was exercised on a real dropped group


def _kl_term(tb, logp, denominator, loss_agg, kl_weight=None):
    # the reference KL (k3), on the denominator tokens only, times the objective's per-token KL
    # weights where it has them (Archer), aggregated like the loss
    from quadrants.ops.kl import kl_penalty

    kl = kl_penalty(logp, tb.ref_logp, "k3") * denominator
    if kl_weight is not None:
        kl = kl * kl_weight
    return aggregate_loss(kl, denominator, loss_agg)


# ---- a batch where every group has equal rewards ----------------------------------------------------

ADVANTAGE_BASED = ["grpo", "dapo", "hapo", "entroadv", "forking", "clip_cov", "kl_cov"]


@pytest.mark.parametrize("name", ADVANTAGE_BASED + ["entroreg", "w_reinforce"])
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_all_equal_rewards(name, loss_agg):
    # two groups, rewards [1, 1 | 0, 0]: every advantage is 0
    tb = batch(
        entropy=[[1.0, 0.5, 0.2], [0.3, 0.9, 0.0], [0.4, 0.4, 0.1], [0.8, 0.0, 0.6]],
        rewards=[1.0, 1.0, 0.0, 0.0],
        group_ids=[0, 0, 1, 1],
        response_mask=[[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]],
        normalize_std=True,
    )
    close(tb.advantages, torch.zeros(4))
    # ratios != 1 (kl_cov at ratio 1: its penalty |logπ - logπ_old| is not advantage-based)
    ratios = (
        None
        if name == "kl_cov"
        else [[1.5, 0.5, 1.1], [0.9, 1.3, 1.0], [0.7, 1.0, 1.0], [1.2, 0.8, 1.0]]
    )
    logp = logp_for_ratios(tb, ratios)
    entropy = torch.tensor(
        [[1.0, 2.0, 3.0], [1.0, 1.0, 9.0], [2.0, 9.0, 9.0], [0.5, 0.5, 0.5]], requires_grad=True
    )
    # entroreg without dynamic sampling, so the bonus survives (with it every group is dropped, the
    # batch is empty and the loss is 0: test_entroreg_dropped_groups_carry_no_bonus)
    params = {
        "entroreg": {"beta": 0.1, "dynamic_sampling": False},
        "clip_cov": {"fraction": 0.5},
        "kl_cov": {"fraction": 0.5},
    }
    params = params.get(name, {})
    loss, _ = run(name, tb, logp, entropy, loss_agg=loss_agg, **params)
    assert torch.isfinite(loss)
    if name in ADVANTAGE_BASED:
        close(loss, 0.0)
        close(grad_of(loss, logp), torch.zeros(4, 3))
    elif name == "entroreg":
        # only the bonus is left: token-mean -0.1 * (6 + 2 + 2 + 1.5) / 9;
        # seq-mean-token-mean -0.1 * (2 + 1 + 2 + 0.5) / 4 (per-sequence mean entropies)
        close(loss, -0.1 * 11.5 / 9 if loss_agg == "token-mean" else -0.1 * 5.5 / 4)
    else:
        # W-REINFORCE keeps its weights (no advantage): correct tokens -0.1 r, wrong tokens +r
        # token-mean: (-0.1 * (1.5 + 0.5 + 1.1 + 0.9 + 1.3) + 0.7 + 1.2 + 0.8 + 1.0) / 9
        token_mean = (-0.1 * 5.3 + 3.7) / 9
        seq_mean = (-0.1 * 3.1 / 3 - 0.1 * 2.2 / 2 + 0.7 + 3.0 / 3) / 4
        close(loss, token_mean if loss_agg == "token-mean" else seq_mean)
