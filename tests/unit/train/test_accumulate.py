"""train.micro_batch_size: a mini-batch's gradient accumulated over micro-batches equals the unsplit
one, for every registered objective (the mini-batch's normaliser, constant groups dropped globally,
batch-level selections over the whole mini-batch). Under quadrant isolation the rows without a kept
token run without grad only, and the gradient, loss and metrics are still the one-call ones."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.models.policy import behaviour_pass, response_logprobs
from quadrants.objectives.batch import PolicyOutput, make_token_batch
from quadrants.objectives.loss import compute_loss, objective_output
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.train.context import StepContext
from quadrants.train.gradless_rows import equal_shares, rows_with_gradient
from quadrants.train.update import backward_minibatch

# Clip-Cov with a covariance window that holds candidates here (~46 % of the tokens, 29 % drawn): its
# random draw must be the same in every grad pass of a mini-batch (the defaults select none here)
PARAMS = {
    "clip_cov": {"fraction": 0.3, "cov_lb": 0.0, "cov_ub": 100.0},
    "kl_cov": {"fraction": 0.05},
}


def seeded_batch(
    model, *, rows=6, prompt=4, length=5, rewards=(1.0, 0.0, 1.0, 1.0, 0.0, 1.0), noise=0.05
):
    # 3 groups of 2 sequences, rewards [1, 0 | 1, 1 | 0, 1]: the middle group is constant (DAPO drops it);
    # responses of lengths 5, 3, 5, 2, 4, 5 (right padding); old log-probs from the model, perturbed
    # by `noise` so that the ratios are not all 1 (noise=0: the step's first update, π = π_old). Advantages: rows 0 and 5 positive, 1 and 4 negative, 2 and 3
    # zero (which the quadrant split counts as positive)
    gen = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, 60, (rows, prompt + length), generator=gen)
    response_mask = torch.arange(length)[None] < torch.tensor([5, 3, 5, 2, 4, 5])[:, None]
    attention_mask = torch.cat([torch.ones(rows, prompt, dtype=torch.bool), response_mask], dim=1)
    logp, entropy = behaviour_pass(
        model, sequences, attention_mask, length, temperature=1.0, chunk_size=7, batch_size=rows
    )
    logp = logp + noise * torch.randn(rows, length, generator=gen)
    return make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logp=logp * response_mask,
        entropy=entropy * response_mask,
        rewards=torch.tensor(rewards),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
    )


def context(objective: str, micro: int, model, keep="all", kl_coef=0.0) -> StepContext:
    cfg = RunConfig()
    cfg.objective.kl_coef = kl_coef
    cfg.quadrant.keep = keep
    cfg.objective.name = objective
    cfg.objective.params = PARAMS.get(objective, {})
    cfg.train.micro_batch_size = micro
    cfg.train.entropy_chunk_size = 7
    return build_step(RunPlan.unchecked(cfg), model)


def draws() -> torch.Generator:
    """The objective's draws (Clip-Cov's subset): the same generator state in every path."""
    return torch.Generator().manual_seed(0)


def backward(ctx: StepContext, batch, is_weights=None, generator=None):
    """`backward_minibatch` with the context's objective, forwards and update settings, and a
    generator of `draws()` unless one is given."""
    return backward_minibatch(
        ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, is_weights,
        draws() if generator is None else generator,
    )  # fmt: skip


def gradients(objective: str, micro: int, model, batch, keep="all", kl_coef=0.0):
    model = copy.deepcopy(model)
    loss, metrics = backward(context(objective, micro, model, keep, kl_coef), batch)
    return (
        loss,
        metrics,
        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
    )


@pytest.mark.parametrize("objective", known_objectives())
def test_micro_batches_accumulate_the_unsplit_gradient(objective):
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    loss, metrics, whole = gradients(objective, 0, model, batch)
    assert sum(g.abs().sum() for g in whole.values()) > 0
    for micro in (1, 2, 4):  # 6 of 1; 3 of 2; one of 4 and one of 2 (rows dealt by length)
        split_loss, split_metrics, split = gradients(objective, micro, model, batch)
        torch.testing.assert_close(split_loss, loss, rtol=0, atol=1e-6)
        for name, value in metrics.items():
            torch.testing.assert_close(
                split_metrics[name],
                value,
                rtol=0,
                atol=1e-6,
                equal_nan=True,
                msg=f"{micro}: {name}",
            )
        assert set(split) == set(whole)
        for name, grad in whole.items():  # float32 sums in another order
            torch.testing.assert_close(
                split[name], grad, rtol=1e-4, atol=1e-6, msg=f"{micro}: {name}"
            )


def test_micro_batches_hold_rows_of_similar_length(monkeypatch):
    """Rows are dealt by response length (stable): lengths 5 3 5 2 4 5 -> rows 3 1 | 4 0 | 2 5,
    so each micro-batch's forward is cut after its own longest row (2+3, 4+5, 5+5 positions)."""
    import quadrants.train.update as update_module

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    seen = []
    real = update_module.policy_output

    def spy(forwards, model, mini, with_entropy):
        if torch.is_grad_enabled():
            seen.append(mini.response_mask.sum(1).tolist())
        return real(forwards, model, mini, with_entropy)

    monkeypatch.setattr(update_module, "policy_output", spy)
    gradients("w_reinforce", 2, model, batch)  # every row carries gradient under W-REINFORCE
    assert seen == [[2, 3], [4, 5], [5, 5]]


