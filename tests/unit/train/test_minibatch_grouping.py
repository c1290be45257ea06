"""train.minibatch_grouping=query: every mini-batch of the update holds whole groups (a prompt's
responses together); shuffle (the default) deals rows one by one."""

from __future__ import annotations

import dataclasses

import torch

from quadrants.models.loading import load_policy
from quadrants.ops.balance import balanced_counts
from quadrants.train import update as update_module
from tests.unit.train.test_accumulate import context, seeded_batch


def mini_batch_groups(grouping: str, monkeypatch, steps: int = 8) -> list[list[int]]:
    """The group ids of each mini-batch of 2 rows over `steps` updates of the 6-row, 3-group
    batch (backward_minibatch replaced by a recorder: the order alone is under test)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    ctx = context("grpo", 0, model)
    settings = dataclasses.replace(ctx.update, mini_batch_size=2, minibatch_grouping=grouping)
    seen: list[list[int]] = []

    def record(model, objective, forwards, settings, mini, is_weights, generator):
        seen.append(mini.group_ids.tolist())
        return torch.zeros(()), {}

    monkeypatch.setattr(update_module, "backward_minibatch", record)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    for step in range(steps):
        update_module.update_policy(
            model, optimizer, scheduler, ctx.objective, ctx.forwards, settings, batch, step
        )
    return seen


def test_query_grouping_keeps_each_prompts_responses_in_one_mini_batch(monkeypatch):
    seen = mini_batch_groups("query", monkeypatch)
    assert len(seen) == 8 * 3  # 3 mini-batches of 2 rows per update
    assert all(a == b for a, b in seen)  # both rows of every mini-batch answer one prompt
    # the prompts' order is drawn per step: not always 0, 1, 2
    assert len({tuple(g[0] for g in seen[i : i + 3]) for i in range(0, 24, 3)}) > 1


def test_shuffle_mixes_groups_within_mini_batches(monkeypatch):
    # the default order: rows at random, so some mini-batch holds two prompts' responses (and the
    # query test above is not passing for a batch whose groups come out whole anyway)
    seen = mini_batch_groups("shuffle", monkeypatch)
    assert any(a != b for a, b in seen)


def test_balanced_grouping_gives_each_mini_batch_the_batchs_sign_proportion(monkeypatch):
    # the update's mini-batches under balanced: each holds positive and negative rows in the
    # batch's proportion (ops/balance.py), here checked against balanced_counts on the batch
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    ctx = context("grpo", 0, model)
    settings = dataclasses.replace(ctx.update, mini_batch_size=2, minibatch_grouping="balanced")
    seen: list[tuple[int, int, int]] = []

    def record(model, objective, forwards, settings, mini, is_weights, generator):
        adv = mini.advantages
        seen.append((int((adv > 0).sum()), int((adv < 0).sum()), int((adv == 0).sum())))
        return torch.zeros(()), {}

    monkeypatch.setattr(update_module, "backward_minibatch", record)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    update_module.update_policy(
        model, optimizer, scheduler, ctx.objective, ctx.forwards, settings, batch, 0
    )
    adv = batch.advantages
    classes = (int((adv > 0).sum()), int((adv < 0).sum()), int((adv == 0).sum()))
    assert seen == balanced_counts(*classes, 2)
    assert classes[0] > 0 and classes[1] > 0  # a batch with both signs: the check can fail
