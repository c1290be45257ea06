"""Row subsample means and their cluster standard error, by hand."""

from __future__ import annotations

import math

import torch

from quadrants.ops.subsample import auto_rows, ratio_mean_se, sample_rows


def test_ratio_mean_and_standard_error_by_hand():
    # 3 rows of 10: y = [1, 2, 6] over x = [1, 2, 3] tokens -> R = 9 / 6 = 1.5
    # residuals y - R x = [-0.5, -1, 1.5] -> squares sum 3.5; fpc 1 - 3/10 = 0.7; n (n - 1) = 6
    # SE = sqrt(0.7 * 3.5 / 6) / (6 / 3) = sqrt(0.408333) / 2 = 0.319505
    values = torch.tensor([[1.0, 5.0, 0.0], [1.0, 1.0, 9.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    mean, se = ratio_mean_se(values, mask, population=10)
    torch.testing.assert_close(mean, torch.tensor(1.5), rtol=0, atol=1e-6)
    torch.testing.assert_close(se, torch.tensor(math.sqrt(0.7 * 3.5 / 6) / 2), rtol=0, atol=1e-6)


def test_every_row_sampled_is_the_exact_mean_with_zero_error_and_empty_is_zero():
    values, mask = (
        torch.tensor([[1.0, 3.0], [5.0, 0.0]]),
        torch.tensor([[True, True], [True, False]]),
    )
    mean, se = ratio_mean_se(values, mask, population=2)  # (1 + 3 + 5) / 3 = 3, n = N -> SE 0
    assert mean.item() == 3.0 and se.item() == 0.0
    mean, se = ratio_mean_se(values, torch.zeros_like(mask), population=5)
    assert mean.item() == 0.0 and se.item() == 0.0


def test_sample_rows_is_seeded_distinct_and_sorted():
    a = sample_rows(64, 8, torch.Generator().manual_seed(3))
    b = sample_rows(64, 8, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and len(set(a.tolist())) == 8 and a.tolist() == sorted(a.tolist())
    assert torch.equal(sample_rows(5, 0, torch.Generator()), torch.arange(5))
    assert torch.equal(sample_rows(5, 9, torch.Generator()), torch.arange(5))


def test_standard_error_covers_the_full_mean_at_its_rate():
    # invariant on seeded data: over 400 draws of 8 of 64 rows, the full-batch mean lies within
    # 2 SE of the subsample mean about 95 % of the time (accept 88-99 %)
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(64, 20, generator=gen) * torch.rand(64, 1, generator=gen) * 3
    mask = torch.rand(64, 20, generator=gen) < 0.4
    full, _ = ratio_mean_se(values, mask, population=64)
    hits = 0
    for _ in range(400):
        rows = sample_rows(64, 8, gen)
        mean, se = ratio_mean_se(values[rows], mask[rows], population=64)
        hits += bool((mean - full).abs() <= 2 * se)
    assert 0.88 <= hits / 400 <= 0.99, hits


def test_auto_rows_is_a_sixteenth_of_the_batch_at_least_two_at_most_all():
    # ceil(64 / 16) = 4; ceil(16 / 16) = 1 -> 2; ceil(12 / 16) = 1 -> 2; ceil(4096 / 16) = 256;
    # ceil(65 / 16) = 5; ceil(100 / 16) = 7
    assert [auto_rows(n) for n in (64, 16, 12, 4096, 65, 100)] == [4, 2, 2, 256, 5, 7]
    # the floor of 2 (a standard error needs two rows), capped by the batch itself
    assert [auto_rows(n) for n in (8, 2, 1)] == [2, 2, 1]
    # at least one row per rank: 4 ranks, 16 rows -> 4
    assert auto_rows(16, minimum=4) == 4
