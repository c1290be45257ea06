"""The HF engine's fast decode for Llama-family models: one fused step per token, and finished rows
dropped from the batch.

Shape legend: **B** sequences · **b** sequences still decoding · **P** prompt tokens · **T** new
tokens · **V** vocabulary · **H** query heads · **K** key/value heads · **d** head size.

`decode.sample` calls the Hugging Face module at every token. That costs, on a small model, about as
much as the matrix multiplies themselves (docs/performance.md): per layer three projections where
one would do, two MLP input projections where one would do, the mask and position bookkeeping, and
every finished sequence still computed to the last token. Here:
- the prompt is prefilled by the HF module itself (the same call and cache as `decode.sample`),
  once per distinct prompt: the G rows of a group share its cache, copied before the first token;
- each new token then runs the same arithmetic as the module's forward with the query, key and value
  weights concatenated into one matrix and the gate and up weights into another (built once per
  rollout: the weights are fixed while it samples), the rotary cos and sin of every position
  tabulated once per rollout from the module's own rotary embedding (per step for the rope types
  whose frequencies follow the length), queries and keys rotated in one call, and attention over
  the preallocated cache written in place, its scores scaled and masked in the same batched
  multiply;
- a sequence that has produced its stop token is removed from the batch as soon as an eighth of the
  batch has finished (`COMPACT_FRACTION`), so the work follows the tokens still being sampled.

Sampling is `decode.draw`, the same operations as `decode.sample` on the rows still decoding; the
log-probs and entropies are recorded as there. What changes is rounding: the logits agree with the
HF module's to float tolerance (tests/unit/rollout/test_fast_decode.py checks 2e-6 on logits of
order 1), and removing rows changes which random numbers each row's draw consumes. So for a fixed
seed the tokens are not those `decode.sample` draws, but each sequence is drawn from the same
per-token distributions: the equivalence is in distribution, tested on the per-step logits, on the
first token's empirical distribution, and with greedy decoding, which must give identical tokens.

Which models: `fast_decode_unsupported` names why a model is not handled (another architecture,
sliding-window layers, a non-`nn.Linear` projection such as a quantised or adapter-wrapped one, a
module in training mode); the engine then uses `decode.sample`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quadrants.cpu.linears import PLAIN_LINEARS
from quadrants.cpu.matmul import onednn_linear, routes
from quadrants.rollout.decode import (
    Decoded,
    PreallocatedLayer,
    draw,
    prefill,
    sampling_setup,
    step_logp_entropy,
)

FAST_MODEL_TYPES = ("llama", "qwen2")
COMPACT_FRACTION = 8  # drop finished rows once at least 1/8 of the batch has finished


def fast_decode_unsupported(model: nn.Module) -> str | None:
    """Why `model` cannot take the fast decode (None: it can)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAST_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {list(FAST_MODEL_TYPES)}"
    if model.training:
        return "the module is in training mode"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {getattr(config, 'hidden_act', None)!r} is not silu"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    body = getattr(model, "model", None)
    if not isinstance(getattr(body, "embed_tokens", None), nn.Embedding):
        return "the embedding is not an nn.Embedding"
    if type(getattr(model, "lm_head", None)) not in PLAIN_LINEARS:
        return "lm_head is not an nn.Linear"
    for index, layer in enumerate(body.layers):
        attention, mlp = layer.self_attn, layer.mlp
        if getattr(attention, "sliding_window", None) is not None:
            return f"layer {index} uses sliding-window attention"
        for name, module in (
            ("q_proj", attention.q_proj),
            ("k_proj", attention.k_proj),
            ("v_proj", attention.v_proj),
            ("o_proj", attention.o_proj),
            ("gate_proj", mlp.gate_proj),
            ("up_proj", mlp.up_proj),
            ("down_proj", mlp.down_proj),
        ):
            if type(module) not in PLAIN_LINEARS:
                return f"layer {index} {name} is a {type(module).__name__}, not an nn.Linear"
            if type(module.weight) is not nn.Parameter:  # e.g. a sharded DTensor
                return f"layer {index} {name} holds a {type(module.weight).__name__}"
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            if not hasattr(norm, "variance_epsilon"):
                return f"layer {index} has a {type(norm).__name__} norm"
    return None


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The Llama/Qwen2 RMSNorm: normalised in float32, cast back, then scaled. [..., D] ->
    [..., D]. In float32 it is torch's fused `rms_norm` (the same arithmetic in one call)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    hidden = x.float()
    hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hidden.to(x.dtype)


def signed_sine(sin: Tensor) -> Tensor:
    """sin with its first half negated, [..., d] -> [..., d]: what `rotate` takes."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rotate(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """Rotary embedding in the HF layout (halves, not interleaved): x·cos + (−x₂, x₁)·sin, written
    as x·cos + (x₂, x₁)·(−sin₁, sin₂), the halves swapped by one roll. x [b, heads, d]; cos and
    `signed_sine(sin)` [b, 1, d]."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


