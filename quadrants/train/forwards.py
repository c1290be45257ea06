"""The step's forwards: every pass of the policy (or the KL reference) over a batch's rows runs
here, this rank's share of the rows, gathered through the step's `Placement`
(train/placement.py): in one process every share is all rows and every gather returns its input.

- `no_grad_pass`: log-probs and entropy without grad (the behaviour pass, the reference's, the
  telemetry's before and after the update, the update's detached values);
- `policy_output`: the update's differentiable log-probs (and entropy) of a mini-batch;
- `reference_logprobs`: the KL reference's log-probs (a frozen model, or the policy with its LoRA
  adapters switched off).

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from quadrants.models.lora import adapters_disabled
from quadrants.models.policy import behaviour_pass, response_logprobs
from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.train.context import Forwards, ScoreSettings
from quadrants.train.micro_batches import row_lengths, token_groups


def no_grad_pass(
    forwards: Forwards, model: nn.Module, sequences: Tensor, attention_mask: Tensor, length: int
) -> tuple[Tensor, Tensor]:
    """`model`'s log-probs and entropy ([B, T] each) over the last `length` tokens, no grad, each
    rank running its share of the rows; with `forward_tokens`, in calls packed by that token budget
    per rank (train/micro_batches.py: the groups come from the whole batch, so are the same on
    every rank, and each rank runs its share of each group in one call)."""
    passes, placement = forwards.passes, forwards.placement
    options = placement.forward_options(
        dict(
            temperature=passes.temperature,
            chunk_size=passes.chunk_size,
            batch_size=passes.batch_size,
            max_buckets=passes.length_buckets,
        )
    )
    options["layout"] = passes.layout
    with forwards.precision.autocast(forwards.device):
        if not passes.forward_tokens:
            share = placement.share(sequences.shape[0])
            logp, entropy = behaviour_pass(
                model, sequences[share], attention_mask[share], length, **options
            )
            return placement.gather_rows(logp), placement.gather_rows(entropy)
        rows = torch.arange(sequences.shape[0], device=sequences.device)
        lengths = row_lengths(attention_mask, length, packed=passes.packed)
        groups = token_groups(
            lengths, rows, passes.forward_tokens, placement.world_size, packed=passes.packed
        )
        logp = torch.zeros(sequences.shape[0], length, device=sequences.device)
        entropy = torch.zeros(sequences.shape[0], length, device=sequences.device)
        for group in groups:
            own = group[placement.share(group.shape[0])]
            part_logp, part_entropy = behaviour_pass(
                model,
                sequences[own],
                attention_mask[own],
                length,
                **{**options, "batch_size": max(own.shape[0], 1)},
            )
            logp[group] = placement.gather_rows(part_logp)
            entropy[group] = placement.gather_rows(part_entropy)
        return logp, entropy


def policy_output(
    forwards: Forwards, model: nn.Module, mini: TokenBatch, with_entropy: bool
) -> PolicyOutput:
    """The policy's log-probs (and entropy) over the whole mini-batch, differentiable on this rank's
    rows only: the loss computed from it is the global loss and its gradient is this rank's part."""
    passes, placement = forwards.passes, forwards.placement
    share = placement.share(mini.batch_size)
    options = placement.forward_options(dict(max_buckets=passes.length_buckets))
    with forwards.precision.autocast(forwards.device):
        logp, entropy = response_logprobs(
            model,
            mini.sequences[share],
            mini.attention_mask[share],
            mini.response_length,
            temperature=passes.temperature,
            chunk_size=passes.chunk_size,
            with_entropy=with_entropy,
            layout=passes.layout,
            **options,
        )
    return PolicyOutput(
        placement.splice(logp), None if entropy is None else placement.splice(entropy)
    )


def reference_logprobs(
    model: nn.Module,
    ref_model: nn.Module | None,
    forwards: Forwards,
    settings: ScoreSettings,
    sequences: Tensor,
    attention_mask: Tensor,
    length: int,
) -> Tensor | None:
    """The KL reference's log-probs [B, T] (None without a KL term): the frozen reference model's,
    or under LoRA the policy's own with its adapters switched off (the base it started from;
    models/lora.py `adapters_disabled`), so no second copy of the model is held."""
    if ref_model is not None:
        return no_grad_pass(forwards, ref_model, sequences, attention_mask, length)[0]
    if settings.reference_from_adapters:
        with adapters_disabled(model):
            return no_grad_pass(forwards, model, sequences, attention_mask, length)[0]
    return None