def one_call_gradients(objective: str, model, batch, keep, kl_coef=0.0):
    """The reference: every row in one forward with grad, the loss, its backward; the metrics that
    read the policy over the rows that carry gradient (`rows_with_gradient`), as every path of the
    update logs them."""
    model = copy.deepcopy(model)
    ctx = context(objective, 0, model, keep, kl_coef)
    logp, entropy = response_logprobs(
        model,
        batch.sequences,
        batch.attention_mask,
        batch.response_length,
        temperature=1.0,
        chunk_size=7,
        with_entropy=ctx.objective.spec.wants_entropy(ctx.objective.params),
    )
    spec, params, settings = ctx.objective.spec, ctx.objective.params, ctx.objective.loss
    rows = rows_with_gradient(batch, settings, spec, params)
    loss, metrics = compute_loss(
        spec, params, batch, PolicyOutput(logp, entropy), settings, rows=rows, generator=draws()
    )
    loss.backward()
    return loss.detach(), metrics, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_rows_with_gradient_by_hand():
    """Advantages +, -, 0, 0, -, + (zero counts as positive): the negative quadrants keep rows 1
    and 4; the positive ones rows 0, 2, 3, 5; no isolation: every row (None)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    negative = rows_with_gradient(batch, context("grpo", 0, model, ["NHR", "NLR"]).objective.loss)
    positive = rows_with_gradient(batch, context("grpo", 0, model, ["PHR", "PLR"]).objective.loss)
    assert negative.tolist() == [False, True, False, False, True, False]
    assert positive.tolist() == [True, False, True, True, False, True]
    assert rows_with_gradient(batch, context("grpo", 0, model).objective.loss) is None
    high = rows_with_gradient(batch, context("grpo", 0, model, "PHR").objective.loss)
    has_high = (batch.quadrants.PHR & batch.response_mask).any(1)
    assert high.tolist() == has_high.tolist() and not high[[1, 4]].any()


def carried_rows(objective, keep="all", params=None):
    model, _ = load_policy("tiny-random", seed=0)
    ctx = context(objective, 0, model, keep)
    spec, resolved = resolve_objective(objective, params or PARAMS.get(objective, {}))
    rows = rows_with_gradient(seeded_batch(model), ctx.objective.loss, spec, resolved)
    return None if rows is None else rows.tolist()


def test_rows_outside_the_denominator_by_hand():
    """DAPO's dynamic sampling drops the constant group (rows 2, 3): they carry no gradient, with or
    without isolation. Forking's denominator is read only when it selects on the behaviour entropy,
    not on the current one (known only after the forward); its rows 2 and 3 have advantage 0,
    though, which it is inert to (next test)."""
    assert carried_rows("dapo") == [True, True, False, False, True, True]
    assert carried_rows("dapo", ["PHR", "PLR"]) == [True, False, False, False, False, True]
    for objective in ("hapo", "entroadv", "entroreg"):
        assert carried_rows(objective) == [True, True, False, False, True, True], objective
    assert carried_rows("w_reinforce") is None
    forking = carried_rows("forking")
    assert forking is not None and not forking[2] and not forking[3]
    current = {"entropy_source": "current", "scope": "mini_batch"}
    assert carried_rows("forking", params=current) == [True, True, False, False, True, True]


def test_rows_with_zero_advantage_by_hand():
    """Rows 2 and 3 (the constant group) have advantage exactly 0. GRPO keeps them in its
    denominator, but its per-token loss there is max(−0·r, −0·clip(r)) = 0 for every ratio, so they
    carry no gradient; the same holds for DAPO without dynamic sampling, Clip-Cov and forking. With
    a KL term (kl_coef > 0) they do carry gradient (the KL pulls every counted token), and so they
    do under W-REINFORCE (−w·r with w = λ or −1 by reward, never 0), EntroReg without dynamic
    sampling (its entropy bonus) and KL-Cov (its penalty on selected tokens): every row (None)."""
    carried = [True, True, False, False, True, True]
    assert carried_rows("grpo") == carried
    assert carried_rows("grpo", ["PHR", "PLR"]) == [True, False, False, False, False, True]
    assert carried_rows("grpo", ["NHR", "NLR"]) == [False, True, False, False, True, False]
    assert carried_rows("dapo", params={"dynamic_sampling": False}) == carried
    assert carried_rows("clip_cov") == carried
    assert carried_rows("forking", params={"dynamic_sampling": False}) is not None
    model, _ = load_policy("tiny-random", seed=0)
    with_kl = context("grpo", 0, model, kl_coef=0.1).objective.loss
    spec, params = resolve_objective("grpo", {})
    assert rows_with_gradient(seeded_batch(model), with_kl, spec, params) is None
    assert carried_rows("w_reinforce") is None
    assert carried_rows("entroreg", params={"dynamic_sampling": False}) is None
    assert carried_rows("kl_cov") is None


@pytest.mark.parametrize("objective", known_objectives())
def test_zero_advantage_inert_is_true_of_the_objective(objective):
    """The registry's claim, checked on the objective itself: where an objective says a token with
    advantage 0 is inert, its per-token loss on rows 2 and 3 (advantage 0) is exactly 0 and so is
    the gradient there, for log-probs far from the old ones (ratios e^±1.5, clipped and not). An
    objective that makes no such claim must not be inert there (W-REINFORCE, EntroReg without
    dynamic sampling): the flag is not decorative."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    params = {
        **PARAMS.get(objective, {}),
        **(
            {"dynamic_sampling": False}
            if objective in ("dapo", "hapo", "entroadv", "entroreg", "forking")
            else {}
        ),
    }
    spec, params = resolve_objective(objective, params)
    zero = batch.advantages == 0
    assert zero.tolist() == [False, False, True, True, False, False]
    for shift in (-1.5, 0.0, 1.5):
        logp = (batch.old_logp + shift).clone().requires_grad_(True)
        entropy = batch.entropy.clone().requires_grad_(True) if spec.wants_entropy(params) else None
        out = objective_output(spec, params, batch, PolicyOutput(logp, entropy), draws())
        inputs = [logp] if entropy is None else [logp, entropy]
        grads = torch.autograd.grad(out.per_token_loss.sum(), inputs, allow_unused=True)
        inert = bool((out.per_token_loss[zero] == 0).all()) and all(
            g is None or bool((g[zero] == 0).all()) for g in grads
        )
        if spec.inert_at_zero_advantage(params):
            assert inert, f"{objective} shift={shift}"
        elif objective in ("w_reinforce", "entroreg"):
            assert not inert, f"{objective} shift={shift}"


