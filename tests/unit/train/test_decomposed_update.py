"""Objectives whose loss decomposes over rows (ObjectiveSpec.decomposable) run no forward without
grad in the update (train/update.py `backward_by_rows`), and log the loss, metrics and gradients of the
path that does (the spec marked non-decomposable here, the update before this change); objectives
that need a mini-batch statistic (Clip-Cov) keep their no-grad pass.

Tolerances (float32 on the CPU, the tiny policy): the loss and metrics within 1e-6 absolute (sums of
~30 terms of size ~1, a few ulp of 6e-8 each); gradients within rtol 1e-4 / atol 1e-6 (the same
products summed in another order over the micro-batches), as tests/unit/train/test_accumulate.py.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import pytest
import torch

from quadrants.models.loading import load_policy
from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.loss import compute_loss, mini_batch_normaliser
from quadrants.objectives.registry import get_objective, known_objectives, resolve_objective
from tests.unit.train.test_accumulate import PARAMS, backward, context, seeded_batch

DECOMPOSABLE = [
    name
    for name in known_objectives()
    if get_objective(name).decomposes(resolve_objective(name, PARAMS.get(name, {}))[1])
]
KEEPS = ("all", ["NHR", "NLR"], "PHR")


def test_which_objectives_decompose():
    """The registry's declarations at the default parameters (the reasons are in each module's
    `decomposition`): Clip-Cov, KL-Cov, KTAE and STEER read mini-batch statistics; forking with
    scope=mini_batch and archer with scope=mini_batch read a mini-batch quantile."""
    assert set(known_objectives()) - set(DECOMPOSABLE) == {"clip_cov", "kl_cov", "ktae", "steer"}
    for name, params in (
        ("forking", {"scope": "mini_batch"}),
        ("archer", {"scope": "mini_batch"}),
        ("archer", {"kl_normaliser": "entropy_group"}),
        ("adaptive_entropy", {"entropy_estimate": "full"}),
    ):
        spec, resolved = resolve_objective(name, params)
        assert not spec.decomposes(resolved), (name, params)
    for name in known_objectives():
        assert get_objective(name).decomposition, f"{name}: no reason recorded"


@pytest.mark.parametrize("objective", DECOMPOSABLE)
def test_decomposable_is_true_of_the_objective(objective):
    """The claim checked on the objective itself, at log-probs off the old ones (shift ±0.7): run
    on rows {0, 1, 2} and on rows {3, 4, 5} apart, it gives each row the per-token loss and the
    denominator it gives that row in the whole batch, and the two halves' losses over the whole
    batch's normaliser add up to the whole batch's loss."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    ctx = context(objective, 0, model)
    spec, params, settings = ctx.objective.spec, ctx.objective.params, ctx.objective.loss
    halves = [torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5])]
    for shift in (-0.7, 0.7):
        logp = batch.old_logp + shift * batch.response_mask
        policy = PolicyOutput(logp, batch.entropy * 0.9 if spec.wants_entropy(params) else None)
        whole = spec.fn(batch, policy, **params)
        whole_loss, _ = compute_loss(spec, params, batch, policy, settings)
        normaliser = mini_batch_normaliser(spec, params, batch, settings)
        total = torch.zeros(())
        for rows in halves:
            part_policy = PolicyOutput(
                logp[rows], None if policy.entropy is None else policy.entropy[rows]
            )
            part = spec.fn(batch.select(rows), part_policy, **params)
            torch.testing.assert_close(
                part.per_token_loss, whole.per_token_loss[rows], rtol=0, atol=1e-6
            )
            if whole.denominator_mask is not None:
                assert torch.equal(part.denominator_mask, whole.denominator_mask[rows])
            loss, _ = compute_loss(
                spec, params, batch.select(rows), part_policy, settings, normaliser=normaliser
            )
            total = total + loss
        torch.testing.assert_close(total, whole_loss, rtol=0, atol=1e-6)


