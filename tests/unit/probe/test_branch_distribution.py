"""The probe's branch distribution is the one the engines sample from: softmax(logits / T) after
transformers' TopPLogitsWarper (transformers/generation/logits_process.py: tokens whose ascending
cumulative probability is <= 1 - top_p are removed), so branch masses and rest draws follow it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from quadrants.config import ProbeConfig
from quadrants.probe.branching import next_token_probs, plan_branches
from quadrants.probe.positions import Positions
from quadrants.rollout.engine import Rollouts

PROBS = [0.5, 0.3, 0.15, 0.05]


class FixedLogits(nn.Module):
    """A policy whose next-token logits are log PROBS at every position (a real nn.Module with the
    call signature next_token_probs uses; what it does with a language model is the HF forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(PROBS).log(), requires_grad=False)

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep, use_cache):
        return SimpleNamespace(logits=self.logits.expand(input_ids.shape[0], 1, -1))


def rollouts() -> Rollouts:
    return Rollouts(
        prompt_ids=torch.tensor([[1, 2]]),
        prompt_mask=torch.ones(1, 2, dtype=torch.bool),
        response_ids=torch.tensor([[0, 1, 0]]),
        response_mask=torch.ones(1, 3, dtype=torch.bool),
        behaviour_logp=torch.zeros(1, 3),
        texts=["x"],
        group_ids=torch.zeros(1, dtype=torch.long),
        finished=torch.ones(1, dtype=torch.bool),
    )


def positions() -> Positions:
    one = torch.ones(1, dtype=torch.long)
    return Positions(sequence=0 * one, token=one, quadrant=0 * one, weight=one.double())


def test_top_p_truncates_and_renormalises_as_the_engine_does():
    # ascending [0.05, 0.15, 0.3, 0.5], cumulative [0.05, 0.2, 0.5, 1.0]; top_p 0.75 removes
    # cumulative <= 0.25: 0.05 and 0.15 -> kept [0.5, 0.3] / 0.8 = [0.625, 0.375, 0, 0]
    probs = next_token_probs(FixedLogits(), rollouts(), positions(), temperature=1.0, top_p=0.75)
    torch.testing.assert_close(probs[0], torch.tensor([0.625, 0.375, 0.0, 0.0]))
    # top_p 1: the full softmax
    probs = next_token_probs(FixedLogits(), rollouts(), positions(), temperature=1.0)
    torch.testing.assert_close(probs[0], torch.tensor(PROBS))
    # temperature 2 then top_p 0.75: p ∝ sqrt(PROBS) = [0.7071, 0.5477, 0.3873, 0.2236] / 1.8657
    # = [0.3790, 0.2936, 0.2076, 0.1198]; cumulative ascending [0.1198, 0.3274, ...]: only 0.1198
    # <= 0.25 goes -> [0.3790, 0.2936, 0.2076] / 0.8802 = [0.4306, 0.3335, 0.2359, 0]
    probs = next_token_probs(FixedLogits(), rollouts(), positions(), temperature=2.0, top_p=0.75)
    root = [math.sqrt(p) for p in PROBS[:3]]
    expected = torch.tensor([r / sum(root) for r in root] + [0.0])
    torch.testing.assert_close(probs[0], expected)


def test_branches_and_rest_come_from_the_truncated_distribution():
    # top_p 0.9 keeps [0.5, 0.3, 0.15] / 0.95; one top branch (coverage 0.5): the rest is
    # [0.3, 0.15] / 0.95 = 0.4737, drawn only from tokens 1 and 2 (never the cut token 3)
    probs = next_token_probs(FixedLogits(), rollouts(), positions(), temperature=1.0, top_p=0.9)
    probe = ProbeConfig(branches=1, coverage=0.5, continuations=200)
    branches, forced, cut = plan_branches(
        probs, torch.tensor([0]), probe, torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(
        branches.mass[0], torch.tensor([0.5 / 0.95, 0.45 / 0.95]), rtol=0, atol=1e-6
    )
    assert (forced[0, 0] == 0).all() and set(forced[0, 1].tolist()) == {1, 2}
    assert cut.item() == 0.0
