"""Token entropy and token log-probabilities from logits, computed in row chunks.

Shape legend: **N** rows (flattened B*T positions) · **V** vocabulary.

Both quantities are taken at a sampling temperature: the distribution is softmax(logits / temperature),
the one the rollout engine sampled from (before top-p truncation, which no trainer can recompute).
The full-vocabulary entropy materialises a [chunk, V] float32 buffer at a time, so peak extra memory
is bounded by `chunk_size * V`, not by `N * V` (at V = 151,936 and N = 4,096 the direct formula needs
several GB of temporaries; a chunk of 256 rows needs about 150 MB).
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_CHUNK_SIZE = 256


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _entropy_rows(logits: Tensor, temperature: float) -> Tensor:
    """H = logsumexp(z) - sum softmax(z) * z, with z = logits / temperature. [n, V] -> [n]."""
    z = logits.float() / temperature
    log_norm = torch.logsumexp(z, dim=-1)  # [n]
    probs = torch.softmax(z, dim=-1)  # [n, V]
    return log_norm - (probs * z).sum(dim=-1)


def entropy_from_logits_direct(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Reference formula H = -sum p log p over the whole tensor at once (memory O(N*V)).

    Args:
        logits: [..., V] float.
        temperature: sampling temperature (> 0).

    Returns:
        [...] float32 entropy in nats.
    """
    _check_temperature(temperature)
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def entropy_from_logits(
    logits: Tensor, temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Tensor:
    """Full-vocabulary token entropy in nats, computed `chunk_size` rows at a time.

    Differentiable (each chunk keeps its own graph), so the same function serves the no-grad
    behaviour pass and an entropy bonus in the loss.

    Args:
        logits: [..., V] float (any float dtype; computed in float32).
        temperature: sampling temperature (> 0).
        chunk_size: rows per chunk (> 0); peak extra memory is about 3 * chunk_size * V * 4 bytes.

    Returns:
        [...] float32 entropy.
    """
    _check_temperature(temperature)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    lead_shape = logits.shape[:-1]
    rows = logits.reshape(-1, logits.shape[-1])  # [N, V]
    out = [_entropy_rows(rows[i : i + chunk_size], temperature) for i in range(0, rows.shape[0], chunk_size)]
    if not out:
        return logits.new_zeros(lead_shape, dtype=torch.float32)
    return torch.cat(out).reshape(lead_shape)


def logprobs_from_logits(
    logits: Tensor, tokens: Tensor, temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Tensor:
    """log softmax(logits / temperature) gathered at `tokens`, chunked like `entropy_from_logits`.

    Args:
        logits: [..., V] float.
        tokens: [...] long, the token whose log-probability is wanted at each position.
        temperature: sampling temperature (> 0).
        chunk_size: rows per chunk (> 0).

    Returns:
        [...] float32 log-probabilities (differentiable).
    """
    logp, _ = logprobs_and_entropy(logits, tokens, temperature, chunk_size, with_entropy=False)
    return logp


def logprobs_and_entropy(
    logits: Tensor,
    tokens: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of `tokens` and (optionally) entropy, sharing one softmax per chunk.

    Args:
        logits: [..., V] float.
        tokens: [...] long.
        temperature: sampling temperature (> 0).
        chunk_size: rows per chunk (> 0).
        with_entropy: also return the entropy (skipped work when False).

    Returns:
        (logp [...] float32, entropy [...] float32 or None).
    """
    _check_temperature(temperature)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(f"tokens shape {tuple(tokens.shape)} != logits shape {tuple(logits.shape[:-1])}")
    rows = logits.reshape(-1, logits.shape[-1])  # [N, V]
    ids = tokens.reshape(-1)
    logps, ents = [], []
    for i in range(0, rows.shape[0], chunk_size):
        z = rows[i : i + chunk_size].float() / temperature  # [n, V]
        log_norm = torch.logsumexp(z, dim=-1)  # [n]
        logps.append(z.gather(-1, ids[i : i + chunk_size, None]).squeeze(-1) - log_norm)
        if with_entropy:
            ents.append(log_norm - (torch.softmax(z, dim=-1) * z).sum(dim=-1))
    if not logps:
        empty = logits.new_zeros(tokens.shape, dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    logp = torch.cat(logps).reshape(tokens.shape)
    entropy = torch.cat(ents).reshape(tokens.shape) if with_entropy else None
    return logp, entropy
