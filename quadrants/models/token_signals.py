"""No-grad passes for the per-token signals other than the token entropy: the attention entropy
(`quadrant.axis=attention_entropy`) and the LoRA adapter residual (ARCA, its telemetry).

Both give one value per response token t, read at the position whose output predicts token t
(sequence position P + t − 1), the position the token's log-prob and entropy come from
(models/policy.py), so the three signals describe the same distribution. Rows go through the model
`batch_size` at a time, so memory is bounded by one chunk of rows, never the whole batch.

Attention weights: only the eager attention materialises them. transformers'
`eager_attention_forward` returns `(attn_output, attn_weights)` and the attention module returns
both (e.g. transformers/models/qwen2/modeling_qwen2.py `Qwen2Attention.forward`), while the SDPA
and flash paths return None for the weights (transformers/integrations/sdpa_attention.py
`sdpa_attention_forward`: `return attn_output, None`). So the pass switches the model to eager
for its duration with transformers' `set_attn_implementation` (transformers/modeling_utils.py) and
back after. It does not ask for `output_attentions=True`, which would collect every layer's
[b, H, L, L] weights until the forward ends (transformers/utils/output_capturing.py
`capture_outputs`); a forward hook on each chosen layer's attention module reduces that layer's
weights to [b, T] entropies as soon as they are computed, so one layer's weights live at a time.

Under `train.attention_layout=packed` the adapter residual runs packed as the policy's forwards do;
the attention entropy stays padded (`attention_entropy_pass` says why).

Adapter residual: the decoder's last hidden state (by default; `model.lora.residual_layer` picks
another entry of transformers' `hidden_states`, where 0 is the embeddings and −1 the final,
normed state the LM head reads: `capture_outputs` ties hidden_states[-1] to `last_hidden_state`)
with the adapters on, and again with them off (models/lora.py `adapters_disabled`, peft's
`disable_adapter()`). Only the decoder runs (`get_decoder()`), not the LM head.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from quadrants.models.lora import adapters_disabled
from quadrants.models.policy import position_ids_from_mask
from quadrants.ops.adapter_credit import residual_norm
from quadrants.ops.attention_entropy import head_mean_entropy
from quadrants.ops.packing import PackedRows, pack_rows, unpack

EAGER = "eager"


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's layers (`model.model.layers` for the Llama/Qwen2 family)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no decoder `layers` to read attention from")
    return layers


def chosen_layers(count: int, layers: str | Sequence[int]) -> list[int]:
    """`quadrant.attention_layers` as layer indices: "all", "last", or a list of indices (negative
    counts from the end). Raises ValueError naming the key."""
    if layers == "all":
        return list(range(count))
    if layers == "last":
        return [count - 1]
    # a list, or Hydra's ListConfig
    if not isinstance(layers, str) and isinstance(layers, Sequence):
        wanted = list(layers)
        if wanted and all(isinstance(i, int) for i in wanted):
            out = sorted({i % count for i in wanted if -count <= i < count})
            if len(out) == len(wanted):
                return out
    raise ValueError(
        f"quadrant.attention_layers={layers!r} is not a layer selection for a model of {count} "
        "layers; use 'all', 'last', or a list of distinct layer indices in "
        f"[-{count}, {count - 1}]"
    )


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """While inside, the model computes attention with transformers' eager implementation."""
    before = model.config._attn_implementation
    if before != EAGER:
        model.set_attn_implementation(EAGER)
    try:
        yield
    finally:
        if before != EAGER:
            model.set_attn_implementation(before)


def _forward_rows(
    module: nn.Module, sequences: Tensor, attention_mask: Tensor, packed: PackedRows | None = None
) -> object:
    """`module` over the rows: padded, or with `packed`, over its one sequence of real tokens
    (ops/packing.py: attention kept within each row, no attention mask)."""
    if packed is not None:
        return module(
            input_ids=packed.input_ids,
            position_ids=packed.position_ids,
            attention_mask=None,
            use_cache=False,
        )
    return module(
        input_ids=sequences,
        attention_mask=attention_mask.long(),
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )


def _predicting(values: Tensor, response_length: int, packed: PackedRows | None) -> Tensor:
    """The entries of `values` [b, L, ...] (padded) or [1, N, ...] (packed) at the positions that
    predict the T response tokens: [b, T, ...], padded; packed, [1, M, ...] (unpacked by the
    caller once reduced)."""
    if packed is None:
        return values[:, -response_length - 1 : -1]
    return values[:, packed.states]


