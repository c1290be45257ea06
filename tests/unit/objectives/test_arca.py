"""objectives/arca.py: the weighted GRPO loss by hand, the no-residual case, the parameter ranges,
and the compose-time refusal without LoRA."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from quadrants.config import LoraConfig, RunConfig
from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.registry import get_objective, resolve_objective
from quadrants.run_plan import RunPlan
from tests.unit.objectives.helpers import batch, t


def test_arca_loss_by_hand():
    # one group, rewards [2, −2], normalize_std off: advantages [+2, −2]; old log-probs −1
    # row 0: r = [1, 3] -> mean 2 -> w = [0.5, 1.5]; Â_t = 2 · w = [1, 3]
    # row 1: r = [2, pad] -> w = [1, 0];                Â_t = −2 · 1 = −2 on its one token
    # current log-probs: row 0 [−1, −1 + ln 1.1] (ratios 1, 1.1), row 1 [−1 + ln 0.5] (ratio 0.5)
    # clipped surrogate, ε = 0.2: per token −min(r Â, clip(r) Â):
    #   row 0: −min(1·1, 1·1) = −1;  −min(1.1·3, 1.1·3) = −3.3 (1.1 is inside [0.8, 1.2])
    #   row 1: Â < 0, r = 0.5: −min(0.5·(−2), 0.8·(−2)) = −min(−1, −1.6) = 1.6
    tb = batch([[1.0, 1.0], [1.0, 1.0]], [2.0, -2.0], [0, 0], response_mask=[[1, 1], [1, 0]])
    tb = replace(tb, adapter_residual=t([[1.0, 3.0], [2.0, 0.0]]))
    logp = t([[-1.0, -1.0 + math.log(1.1)], [-1.0 + math.log(0.5), -1.0]])
    spec, params = resolve_objective("arca", {})
    out = spec.fn(tb, PolicyOutput(logp=logp), **params)
    torch.testing.assert_close(out.per_token_loss, t([[-1.0, -3.3], [1.6, 0.0]]))
    # weights [0.5, 1.5] and [1]: effective-token ratio (4 / (2 · 2.5) = 0.8 and 1) -> mean 0.9;
    # Gini (row 0: (−1 · 0.5 + 1 · 1.5) / (2 · 2) = 0.25; row 1: 0) -> mean 0.125; max 1.5
    torch.testing.assert_close(out.metrics["arca_effective_token_ratio"], torch.tensor(0.9))
    torch.testing.assert_close(out.metrics["arca_weight_gini"], torch.tensor(0.125))
    torch.testing.assert_close(out.metrics["arca_weight_max"], torch.tensor(1.5))


def test_without_a_residual_arca_is_grpo():
    # no adapters (residual None) or peft's B = 0 (residual 0): weights 1, GRPO's loss exactly
    tb = batch([[0.3, 1.0], [2.0, 0.1]], [1.0, 0.0], [0, 0], response_mask=[[1, 1], [1, 0]])
    logp = t([[-0.9, -1.2], [-1.1, -1.0]])
    grpo, grpo_params = resolve_objective("grpo", {})
    expected = grpo.fn(tb, PolicyOutput(logp=logp), **grpo_params).per_token_loss
    spec, params = resolve_objective("arca", {})
    for residual in (None, torch.zeros(2, 2)):
        got = spec.fn(replace(tb, adapter_residual=residual), PolicyOutput(logp=logp), **params)
        torch.testing.assert_close(got.per_token_loss, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"mix": 1.5}, r"mix=1.5 is out of range"),
        ({"max_weight": 0.5}, r"max_weight=0.5 is out of range"),
        ({"clip_low": 1.0}, r"clip_low=1.0 is out of range"),
    ],
)
def test_parameter_ranges(params, message):
    with pytest.raises(ValueError, match=message):
        resolve_objective("arca", params)


def test_arca_without_lora_is_refused_at_compose_time():
    cfg = RunConfig()
    cfg.model.name_or_path = "tiny-random"
    cfg.objective.name = "arca"
    with pytest.raises(ValueError, match=r"model.lora.enabled=true"):
        RunPlan.parse(cfg, files=False)
    cfg.model.lora = LoraConfig(enabled=True, rank=4, alpha=8.0)
    RunPlan.parse(cfg, files=False)
    assert get_objective("arca").inert_at_zero_advantage({})
