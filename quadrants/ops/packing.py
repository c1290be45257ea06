"""Padding-free rows: a batch of left-padded (prompt + response) rows as one packed sequence.

Shape legend: **B** rows · **L** = P + T padded width · **N** packed tokens · **M** targets.

Each row keeps its real tokens up to the one before its last real response token (that token is a
target only: no later position reads it, as in the padded forward of models/policy.py), in row
order, all rows end to end in one [1, N] sequence. Its position ids are the padded path's
(`position_ids_from_mask`: 0, 1, ... over the row's real tokens), so each row restarts at 0. That is
the packed format transformers recognises when the attention mask is None and no cache is passed
(huggingface/transformers, src/transformers/masking_utils.py `_preprocess_mask_arguments` ->
`find_packed_sequence_indices`: a new sequence wherever the position does not grow by 1): for SDPA
and eager attention the causal mask becomes block-diagonal (`packed_sequence_mask_function`), for
flex attention a document BlockMask, and flash attention runs varlen with cu_seqlens read from the
position ids (modeling_flash_attention_utils.py `_is_packed_sequence`,
`prepare_fa_kwargs_from_position_ids`). TRL's padding-free collator builds the same input
(huggingface/trl, trl/trainer/sft_trainer.py `DataCollatorForLanguageModeling(padding_free=True)`:
input_ids and position_ids flattened to one row, no attention mask), as does verl's
`use_remove_padding` (volcengine/verl, verl/workers/actor/dp_actor.py: `unpad_input`, one row of
the real tokens with their position ids).

`targets` names, for every response position t < the row's span (1 + its last real response
token's index), the packed position whose output predicts it (row position P − 1 + t) and the
token; `unpack` puts the M per-target values back at [B, T], 0 elsewhere (the padded path's
length buckets also return 0 past a row's span; every consumer masks those positions).

Rows known by their lengths (`lengths_mask`, `pack_known_lengths`: each row's real prompt and
response token counts as Python ints) are laid out from those counts alone, with no operation that
reads the tensors' values, so the memory plan traces them on fake tensors (memory/trace.py).

Pure tensor math: no model, no config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from quadrants.ops.length_buckets import response_spans


@dataclass(frozen=True)
class PackedRows:
    """One packed sequence and where its targets are.

    Attributes:
        input_ids: [1, N] long, the kept tokens of every row, rows end to end.
        position_ids: [1, N] long, each row's own positions (0 at its first real token).
        states: [M] long, the packed position that predicts each target.
        targets: [M] long, the target token ids.
        target_mask: [B, T] bool, True at the (row, response position) of each target, in the
            row-major order of `states` and `targets`.
        row_tokens: [B] long, each row's fed tokens (its share of N).
    """

    input_ids: Tensor
    position_ids: Tensor
    states: Tensor
    targets: Tensor
    target_mask: Tensor
    row_tokens: Tensor


def kept_tokens(attention_mask: Tensor, response_length: int) -> Tensor:
    """[B, L] bool -> [B, L] bool: the tokens a packed forward feeds. A row's real tokens before
    its last real response token (at row position P + span − 1; span from `response_spans`); a
    row without a response token keeps its prompt (the whole row when T = 0)."""
    width = attention_mask.shape[1]
    prompt = width - response_length
    if response_length < 1:
        return attention_mask.bool()
    spans = response_spans(attention_mask[:, prompt:])  # [B]
    ends = prompt + (spans - 1).clamp_min(0)  # [B]: first row position not fed
    columns = torch.arange(width, device=attention_mask.device)
    return attention_mask.bool() & (columns[None, :] < ends[:, None])


def pack_rows(sequences: Tensor, attention_mask: Tensor, response_length: int) -> PackedRows:
    """The packed layout of `sequences` [B, L] (left-padded prompts, then T response positions)
    under `attention_mask` [B, L] bool.

    Raises ValueError where the padded and packed forwards would not agree: a row whose response
    mask has a hole before its last real token (the packed row would skip a position the padded
    one attends over), or a row with a response but no real prompt token before it (nothing
    predicts its first response token)."""
    mask = attention_mask.bool()
    batch, width = mask.shape
    prompt = width - response_length
    keep = kept_tokens(mask, response_length)  # [B, L]
    order = keep.flatten().nonzero().squeeze(1)  # [N] row-major
    positions = (mask.long().cumsum(-1) - 1).clamp_min(0)  # models/policy.py position_ids_from_mask
    packed_index = keep.flatten().long().cumsum(0).sub_(1).view(batch, width)  # [B, L]
    if response_length < 1:
        target_mask = mask.new_zeros(batch, 0)
        states = order.new_zeros(0)
        targets = sequences.new_zeros(0)
    else:
        spans = response_spans(mask[:, prompt:])
        columns = torch.arange(response_length, device=mask.device)
        target_mask = columns[None, :] < spans[:, None]  # [B, T]
        if bool((target_mask & ~mask[:, prompt:]).any()):
            raise ValueError(
                "a response mask has a hole before its row's last real token; packed rows need "
                "each response's real tokens contiguous from its first position"
            )
        if prompt < 1 or bool((~mask[:, prompt - 1] & (spans > 0)).any()):
            raise ValueError(
                "a row has response tokens but no real prompt token before them; nothing "
                "predicts its first response token"
            )
        predicting = packed_index[:, prompt - 1 : prompt - 1 + response_length]  # [B, T]
        states = predicting[target_mask]
        targets = sequences[:, prompt:][target_mask]
    return PackedRows(
        input_ids=sequences.flatten()[order][None, :],
        position_ids=positions.flatten()[order][None, :],
        states=states,
        targets=targets,
        target_mask=target_mask,
        row_tokens=keep.sum(-1),
    )


def pack_full_rows(sequences: Tensor, response_length: int) -> PackedRows:
    """`pack_rows` of rows without padding ([B, L], every token real), from the shapes alone
    (`pack_known_lengths` with every prompt P = L − T and every response T tokens long). Every row
    feeds L − 1 tokens (L when T = 0)."""
    batch, width = sequences.shape
    prompt = width - response_length
    return pack_known_lengths(
        sequences, response_length, [prompt] * batch, [response_length] * batch
    )


def lengths_mask(
    prompts: Sequence[int], responses: Sequence[int], prompt_width: int, response_width: int
) -> Tensor:
    """[B, P + T] bool of rows laid out as the trainer lays them out (train/blocks.py
    `concat_rollouts`): row i's `prompts[i]` real prompt tokens left-padded to P =
    `prompt_width`, then its `responses[i]` real response tokens right-padded to T =
    `response_width`."""
    columns = torch.arange(prompt_width + response_width)
    starts = torch.tensor([prompt_width - p for p in prompts], dtype=torch.long)
    ends = torch.tensor([prompt_width + r for r in responses], dtype=torch.long)
    return (columns[None] >= starts[:, None]) & (columns[None] < ends[:, None])


def pack_known_lengths(
    sequences: Tensor, response_length: int, prompts: Sequence[int], responses: Sequence[int]
) -> PackedRows:
    """`pack_rows` of `sequences` [B, P + T] under `lengths_mask(prompts, responses, P, T)`, laid
    out from the lengths (Python ints) alone: every index is built from them, so no operation
    depends on the tensors' values (the memory plan traces it on fake tensors, where `pack_rows`'
    `nonzero` has no size). Row i feeds its p_i + r_i − 1 real tokens (the last response token is
    a target only; p_i when r_i = 0), and its response token t < r_i is predicted by its own
    position p_i − 1 + t. Each row needs p_i ≥ 1 where r_i ≥ 1 (`pack_rows` refuses the same)."""
    batch, width = sequences.shape
    prompt = width - response_length
    if len(prompts) != batch or len(responses) != batch:
        raise ValueError(
            f"{len(prompts)} prompt and {len(responses)} response lengths for {batch} rows"
        )
    if any(not 0 <= p <= prompt for p in prompts) or any(
        not 0 <= r <= response_length for r in responses
    ):
        raise ValueError(
            f"lengths outside the rows' {prompt} prompt and {response_length} response columns"
        )
    if any(r > 0 and p < 1 for p, r in zip(prompts, responses, strict=True)):
        raise ValueError(
            "a row has response tokens but no real prompt token before them; nothing predicts "
            "its first response token"
        )
    device = sequences.device
    fed = [p + r - 1 if r > 0 else p for p, r in zip(prompts, responses, strict=True)]
    columns: list[int] = []  # flat [B * L] index of every fed token, row-major
    positions: list[int] = []
    states: list[int] = []  # packed position predicting each target
    target_columns: list[int] = []  # flat index of each target token
    start = 0  # the row's first packed position
    for row, (p, r, n) in enumerate(zip(prompts, responses, fed, strict=True)):
        first = row * width + prompt - p  # the row's first real token, flattened
        columns.extend(range(first, first + n))
        positions.extend(range(n))
        states.extend(range(start + p - 1, start + p - 1 + r))
        target_columns.extend(range(row * width + prompt, row * width + prompt + r))
        start += n
    flat = sequences.reshape(-1)

    def index(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    target_mask = (
        torch.arange(response_length, device=device)[None, :] < index(list(responses))[:, None]
    )
    return PackedRows(
        input_ids=flat[index(columns)][None, :],
        position_ids=index(positions)[None, :],
        states=index(states),
        targets=flat[index(target_columns)],
        target_mask=target_mask,
        row_tokens=index(fed),
    )


def unpack(values: Tensor, packed: PackedRows) -> Tensor:
    """[M] per-target values -> [B, T], 0 where a row has no target (differentiable)."""
    out = values.new_zeros(packed.target_mask.shape)
    return out.masked_scatter(packed.target_mask, values)


def real_lengths(attention_mask: Tensor, response_length: int) -> Tensor:
    """[B, L] bool -> [B] long: each row's real tokens up to its last real response token (its
    prompt's real tokens + its span): the tokens a packed row holds, counting its last token as
    the padded row length does (train/micro_batches.py `row_lengths`)."""
    prompt = attention_mask.shape[1] - response_length
    prompt_tokens = attention_mask[:, :prompt].long().sum(-1)
    if response_length < 1:
        return prompt_tokens
    return prompt_tokens + response_spans(attention_mask[:, prompt:])
