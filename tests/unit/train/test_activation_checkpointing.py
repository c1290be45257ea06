"""train.activation_checkpointing in one process: transformers' non-reentrant checkpointing of each
decoder layer, turned on by `shard_model`, gives the gradients of the plain update through the
library's own forward paths (the fused LM head; the shared-prompt forward, which checkpointing
turns off because transformers drops the KV cache under it, models/policy.py; token micro-batches).
The 2-rank FSDP2 half is tests/distributed/test_precision.py. What only a GPU shows: the memory it
saves (the plan, `python -m quadrants.plan`, measures it)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from quadrants.distributed.collectives import DistEnv, shard_model
from quadrants.models.loading import load_policy
from quadrants.models.policy import checkpoints_activations
from tests.unit.train.test_accumulate import backward, context, seeded_batch


def gradients(model, batch, objective, *, checkpointing, tokens=0, keep="all"):
    model = copy.deepcopy(model)
    model = shard_model(model, DistEnv(), activation_checkpointing=checkpointing)
    assert checkpoints_activations(model) == checkpointing
    model.train()  # transformers checkpoints in training mode only, as update_policy runs
    calls = []  # grad mode of every MLP call: inside the checkpointed forward, so run again in
    for layer in model.model.layers:  # backward (the layer's own hooks stay outside, FSDP's too)
        layer.mlp.register_forward_pre_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    ctx = context(objective, 0, model, keep)
    ctx.update = dataclasses.replace(ctx.update, micro_batch_tokens=tokens)
    torch.manual_seed(0)
    loss, _ = backward(ctx, batch)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss, grads, calls, model


@pytest.mark.parametrize(
    "objective, tokens, keep", [("grpo", 0, "all"), ("dapo", 16, "all"), ("grpo", 27, "PHR")]
)
def test_checkpointing_gives_the_plain_gradients(objective, tokens, keep):
    base, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(base)
    loss, plain, calls, _ = gradients(
        base, batch, objective, checkpointing=False, tokens=tokens, keep=keep
    )
    ckpt_loss, checkpointed, ckpt_calls, model = gradients(
        base, batch, objective, checkpointing=True, tokens=tokens, keep=keep
    )
    # checkpointed: the MLPs run with grad in the forward and again in backward's recompute
    assert sum(ckpt_calls) > sum(calls) > 0
    torch.testing.assert_close(ckpt_loss, loss, rtol=0, atol=1e-6)
    assert sum(g.abs().sum() for g in plain.values()) > 0
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, rtol=1e-4, atol=1e-6, msg=name)
