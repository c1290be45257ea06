"""The packed layout of left-padded rows (ops/packing.py), checked by hand."""

from __future__ import annotations

import pytest
import torch

from quadrants.ops.packing import kept_tokens, pack_full_rows, pack_rows, real_lengths, unpack


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