@pytest.mark.slow
@pytest.mark.parametrize("objective", known_objectives())
def test_rows_without_gradient_change_nothing(objective):
    """Without isolation (the DAPO family still drops the constant group's rows) and under each
    isolation, with and without micro-batches: the loss, every metric and every gradient equal one
    forward with grad over every row (the policy metrics over the rows with gradient,
    `one_call_gradients`)."""
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    for keep in ("all", ["NHR", "NLR"], "PHR", "NLR", ["PHR", "PLR"]):
        loss, metrics, whole = one_call_gradients(objective, model, batch, keep)
        for micro in (0, 2):
            got_loss, got_metrics, got = gradients(objective, micro, model, batch, keep)
            where = f"keep={keep} micro={micro}"
            torch.testing.assert_close(got_loss, loss, rtol=0, atol=1e-6, msg=where)
            assert set(got_metrics) == set(metrics)
            for name, value in metrics.items():
                torch.testing.assert_close(
                    got_metrics[name],
                    value,
                    rtol=0,
                    atol=1e-6,
                    equal_nan=True,
                    msg=f"{where}: {name}",
                )
            assert set(got) == set(whole)
            for name, grad in whole.items():
                torch.testing.assert_close(
                    got[name], grad, rtol=1e-4, atol=1e-6, msg=f"{where}: {name}"
                )


