"""Forward passes of the policy over (prompt + response) sequences: token log-probs and entropy.

Position ids are rebuilt from the attention mask so that left-padded prompts see the same positions
as they did inside `generate` (a plain forward would count the padding and shift every position).
Only the last T + 1 positions go through the LM head (`logits_to_keep`).

The LM head itself is fused with the log-prob and entropy reduction (ops/fused_head.py) when the
model's logits are a plain linear map of its last hidden states (no soft-capping or scaling): for
the duration of the call the head's `forward` is replaced by one that returns [B, T, 2]
(logp, entropy) in place of the logits, so the [B, T, V] logits never exist, in the update's forward
and backward nor in the no-grad passes. The module, its parameters and any FSDP hooks stay as they
are. Other models take the logits and reduce them in row chunks (ops/entropy.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from quadrants.ops.entropy import logprobs_and_entropy
from quadrants.ops.fused_head import head_logprobs_and_entropy

# config attributes that change logits after the head; a model with any of them
# set takes the logits path
_LOGIT_TRANSFORMS = {
    "final_logit_softcapping": None,
    "logit_scale": None,
    "logits_scaling": 1.0,
    "output_multiplier_scale": None,
}


def fused_head(model: nn.Module) -> nn.Linear | None:
    """The model's LM head when its logits are exactly `head(hidden)`, else None."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, nn.Linear):
        return None
    config = getattr(model, "config", None)
    if any(
        getattr(config, key, neutral) not in (neutral, 0.0)
        for key, neutral in _LOGIT_TRANSFORMS.items()
    ):
        return None
    return head


@contextmanager
def _head_reduces(
    head: nn.Linear, targets: Tensor, temperature: float, chunk_size: int
) -> Iterator[None]:
    """While inside, `head(hidden [B, T + 1, H])` returns [B, T, 2]: (logp of
    `targets`, entropy)."""

    def forward(hidden: Tensor) -> Tensor:
        logp, entropy = head_logprobs_and_entropy(
            hidden[:, :-1],
            head.weight,
            targets,
            head.bias,
            temperature=temperature,
            chunk_size=chunk_size,
        )
        return torch.stack([logp, entropy], dim=-1)

    head.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        del head.forward


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """[B, L] bool -> [B, L] long positions counting only attended tokens (0 on left padding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def response_logprobs(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropy) of the response tokens under `model` at `temperature`.

    Args:
        sequences: [B, L] long, prompt + response (response = the last T positions).
        attention_mask: [B, L] bool.
        response_length: T.

    Returns:
        (logp [B, T] float32, entropy [B, T] float32 or None); differentiable if grad is enabled.
    """
    inputs = dict(
        input_ids=sequences,
        attention_mask=attention_mask.long(),
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=response_length + 1,
        use_cache=False,
    )
    targets = sequences[:, -response_length:]  # [B, T]
    head = fused_head(model)
    if head is not None:
        with _head_reduces(head, targets, temperature, chunk_size):
            reduced = model(**inputs).logits  # [B, T, 2]
        return reduced[..., 0], reduced[..., 1] if with_entropy else None
    logits = model(**inputs).logits[:, :-1]  # [B, T, V]: position P-1+t predicts response token t
    return logprobs_and_entropy(logits, targets, temperature, chunk_size, with_entropy=with_entropy)


@torch.no_grad()
def behaviour_pass(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    temperature: float,
    chunk_size: int,
    batch_size: int,
) -> tuple[Tensor, Tensor]:
    """One no-grad pass giving old log-probs and entropy, `batch_size` sequences at a time.

    Returns:
        (old_logp [B, T], entropy [B, T]) float32.
    """
    was_training = model.training
    model.eval()
    logps, ents = [], []
    for i in range(0, sequences.shape[0], batch_size):
        logp, ent = response_logprobs(
            model,
            sequences[i : i + batch_size],
            attention_mask[i : i + batch_size],
            response_length,
            temperature=temperature,
            chunk_size=chunk_size,
            with_entropy=True,
        )
        logps.append(logp)
        ents.append(ent)
    model.train(was_training)
    return torch.cat(logps), torch.cat(ents)
