"""Forward passes of the policy over (prompt + response) sequences: token log-probs and entropy.

Position ids are rebuilt from the attention mask so that left-padded prompts see the same positions
as they did inside `generate` (a plain forward would count the padding and shift every position).
Only the last T + 1 positions go through the LM head (`logits_to_keep`), and entropy is reduced in
row chunks, so the [B, T, V] logits are the largest tensor and nothing of size [B, L, V] exists.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from quadrants.ops.entropy import logprobs_and_entropy


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
    out = model(
        input_ids=sequences,
        attention_mask=attention_mask.long(),
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=response_length + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1]  # [B, T, V]: position P-1+t predicts response token t
    targets = sequences[:, -response_length:]  # [B, T]
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
            model, sequences[i : i + batch_size], attention_mask[i : i + batch_size], response_length,
            temperature=temperature, chunk_size=chunk_size, with_entropy=True,
        )
        logps.append(logp)
        ents.append(ent)
    model.train(was_training)
    return torch.cat(logps), torch.cat(ents)