def rotary_table(rotary: nn.Module, like: Tensor, capacity: int) -> tuple[Tensor, Tensor] | None:
    """cos and `signed_sine(sin)` [capacity, d] of positions 0..capacity−1, from the model's own
    rotary embedding (`like` gives the dtype and device); None for the rope types whose frequencies
    change with the length seen so far (transformers' dynamic and longrope), computed per step."""
    if getattr(rotary, "rope_type", "default") in ("dynamic", "longrope"):
        return None
    positions = torch.arange(capacity, device=like.device)[None]  # [1, capacity]
    cos, sin = rotary(like, positions)  # [1, capacity, d] each
    return cos[0], signed_sine(sin[0])


def _cat_bias(*modules: nn.Linear) -> Tensor | None:
    """The concatenated biases of `modules`; None when none has one (zeros stand in for a missing
    one beside present ones)."""
    if all(m.bias is None for m in modules):
        return None
    return torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules]
    )


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's weights, with the QKV and gate-up matrices concatenated."""

    norm_in: nn.Module
    qkv_weight: Tensor
    qkv_bias: Tensor | None
    o_proj: nn.Linear
    norm_post: nn.Module
    gate_up_weight: Tensor
    gate_up_bias: Tensor | None
    down_proj: nn.Linear


class FastDecoder:
    """Decodes one token per `step` for the rows still running, over the cache the HF prefill
    filled (`PreallocatedLayer` buffers, [b, K, capacity, d] each, first `length` positions set)."""

    def __init__(self, model: nn.Module, layers: list[PreallocatedLayer], prompt_mask: Tensor):
        body = model.model
        config = model.config
        self.embed = body.embed_tokens
        self.rotary = body.rotary_emb
        self.final_norm = body.norm
        self.lm_head = model.lm_head
        # whether every multiply of the step goes through oneDNN (train.cpu.matmul), asked once
        # and on the CPU only: the weights and the hidden states share the model's dtype and device
        on_cpu = self.lm_head.weight.device.type == "cpu"
        self.onednn = on_cpu and routes(self.lm_head.weight, self.lm_head.weight)
        first = body.layers[0].self_attn
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(first.head_dim)
        self.scaling = float(first.scaling)
        self.intermediate = int(body.layers[0].mlp.gate_proj.weight.shape[0])
        self.layers = [
            _Layer(
                norm_in=layer.input_layernorm,
                qkv_weight=torch.cat(
                    [
                        layer.self_attn.q_proj.weight,
                        layer.self_attn.k_proj.weight,
                        layer.self_attn.v_proj.weight,
                    ]
                ),
                qkv_bias=_cat_bias(
                    layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj
                ),
                o_proj=layer.self_attn.o_proj,
                norm_post=layer.post_attention_layernorm,
                gate_up_weight=torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                gate_up_bias=_cat_bias(layer.mlp.gate_proj, layer.mlp.up_proj),
                down_proj=layer.mlp.down_proj,
            )
            for layer in body.layers
        ]
        self.keys = [layer._key_buffer for layer in layers]  # [b, K, capacity, d] each
        self.values = [layer._value_buffer for layer in layers]
        self.length = layers[0].length
        capacity = self.keys[0].shape[2]
        self.rotary_table = rotary_table(self.rotary, self.embed.weight, capacity)
        # additive key mask in the model's dtype (baddbmm adds it to the scores), one copy per
        # key/value head: -inf on the prompt's left padding, 0 elsewhere. [b, K, 1, capacity]
        key_mask = torch.zeros(
            prompt_mask.shape[0], capacity, dtype=self.embed.weight.dtype, device=prompt_mask.device
        )
        key_mask[:, : prompt_mask.shape[1]].masked_fill_(~prompt_mask, float("-inf"))
        self.key_mask = key_mask[:, None, None, :].repeat(1, self.kv_heads, 1, 1)

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return onednn_linear(x, weight, bias) if self.onednn else F.linear(x, weight, bias)

    def keep(self, rows: Tensor) -> None:
        """Continue with `rows` (indices into the current batch) only."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.key_mask = self.key_mask.index_select(0, rows)

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Logits [b, V] (the model's dtype) after feeding `tokens` [b] at `positions` [b]."""
        end = self.length + 1
        if end > self.keys[0].shape[2]:
            raise ValueError(f"the cache holds {self.keys[0].shape[2]} positions, {end} asked for")
        rows = tokens.shape[0]
        heads, kv_heads, d = self.heads, self.kv_heads, self.head_dim
        group = heads // kv_heads  # query head h reads key/value head h // group (repeat_kv)
        x = self.embed(tokens)  # [b, D], a new tensor: the residual stream is added to in place
        if self.rotary_table is None:
            cos, sin = self.rotary(x, positions[:, None])  # [b, 1, d] each
            sin = signed_sine(sin)
        else:
            cos = self.rotary_table[0].index_select(0, positions)[:, None]  # [b, 1, d]
            sin = self.rotary_table[1].index_select(0, positions)[:, None]
        mask = self.key_mask[..., :end].reshape(rows * kv_heads, 1, end)
        for index, layer in enumerate(self.layers):
            hidden = rms_norm(x, layer.norm_in.weight, layer.norm_in.variance_epsilon)
            qkv = self._linear(hidden, layer.qkv_weight, layer.qkv_bias)  # [b, (H+2K)d]
            # q and k rotated together: [b, H + K, d]
            rotated = rotate(qkv[:, : (heads + kv_heads) * d].view(rows, -1, d), cos, sin)
            self.keys[index][:, :, self.length] = rotated[:, heads:]
            self.values[index][:, :, self.length] = qkv[:, (heads + kv_heads) * d :].view(
                rows, kv_heads, d
            )
            keys = self.keys[index][:, :, :end].reshape(rows * kv_heads, end, d)
            values = self.values[index][:, :, :end].reshape(rows * kv_heads, end, d)
            grouped = rotated[:, :heads].reshape(rows * kv_heads, group, d)
            scores = torch.baddbmm(mask, grouped, keys.transpose(1, 2), alpha=self.scaling)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
            attended = torch.bmm(probs, values).view(rows, heads * d)  # [b, H d]
            x.add_(self._linear(attended, layer.o_proj.weight, layer.o_proj.bias))
            hidden = rms_norm(x, layer.norm_post.weight, layer.norm_post.variance_epsilon)
            gate_up = self._linear(hidden, layer.gate_up_weight, layer.gate_up_bias)  # [b, 2 MLP]
            gate, up = gate_up[:, : self.intermediate], gate_up[:, self.intermediate :]
            act = F.silu(gate) * up
            x.add_(self._linear(act, layer.down_proj.weight, layer.down_proj.bias))
        self.length = end
        hidden = rms_norm(x, self.final_norm.weight, self.final_norm.variance_epsilon)
        return self._linear(hidden, self.lm_head.weight, self.lm_head.bias)