def forwards_by_grad(model) -> tuple[dict[bool, int], torch.utils.hooks.RemovableHandle]:
    """A forward hook on the model: counts its forwards with and without grad."""
    counts = {True: 0, False: 0}

    def hook(module, args, output):
        counts[torch.is_grad_enabled()] += 1

    return counts, model.register_forward_hook(hook)


def run(objective, micro, model, batch, keep, *, decomposable: bool | None = None):
    """The update of one mini-batch: (loss, metrics, gradients, forwards {grad: count}); with
    `decomposable=False` the spec is marked non-decomposable: the path with the no-grad pass."""
    model = copy.deepcopy(model)
    ctx = context(objective, micro, model, keep)
    if decomposable is not None:
        spec = dataclasses.replace(ctx.objective.spec, decomposable=decomposable)
        ctx = dataclasses.replace(ctx, objective=dataclasses.replace(ctx.objective, spec=spec))
    counts, handle = forwards_by_grad(model)
    torch.manual_seed(0)
    loss, metrics = backward(ctx, batch)
    handle.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss, metrics, grads, counts


@pytest.mark.parametrize("objective", DECOMPOSABLE)
def test_decomposable_objectives_run_no_gradless_forward(objective):
    """Under isolation (keep=NHR,NLR: rows 0, 2, 3, 5 carry no gradient) and under micro-batches
    of 2 rows (every row carries some for most objectives): no forward of the model runs without
    grad; marked non-decomposable, the same update runs one (or one per micro-batch)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    for keep, micro in ((["NHR", "NLR"], 0), ("all", 2)):
        *_, counts = run(objective, micro, model, batch, keep)
        assert counts[False] == 0 and counts[True] > 0, (keep, micro, counts)
        *_, before = run(objective, micro, model, batch, keep, decomposable=False)
        assert before[False] > 0, (keep, micro, before)


def test_clip_cov_keeps_its_pass():
    """Clip-Cov centres its covariance on the mini-batch: its rows without gradient (keep=NHR,NLR)
    and, with micro-batches, every row run once without grad. (The hook counts the model's calls:
    a pass over rows of several lengths makes one call per length bucket, models/policy.py.)"""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    assert not get_objective("clip_cov").decomposes(resolve_objective("clip_cov", {})[1])
    *_, counts = run("clip_cov", 0, model, batch, ["NHR", "NLR"])
    assert counts[False] > 0 and counts[True] > 0, counts
    *_, counts = run("clip_cov", 2, model, batch, "all")
    assert counts[False] >= 3 and counts[True] >= 3, counts  # 3 micro-batches of 2 rows


def later_batch(model):
    """The batch as a later mini-batch of a step sees it (π ≠ π_old): old log-probs 0.3·N(0, 1)
    off the model's (ratios e^±0.3 and beyond: clipped, at ε 0.2-0.28, on about a third of the
    tokens) and behaviour entropies 1.25 times the model's."""
    batch = seeded_batch(model, noise=0.3)
    return dataclasses.replace(batch, entropy=batch.entropy * 1.25)


