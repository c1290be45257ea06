"""Token entropy and token log-probabilities from logits, computed in row chunks.

Shape legend: **N** rows (flattened B*T positions) · **V** vocabulary.

Both quantities are taken at a sampling temperature: the distribution is
softmax(logits / temperature), the one the rollout engine sampled from (before top-p truncation,
which no trainer can recompute).

Memory: the chunked functions materialise [chunk, V] float32 buffers at a time, so peak extra memory
is bounded by a few `chunk_size * V` buffers, not by `N * V` (at V = 151,936 and N = 4,096 the
direct formula needs several GB of temporaries; a chunk of 256 rows needs about 150 MB). This holds
for the backward pass too: `_ChunkedLogpEntropy` keeps only the logits and recomputes each chunk's
softmax when gradients are asked for, writing straight into the [N, V] logits gradient (which any
trainer needs anyway), using
    d logp_y / d z_j = 1[j = y] − p_j,        d H / d z_j = −p_j (log p_j + H),    z = logits / τ.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_CHUNK_SIZE = 256


def _check(temperature: float, chunk_size: int) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")


def _chunk_stats(
    rows: Tensor, ids: Tensor | None, temperature: float
) -> tuple[Tensor, Tensor | None, Tensor]:
    """For one chunk [n, V]: (log_probs [n, V], logp of ids [n] or None, entropy [n]).

    Entropy is −Σ p log p from log_softmax (accurate to float32 rounding at V = 152k); p log p is
    taken as 0 where p = 0, so −inf logits (masked vocabulary) give no NaN.
    """
    log_probs = torch.log_softmax(rows.float() / temperature, dim=-1)  # [n, V]
    probs = log_probs.exp()
    plogp = torch.where(probs > 0, probs * log_probs, torch.zeros_like(probs))
    entropy = -plogp.sum(-1)
    logp = None if ids is None else log_probs.gather(-1, ids[:, None]).squeeze(-1)
    return log_probs, logp, entropy


class _ChunkedLogpEntropy(torch.autograd.Function):
    """logp of `ids` and entropy per row, chunked in forward and backward. rows [N, V], ids [N]."""

    @staticmethod
    def forward(ctx, rows: Tensor, ids: Tensor, temperature: float, chunk_size: int):  # type: ignore[override]
        logps, ents = [], []
        for i in range(0, rows.shape[0], chunk_size):
            _, logp, ent = _chunk_stats(
                rows[i : i + chunk_size], ids[i : i + chunk_size], temperature
            )
            logps.append(logp)
            ents.append(ent)
        logp = torch.cat(logps) if logps else rows.new_zeros(0, dtype=torch.float32)
        entropy = torch.cat(ents) if ents else rows.new_zeros(0, dtype=torch.float32)
        ctx.save_for_backward(rows, ids, entropy)
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):  # type: ignore[override]
        rows, ids, entropy = ctx.saved_tensors
        grad_rows = torch.empty_like(rows)
        step, tau = ctx.chunk_size, ctx.temperature
        for i in range(0, rows.shape[0], step):
            sl = slice(i, i + step)
            log_probs, _, _ = _chunk_stats(rows[sl], None, tau)
            probs = log_probs.exp()  # [n, V]
            g_lp = grad_logp[sl, None].float()  # [n, 1]
            g_h = grad_entropy[sl, None].float()
            safe_log = torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))
            grad_z = -probs * (g_lp + g_h * (safe_log + entropy[sl, None]))  # [n, V]
            grad_z.scatter_add_(-1, ids[sl, None], g_lp)  # + 1[j = y] * g_logp
            grad_rows[sl] = (grad_z / tau).to(rows.dtype)
        return grad_rows, None, None, None


def logprobs_and_entropy(
    logits: Tensor,
    tokens: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of `tokens` and (optionally) the full-vocabulary entropy, chunked.

    Differentiable in `logits` with chunk-bounded extra memory in both passes.

    Args:
        logits: [..., V] float (any float dtype; computed in float32).
        tokens: [...] long.
        temperature: sampling temperature (> 0).
        chunk_size: rows per chunk (> 0).
        with_entropy: return the entropy too (it is computed either way; this only drops it).

    Returns:
        (logp [...] float32, entropy [...] float32 or None).
    """
    _check(temperature, chunk_size)
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(
            f"tokens shape {tuple(tokens.shape)} != logits shape {tuple(logits.shape[:-1])}"
        )
    rows = logits.reshape(-1, logits.shape[-1])  # [N, V]
    logp, entropy = _ChunkedLogpEntropy.apply(rows, tokens.reshape(-1), temperature, chunk_size)
    logp = logp.reshape(tokens.shape)
    return logp, (entropy.reshape(tokens.shape) if with_entropy else None)


def entropy_from_logits(
    logits: Tensor, temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Tensor:
    """Full-vocabulary token entropy in nats, `chunk_size` rows at a time (differentiable).

    Args:
        logits: [..., V] float.
        temperature: sampling temperature (> 0).
        chunk_size: rows per chunk (> 0).

    Returns:
        [...] float32 entropy.
    """
    tokens = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    _, entropy = logprobs_and_entropy(logits, tokens, temperature, chunk_size)
    return entropy  # type: ignore[return-value]


def logprobs_from_logits(
    logits: Tensor, tokens: Tensor, temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Tensor:
    """log softmax(logits / temperature) gathered at `tokens`, chunked. [..., V],
    [...] -> [...] float32."""
    logp, _ = logprobs_and_entropy(logits, tokens, temperature, chunk_size, with_entropy=False)
    return logp


def entropy_from_logits_direct(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Reference formula H = −Σ p log p over the whole tensor at once (memory O(N·V)).

    Args:
        logits: [..., V] float.
        temperature: sampling temperature (> 0).

    Returns:
        [...] float32 entropy in nats.
    """
    _check(temperature, 1)
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = log_probs.exp()
    return -torch.where(probs > 0, probs * log_probs, torch.zeros_like(probs)).sum(dim=-1)