@torch.no_grad()
def sample_fast(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: list[int],
    pad_id: int,
    record: bool,
) -> Decoded:
    """`decode.sample`'s contract (same arguments, same Decoded) with the fused step and finished
    rows removed; `fast_decode_unsupported(model)` must be None."""
    record_at, top_p_warper = sampling_setup(temperature, top_p)
    batch = prompt_ids.shape[0]
    columns = prompt_ids.shape[1] + max_new_tokens
    # each distinct prompt is prefilled once (a group's G rows share one) and its cache copied
    distinct, copies = torch.unique(
        torch.cat([prompt_ids, prompt_mask.long()], dim=1), dim=0, return_inverse=True
    )  # [U, 2P], [B]
    unique_ids = distinct[:, : prompt_ids.shape[1]]
    unique_mask = distinct[:, prompt_ids.shape[1] :]  # [U, P] long
    out, positions, cache = prefill(model, unique_ids, unique_mask, columns)
    if not all(isinstance(layer, PreallocatedLayer) for layer in cache.layers):
        raise ValueError("the fast decode needs full-attention layers (fast_decode_unsupported)")
    decoder = FastDecoder(model, cache.layers, unique_mask.bool())
    decoder.keep(copies)  # [U, ...] -> [B, ...]
    logits = out.logits[:, -1].float()[copies]  # [b, V]
    position = positions[copies, -1]  # [b]
    rows = torch.arange(batch, device=prompt_ids.device)  # the original index of each row
    unfinished = torch.ones(batch, dtype=torch.long, device=prompt_ids.device)
    stops = torch.tensor(stop_ids, dtype=prompt_ids.dtype, device=prompt_ids.device)
    tokens = prompt_ids.new_full((batch, max_new_tokens), pad_id)
    logps = torch.zeros(batch, max_new_tokens, device=prompt_ids.device)
    entropies = torch.zeros(batch, max_new_tokens, device=prompt_ids.device)
    steps = 0
    for step in range(max_new_tokens):
        next_tokens = draw(logits, temperature, top_p_warper, prompt_ids)
        next_tokens = next_tokens * unfinished + pad_id * (1 - unfinished)  # [b]
        tokens[rows, step] = next_tokens
        if record:
            logp, entropy = step_logp_entropy(logits, next_tokens, record_at)
            logps[rows, step] = logp * unfinished
            entropies[rows, step] = entropy * unfinished
        steps = step + 1
        unfinished = unfinished & ~torch.isin(next_tokens, stops)
        running = int(unfinished.sum())
        if steps == max_new_tokens or running == 0:
            break
        finished = rows.shape[0] - running
        if finished * COMPACT_FRACTION >= rows.shape[0]:
            keep = unfinished.nonzero().squeeze(1)
            rows, next_tokens, position = rows[keep], next_tokens[keep], position[keep]
            unfinished = unfinished[keep]
            decoder.keep(keep)
        position = position + 1
        logits = decoder.step(next_tokens, position).float()
    tokens = tokens[:, :steps]
    if not record:
        return Decoded(tokens, None, None)
    return Decoded(tokens, logps[:, :steps], entropies[:, :steps])