def test_zero_advantage_rows_with_kl_change_nothing():
    """GRPO with a KL term to a reference (k3, kl_coef 0.1; reference log-probs 0.1 below the old
    ones on every token): the zero-advantage rows now carry the KL's gradient, so every row runs
    with grad, and the loss, metrics and gradients equal one call over every row."""
    model, _ = load_policy("tiny-random", seed=0)
    plain = seeded_batch(model)
    batch = dataclasses.replace(plain, ref_logp=plain.old_logp - 0.1)
    loss, metrics, whole = one_call_gradients("grpo", model, batch, "all", kl_coef=0.1)
    got_loss, got_metrics, got = gradients("grpo", 0, model, batch, "all", kl_coef=0.1)
    assert "kl_ref" in metrics
    torch.testing.assert_close(got_loss, loss, rtol=0, atol=1e-6)
    for name, value in metrics.items():
        torch.testing.assert_close(
            got_metrics[name], value, rtol=0, atol=1e-6, equal_nan=True, msg=name
        )
    for name, grad in whole.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_forking_on_the_current_entropy_skips_zero_advantage_rows(monkeypatch):
    """Forking selecting on the current policy's entropy (known only after the forward) still
    skips the zero-advantage rows 2 and 3, whose entropy then comes from the no-grad pass: the
    selection, loss, metrics and gradients equal one call over every row."""
    current = {"entropy_source": "current", "scope": "mini_batch"}
    monkeypatch.setitem(PARAMS, "forking", current)
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    assert carried_rows("forking", params=current) == [True, True, False, False, True, True]
    loss, metrics, whole = one_call_gradients("forking", model, batch, "all")
    for micro in (0, 2):
        got_loss, got_metrics, got = gradients("forking", micro, model, batch, "all")
        torch.testing.assert_close(got_loss, loss, rtol=0, atol=1e-6)
        assert 0 < float(metrics["selected_frac"]) < 1
        for name, value in metrics.items():
            torch.testing.assert_close(
                got_metrics[name], value, rtol=0, atol=1e-6, equal_nan=True, msg=name
            )
        for name, grad in whole.items():
            torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rows_without_gradient_get_no_grad_forward(monkeypatch):
    """Clip-Cov (its covariance is centred on the mini-batch: not decomposable), keep=NHR,NLR:
    rows 1 and 4 (response lengths 3 and 4) are the only rows a forward with grad sees; the other
    four (lengths 5, 5, 2, 5) run once without grad. With micro-batches of 1 every row runs
    without grad first and rows 1 and 4 then one at a time, shortest first. GRPO and DAPO
    decompose over rows: the same rows run with grad, and no forward runs without grad."""
    import quadrants.train.update as update_module

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    seen = {True: [], False: []}
    real = update_module.policy_output

    def spy(forwards, model, mini, with_entropy):
        seen[torch.is_grad_enabled()].append(mini.response_mask.sum(1).tolist())
        return real(forwards, model, mini, with_entropy)

    monkeypatch.setattr(update_module, "policy_output", spy)
    gradients("clip_cov", 0, model, batch, ["NHR", "NLR"])
    assert seen == {True: [[3, 4]], False: [[5, 5, 2, 5]]}
    seen = {True: [], False: []}
    gradients("clip_cov", 1, model, batch, ["NHR", "NLR"])
    assert seen == {True: [[3], [4]], False: [[2], [3], [4], [5], [5], [5]]}
    seen = {True: [], False: []}
    gradients("grpo", 0, model, batch, ["NHR", "NLR"])
    assert seen == {True: [[3, 4]], False: []}
    seen = {True: [], False: []}
    gradients("grpo", 1, model, batch, ["NHR", "NLR"])
    assert seen == {True: [[3], [4]], False: []}
    seen = {True: [], False: []}  # DAPO without isolation: the constant group (rows 2, 3) idle
    gradients("dapo", 0, model, batch)
    assert seen == {True: [[3, 4, 5, 5]], False: []}
    seen = {True: [], False: []}  # Clip-Cov: the same rows, idle for their advantage of 0
    gradients("clip_cov", 0, model, batch)
    assert seen == {True: [[3, 4, 5, 5]], False: [[5, 2]]}


