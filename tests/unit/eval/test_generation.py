"""The evaluation sampler draws exactly what the training engine draws, without keeping logits."""

from __future__ import annotations

import torch

from quadrants.eval.generation import TextEngine
from quadrants.models.loading import load_policy
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.hf import HFEngine


def test_same_seed_same_samples_as_the_training_engine():
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    sampling = SamplingSettings(n=3, temperature=0.6, top_p=0.95, max_new_tokens=12, seed=11)
    prompts = ["1+2=", "7+8-5+9="]  # different lengths: left padding
    ours = TextEngine(model, tokenizer).generate(prompts, sampling)
    theirs = HFEngine(model, tokenizer).generate(prompts, sampling)
    assert ours.texts == theirs.texts and len(ours.texts) == 6
    torch.testing.assert_close(ours.response_ids, theirs.response_ids, rtol=0, atol=0)
    assert torch.equal(ours.response_mask, theirs.response_mask) and torch.equal(
        ours.finished, theirs.finished
    )
    assert ours.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert not ours.behaviour_logp.any()  # not computed: evaluation needs none
