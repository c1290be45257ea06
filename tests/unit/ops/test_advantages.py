"""GRPO group advantages and DAPO's constant-reward groups, by hand and against a loop reference."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.ops.advantages import constant_reward_groups, group_advantages

EPS = 1e-6  # group_advantages' default, added to the std before dividing


def test_group_advantages_by_hand():
    # group 0 rewards [1, 0] -> mean 0.5, sample std sqrt(0.5) = 0.7071068
    #   -> A = +-0.5 / (0.7071068 + 1e-6) = +-0.7071058
    # group 1 rewards [1, 1, 1] -> all equal -> 0
    # group 2 rewards [0.5] -> singleton -> 0
    # group 3 rewards [1, 0, 0] -> mean 1/3, centred [2/3, -1/3, -1/3],
    #   sample var (4/9 + 1/9 + 1/9) / 2 = 1/3 -> std 0.5773503 -> A = [1.1546985, -0.5773493, -0.5773493]
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3])
    std0, std3 = math.sqrt(0.5) + EPS, math.sqrt(1 / 3) + EPS
    expected = torch.tensor(
        [0.5 / std0, -0.5 / std0, 0, 0, 0, 0, (2 / 3) / std3, -(1 / 3) / std3, -(1 / 3) / std3]
    )
    torch.testing.assert_close(group_advantages(rewards, group_ids), expected, rtol=0, atol=1e-6)


def test_group_advantages_without_std_normalisation():
    # Dr. GRPO: r - mean only. group 0 [1, 0] -> [0.5, -0.5]; group 3 [1, 0, 0] -> [2/3, -1/3, -1/3];
    # all-equal and singleton groups still 0
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3])
    expected = torch.tensor([0.5, -0.5, 0, 0, 0, 0, 2 / 3, -1 / 3, -1 / 3])
    out = group_advantages(rewards, group_ids, normalize_std=False)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_non_contiguous_interleaved_group_ids():
    # prompt 3: sequences 0, 2 with rewards [1, 0] -> mean 0.5, std 0.7071068 -> [+0.7071058, -0.7071058]
    # prompt 8: sequences 1, 3 with rewards [2, 4] -> mean 3, centred [-1, 1], std sqrt(2) = 1.4142136
    #   -> [-1, 1] / (1.4142136 + 1e-6) = [-0.7071063, +0.7071063]
    rewards = torch.tensor([1.0, 2.0, 0.0, 4.0])
    group_ids = torch.tensor([3, 8, 3, 8])
    s3, s8 = math.sqrt(0.5) + EPS, math.sqrt(2) + EPS
    expected = torch.tensor([0.5 / s3, -1 / s8, -0.5 / s3, 1 / s8])
    torch.testing.assert_close(group_advantages(rewards, group_ids), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        group_advantages(rewards, group_ids, normalize_std=False),
        torch.tensor([0.5, -1.0, -0.5, 1.0]),
        rtol=0,
        atol=1e-6,
    )


def test_all_equal_and_singleton_groups_are_exactly_zero():
    # 0/1 and 0.5 rewards are exact in float32, so the group mean equals them exactly
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.25])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 3])
    for normalize_std in (True, False):
        out = group_advantages(rewards, group_ids, normalize_std=normalize_std)
        assert torch.equal(out, torch.zeros(7))


def test_all_equal_non_dyadic_rewards_give_zero_advantage():
    # constant_reward_groups says this group is constant (max == min); the advantages should agree
    rewards = torch.tensor([0.9, 0.9, 0.9])
    group_ids = torch.zeros(3, dtype=torch.long)
    assert constant_reward_groups(rewards, group_ids).all()
    torch.testing.assert_close(
        group_advantages(rewards, group_ids), torch.zeros(3), rtol=0, atol=1e-6
    )


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="must be \\[B\\]"):
        group_advantages(torch.zeros(3), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="must be \\[B\\]"):
        group_advantages(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.long))


def loop_group_advantages(rewards, group_ids, normalize_std, eps=EPS):
    """Plain-Python reference (float64): per group mean, sample std, zeros for uninformative groups."""
    out = []
    for i, gid in enumerate(group_ids.tolist()):
        group = [float(r) for r, g in zip(rewards.tolist(), group_ids.tolist()) if g == gid]
        if len(group) < 2 or max(group) == min(group):
            out.append(0.0)
            continue
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        centred = float(rewards[i]) - mean
        out.append(centred / (std + eps) if normalize_std else centred)
    return torch.tensor(out)


@pytest.mark.parametrize("normalize_std", [True, False])
def test_group_advantages_match_loop_reference(normalize_std):
    for seed in range(30):
        gen = torch.Generator().manual_seed(seed)
        batch = 16
        # binary rewards (the RLVR case, many all-equal groups) and dyadic partial credit in {0, .25, ..., 1};
        # both are exact in float32, so "all equal" is unambiguous
        if seed % 2:
            rewards = torch.randint(0, 2, (batch,), generator=gen).float()
        else:
            rewards = torch.randint(0, 5, (batch,), generator=gen).float() / 4
        group_ids = (
            torch.randint(0, 7, (batch,), generator=gen) * 3 + 1
        )  # non-contiguous, some singletons
        got = group_advantages(rewards, group_ids, normalize_std=normalize_std)
        expected = loop_group_advantages(rewards, group_ids, normalize_std)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_group_advantages_match_loop_reference_on_continuous_rewards():
    for seed in range(10):
        gen = torch.Generator().manual_seed(100 + seed)
        rewards = torch.randn(16, generator=gen)
        group_ids = torch.randint(0, 5, (16,), generator=gen)
        expected = loop_group_advantages(rewards, group_ids, normalize_std=True)
        torch.testing.assert_close(
            group_advantages(rewards, group_ids), expected, rtol=0, atol=1e-5
        )
        # atol 1e-5 here: |A| reaches ~3 (ulp 2.4e-7) and float32 vs float64 group statistics add a few ulps


def test_constant_reward_groups_by_hand():
    # group 0 [1, 1] constant; group 4 [0, 1] not; group 9 [0.3] singleton -> constant (max == min);
    # group 2 [0, 0, 0] constant
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.3, 0.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 4, 4, 9, 2, 2, 2])
    out = constant_reward_groups(rewards, group_ids)
    assert out.dtype == torch.bool
    assert out.tolist() == [True, True, False, False, True, True, True, True]
