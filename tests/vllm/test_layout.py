"""Both engines' Rollouts layout, checkable without vLLM: the HF engine against the contract, and the
vLLM engine's assembly (`assemble_rollouts`, the code that turns vLLM's token ids and log-probs into
Rollouts) against the HF engine on the very same sampled tokens. The engines side by side on one
request, with vLLM running, is in test_engine.py (opt-in stage)."""

from __future__ import annotations

import torch

from quadrants.models.tiny import random_tiny_policy
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.hf import HFEngine
from quadrants.rollout.vllm import assemble_rollouts

from .layout import SHARP, assert_rollouts_layout

PROMPTS = ["12+7=", "3+45-6=", "8*9="]  # different lengths: real left padding


def test_assembly_by_hand():
    # char tokenizer: pad 0, eos 2. Three responses: EOS at the end; cut by max tokens (no EOS);
    # tokens after an EOS (cut off, as the HF engine's mask does)
    _, tokenizer = random_tiny_policy(0)
    prompt = tokenizer(["1+1="], return_tensors="pt", add_special_tokens=False)
    prompt_ids = prompt["input_ids"].repeat_interleave(3, dim=0)
    prompt_mask = prompt["attention_mask"].repeat_interleave(3, dim=0).bool()
    rollouts = assemble_rollouts(
        tokenizer,
        prompt_ids,
        prompt_mask,
        responses=[[22, 2], [22, 23, 24], [25, 2, 26]],
        logprobs=[[-0.5, -0.25], [-1.0, -2.0, -3.0], [-0.125, -0.75, -9.0]],
        n=3,
    )
    assert rollouts.response_ids.tolist() == [[22, 2, 0], [22, 23, 24], [25, 2, 0]]
    assert rollouts.response_mask.tolist() == [
        [True, True, False],
        [True, True, True],
        [True, True, False],
    ]
    assert rollouts.finished.tolist() == [True, False, True]
    assert rollouts.behaviour_logp.tolist() == [
        [-0.5, -0.25, 0.0],
        [-1.0, -2.0, -3.0],
        [-0.125, -0.75, 0.0],
    ]
    assert rollouts.group_ids.tolist() == [0, 0, 0]
    # id 4 is "\n", then id = ASCII code - 27 (" " is 5): 22-25 are '1'..'4'; EOS and padding drop out
    assert rollouts.texts == ["1", "123", "4"]
    assert_rollouts_layout(rollouts, num_prompts=1, n=3, pad_id=0, eos_id=2)


def test_hf_rollouts_follow_the_layout_and_the_vllm_assembly_reproduces_them():
    torch.manual_seed(0)
    model, tokenizer = random_tiny_policy(0, **SHARP)
    torch.set_num_threads(1)
    # the SHARP model: some responses reach EOS, some run to max_new_tokens (both kinds of row)
    sampling = SamplingSettings(n=4, temperature=1.0, top_p=1.0, max_new_tokens=40, seed=3)
    hf = HFEngine(model, tokenizer).generate(PROMPTS, sampling)
    assert_rollouts_layout(
        hf, num_prompts=3, n=4, pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id
    )
    assert hf.finished.any() and not hf.finished.all()
    lengths = hf.response_mask.sum(-1).tolist()
    responses = [hf.response_ids[row, :k].tolist() for row, k in enumerate(lengths)]
    logprobs = [hf.behaviour_logp[row, :k].tolist() for row, k in enumerate(lengths)]
    assembled = assemble_rollouts(
        tokenizer, hf.prompt_ids, hf.prompt_mask, responses, logprobs, n=4
    )
    for name in (
        "prompt_ids",
        "prompt_mask",
        "response_ids",
        "response_mask",
        "behaviour_logp",
        "group_ids",
        "finished",
    ):
        assert torch.equal(getattr(assembled, name), getattr(hf, name)), name
    assert assembled.texts == hf.texts
