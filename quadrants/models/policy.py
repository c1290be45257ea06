"""Forward passes of the policy over (prompt + response) sequences: token log-probs and entropy.

Position ids are rebuilt from the attention mask so that left-padded prompts see the same positions
as they did inside `generate` (a plain forward would count the padding and shift every position).
The last response token is only a target (no later position reads it), so no call feeds it;
only the T positions that predict the response go through the LM head (`logits_to_keep`).

Rows that share a prompt (a GRPO group's G responses) share its forward: each distinct prompt runs
once with a KV cache, the cache is copied to its rows, and the responses continue from it
(`shared_prompts`). The update then computes P + G·T positions per group where the plain forward
computes G·(P + T), with gradients flowing back through the copied cache into the one prompt pass.

The responses run in length buckets (ops/length_buckets.py): rows sorted by the position of their
last real token and split where that saves enough padding, each bucket one call cut after its
longest row. Cut positions come back as 0; every consumer masks them.

The LM head itself is fused with the log-prob and entropy reduction (ops/fused_head.py) when the
model's logits are a plain linear map of its last hidden states (no soft-capping or scaling): for
the duration of the call the head's `forward` is replaced by one that returns [B, T, 2]
(logp, entropy) in place of the logits, so the [B, T, V] logits never exist, in the update's forward
and backward nor in the no-grad passes. The module, its parameters and any FSDP hooks stay as they
are. Other models take the logits and reduce them in row chunks (ops/entropy.py).

`train.attention_layout=packed` replaces all of the above but the head (`packed_logprobs`): the
rows' real tokens go end to end in one sequence with per-row position ids and no attention mask,
which transformers keeps apart row by row (ops/packing.py); no padding, no buckets, no shared
prompt, one call whatever the rows (so FSDP ranks make the same calls).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from quadrants.ops.entropy import logprobs_and_entropy
from quadrants.ops.fused_head import head_logprobs_and_entropy
from quadrants.ops.length_buckets import length_buckets, response_spans
from quadrants.ops.packing import PackedRows, pack_rows, unpack

MAX_LENGTH_BUCKETS = 4  # response-length buckets per forward (1 under FSDP: ranks make equal calls)
LAYOUTS = ("padded", "packed")  # train.attention_layout

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


# model families whose transformers modelling builds its masks with masking_utils'
# `create_causal_mask` / `create_sliding_window_causal_mask` from the position ids (checked in
# transformers 5.23: models/{llama,mistral,qwen2,qwen3}/modeling_*.py), so that packed rows stay
# apart under SDPA, eager, flex and flash attention (ops/packing.py); other families may attend
# across rows or carry a recurrent state from one row into the next
PACKED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_PACKED_LAYER_TYPES = ("full_attention", "sliding_attention")
_PACKED_ATTENTIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")


def packing_refusal(config: object) -> str | None:
    """Why `train.attention_layout=packed` cannot run a model of this transformers `config`, or
    None when it can: a family outside `PACKED_MODEL_TYPES`, a layer that is not plain or
    sliding-window attention, or an attention implementation that does not read packed position
    ids (a loaded model's `config._attn_implementation`; None before loading)."""
    model_type = getattr(config, "model_type", None)
    if model_type not in PACKED_MODEL_TYPES:
        return (
            f"the model's family {model_type!r} is not one whose attention keeps packed rows "
            f"apart ({', '.join(PACKED_MODEL_TYPES)})"
        )
    layers = getattr(config, "layer_types", None) or []
    other = sorted({kind for kind in layers if kind not in _PACKED_LAYER_TYPES})
    if other:
        return f"the model has {', '.join(other)} layers, which packed rows would run through"
    attention = getattr(config, "_attn_implementation", None)
    if attention is not None and attention not in _PACKED_ATTENTIONS:
        return f"its attention implementation {attention!r} does not read packed position ids"
    return None


def check_packable(config: object, key: str = "train.attention_layout") -> None:
    """Raise ValueError naming `key` and the fix when `packing_refusal` refuses `config`."""
    reason = packing_refusal(config)
    if reason is not None:
        raise ValueError(f"{key}=packed: {reason}. Set {key}=padded for this model")


@contextmanager
def _head_reduces(
    head: nn.Linear,
    targets: Tensor,
    temperature: float,
    chunk_size: int,
    prefix: Tensor | None = None,
    skip_gradless: bool = True,
) -> Iterator[None]:
    """While inside, `head(hidden)` returns [B, T, 2]: (logp of `targets` [B, T], entropy).
    `hidden` is [B, T, H], the states that predict the T targets; with `prefix` [B, 1, H] (the
    last prompt position's state, from an earlier call), `hidden` is [B, T - 1, H], the response
    positions before the last (the last predicts nothing; a one-token call passes [B, 1, H], whose
    state is dropped)."""

    def forward(hidden: Tensor) -> Tensor:
        if prefix is None:  # the last T states (a call for T = 0 keeps one)
            states = hidden[:, hidden.shape[1] - targets.shape[1] :]
        else:
            states = torch.cat([prefix, hidden], dim=1)[:, : targets.shape[1]]
        logp, entropy = head_logprobs_and_entropy(
            states,
            head.weight,
            targets,
            head.bias,
            temperature=temperature,
            chunk_size=chunk_size,
            skip_gradless=skip_gradless,
        )
        return torch.stack([logp, entropy], dim=-1)

    head.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        del head.forward


@contextmanager
def _head_passes_hidden(head: nn.Linear | None) -> Iterator[None]:
    """While inside, `head` (when not None) returns its input: the model's "logits" are its last
    hidden states."""
    if head is None:
        yield
        return
    head.forward = lambda hidden: hidden  # type: ignore[method-assign]
    try:
        yield
    finally:
        del head.forward


def checkpoints_activations(model: nn.Module) -> bool:
    """transformers' activation checkpointing flag (`is_gradient_checkpointing` before v5)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(model)):
            return bool(getattr(model, name))
    return False


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
    share_prompts: str = "auto",
    max_buckets: int = MAX_LENGTH_BUCKETS,
    layout: str = "padded",
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropy) of the response tokens under `model` at `temperature`.

    Args:
        sequences: [B, L] long, prompt + response (response = the last T positions).
        attention_mask: [B, L] bool.
        response_length: T.
        share_prompts: `auto`: one forward per distinct prompt where rows share one
            (`shared_prompts`); `always`: that path even when no prompt repeats (under FSDP every
            rank must make the same number of forward calls, whatever its rows); `never`: every
            row's prompt computed (the reference the shared path is tested on).
        max_buckets: the responses run in at most this many length buckets, each cut after its
            longest row's last real token (ops/length_buckets.py); 1: one call, still cut after
            the batch's last real token. Under FSDP every rank must pass the same value, and 1
            (the number of calls must not depend on a rank's rows).
        layout: `padded` (the above); `packed`: one call over the rows' real tokens end to end
            (`packed_logprobs`; no buckets, no shared prompts: `share_prompts` and `max_buckets`
            are not read).

    Returns:
        (logp [B, T] float32, entropy [B, T] float32 or None); differentiable if grad is enabled.
        Positions a bucket cuts (after its longest row's last token) hold 0; packed, every
        position after a row's last real response token.
    """
    if layout == "packed":
        return packed_logprobs(
            model,
            sequences,
            attention_mask,
            response_length,
            temperature=temperature,
            chunk_size=chunk_size,
            with_entropy=with_entropy,
        )
    if layout != "padded":
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if response_length < 1:
        buckets = [(torch.arange(sequences.shape[0], device=sequences.device), response_length)]
    else:
        spans = response_spans(attention_mask[:, -response_length:])
        buckets = length_buckets(spans, max_buckets=max_buckets)
    passes = dict(temperature=temperature, chunk_size=chunk_size, with_entropy=with_entropy)
    shared = (
        None
        if share_prompts == "never"
        else shared_prompts(
            model,
            sequences,
            attention_mask,
            response_length,
            even_if_distinct=share_prompts == "always",
        )
    )
    if shared is not None:
        parts = _shared_prompt_logprobs(
            model,
            sequences,
            attention_mask,
            response_length,
            *shared,
            buckets,
            **passes,
        )
    else:
        prompt_length = sequences.shape[1] - response_length
        parts = [
            plain_logprobs(
                model,
                sequences[rows, : prompt_length + length],
                attention_mask[rows, : prompt_length + length],
                length,
                **passes,
            )
            for rows, length in buckets
        ]
    return _assemble(parts, buckets, response_length)


def _assemble(
    parts: list[tuple[Tensor, Tensor | None]],
    buckets: list[tuple[Tensor, int]],
    response_length: int,
) -> tuple[Tensor, Tensor | None]:
    """The buckets' (logp [n, t], entropy) padded with zeros to T and put back in row order."""

    def whole(pieces: list[Tensor]) -> Tensor:
        padded = [F.pad(piece, (0, response_length - piece.shape[1])) for piece in pieces]
        if len(padded) == 1:  # one bucket holds every row, in order
            return padded[0]
        order = torch.cat([rows for rows, _ in buckets])
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0], device=order.device)
        return torch.cat(padded).index_select(0, inverse)

    logp = whole([logp for logp, _ in parts])
    if parts[0][1] is None:
        return logp, None
    return logp, whole([entropy for _, entropy in parts])  # type: ignore[misc]


