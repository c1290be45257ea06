"""The packed layout of left-padded rows (ops/packing.py), checked by hand."""

from __future__ import annotations

import pytest
import torch

from quadrants.ops.packing import (
    kept_tokens,
    lengths_mask,
    pack_full_rows,
    pack_known_lengths,
    pack_rows,
    real_lengths,
    unpack,
)


def _rows() -> tuple[torch.Tensor, torch.Tensor]:
    """P = 3, T = 3. Row 0: prompt [11 12 13], response [14 15] then a pad. Row 1: prompt
    [21] left-padded, response [22 23 24]. Row 2: prompt [31 32], no response token."""
    sequences = torch.tensor(
        [
            [11, 12, 13, 14, 15, 0],
            [0, 0, 21, 22, 23, 24],
            [0, 31, 32, 0, 0, 0],
        ]
    )
    mask = sequences != 0
    return sequences, mask


def test_rows_are_packed_by_hand() -> None:
    sequences, mask = _rows()
    packed = pack_rows(sequences, mask, 3)
    # row 0 feeds 11 12 13 14 (15 is a target only); row 1 feeds 21 22 23 (24 a target only);
    # row 2 has no response: it keeps its prompt 31 32
    assert packed.input_ids.tolist() == [[11, 12, 13, 14, 21, 22, 23, 31, 32]]
    # each row's positions restart at 0
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1]]
    assert packed.row_tokens.tolist() == [4, 3, 2]
    # targets: row 0's 14 (predicted by packed position 2, token 13) and 15 (position 3);
    # row 1's 22, 23, 24 (positions 4, 5, 6); row 2 none
    assert packed.states.tolist() == [2, 3, 4, 5, 6]
    assert packed.targets.tolist() == [14, 15, 22, 23, 24]
    assert packed.target_mask.tolist() == [
        [True, True, False],
        [True, True, True],
        [False, False, False],
    ]
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert unpack(values, packed).tolist() == [[1, 2, 0], [3, 4, 5], [0, 0, 0]]
    # real lengths: prompt tokens + span, 3 + 2, 1 + 3, 2 + 0
    assert real_lengths(mask, 3).tolist() == [5, 4, 2]


def test_no_response_columns_keep_every_real_token() -> None:
    sequences, mask = _rows()
    assert torch.equal(kept_tokens(mask, 0), mask)
    packed = pack_rows(sequences, mask, 0)
    assert packed.input_ids.shape == (1, int(mask.sum())) and packed.states.numel() == 0


def test_rows_the_packed_forward_cannot_match_are_refused() -> None:
    sequences, mask = _rows()
    holed = mask.clone()
    holed[1, 4] = False  # row 1's response: real, hole, real
    with pytest.raises(ValueError, match="hole"):
        pack_rows(sequences, holed, 3)
    no_prompt = mask.clone()
    no_prompt[1, 2] = False  # row 1 keeps its response but loses its one prompt token
    with pytest.raises(ValueError, match="no real prompt token"):
        pack_rows(sequences, no_prompt, 3)


def test_full_rows_pack_as_pack_rows_packs_them():
    # 2 rows of 5 real tokens, T = 2: each feeds 4 (positions 0-3); targets at row positions 3, 4
    # predicted by row positions 2, 3: packed 2, 3 and 4 + 2, 4 + 3
    sequences = torch.arange(10).view(2, 5) + 1
    full = pack_full_rows(sequences, 2)
    assert full.states.tolist() == [2, 3, 6, 7]
    assert full.targets.tolist() == [4, 5, 9, 10]
    general = pack_rows(sequences, torch.ones(2, 5, dtype=torch.bool), 2)
    for name in ("input_ids", "position_ids", "states", "targets", "target_mask", "row_tokens"):
        assert torch.equal(getattr(full, name), getattr(general, name)), name


# P = 4 prompt columns, T = 3 response columns; row i: prompts[i] real prompt tokens, responses[i]
# real response tokens
PROMPTS, RESPONSES = [3, 1, 2], [2, 3, 0]


def test_lengths_mask_lays_rows_out_as_the_trainer_does():
    # left-padded prompts (4 - 3 = 1, 4 - 1 = 3, 4 - 2 = 2 pad columns), right-padded responses
    # (3 - 2 = 1, 0, 3 pad columns): 5 + 4 + 2 = 11 real of 3 x 7 = 21
    mask = lengths_mask(PROMPTS, RESPONSES, 4, 3)
    assert mask.int().tolist() == [
        [0, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 1, 1, 1, 1],
        [0, 0, 1, 1, 0, 0, 0],
    ]
    assert int(mask.sum()) == 11
    assert real_lengths(mask, 3).tolist() == [5, 4, 2]


def test_known_lengths_pack_by_hand_and_as_pack_rows_packs_them():
    # rows 1..7, 8..14, 15..21 (values = flat index + 1)
    sequences = torch.arange(1, 22).view(3, 7)
    packed = pack_known_lengths(sequences, 3, PROMPTS, RESPONSES)
    # row 0: prompt at columns 1-3 (2 3 4), response at 4-5 (5 6): feeds 3 + 2 - 1 = 4 tokens
    # 2 3 4 5; row 1: prompt at column 3 (11), response 4-6 (12 13 14): feeds 3 tokens 11 12 13;
    # row 2: prompt at 2-3 (17 18), no response: feeds its 2 prompt tokens; N = 4 + 3 + 2 = 9
    assert packed.input_ids.tolist() == [[2, 3, 4, 5, 11, 12, 13, 17, 18]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1]]
    assert packed.row_tokens.tolist() == [4, 3, 2]
    # targets: row 0's 5 and 6 predicted by its positions 3 - 1 + 0 = 2 and 3; row 1 starts at
    # packed position 4: its 12 13 14 by 4 + 1 - 1 + t = 4, 5, 6
    assert packed.states.tolist() == [2, 3, 4, 5, 6]
    assert packed.targets.tolist() == [5, 6, 12, 13, 14]
    general = pack_rows(sequences, lengths_mask(PROMPTS, RESPONSES, 4, 3), 3)
    for name in ("input_ids", "position_ids", "states", "targets", "target_mask", "row_tokens"):
        assert torch.equal(getattr(packed, name), getattr(general, name)), name


def test_known_lengths_pack_on_fake_tensors():
    """The memory plan traces it without values: every shape comes from the lengths."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        packed = pack_known_lengths(torch.randint(0, 9, (3, 7)), 3, PROMPTS, RESPONSES)
    # N = 4 + 3 + 2 = 9 fed tokens, M = 2 + 3 + 0 = 5 targets
    assert packed.input_ids.shape == (1, 9) and packed.states.shape == (5,)


def test_known_lengths_that_do_not_fit_are_refused():
    sequences = torch.zeros(2, 7, dtype=torch.long)
    with pytest.raises(ValueError, match="no real prompt token"):
        pack_known_lengths(sequences, 3, [0, 2], [1, 1])
    with pytest.raises(ValueError, match="outside"):
        pack_known_lengths(sequences, 3, [5, 2], [1, 1])  # 5 > P = 4
    with pytest.raises(ValueError, match="for 2 rows"):
        pack_known_lengths(sequences, 3, [1], [1])
