"""The random control matched on the tokens that train (train/score.py `draw_control`,
ops/random_control.py `draw_by_labels`): the first design's excess on a batch with constant-reward
groups, and the exact per-mini-batch, per-row and per-entropy-bin counts of the new draws; the
Horvitz–Thompson noise's closed form against enumeration; the gradient-cosine diagnostic."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.objectives.batch import PolicyOutput, make_token_batch
from quadrants.objectives.loss import (
    LossSettings,
    applied_weights,
    compute_loss,
    gradient_tokens,
)
from quadrants.objectives.registry import resolve_objective
from quadrants.ops.quadrants import Quadrant, QuadrantSettings, RandomControl
from quadrants.ops.random_control import entropy_deciles, ht_relative_noise
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.train.context import UpdateSettings
from quadrants.train.score import draw_control
from quadrants.train.telemetry import gradient_figures
from quadrants.train.update import (
    cosine_and_ratio,
    first_epoch_minibatches,
    gradient_cosine,
    update_gradient,
)
from tests.unit.train.test_accumulate import seeded_batch

PHR = (Quadrant.PHR,)


def constant_groups_batch():
    """3 groups x 2 responses, T = 4, every response full length, advantages exact
    (normalize_std=False):
        group 0 rewards [1, 1] (all correct): A = 0, 0; entropy [[2,2,0,0],[2,2,2,0]], mean 1.25
            -> row 0 high t0,t1 (2), row 1 high t0-t2 (3): PHR 5 (zero advantage counts positive)
        group 1 rewards [1, 0]: A = +0.5, -0.5; entropy [[2,0,0,0],[2,2,0,0]], mean 0.75
            -> row 2 (+): PHR t0 (1), PLR 3; row 3 (-): NHR 2, NLR 2
        group 2 rewards [0, 0] (all wrong): A = 0, 0; entropy all 2, mean 2 -> PHR 8
    PHR's nominal count: 5 + 1 + 8 = 14 of the 24 response tokens (20 positive).
    Under DAPO (dynamic sampling) only group 1's 8 tokens carry gradient, 4 of each sign, and PHR
    has 1 of them (row 2, t0)."""
    mask = torch.ones(6, 4, dtype=torch.bool)
    entropy = torch.tensor(
        [[2.0, 2, 0, 0], [2, 2, 2, 0], [2, 0, 0, 0], [2, 2, 0, 0], [2, 2, 2, 2], [2, 2, 2, 2]]
    )
    return make_token_batch(
        sequences=torch.zeros(6, 5, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(6, 1, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=torch.full((6, 4), -1.0),
        entropy=entropy,
        rewards=torch.tensor([1.0, 1, 1, 0, 0, 0]),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        normalize_std=False,
    )


def update_settings(mini_batch_size: int, seed: int = 0) -> UpdateSettings:
    return UpdateSettings(
        seed=seed, epochs=1, mini_batch_size=mini_batch_size, micro_batch_size=0,
        micro_batch_tokens=0, forward_tokens=0, max_grad_norm=1.0, measure_dlogp=False,
        dlogp_rows=None, minibatch_grouping="shuffle",
    )  # fmt: skip


def carrying_of(tb, name="dapo"):
    spec, params = resolve_objective(name, {})
    return gradient_tokens(spec, params, tb)


def test_gradient_tokens_by_hand():
    tb = constant_groups_batch()
    assert {q: int(tb.quadrants[q].sum()) for q in ("PHR", "PLR", "NHR", "NLR")} == {
        "PHR": 14, "PLR": 6, "NHR": 2, "NLR": 2,
    }  # fmt: skip
    expected = torch.zeros(6, 4, dtype=torch.bool)
    expected[2:4] = True  # group 1 only: DAPO drops groups 0 and 2 from its denominator
    assert torch.equal(carrying_of(tb, "dapo"), expected)
    # GRPO (seq-mean) keeps every token in its denominator; the zero advantages leave groups 0, 2 out
    assert torch.equal(carrying_of(tb, "grpo"), expected)


@pytest.mark.parametrize(
    ("by_sign", "expected_carrying"),
    [
        # one stratum: 14 of the 24 tokens; 8 carry gradient: hypergeometric mean 14 * 8/24 = 4.667
        (False, 14 * 8 / 24),
        # by sign: 14 of the 20 positive tokens; 4 carry gradient: 14 * 4/20 = 2.8
        (True, 14 * 4 / 20),
    ],
)
def test_nominal_matching_trains_the_measured_excess(by_sign, expected_carrying):
    """PHR trains 1 gradient-carrying token (A = +0.5, mass 0.5); the first design's control draws
    PHR's nominal 14 and trains 4.67x (unsigned) or 2.8x (signed) as many, with as many times the
    advantage mass (every carrying token has |A| = 0.5). Over 4000 seeded draws the mean's standard
    error is sqrt(14*8*16*10/(24^2*23))/sqrt(4000) = 0.018 (unsigned), so 0.08 is > 4 se."""
    tb = constant_groups_batch()
    carrying = carrying_of(tb)
    control = RandomControl(PHR, match_sign=by_sign, within="nominal")
    settings = QuadrantSettings(control=control)
    arm = gradient_figures(tb.quadrants.union(PHR), carrying, tb.advantages, "")
    assert arm["train/grad_tokens_pos"] == 1 and arm["train/grad_adv_mass"] == 0.5
    draws = 4000
    total = mass = 0.0
    for step in range(draws):
        drawn = draw_control(tb, settings, 0, step, carrying=carrying).control_mask
        assert int(drawn.sum()) == 14  # the nominal count, every draw
        figures = gradient_figures(drawn, carrying, tb.advantages, "")
        total += figures["train/grad_tokens_pos"] + figures["train/grad_tokens_neg"]
        mass += figures["train/grad_adv_mass"]
    assert abs(total / draws - expected_carrying) < 0.08
    assert abs(mass / draws - 0.5 * expected_carrying) < 0.04


@pytest.mark.parametrize("by_sign", [False, True])
@pytest.mark.parametrize("step", range(20))
def test_minibatch_matching_trains_the_arms_count_in_every_minibatch(by_sign, step):
    """Two mini-batches of 3 rows: the one holding row 2 has PHR's 1 gradient-carrying token (sign
    +), the other 0. The control draws exactly that in each, per sign with match_sign, and only
    among gradient-carrying tokens."""
    tb = constant_groups_batch()
    carrying = carrying_of(tb)
    update = update_settings(3, seed=step)
    settings = QuadrantSettings(control=RandomControl(PHR, match_sign=by_sign))
    drawn = draw_control(tb, settings, 0, step, carrying=carrying, update=update).control_mask
    arm = tb.quadrants.union(PHR) & carrying
    assert not bool((drawn & ~carrying).any())
    positive = tb.advantages > 0
    for rows in first_epoch_minibatches(tb, update, step):
        for side in (positive[rows], ~positive[rows]):
            got, want = drawn[rows][side].sum(), arm[rows][side].sum()
            if by_sign:
                assert int(got) == int(want)
        assert int(drawn[rows].sum()) == int(arm[rows].sum())
    assert int(drawn.sum()) == 1


def random_batch(seed: int, rows: int = 8, length: int = 12):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, length + 1, (rows,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    return make_token_batch(
        sequences=torch.zeros(rows, length + 1, dtype=torch.long),
        attention_mask=torch.cat([torch.ones(rows, 1, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=-torch.rand(rows, length, generator=gen) * mask,
        entropy=torch.rand(rows, length, generator=gen) * 3 * mask,
        rewards=torch.tensor([1.0, 0, 1, 1, 0, 0, 1, 0])[:rows],
        group_ids=torch.arange(rows) // 2,
    )


@pytest.mark.parametrize("seed", range(5))
def test_row_matching_keeps_each_rows_count(seed):
    tb = random_batch(seed)
    carrying = carrying_of(tb)
    settings = QuadrantSettings(control=RandomControl(PHR, within="row"))
    drawn = draw_control(tb, settings, 7, seed, carrying=carrying).control_mask
    arm = tb.quadrants.union(PHR) & carrying
    assert torch.equal(drawn.sum(1), arm.sum(1))
    assert not bool((drawn & ~carrying).any())


def test_entropy_deciles_by_hand():
    # 20 eligible tokens of entropies 0.0 .. 1.9 (and one ineligible): 2 per decile, in order
    entropy = torch.cat([torch.arange(20.0) / 10, torch.tensor([9.0])])[None]
    eligible = torch.ones_like(entropy, dtype=torch.bool)
    eligible[0, 20] = False
    bins = entropy_deciles(entropy, eligible)
    assert bins[0, :20].tolist() == [d for d in range(10) for _ in range(2)]
    assert int(bins[0, 20]) == -1


@pytest.mark.parametrize("seed", range(5))
def test_entropy_stratified_draw_keeps_each_bins_count(seed):
    tb = random_batch(seed)
    carrying = carrying_of(tb)
    control = RandomControl(PHR, match_sign=True, stratify="entropy")
    update = update_settings(4, seed=seed)
    drawn = draw_control(
        tb, QuadrantSettings(control=control), 3, seed, carrying=carrying, update=update
    ).control_mask
    arm = tb.quadrants.union(PHR) & carrying
    bins = entropy_deciles(tb.entropy, carrying)
    for d in range(10):
        assert int((drawn & (bins == d)).sum()) == int((arm & (bins == d)).sum())
    for rows in first_epoch_minibatches(tb, update, seed):
        assert int(drawn[rows].sum()) == int(arm[rows].sum())


def test_match_fraction_draws_that_share_of_each_stratum():
    tb = constant_groups_batch()
    carrying = carrying_of(tb)
    # 8 carrying tokens, one stratum: round(0.5 * 8) = 4; by sign 4 + 4 -> 2 + 2
    half = QuadrantSettings(control=RandomControl((), match_fraction=0.5))
    assert int(draw_control(tb, half, 0, 1, carrying=carrying).control_mask.sum()) == 4
    signed = QuadrantSettings(control=RandomControl((), match_sign=True, match_fraction=0.5))
    drawn = draw_control(tb, signed, 0, 1, carrying=carrying).control_mask
    assert int(drawn[2].sum()) == 2 and int(drawn[3].sum()) == 2


def loss_gradient(tb, settings: QuadrantSettings):
    spec, params = resolve_objective("dapo", {})
    logp = tb.old_logp.clone().requires_grad_(True)
    loss, _ = compute_loss(spec, params, tb, PolicyOutput(logp=logp), LossSettings(settings))
    (grad,) = torch.autograd.grad(loss, logp)
    return grad.double()


@pytest.mark.parametrize(("fraction", "by_sign"), [(0.5, False), (0.25, True), (1.0, False)])
def test_ht_noise_equals_its_closed_form_by_enumeration(fraction, by_sign):
    """Every possible draw enumerated (C(8,4) = 70 unsigned at 1/2; C(4,1)^2 = 16 by sign at 1/4),
    each equally likely; the mean of ||g_HT - g_full||^2 / ||g_full||^2 over them, g the loss's
    gradient in the log-prob coordinates, equals `ht_relative_noise` of the draw's π. By hand for
    a DAPO step at ratio 1: c_t = -A_t/8 on the 8 carrying tokens (|c_t| all equal), so the
    closed form is (1 - π)/π: 1 at π = 1/2, 3 at π = 1/4, 0 at π = 1."""
    tb = constant_groups_batch()
    carrying = carrying_of(tb)
    control = RandomControl((), match_sign=by_sign, reweight="ht", match_fraction=fraction)
    one = draw_control(tb, QuadrantSettings(control=control), 0, 0, carrying=carrying)
    weight = one.control_weight
    full = loss_gradient(tb, QuadrantSettings())
    tokens = torch.nonzero(carrying.view(-1)).squeeze(1).tolist()
    strata = [t for t in tokens if t < 12], [t for t in tokens if t >= 12]  # rows 2 / 3
    if not by_sign:
        strata = (tokens,)
    k = [round(fraction * len(s)) for s in strata]
    errors = []
    for choice in itertools.product(*(itertools.combinations(s, n) for s, n in zip(strata, k))):
        mask = torch.zeros(24, dtype=torch.bool)
        mask[[t for part in choice for t in part]] = True
        drawn = dataclasses.replace(one, control_mask=mask.view(6, 4))
        g = loss_gradient(drawn, QuadrantSettings(control=control))
        errors.append(float(((g - full) ** 2).sum() / (full**2).sum()))
    enumerated = sum(errors) / len(errors)
    spec, params = resolve_objective("dapo", {})
    plain = dataclasses.replace(one, control_mask=None, control_weight=None)
    c, _ = applied_weights(spec, params, plain, LossSettings())
    reachable = weight > 0
    closed = ht_relative_noise(c * carrying, torch.where(reachable, 1 / weight, 0.0), reachable)
    assert float(closed) == pytest.approx(enumerated, rel=1e-9, abs=1e-12)
    assert float(closed) == pytest.approx((1 - fraction) / fraction, abs=1e-12)


def test_bad_control_options_are_refused_naming_the_key():
    cfg = RunConfig()
    cfg.quadrant.keep = "random"
    cfg.quadrant.match = "PHR"
    cfg.quadrant.within = "prompt"
    with pytest.raises(ValueError, match=r"quadrant\.within='prompt' is unknown; choose one of"):
        QuadrantSettings.from_config(cfg.quadrant)
    cfg.quadrant.within = "minibatch"
    cfg.quadrant.match, cfg.quadrant.match_fraction, cfg.quadrant.stratify = None, 0.5, "entropy"
    with pytest.raises(ValueError, match=r"quadrant\.stratify=entropy .* set quadrant\.match="):
        QuadrantSettings.from_config(cfg.quadrant)
    cfg.quadrant.stratify = "none"
    for bad in (0.0, 1.5, -0.1):
        cfg.quadrant.match_fraction = bad
        with pytest.raises(ValueError, match=r"quadrant\.match_fraction=.* outside \(0, 1\]"):
            QuadrantSettings.from_config(cfg.quadrant)
    cfg.quadrant.keep, cfg.quadrant.match_fraction, cfg.quadrant.stratify = "PHR", None, "entropy"
    with pytest.raises(ValueError, match=r"draws nothing; use quadrant=random"):
        QuadrantSettings.from_config(cfg.quadrant)


def test_cosine_and_ratio_by_hand():
    # a = (3, 0), f = (3, 4): <a, f> = 9, |a|^2 = 9, |f|^2 = 25 -> cos 9 / (3 * 5) = 0.6, ratio 3/5
    figures = cosine_and_ratio(9.0, 9.0, 25.0)
    assert figures["train/gradient/cosine"] == pytest.approx(0.6)
    assert figures["train/gradient/norm_ratio"] == pytest.approx(0.6)
    assert math.isnan(cosine_and_ratio(0.0, 0.0, 25.0)["train/gradient/cosine"])


def tiny_context(keep: str):
    cfg = RunConfig()
    cfg.quadrant.keep = keep
    cfg.train.entropy_chunk_size = 7
    cfg.train.mini_batch_size = 3  # two mini-batches of the 6 rows
    model, _ = load_policy("tiny-random", seed=0)
    return build_step(RunPlan.unchecked(cfg), model)


def flat_gradient(ctx, objective, batch) -> torch.Tensor:
    update_gradient(ctx.model, objective, ctx.forwards, ctx.update, batch, 0)
    grads = [
        p.grad.detach().clone().reshape(-1) for p in ctx.model.parameters() if p.grad is not None
    ]
    for p in ctx.model.parameters():
        p.grad = None
    return torch.cat(grads).double()


@pytest.mark.slow  # three tiny-model contexts, six update_gradient passes
def test_gradient_cosine_of_all_is_one_and_of_a_quadrant_its_value():
    """On the tiny random policy (real forwards and backwards; seeded_batch's 6 rows, DAPO):
    `all` against the full objective is the same gradient, cos 1 and norm ratio 1. PHR's
    figures equal those of its own and the full objective's gradients taken one by one
    (`update_gradient`); and as the four quadrant losses sum to the full one, g_full = g_PHR +
    g_rest, so the PHR figures are <g, g + r> / (|g| |g + r|), checked here with r taken apart."""
    ctx = tiny_context("all")
    batch = seeded_batch(ctx.model)
    same = gradient_cosine(ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, 0)
    assert same["train/gradient/cosine"] == pytest.approx(1.0, abs=1e-9)
    assert same["train/gradient/norm_ratio"] == pytest.approx(1.0, abs=1e-12)
    assert all(p.grad is None for p in ctx.model.parameters())
    phr = tiny_context("PHR")
    phr.model.load_state_dict(ctx.model.state_dict())
    figures = gradient_cosine(phr.model, phr.objective, phr.forwards, phr.update, batch, 0)
    rest = tiny_context("PLR,NHR,NLR")
    rest.model.load_state_dict(ctx.model.state_dict())
    g = flat_gradient(phr, phr.objective, batch)
    r = flat_gradient(rest, rest.objective, batch)
    f = g + r
    assert float(g.norm()) > 0 and float(r.norm()) > 0
    cosine = float(g @ f / (g.norm() * f.norm()))
    assert figures["train/gradient/cosine"] == pytest.approx(cosine, rel=1e-5)
    assert figures["train/gradient/norm_ratio"] == pytest.approx(
        float(g.norm() / f.norm()), rel=1e-5
    )
    assert figures["train/gradient/cosine"] < 0.999  # PHR is not the full direction


def uniform_policy():
    """A real 1-layer Llama whose every weight is 0 but the token embeddings (all ones) and the
    norms' scales (ones): attention and MLP add 0 to the residual stream, so at every position the
    final hidden state is h = RMSNorm(1) = c * 1 (c = 1/sqrt(1 + eps)), the logits W h are 0
    (lm_head W = 0) and pi is uniform over the V = 3 tokens. The loss's gradient reaches W alone
    (dL/dh = W^T dL/dz = 0, so nothing flows below it): dL/dW = sum_t dL/dz_t h^T, and every cosine
    and norm ratio of two such gradients is that of their V-vectors sum_t dL/dz_t."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=3, hidden_size=4, intermediate_size=4, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=False,
        max_position_embeddings=8, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.fill_(1.0 if ("embed" in name or "norm" in name) else 0.0)
    return model


def hand_built_batch():
    """One group, two rows of 2 response tokens (prompt: 1 token):
        row 0: reward 1, A = +0.5, tokens y = (0, 1), entropy (2, 0)
        row 1: reward 0, A = -0.5, tokens y = (1, 2), entropy (2, 0)
    The group's mean entropy is 1, so t0 is high and t1 low: PHR = {row 0 t0 (y 0)}, PLR = {row 0
    t1 (y 1)}, NHR = {row 1 t0 (y 1)}, NLR = {row 1 t1 (y 2)}; old log-probs log(1/3), pi's own, so
    every ratio is 1 and no clip is active."""
    sequences = torch.tensor([[0, 0, 1], [0, 1, 2]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    return make_token_batch(
        sequences=sequences,
        attention_mask=torch.ones(2, 3, dtype=torch.bool),
        response_mask=mask,
        old_logp=torch.full((2, 2), -math.log(3.0)),
        entropy=torch.tensor([[2.0, 0.0], [2.0, 0.0]]),
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        normalize_std=False,
    )


def test_gradient_cosine_of_disjoint_quadrants_equals_its_hand_computed_value():
    """By hand: at ratio 1 each token adds A_t (p - e_y) / N to dL/dz (L = -sum A_t rho_t / N, the
    gradient of -log pi(y) in the logits is p - e_y, p = (1/3, 1/3, 1/3); N the same token-mean
    normaliser for the arm and the full loss):
        PHR: +0.5 (p - e0)                       = 0.5 (-2/3,  1/3, 1/3)
        NHR: -0.5 (p - e1)                       = 0.5 (-1/3,  2/3, -1/3)
        full: +0.5 [(p-e0) + (p-e1)] - 0.5 [(p-e1) + (p-e2)] = 0.5 (e2 - e0) = 0.5 (-1, 0, 1)
    cos(PHR, NHR)  = (2/9 + 2/9 - 1/9) / (6/9)       = 1/2
    cos(PHR, full) = (2/3 + 1/3) / (sqrt(6)/3 sqrt(2)) = sqrt(3)/2 = 0.8660, norm ratio
                     (sqrt(6)/3) / sqrt(2) = 1/sqrt(3) = 0.5774
    PHR + NHR (the high-entropy half) = 0.5 (e1 - e0) = 0.5 (-1, 1, 0): cos with full 1/2,
    ratio 1."""
    contexts = {}
    for keep in ("PHR", "NHR", "PHR,NHR", "all"):
        cfg = RunConfig()
        cfg.quadrant.keep = keep
        cfg.objective.kl_coef = 0.0
        cfg.train.mini_batch_size = 2  # the whole batch in one mini-batch
        contexts[keep] = build_step(RunPlan.unchecked(cfg), uniform_policy())
    batch = hand_built_batch()
    g = {keep: flat_gradient(ctx, ctx.objective, batch) for keep, ctx in contexts.items()}
    cos = float(g["PHR"] @ g["NHR"] / (g["PHR"].norm() * g["NHR"].norm()))
    assert cos == pytest.approx(0.5, abs=1e-6)  # two disjoint quadrants
    assert float(g["all"].norm()) > 0

    def figures(keep):
        ctx = contexts[keep]
        return gradient_cosine(ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, 0)

    phr = figures("PHR")
    assert phr["train/gradient/cosine"] == pytest.approx(math.sqrt(3) / 2, abs=1e-6)
    assert phr["train/gradient/norm_ratio"] == pytest.approx(1 / math.sqrt(3), abs=1e-6)
    high = figures("PHR,NHR")
    assert high["train/gradient/cosine"] == pytest.approx(0.5, abs=1e-6)
    assert high["train/gradient/norm_ratio"] == pytest.approx(1.0, abs=1e-6)
    same = figures("all")
    assert same["train/gradient/cosine"] == pytest.approx(1.0, abs=1e-9)