@torch.no_grad()
def attention_entropy_pass(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    layers: str | Sequence[int] = "all",
    batch_size: int,
) -> Tensor:
    """Per response token, the attention entropy (nats) of the position that predicts it, averaged
    over the heads of the chosen layers and over those layers. [B, L] -> [B, T] float32.

    Always over padded rows, whatever train.attention_layout says: eager attention materialises
    each layer's [b, H, L, L] weights, and b rows packed into one sequence of N ≈ b·L tokens would
    make them [1, H, N, N], b times larger, for the same entropies (a key of another row gets
    weight 0, as a padded key does)."""
    modules = decoder_layers(model)
    picked = chosen_layers(len(modules), layers)
    found: list[Tensor] = []

    def record(_module: nn.Module, _args: object, output: object) -> None:
        weights = output[1] if isinstance(output, tuple) else None
        if weights is None:
            raise RuntimeError("the attention module returned no weights under eager attention")
        rows = weights[:, :, -response_length - 1 : -1, :]  # [b, H, T, K]
        found.append(head_mean_entropy(rows))  # [b, T]

    was_training = model.training
    model.eval()
    hooks = [modules[i].self_attn.register_forward_hook(record) for i in picked]
    out = []
    try:
        with eager_attention(model):
            decoder = model.get_decoder()
            for start in range(0, sequences.shape[0], batch_size):
                found.clear()
                rows = slice(start, start + batch_size)
                _forward_rows(decoder, sequences[rows], attention_mask[rows])
                out.append(torch.stack(found).mean(0))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return torch.cat(out)


def _hidden_state_at(decoder: nn.Module, layer: int) -> tuple[nn.Module | None, int]:
    """Where transformers' `hidden_states[layer]` comes from, without asking for all of them:
    (the module whose output it is, that output's index) or (None, -1) for the last entry, which
    the decoder returns as `last_hidden_state`. hidden_states is [embeddings, the output of
    layer 0, ..., of layer n-2, the normed output of layer n-1] (n + 1 entries;
    transformers/utils/output_capturing.py `capture_outputs` replaces the last layer's raw output
    by `last_hidden_state`). Raises ValueError naming the key when `layer` is out of range."""
    layers = decoder.layers
    count = len(layers) + 1
    if not -count <= layer < count:
        raise ValueError(
            f"model.lora.residual_layer={layer} is out of range for a model with {count} hidden "
            f"states; allowed: [-{count}, {count - 1}] (-1 = the final hidden state)"
        )
    index = layer % count
    if index == count - 1:
        return None, -1
    if index == 0:
        return decoder.embed_tokens, 0
    return layers[index - 1], index


@torch.no_grad()
def adapter_residual_pass(
    model: nn.Module,
    sequences: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    layer: int = -1,
    batch_size: int,
    layout: str = "padded",
) -> Tensor:
    """Per response token, ||h_adapted − h_base||_2 at hidden-state entry `layer` of the position
    that predicts it (module docstring). Only that one hidden state is kept: a forward hook on the
    module that outputs it, or the decoder's `last_hidden_state` for −1 (asking transformers for
    `output_hidden_states` would keep all n + 1 of them for the chunk). [B, L] -> [B, T] float32.
    `layout=packed` (train.attention_layout): each chunk's rows as one sequence of their real tokens
    (ops/packing.py), as the policy's forwards run them; positions after a row's last real response
    token hold 0."""
    was_training = model.training
    model.eval()
    decoder = model.get_decoder()
    source, _ = _hidden_state_at(decoder, layer)
    caught: list[Tensor] = []

    def catch(_module: nn.Module, _args: object, output: object) -> None:
        caught.append(output[0] if isinstance(output, tuple) else output)

    hook = None if source is None else source.register_forward_hook(catch)
    out = []
    try:
        for start in range(0, sequences.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            packed = None
            if layout == "packed":
                packed = pack_rows(sequences[rows], attention_mask[rows], response_length)

            def state(rows: slice = rows, packed: PackedRows | None = packed) -> Tensor:
                caught.clear()
                last = _forward_rows(decoder, sequences[rows], attention_mask[rows], packed)
                hidden = last.last_hidden_state if source is None else caught[0]
                return _predicting(hidden, response_length, packed)  # [b, T, d] ([1, M, d])

            adapted = state()
            with adapters_disabled(model):
                base = state()
            norm = residual_norm(adapted, base)
            out.append(norm if packed is None else unpack(norm[0], packed))
    finally:
        if hook is not None:
            hook.remove()
        model.train(was_training)
    return torch.cat(out)