def plain_logprobs(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
    skip_gradless: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """`response_logprobs` of rows that each carry their prompt: one forward over [B, P + T - 1]
    (the last token is a target only: no position after it reads it), no length buckets and no
    shared prompts (`response_logprobs` picks those by the data; this path asks nothing of it, so
    the memory plan traces it on fake tensors: memory/trace.py).

    `skip_gradless`: the fused head's backward skips rows whose incoming gradients are both 0
    (ops/fused_head.py); False recomputes every row, the path of most memory, and asks no
    data-dependent question of the gradients."""
    end = sequences.shape[1] - 1 if response_length > 0 else sequences.shape[1]
    inputs = dict(
        input_ids=sequences[:, :end],
        attention_mask=attention_mask[:, :end].long(),
        position_ids=position_ids_from_mask(attention_mask)[:, :end],
        logits_to_keep=max(response_length, 1),  # 0 would keep every position
        use_cache=False,
    )
    targets = sequences[:, sequences.shape[1] - response_length :]  # [B, T] (T = 0: none)
    head = fused_head(model)
    if head is not None:
        with _head_reduces(head, targets, temperature, chunk_size, skip_gradless=skip_gradless):
            reduced = model(**inputs).logits  # [B, T, 2]
        return reduced[..., 0], reduced[..., 1] if with_entropy else None
    logits = model(**inputs).logits  # position P-1+t predicts response token t
    logits = logits[:, logits.shape[1] - response_length :]  # [B, T, V]
    return logprobs_and_entropy(logits, targets, temperature, chunk_size, with_entropy=with_entropy)


def packed_logprobs(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
    skip_gradless: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """`plain_logprobs` without padding: the rows' real tokens in one [1, N] sequence with each
    row's own position ids and no attention mask (ops/packing.py `pack_rows`), which transformers'
    attention keeps apart row by row (block-diagonal causal mask under SDPA and eager, varlen under
    flash attention: ops/packing.py names the source). The same function of the weights as the
    padded forward; float rounding differs (tests/unit/models/test_packed_forward.py). Positions
    after a row's last real response token hold 0."""
    packed = pack_rows(sequences, attention_mask, response_length)
    logp, entropy = packed_forward(
        model,
        packed,
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        skip_gradless=skip_gradless,
    )
    return unpack(logp, packed), None if entropy is None else unpack(entropy, packed)


def packed_forward(
    model: nn.Module,
    packed: PackedRows,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
    skip_gradless: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """(logp [M], entropy [M] or None) of `packed`'s targets: one call over its [1, N] tokens, and
    only the M positions that predict a target reach the LM head (`logits_to_keep` as a tensor of
    positions: transformers/modeling_utils.py `slice_logits_to_keep`). Asks nothing of the data
    (the memory plan traces it on fake tensors: memory/trace.py)."""
    keep = packed.states
    if keep.shape[0] == 0:  # no target (T = 0 or no response token): one state, dropped
        keep = torch.full((1,), packed.input_ids.shape[1] - 1, device=keep.device)
    inputs = dict(
        input_ids=packed.input_ids,
        position_ids=packed.position_ids,
        attention_mask=None,  # the packed format: transformers reads the rows from position_ids
        logits_to_keep=keep,
        use_cache=False,
    )
    targets = packed.targets[None, :]  # [1, M]
    head = fused_head(model)
    if head is not None:
        with _head_reduces(head, targets, temperature, chunk_size, skip_gradless=skip_gradless):
            reduced = model(**inputs).logits[0]  # [M, 2]
        return reduced[:, 0], reduced[:, 1] if with_entropy else None
    logits = model(**inputs).logits  # [1, M (or 1), V]
    logits = logits[:, logits.shape[1] - targets.shape[1] :]
    logp, entropy = logprobs_and_entropy(
        logits, targets, temperature, chunk_size, with_entropy=with_entropy
    )
    return logp[0], None if entropy is None else entropy[0]


def shared_prompts(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    even_if_distinct: bool = False,
) -> tuple[Tensor, Tensor] | None:
    """(first [U], copies [B]) when rows share a prompt (a GRPO group's G rows do) and the model
    can continue a batch of prompts from a cache: `first[u]` is a row holding distinct prompt u,
    `copies[b]` the distinct prompt of row b. None: every prompt is distinct (unless
    `even_if_distinct`), there is no prompt,
    the model checkpoints activations (transformers then drops the cache), or a layer's cache is
    not plain full attention."""
    prompt_length = sequences.shape[1] - response_length
    if prompt_length < 1 or response_length < 1:
        return None
    if not hasattr(model, "config") or checkpoints_activations(model):
        return None
    prompts = torch.cat([sequences[:, :prompt_length], attention_mask[:, :prompt_length].long()], 1)
    distinct, copies = torch.unique(prompts, dim=0, return_inverse=True)  # [U, 2P], [B]
    if distinct.shape[0] == sequences.shape[0] and not even_if_distinct:
        return None
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # a config transformers' cache does not understand: the plain path
        return None
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    rows = torch.arange(sequences.shape[0], device=sequences.device)
    first = torch.full((distinct.shape[0],), sequences.shape[0], device=sequences.device)
    first = first.scatter_reduce(0, copies, rows, reduce="amin")
    return first, copies


def _shared_prompt_logprobs(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    first: Tensor,
    copies: Tensor,
    buckets: list[tuple[Tensor, int]],
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
) -> list[tuple[Tensor, Tensor | None]]:
    """`response_logprobs` computing each distinct prompt once: the U prompts go through the model
    with a cache, the cache is copied to each bucket's rows (`index_select`, so the gradients of
    the G rows that share a prompt add up in it), and each bucket's responses continue from it,
    cut to the bucket's length. The same function of the weights as the plain path (attention over
    prompt keys, then response keys); float32 rounding differs
    (tests/unit/models/test_shared_prompts.py). One (logp, entropy) per bucket."""
    prompt_length = sequences.shape[1] - response_length
    prompt_mask = attention_mask[first, :prompt_length].long()  # [U, P]
    cache = DynamicCache(config=model.config)
    head = fused_head(model)
    with _head_passes_hidden(head):
        last = model(
            input_ids=sequences[first, :prompt_length],
            attention_mask=prompt_mask,
            position_ids=position_ids_from_mask(prompt_mask),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits  # [U, 1, H] hidden states (fused head) or [U, 1, V] logits
    positions = position_ids_from_mask(attention_mask)
    parts = []
    for rows, length in buckets:
        prompts = copies[rows]  # [n]: each row's distinct prompt
        rows_cache = DynamicCache(config=model.config)
        rows_cache.layers = [copy.copy(layer) for layer in cache.layers]
        for layer in rows_cache.layers:
            layer.keys = layer.keys.index_select(0, prompts)  # [U, ...] -> [n, ...]
            layer.values = layer.values.index_select(0, prompts)
        end = prompt_length + length
        targets = sequences[rows, prompt_length:end]  # [n, t]
        # the last target is read by no later position: the call stops before it (a one-token
        # bucket still makes its call, so that every FSDP rank makes the same ones)
        fed = end - 1 if length > 1 else end
        inputs = dict(
            input_ids=sequences[rows, prompt_length:fed],
            attention_mask=attention_mask[rows, :fed].long(),
            position_ids=positions[rows, prompt_length:fed],
            past_key_values=rows_cache,
            use_cache=True,
            logits_to_keep=0,  # every position fed
        )
        prefix = last.index_select(0, prompts)
        if head is not None:
            with _head_reduces(head, targets, temperature, chunk_size, prefix=prefix):
                reduced = model(**inputs).logits  # [n, t, 2]
            parts.append((reduced[..., 0], reduced[..., 1] if with_entropy else None))
            continue
        logits = torch.cat([prefix, model(**inputs).logits], dim=1)[:, : targets.shape[1]]
        parts.append(
            logprobs_and_entropy(
                logits, targets, temperature, chunk_size, with_entropy=with_entropy
            )
        )
    return parts


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
    share_prompts: str = "auto",
    max_buckets: int = MAX_LENGTH_BUCKETS,
    layout: str = "padded",
) -> tuple[Tensor, Tensor]:
    """One no-grad pass giving old log-probs and entropy, `batch_size` sequences at a time
    (`share_prompts`, `max_buckets`, `layout` as in `response_logprobs`).

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
            share_prompts=share_prompts,
            max_buckets=max_buckets,
            layout=layout,
        )
        logps.append(logp)
        ents.append(ent)
    model.train(was_training)
    return torch.cat(logps), torch.cat(ents)
