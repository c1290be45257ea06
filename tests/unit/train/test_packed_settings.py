"""train.attention_layout: the token budgets count real tokens under `packed`, and the layout is
refused, naming the key and the fix, for a model whose attention would not keep packed rows apart."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from quadrants.config import RunConfig
from quadrants.models.policy import check_packable, packing_refusal
from quadrants.run_plan import RunPlan
from quadrants.run_plan.composition import validate_attention_layout
from quadrants.train.micro_batches import pack_for_ranks, row_lengths


def test_packed_budgets_count_real_tokens_by_hand():
    # lengths 1 1 1 1 5 5, budget 12, 2 ranks, units [0, 1] [2, 3] [4, 5].
    # padded: [0..3] costs 2 rows x 1; adding [4, 5] costs 3 rows x 5 = 15 > 12: two groups.
    # packed: the last rank's share of [0..5] is rows 3, 4, 5: 1 + 5 + 5 = 11 <= 12: one group
    lengths = [1, 1, 1, 1, 5, 5]
    assert pack_for_ranks(lengths, 12, 2) == [[0, 1, 2, 3], [4, 5]]
    assert pack_for_ranks(lengths, 12, 2, packed=True) == [[0, 1, 2, 3, 4, 5]]
    # one rank, lengths 4 4 4 4, budget 12: padded 3 x 4 = 12 then [3]; packed 4 + 4 + 4 = 12
    assert pack_for_ranks([4, 4, 4, 4], 12, 1, packed=True) == [[0, 1, 2], [3]]
    # a row over the budget still runs alone
    assert pack_for_ranks([2, 20, 3], 10, 1, packed=True) == [[0, 2], [1]]


def test_packed_row_lengths_are_real_tokens():
    # prompt width 3: row 0 has 3 real prompt tokens and 2 response tokens, row 1 one prompt token
    # and 3 response tokens; padded both cost 3 + their span
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    assert row_lengths(mask, 3) == [3 + 2, 3 + 3]
    assert row_lengths(mask, 3, packed=True) == [3 + 2, 1 + 3]


def test_the_layout_is_checked_at_compose_time(tmp_path):
    cfg = RunConfig()
    cfg.train.attention_layout = "diagonal"
    with pytest.raises(ValueError, match=r"train.attention_layout='diagonal' is unknown"):
        RunPlan.parse(cfg)
    cfg.train.attention_layout = "packed"  # the tiny model is a Qwen2
    RunPlan.parse(cfg)
    # a local GPT-2 directory: refused before anything loads, naming the fix
    AutoConfig.for_model("gpt2").save_pretrained(tmp_path)
    cfg.train.attention_layout = "packed"
    with pytest.raises(ValueError, match=r"train.attention_layout=packed: .*'gpt2'.*=padded"):
        validate_attention_layout(cfg.train, str(tmp_path))
    cfg.train.attention_layout = "padded"
    validate_attention_layout(cfg.train, str(tmp_path))


def test_models_packing_cannot_serve_are_refused():
    assert packing_refusal(AutoConfig.for_model("qwen2")) is None
    assert packing_refusal(AutoConfig.for_model("llama")) is None
    assert "'gpt2'" in packing_refusal(AutoConfig.for_model("gpt2"))
    # a hybrid layer stack (a recurrent layer would carry its state from one row into the next)
    hybrid = AutoConfig.for_model("qwen2")
    hybrid.layer_types = ["full_attention", "linear_attention"]
    assert "linear_attention layers" in packing_refusal(hybrid)
    loaded = AutoConfig.for_model("qwen2")
    loaded._attn_implementation = "paged_attention"
    assert "'paged_attention'" in packing_refusal(loaded)
    with pytest.raises(ValueError, match=r"train.attention_layout=packed: .*padded"):
        check_packable(hybrid)