def test_no_row_with_gradient_gives_zero_gradients():
    """Every group constant (all rewards 1): every advantage is 0, counted positive, so NHR keeps
    no row, and without isolation GRPO is inert on every row. No forward runs with grad; the loss
    is 0 as in one call, and every parameter's gradient is exactly zero (not None: the optimizer
    steps as it would after a zero loss's backward). The metrics that read the policy are NaN in
    both (no trained token to describe: objectives/batch.py `PolicyMetric.over_rows`)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model, rewards=(1.0,) * 6)
    for keep in ("NHR", "all"):  # keep=all: GRPO is inert on every row (advantage 0)
        loss, metrics, whole = one_call_gradients("grpo", model, batch, keep)
        got_loss, got_metrics, got = gradients("grpo", 0, model, batch, keep)
        assert float(got_loss) == float(loss) == 0.0
        for name, value in metrics.items():
            torch.testing.assert_close(
                got_metrics[name], value, rtol=0, atol=1e-6, equal_nan=True, msg=name
            )
        assert set(got) == set(whole) == {n for n, _ in model.named_parameters()}
        assert all(bool((g == 0).all()) for g in got.values())
        assert all(bool((g == 0).all()) for g in whole.values())


def test_equal_shares_by_hand():
    """Sharded ranks: idle rows join the grad pass, first ones first, until both passes split
    evenly; with no row carrying gradient, one row per rank still runs with grad (its gradient is
    zero) so that every rank makes the same calls."""
    rows = torch.tensor([False, True, False, False, True, True])
    assert equal_shares(rows, 2).tolist() == [True, True, False, False, True, True]
    assert equal_shares(rows, 3).tolist() == rows.tolist()  # 3 with grad, 3 without
    assert equal_shares(rows, 6).tolist() == [True] * 6
    none = torch.zeros(6, dtype=torch.bool)
    assert equal_shares(none, 2).tolist() == [True, True, False, False, False, False]
    for world in (1, 2, 3, 6):
        for bits in range(64):
            carried = torch.tensor([bool(bits >> i & 1) for i in range(6)])
            shares = equal_shares(carried, world)
            assert bool((shares | ~carried).all())  # every row with gradient stays
            assert int(shares.sum()) % world == 0 and int((~shares).sum()) % world == 0
            assert shares.any()
            assert int(shares.sum()) - int(carried.sum()) < max(world, 1) + (not carried.any())


def test_every_grad_pass_draws_what_one_call_draws():
    """Clip-Cov split into micro-batches of 2 rows (its 4 rows with gradient by length: 1 4 | 0 5;
    rows 2 and 3, of advantage 0, run without grad): each grad pass computes the whole mini-batch's loss and must detach the same tokens as the unsplit
    call, so every pass starts from the generator's state before the first, and the generator
    ends where the one call leaves it (the next mini-batch draws on from there). The first pass's
    draw without that replay would be another one: the second pass then detaches other tokens."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    one, split = draws(), draws()
    backward(context("clip_cov", 0, copy.deepcopy(model)), batch, generator=one)
    backward(context("clip_cov", 2, copy.deepcopy(model)), batch, generator=split)
    assert torch.equal(split.get_state(), one.get_state())
    assert not torch.equal(one.get_state(), draws().get_state())  # the call drew


def test_the_update_leaves_the_default_generators_alone():
    """The objective draws from the generator it is given only: torch's default generator is
    where it was after a Clip-Cov update, split or not, and two generators in the same state
    give the same loss and gradient."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    torch.manual_seed(7)
    state = torch.get_rng_state()
    for micro in (0, 2):
        backward(context("clip_cov", micro, copy.deepcopy(model)), batch)
    assert torch.equal(torch.get_rng_state(), state)
    first, second = (gradients("clip_cov", 2, model, batch) for _ in range(2))
    assert float(first[0]) == float(second[0])
    assert all(torch.equal(first[2][name], second[2][name]) for name in first[2])
