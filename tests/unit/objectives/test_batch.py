"""TokenBatch: make_token_batch's statistics and select() (per-sequence fields sliced, rollout ones kept)."""

import torch

from quadrants.objectives.batch import fraction, token_advantages

from .helpers import batch, close


def four_sequence_batch():
    """Two groups: rewards [2, -2 | 1, 1] (group 1 all equal), ragged responses, a reference policy."""
    return batch(
        entropy=[[1.0, 0.0, 0.5], [1.0, 0.0, 9.0], [0.3, 0.6, 9.0], [0.4, 0.2, 0.8]],
        rewards=[2.0, -2.0, 1.0, 1.0],
        group_ids=[5, 5, 9, 9],
        response_mask=[[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]],
        old_logp=[[-1.0, -0.5, -2.0], [-0.3, -1.5, 0.0], [-1.0, -1.1, 0.0], [-2.0, -0.1, -0.7]],
        ref_logp=[[-1.1, -0.4, -2.0], [-0.2, -1.5, 0.0], [-1.0, -1.0, 0.0], [-2.1, -0.2, -0.6]],
    )


def test_make_token_batch_statistics():
    tb = four_sequence_batch()
    close(tb.advantages, [2.0, -2.0, 0.0, 0.0])
    assert tb.constant_group_mask.tolist() == [False, False, True, True]
    # group 9: tokens [0.3, 0.6, 0.4, 0.2, 0.8] -> mean 2.3 / 5 = 0.46 (padding 9 ignored)
    close(tb.group_entropy_mean, [0.5, 0.5, 0.46, 0.46])
    # population var: (0.16^2 + 0.14^2 + 0.06^2 + 0.26^2 + 0.34^2) / 5 = 0.232 / 5 = 0.0464
    close(tb.group_entropy_std, [0.2**0.5, 0.2**0.5, 0.0464**0.5, 0.0464**0.5])
    assert tb.num_rollout_tokens == 10
    close(tb.rollout_entropy_sorted, [0.0, 0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.0])
    # A = 0 counts as positive: group 9's high tokens (>= 0.46) are PHR
    assert tb.quadrants.PHR[2:].tolist() == [[False, True, False], [False, False, True]]
    assert not (tb.quadrants.NHR[2:] | tb.quadrants.NLR[2:]).any()
    close(token_advantages(tb)[:, 0], [2.0, -2.0, 0.0, 0.0])
    assert tb.batch_size == 4 and tb.response_length == 3


def test_quadrants_partition_the_response_tokens():
    tb = four_sequence_batch()
    q = tb.quadrants
    total = q.PHR.int() + q.PLR.int() + q.NHR.int() + q.NLR.int()
    assert torch.equal(total, tb.response_mask.int())


def test_select_slices_per_sequence_fields_and_keeps_rollout_ones():
    tb = four_sequence_batch()
    index = torch.tensor([3, 0])
    mini = tb.select(index)
    for name in (
        "sequences",
        "attention_mask",
        "response_mask",
        "old_logp",
        "entropy",
        "rewards",
        "advantages",
        "group_ids",
        "constant_group_mask",
        "group_entropy_mean",
        "group_entropy_std",
        "ref_logp",
    ):
        assert torch.equal(getattr(mini, name), getattr(tb, name)[index]), name
    for q in ("PHR", "PLR", "NHR", "NLR", "threshold"):
        assert torch.equal(getattr(mini.quadrants, q), getattr(tb.quadrants, q)[index]), q
    # rollout-level: shared, not sliced or recomputed
    assert mini.rollout_entropy_sorted is tb.rollout_entropy_sorted
    assert mini.num_rollout_tokens == 10
    assert mini.batch_size == 2
    # group statistics travel with the mini-batch (not recomputed on a partial group)
    close(mini.group_entropy_mean, [0.46, 0.5])
    assert mini.constant_group_mask.tolist() == [True, False]


def test_select_without_reference_keeps_none():
    tb = batch(entropy=[[1.0], [0.0]], rewards=[1.0, 0.0], group_ids=[0, 0])
    assert tb.ref_logp is None
    assert tb.select(torch.tensor([1])).ref_logp is None


def test_fraction_helper():
    mask = torch.tensor([[True, False], [True, True]])
    close(fraction(torch.tensor([[True, True], [False, False]]), mask), 1 / 3)
    close(fraction(mask, torch.zeros(2, 2, dtype=torch.bool)), 0.0)  # empty denominator -> 0


def test_constant_groups_by_correctness_when_rewards_are_shaped():
    # shaped rewards [0, -0.25 | 1, 0]: group 0 has two wrong answers of different lengths. By rewards
    # it is mixed (advantages +-0.125); by correctness [0, 0 | 1, 0] (constant_by) it is constant
    from quadrants.objectives.batch import make_token_batch

    kwargs = dict(
        sequences=torch.zeros(4, 3, dtype=torch.long),
        attention_mask=torch.ones(4, 3, dtype=torch.bool),
        response_mask=torch.ones(4, 2, dtype=torch.bool),
        old_logp=torch.zeros(4, 2),
        entropy=torch.ones(4, 2),
        rewards=torch.tensor([0.0, -0.25, 1.0, 0.0]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        normalize_std=False,
    )
    assert make_token_batch(**kwargs).constant_group_mask.tolist() == [False, False, False, False]
    by_correct = make_token_batch(**kwargs, constant_by=torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert by_correct.constant_group_mask.tolist() == [True, True, False, False]
    close(
        by_correct.advantages, [0.125, -0.125, 0.5, -0.5]
    )  # advantages still from the shaped rewards
