"""train.micro_batch_tokens / train.forward_tokens (quadrants/train/micro_batches.py): the packing by
hand, and the accumulated update equal to the unsplit one for every objective, with quadrant
isolation and DAPO's dynamic sampling; the no-grad passes by token budget equal to one call; the
gradients freed after a step's last update."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.models.policy import behaviour_pass
from quadrants.objectives.registry import known_objectives
from quadrants.run_plan import RunPlan
from quadrants.train.context import Forwards, PassSettings
from quadrants.train.forwards import no_grad_pass
from quadrants.train.micro_batches import pack_by_tokens, pack_for_ranks, row_lengths, token_groups
from tests.unit.train.test_accumulate import backward, context, seeded_batch


def test_pack_by_tokens_by_hand():
    # lengths 5 3 8 3 2, budget 10: by length rows 4 (2), 1 (3), 3 (3), 0 (5), 2 (8);
    # [4, 1, 3] costs 3 x 3 = 9; adding row 0 would cost 4 x 5 = 20; [0] 5, + row 2: 2 x 8 = 16
    assert pack_by_tokens([5, 3, 8, 3, 2], 10) == [[4, 1, 3], [0], [2]]
    # a row over the budget runs alone: [2] x 12 > 10
    assert pack_by_tokens([2, 2, 12, 2], 10) == [[0, 1, 3], [2]]
    assert pack_by_tokens([4, 4, 4], 12) == [[0, 1, 2]]  # 3 x 4 = 12: exactly the budget
    assert pack_by_tokens([], 5) == []
    with pytest.raises(ValueError, match="must be > 0"):
        pack_by_tokens([1], 0)


def test_pack_for_ranks_by_hand():
    # 2 ranks: by length rows 5 (1), 4 (2) | 1 (3), 3 (3) | 0 (5), 2 (8); units of 2 rows.
    # [5, 4, 1, 3]: each rank runs 2 rows, 2 x 3 = 6 <= 10; adding unit [0, 2]: 3 x 8 = 24
    assert pack_for_ranks([5, 3, 8, 3, 2, 1], 10, 2) == [[5, 4, 1, 3], [0, 2]]
    # every group a multiple of the ranks, each rank's share within the budget
    lengths = [7, 1, 9, 4, 4, 12, 3, 3]
    for world in (1, 2, 4):
        for budget in (5, 9, 16, 40):
            groups = pack_for_ranks(lengths, budget, world)
            assert sorted(i for g in groups for i in g) == list(range(8))
            for group in groups:
                assert len(group) % world == 0
                assert (
                    len(group) == world
                    or len(group) // world * max(lengths[i] for i in group) <= budget
                )
    with pytest.raises(ValueError, match="do not split into 2"):
        pack_for_ranks([1, 2, 3], 10, 2)


def test_row_lengths_count_the_prompt_width_and_the_last_real_token():
    # prompt width 2 (left padded), responses of 3 columns: real tokens at 0-2, 0, none
    mask = torch.tensor(
        [[1, 1, 1, 1, 1], [0, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool
    )  # [3, 2 + 3]
    assert row_lengths(mask, 3) == [2 + 3, 2 + 1, 2 + 0]
    groups = token_groups([5, 3, 2], torch.tensor([0, 2]), 10)
    assert [g.tolist() for g in groups] == [[2, 0]]


def gradients_by_tokens(objective, tokens, model, batch, keep="all", forward_tokens=0):
    model = copy.deepcopy(model)  # Clip-Cov's draws: `backward`'s generator, the same each call
    ctx = context(objective, 0, model, keep)
    ctx.update = dataclasses.replace(
        ctx.update, micro_batch_tokens=tokens, forward_tokens=forward_tokens
    )
    loss, metrics = backward(ctx, batch)
    return loss, metrics, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("objective", known_objectives())
@pytest.mark.parametrize("keep", ["all", "PHR"])
def test_token_budget_accumulates_the_unsplit_gradient(objective, keep):
    """Rows of 4 prompt + 5, 3, 5, 2, 4, 5 response tokens: 9 7 9 6 8 9. Budget 9: each row alone
    (2 x 7 > 9); 16: [6, 7] then each other row alone (2 x 8 = 16 fits [8] + nothing longer,
    2 x 9 > 16); 27: [6, 7, 8] (3 x 8 = 24) and [9, 9, 9] (27); 100: one piece. The seeded batch has
    a constant group (DAPO drops it: dynamic sampling) and rows of every quadrant; under PHR the
    rows without a kept token run without grad only. `forward_tokens=16` packs the first no-grad
    pass differently from the grad passes (budget 27)."""
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    loss, metrics, whole = gradients_by_tokens(objective, 0, model, batch, keep)
    if keep == "all":  # (forking selects no PHR token here: its PHR gradient is 0)
        assert sum(g.abs().sum() for g in whole.values()) > 0
    budgets = ((9, 0), (16, 0), (27, 0), (27, 16), (100, 0)) if keep == "all" else ((27, 16),)
    for tokens, forward in budgets:
        split_loss, split_metrics, split = gradients_by_tokens(
            objective, tokens, model, batch, keep, forward
        )
        torch.testing.assert_close(split_loss, loss, rtol=0, atol=1e-6)
        for name, value in metrics.items():
            torch.testing.assert_close(
                split_metrics[name],
                value,
                rtol=0,
                atol=1e-6,
                equal_nan=True,
                msg=f"{tokens}: {name}",
            )
        for name, grad in whole.items():  # float32 sums in another order
            torch.testing.assert_close(
                split[name], grad, rtol=1e-4, atol=1e-6, msg=f"{tokens}: {name}"
            )


def test_grad_passes_keep_to_the_budget(monkeypatch):
    """GRPO: rows 2 and 3 (a constant group, advantage 0) carry no gradient and run without grad
    only; the others, 1 (7 tokens), 4 (8), 0 (9), 5 (9), are packed by 16: [1, 4] (2 x 8 = 16),
    [0] (2 x 9 = 18 > 16), [5]; no grad pass exceeds 16 padded tokens."""
    import quadrants.train.update as update_module

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    seen = []
    real = update_module.policy_output

    def spy(forwards, model, mini, with_entropy):
        if torch.is_grad_enabled():
            lengths = row_lengths(mini.attention_mask, mini.response_length)
            seen.append((len(lengths), max(lengths)))
        return real(forwards, model, mini, with_entropy)

    monkeypatch.setattr(update_module, "policy_output", spy)
    gradients_by_tokens("grpo", 16, model, batch)
    assert seen == [(2, 8), (1, 9), (1, 9)]
    assert all(rows * longest <= 16 for rows, longest in seen)


def test_no_grad_pass_by_tokens_equals_one_call():
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    passes = dict(temperature=1.0, chunk_size=7, batch_size=6)
    args = (model, batch.sequences, batch.attention_mask, batch.response_length)
    logp, entropy = behaviour_pass(*args, **passes)
    groups = token_groups(row_lengths(batch.attention_mask, 5), torch.arange(6), 16)
    assert len(groups) == 5
    # one process, fp32, CPU; one length bucket (each call cut to its longest row only)
    forwards = Forwards(
        PassSettings(**passes, length_buckets=1, forward_tokens=16, layout="padded")
    )
    by_tokens = no_grad_pass(forwards, *args)
    mask = batch.response_mask
    torch.testing.assert_close(by_tokens[0] * mask, logp * mask, rtol=0, atol=1e-5)
    torch.testing.assert_close(by_tokens[1] * mask, entropy * mask, rtol=0, atol=1e-5)


def test_token_budget_settings_are_checked_at_compose_time():
    cfg = RunConfig()
    cfg.train.micro_batch_tokens = 64
    cfg.train.micro_batch_size = 4
    with pytest.raises(ValueError, match="both split the mini-batch; set one"):
        RunPlan.parse(cfg)
    cfg.train.micro_batch_size = 0
    cfg.rollout.max_new_tokens = 128
    with pytest.raises(ValueError, match=r"train.micro_batch_tokens=64 is below"):
        RunPlan.parse(cfg)
    cfg.train.micro_batch_tokens = 512
    cfg.train.forward_tokens = 100
    with pytest.raises(ValueError, match=r"train.forward_tokens=100 is below"):
        RunPlan.parse(cfg)
    cfg.train.forward_tokens = 1024
    RunPlan.parse(cfg)


def test_gradients_are_freed_after_the_last_update():
    """update_policy's last optimizer step is followed by zero_grad(set_to_none=True): no .grad
    is held through the next rollout (with two mini-batches of 3 rows, two updates)."""
    from quadrants.train.update import update_policy

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    ctx = context("grpo", 0, model)
    ctx.update = dataclasses.replace(ctx.update, mini_batch_size=3)
    ctx.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ctx.scheduler = torch.optim.lr_scheduler.LambdaLR(ctx.optimizer, lambda s: 1.0)
    seen = []
    ctx.optimizer.register_step_pre_hook(
        lambda opt, *_: seen.append(sum(p.grad is not None for p in model.parameters()))
    )
    update_policy(
        ctx.model, ctx.optimizer, ctx.scheduler, ctx.objective, ctx.forwards, ctx.update, batch, 0
    )
    assert len(seen) == 2 and all(count > 0 for count in seen)  # gradients existed at each step
    assert all(p.grad is None for p in model.parameters())
