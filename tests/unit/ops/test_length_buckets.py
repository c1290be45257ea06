"""Response-length buckets (quadrants/ops/length_buckets.py): spans, and the split that minimises
the padded area, checked by hand and against every possible split."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from quadrants.ops.length_buckets import _best_splits, length_buckets, response_spans


def _area(lengths: list[int], ends: list[int]) -> int:
    cuts = [0, *ends]
    return sum((b - a) * lengths[b - 1] for a, b in zip(cuts, cuts[1:]))


def test_spans_by_hand() -> None:
    mask = torch.tensor(
        [
            [1, 1, 1, 0],  # last real token at index 2: span 3
            [0, 0, 0, 0],  # no response token: 0
            [1, 1, 1, 1],  # 4
            [1, 0, 1, 0],  # a hole does not end the row early: 3
        ],
        dtype=torch.bool,
    )
    assert response_spans(mask).tolist() == [3, 0, 4, 3]


def test_the_split_by_hand() -> None:
    # spans 10 10 2 3 10 0 (T = 10); sorted, with 0 counted as 1: 1 2 3 10 10 10.
    # one bucket: 6 x 10 = 60. Two: [1 2 3] [10 10 10] = 3 x 3 + 3 x 10 = 39, saves 21 >= 60/16.
    # Three: [1] [2 3] [10 ...] = 1 + 6 + 30 = 37, saves 2 < 3.75: two buckets.
    spans = torch.tensor([10, 10, 2, 3, 10, 0])
    assert [a for a, _ in _best_splits(torch.tensor([1, 2, 3, 10, 10, 10]), 3)] == [60, 39, 37]
    buckets = length_buckets(spans, max_buckets=4)
    assert [(rows.tolist(), length) for rows, length in buckets] == [
        ([5, 2, 3], 3),
        ([0, 1, 4], 10),
    ]
    # a higher bar keeps one bucket: every row, in order, cut to the longest span
    ((rows, length),) = length_buckets(spans, max_buckets=4, min_gain=0.5)
    assert rows.tolist() == [0, 1, 2, 3, 4, 5] and length == 10
    ((rows, length),) = length_buckets(spans, max_buckets=1)
    assert rows.tolist() == [0, 1, 2, 3, 4, 5] and length == 10
    # spans 3 2 3: [2] [3 3] = 2 + 6 = 8 saves 1 of 9 (>= 9/16): two buckets, cut to 2 and 3
    buckets = length_buckets(torch.tensor([3, 2, 3]), max_buckets=4)
    assert [(rows.tolist(), length) for rows, length in buckets] == [([1], 2), ([0, 2], 3)]


@pytest.mark.slow  # an exhaustive search over every split of many length lists (seconds)
def test_the_programme_finds_the_least_area_of_every_split() -> None:
    """Exhaustive over every way to cut 1..8 sorted lengths into at most k runs."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        lengths = sorted(rng.randint(1, 12) for _ in range(n))
        results = _best_splits(torch.tensor(lengths), 4)
        for runs, (area, ends) in enumerate(results, start=1):
            brute = min(
                _area(lengths, [*cuts, n])
                for r in range(runs)
                for cuts in itertools.combinations(range(1, n), r)
            )
            assert area == brute == _area(lengths, ends), (lengths, runs)
            assert ends[-1] == n and ends == sorted(set(ends)) and len(ends) <= runs


def test_buckets_hold_every_row_once_and_cover_its_span() -> None:
    generator = torch.Generator().manual_seed(1)
    for max_buckets in (1, 2, 4, 8):
        spans = torch.randint(0, 300, (97,), generator=generator)
        spans[:40] = 300  # a block of rows at the limit, as truncated responses are
        buckets = length_buckets(spans, max_buckets=max_buckets)
        assert 1 <= len(buckets) <= max_buckets
        rows = torch.cat([r for r, _ in buckets])
        assert sorted(rows.tolist()) == list(range(97))
        for bucket_rows, length in buckets:
            assert length == max(int(spans[bucket_rows].max()), 1)
        area = sum(len(r) * length for r, length in buckets)
        assert area <= 97 * 300
        if len(buckets) > 1:  # each extra bucket saved at least 1/16 of the whole
            assert 97 * 300 - area >= (len(buckets) - 1) * 97 * 300 / 16