@pytest.mark.slow
@pytest.mark.parametrize("objective", DECOMPOSABLE)
def test_decomposed_update_logs_what_the_pass_logged(objective):
    """At the step's first update (π = π_old: old log-probs and entropy from the same model,
    unperturbed) and at a later one (`later_batch`), with and without isolation and
    micro-batches: the loss, every metric and every gradient equal those of the path with the
    no-grad pass, to float32 tolerance. The policy metrics (clip fractions, ratio_mean, ...) are
    over the rows that carry gradient in both paths; at a later update the rows without gradient
    have ratios other than 1, so counting them at their behaviour values (the decomposed path
    before the policy metrics were over the rows with gradient) differed here."""
    model, _ = load_policy("tiny-random", seed=0)
    for keep, micro, when in itertools.product(KEEPS, (0, 2), ("first", "later")):
        batch = seeded_batch(model, noise=0.0) if when == "first" else later_batch(model)
        where = f"keep={keep} micro={micro} {when}"
        loss, metrics, grads, counts = run(objective, micro, model, batch, keep)
        ref_loss, ref_metrics, ref_grads, _ = run(
            objective, micro, model, batch, keep, decomposable=False
        )
        assert counts[False] == 0, where
        torch.testing.assert_close(loss, ref_loss, rtol=0, atol=1e-6, msg=where)
        assert set(metrics) == set(ref_metrics), where
        for name, value in ref_metrics.items():
            torch.testing.assert_close(
                metrics[name], value, rtol=0, atol=1e-6, equal_nan=True, msg=f"{where}: {name}"
            )
        assert set(grads) == set(ref_grads), where
        for name, grad in ref_grads.items():
            torch.testing.assert_close(
                grads[name], grad, rtol=1e-4, atol=1e-6, msg=f"{where}: {name}"
            )


def logged_step(objective, model, batch, keep, monkeypatch, *, decomposable=None):
    """`update_policy` over `batch` as one step: 2 epochs of 2 mini-batches of 3 rows, plain SGD
    at lr 0.5 (the policy moves between mini-batches: ratios off 1 on later ones), no gradient
    clipping. Returns each mini-batch's (loss, metrics) as `backward_minibatch` gave them, and
    the model after the step."""
    import quadrants.train.update as update_module

    model = copy.deepcopy(model)
    ctx = context(objective, 0, model, keep)
    if decomposable is not None:
        spec = dataclasses.replace(ctx.objective.spec, decomposable=decomposable)
        ctx = dataclasses.replace(ctx, objective=dataclasses.replace(ctx.objective, spec=spec))
    update = dataclasses.replace(ctx.update, mini_batch_size=3, epochs=2, max_grad_norm=1e9)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    logged = []
    real = update_module.backward_minibatch

    def spy(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        logged.append((loss, dict(metrics)))
        return loss, metrics

    monkeypatch.setattr(update_module, "backward_minibatch", spy)
    torch.manual_seed(0)
    update_module.update_policy(
        model, optimizer, scheduler, ctx.objective, ctx.forwards, update, batch, 0
    )
    monkeypatch.setattr(update_module, "backward_minibatch", real)
    return logged, model


@pytest.mark.slow
@pytest.mark.parametrize("objective", DECOMPOSABLE)
def test_decomposed_step_logs_what_the_pass_logged(objective, monkeypatch):
    """A whole step's update of 4 mini-batches (`logged_step`) on the batch of rows without
    gradient (keep=NHR,NLR: rows 0, 2, 3, 5; keep=all: the constant group's rows 2 and 3 for the
    objectives that drop it or are inert at advantage 0): every mini-batch's loss and metrics,
    the later ones at π ≠ π_old, equal those of the path with the no-grad pass to float32
    tolerance (atol 1e-5: the two paths' weights differ by the rounding of the earlier
    mini-batches' gradients, ~1e-7, times the learning rate)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model, noise=0.0)
    for keep in (["NHR", "NLR"], "all"):
        got, _ = logged_step(objective, model, batch, keep, monkeypatch)
        ref, _ = logged_step(objective, model, batch, keep, monkeypatch, decomposable=False)
        assert len(got) == len(ref) == 4
        for index, ((loss, metrics), (ref_loss, ref_metrics)) in enumerate(zip(got, ref)):
            where = f"keep={keep} mini-batch {index}"
            torch.testing.assert_close(loss, ref_loss, rtol=0, atol=1e-5, msg=where)
            assert set(metrics) == set(ref_metrics), where
            for name, value in ref_metrics.items():
                torch.testing.assert_close(
                    metrics[name], value, rtol=0, atol=1e-5, equal_nan=True, msg=f"{where}: {name}"
                )
