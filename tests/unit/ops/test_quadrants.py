"""Quadrant split by hand for each threshold rule, threshold validation, and the partition invariant."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from quadrants.ops.quadrants import (
    THRESHOLD_RULES,
    Quadrant,
    entropy_threshold,
    masked_quantile,
    quantile_of_sorted,
    split_quadrants,
    validate_threshold,
)

T, F = True, False

# Two prompts, two rollouts each. Sequence 1's last token (9.0) is padding.
# group 0 (sequences 0, 1) response entropies 1.0, 0.0, 0.5, 2.0, 0.5 -> mean 4.0 / 5 = 0.8
# group 1 (sequences 2, 3) response entropies 0.1, 0.3, 0.2, 0.6, 0.2 -> mean 1.4 / 5 = 0.28
ENTROPY = torch.tensor(
    [
        [1.0, 0.0, 0.5],
        [2.0, 0.5, 9.0],
        [0.1, 0.3, 0.0],
        [0.2, 0.6, 0.2],
    ]
)
RESPONSE_MASK = torch.tensor([[T, T, T], [T, T, F], [T, T, F], [T, T, T]])
ADVANTAGES = torch.tensor([1.0, -1.0, 0.0, -0.5])  # sequence 2 has A = 0: counts as positive
GROUP_IDS = torch.tensor([0, 0, 1, 1])
NONE = [F, F, F]


def _split(rule, value=None):
    return split_quadrants(ENTROPY, ADVANTAGES, RESPONSE_MASK, GROUP_IDS, rule=rule, value=value)


def _assert_masks(masks, expected):
    for name, rows in expected.items():
        assert masks[name].tolist() == rows, name


def test_group_mean_split_by_hand():
    # group 0 threshold 0.8: high = 1.0, 2.0; group 1 threshold 0.28: high = 0.3, 0.6
    # (a single batch mean, 5.4 / 10 = 0.54, would put sequence 2's 0.3 low: the threshold is per group)
    masks = _split("group_mean")
    torch.testing.assert_close(
        masks.threshold.float(), torch.tensor([0.8, 0.8, 0.28, 0.28]), rtol=0, atol=1e-6
    )
    _assert_masks(
        masks,
        {
            "PHR": [[T, F, F], NONE, [F, T, F], NONE],
            "PLR": [[F, T, T], NONE, [T, F, F], NONE],
            "NHR": [NONE, [T, F, F], NONE, [F, T, F]],
            "NLR": [NONE, [F, T, F], NONE, [T, F, T]],
        },
    )


def test_batch_quantile_median_split_by_hand():
    # the 10 response entropies sorted: 0, 0.1, 0.2, 0.2, 0.3, 0.5, 0.5, 0.6, 1.0, 2.0 (padding 9.0 excluded)
    # q = 0.5: position 0.5 * 9 = 4.5 -> between 0.3 and 0.5 -> 0.4; high = 0.5, 0.5, 0.6, 1.0, 2.0
    masks = _split("batch_quantile", 0.5)
    torch.testing.assert_close(masks.threshold, torch.full((4,), 0.4), rtol=0, atol=1e-6)
    _assert_masks(
        masks,
        {
            "PHR": [[T, F, T], NONE, NONE, NONE],
            "PLR": [[F, T, F], NONE, [T, T, F], NONE],
            "NHR": [NONE, [T, T, F], NONE, [F, T, F]],
            "NLR": [NONE, NONE, NONE, [T, F, T]],
        },
    )


def test_batch_quantile_80_20_split_by_hand():
    # q = 0.8: position 0.8 * 9 = 7.2 -> 0.6 + 0.2 * (1.0 - 0.6) = 0.68; high = 1.0, 2.0 (top 2 of 10 = 20 %)
    masks = _split("batch_quantile", 0.8)
    torch.testing.assert_close(masks.threshold, torch.full((4,), 0.68), rtol=0, atol=1e-6)
    _assert_masks(
        masks,
        {
            "PHR": [[T, F, F], NONE, NONE, NONE],
            "PLR": [[F, T, T], NONE, [T, T, F], NONE],
            "NHR": [NONE, [T, F, F], NONE, NONE],
            "NLR": [NONE, [F, T, F], NONE, [T, T, T]],
        },
    )
    high = masks.PHR | masks.NHR
    assert int(high.sum()) == 2 and int(RESPONSE_MASK.sum()) == 10


def test_fixed_threshold_split_by_hand():
    # tau = 0.5: H >= 0.5 is high, so the two tokens at exactly 0.5 are high
    masks = _split("fixed", 0.5)
    torch.testing.assert_close(masks.threshold, torch.full((4,), 0.5), rtol=0, atol=0)
    _assert_masks(
        masks,
        {
            "PHR": [[T, F, T], NONE, NONE, NONE],
            "PLR": [[F, T, F], NONE, [T, T, F], NONE],
            "NHR": [NONE, [T, T, F], NONE, [F, T, F]],
            "NLR": [NONE, NONE, NONE, [T, F, T]],
        },
    )


def test_group_with_identical_entropies_is_all_high():
    # every token equals the group mean 0.1, and H >= threshold is high -> all PHR
    masks = split_quadrants(
        torch.full((1, 7), 0.1),
        torch.tensor([1.0]),
        torch.ones(1, 7, dtype=torch.bool),
        torch.tensor([0]),
    )
    assert masks.PHR.all()


def test_zero_advantage_counts_as_positive():
    # one sequence, A = 0, entropies [1, 0] with tau 0.5 -> PHR [T, F], PLR [F, T], nothing negative
    masks = split_quadrants(
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([0.0]),
        torch.tensor([[T, T]]),
        torch.tensor([0]),
        rule="fixed",
        value=0.5,
    )
    assert masks.PHR.tolist() == [[T, F]] and masks.PLR.tolist() == [[F, T]]
    assert not masks.NHR.any() and not masks.NLR.any()


def test_masks_lookup_by_name_and_union():
    masks = _split("fixed", 0.5)
    assert torch.equal(masks["nhr"], masks.NHR)  # names are case-insensitive
    assert torch.equal(masks.union(["PHR", "NHR"]), (ENTROPY >= 0.5) & RESPONSE_MASK)
    assert torch.equal(masks.union([]), torch.zeros(4, 3, dtype=torch.bool))


def test_masks_lookup_by_enum_member():
    # Quadrant is a str subclass; members must not be sent through str() (which gives "Quadrant.NHR")
    masks = _split("fixed", 0.5)
    assert Quadrant.parse(Quadrant.NHR) is Quadrant.NHR
    assert torch.equal(masks[Quadrant.NHR], masks.NHR)
    assert torch.equal(masks.union([Quadrant.PHR, Quadrant.NHR]), (ENTROPY >= 0.5) & RESPONSE_MASK)


def test_quadrant_parse():
    assert Quadrant.parse("PLR") is Quadrant.PLR
    assert Quadrant.parse("nlr") is Quadrant.NLR


def test_quadrant_parse_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown quadrant 'PXR'.*'PHR', 'PLR', 'NHR', 'NLR'"):
        Quadrant.parse("PXR")


# --- thresholds -----------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0.0, 0.1, 0.25, 0.5, 0.8, 0.95, 1.0])
def test_masked_quantile_matches_numpy_linear_interpolation(q):
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        values = torch.rand(7, 13, generator=gen) * 4
        mask = torch.rand(7, 13, generator=gen) < 0.6
        expected = np.quantile(
            values[mask].double().numpy(), q
        )  # numpy's default method is "linear"
        torch.testing.assert_close(
            masked_quantile(values, mask, q), torch.tensor(expected).float(), rtol=0, atol=1e-6
        )
        torch.testing.assert_close(
            masked_quantile(values, mask, q), torch.quantile(values[mask], q), rtol=0, atol=1e-6
        )


def test_masked_quantile_of_empty_mask_is_zero():
    assert torch.equal(
        masked_quantile(torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.bool), 0.5),
        torch.tensor(0.0),
    )


def test_quantile_of_sorted_by_hand():
    # [1, 2, 4, 8]: q = 0.5 -> position 1.5 -> 2 + 0.5 * (4 - 2) = 3; q = 0.8 -> 2.4 -> 4 + 0.4 * 4 = 5.6
    ordered = torch.tensor([1.0, 2.0, 4.0, 8.0])
    torch.testing.assert_close(
        quantile_of_sorted(ordered, 0.5), torch.tensor(3.0), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        quantile_of_sorted(ordered, 0.8), torch.tensor(5.6), rtol=0, atol=1e-6
    )
    assert torch.equal(quantile_of_sorted(torch.zeros(0), 0.5), torch.tensor(0.0))


def test_masked_quantile_single_value():
    assert float(masked_quantile(torch.tensor([3.0, 7.0]), torch.tensor([F, T]), 0.8)) == 7.0


@pytest.mark.parametrize("value", [None, 0.0, 1.0, 1.5, -0.1, float("nan")])
def test_batch_quantile_out_of_range_raises(value):
    with pytest.raises(ValueError, match=r"batch_quantile.*\(0, 1\)"):
        validate_threshold("batch_quantile", value)
    with pytest.raises(ValueError, match=r"batch_quantile.*\(0, 1\)"):
        _split("batch_quantile", value)


@pytest.mark.parametrize("value", [None, -0.5])
def test_fixed_negative_or_missing_raises(value):
    with pytest.raises(ValueError, match=r"fixed.*tau in \[0, inf\)"):
        validate_threshold("fixed", value)
    with pytest.raises(ValueError, match=r"fixed.*tau in \[0, inf\)"):
        _split("fixed", value)


def test_fixed_nan_raises():
    # with tau = nan every comparison H >= nan is False: every token would silently be "low"
    with pytest.raises(ValueError, match="fixed"):
        validate_threshold("fixed", float("nan"))


def test_unknown_rule_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"'batch_mean' is unknown.*'group_mean', 'batch_quantile', 'fixed'"
    ):
        validate_threshold("batch_mean", None)
    with pytest.raises(ValueError, match="is unknown"):
        entropy_threshold(ENTROPY, RESPONSE_MASK, GROUP_IDS, rule="batch_mean")


def test_valid_settings_pass():
    validate_threshold("group_mean", None)
    validate_threshold("batch_quantile", 0.8)
    validate_threshold("fixed", 0.0)


# --- partition invariant --------------------------------------------------------------------------

RULE_SETTINGS = [
    ("group_mean", None),
    ("batch_quantile", 0.5),
    ("batch_quantile", 0.8),
    ("fixed", 0.7),
]
assert {rule for rule, _ in RULE_SETTINGS} == set(THRESHOLD_RULES)


def random_batch(seed: int):
    """Random entropy with ties (quantised to 0.1), zero advantages, padding and an empty sequence."""
    gen = torch.Generator().manual_seed(seed)
    batch, length = 10, 8
    entropy = torch.randint(0, 15, (batch, length), generator=gen).float() / 10
    advantages = torch.randint(-2, 3, (batch,), generator=gen).float()  # includes 0
    response_mask = torch.rand(batch, length, generator=gen) < 0.75
    response_mask[seed % batch] = False
    group_ids = torch.randint(0, 4, (batch,), generator=gen) * 5
    return entropy, advantages, response_mask, group_ids


@pytest.mark.parametrize(("rule", "value"), RULE_SETTINGS)
def test_quadrant_masks_partition_the_response_tokens(rule, value):
    for seed in range(25):
        entropy, advantages, response_mask, group_ids = random_batch(seed)
        masks = split_quadrants(
            entropy, advantages, response_mask, group_ids, rule=rule, value=value
        )
        stacked = torch.stack([masks.PHR, masks.PLR, masks.NHR, masks.NLR]).int()
        assert torch.equal(stacked.sum(0), response_mask.int()), (
            "each response token in exactly one quadrant"
        )
        high = masks.PHR | masks.NHR
        positive = masks.PHR | masks.PLR
        # high/low and positive/negative agree with the rule, token by token
        expected_high = (entropy >= masks.threshold[:, None]) & response_mask
        assert torch.equal(high, expected_high)
        assert torch.equal(positive, (advantages >= 0)[:, None] & response_mask)


def test_group_mean_threshold_matches_loop_reference():
    for seed in range(10):
        entropy, _, response_mask, group_ids = random_batch(seed)
        threshold = entropy_threshold(entropy, response_mask, group_ids, rule="group_mean")
        for i in range(len(group_ids)):
            same = group_ids == group_ids[i]
            tokens = entropy[same][response_mask[same]].double()
            expected = tokens.mean() if tokens.numel() else torch.tensor(0.0, dtype=torch.float64)
            torch.testing.assert_close(threshold[i], expected, rtol=0, atol=1e-6)
