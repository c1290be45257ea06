"""Log-probs and entropy straight from hidden states through the LM head, in row chunks.

Shape legend: **N** rows (flattened response positions) · **H** hidden size · **V** vocabulary.

`logprobs_and_entropy` (ops/entropy.py) bounds the softmax's temporaries but needs the [N, V]
logits as input, and its backward writes the [N, V] logits gradient: at V = 151,936 and N = 4,096
that is 2 x 2.5 GB. Here the head's matmul moves inside the chunk loop: forward computes
z = h W^T (+ b) for `chunk_size` rows, reduces it to logp and entropy at temperature τ and drops it;
backward recomputes each chunk's logits and turns the row gradient (ops/entropy.py's formulas)
    g_z = (1[j = y] − p_j) g_logp − p_j (log p_j + H) g_H,     scaled by 1/τ,
into the hidden-state gradient g_z W and the head's gradient Σ_chunks g_z^T h (and Σ g_z for a
bias). Extra memory: two [chunk, V] float32 buffers at a time plus the weight gradient the trainer
keeps anyway; nothing of size [N, V] exists in either pass. Cost: the head's matmul runs twice in
backward's place of once (forward, recompute) plus the two gradient matmuls, as with activation
checkpointing.

Rows whose incoming gradients are both exactly 0 have g_z = 0 (every term above carries g_logp or
g_H), so their hidden-state gradient is 0 and they add nothing to the head's: backward recomputes
and multiplies only the other rows. Under quadrant isolation most response positions are such rows
(a kept set of one quadrant holds a tenth to a third of the tokens), and the loss's mask makes their
gradient exactly 0. The head's gradient is then a sum over fewer rows in another grouping: equal to
the all-rows sum to float rounding (tests/unit/ops/test_fused_head.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from quadrants.cpu import matmul as cpu_matmul
from quadrants.ops.entropy import DEFAULT_CHUNK_SIZE, _check


def _linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear`; on the CPU through the matmul backend `train.cpu.matmul` chose
    (quadrants/cpu/matmul.py: oneDNN where it is faster), which a run on any other device never
    calls."""
    if x.device.type == "cpu":
        return cpu_matmul.linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _chunk_log_probs(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float
) -> Tensor:
    """log softmax((h W^T + b) / τ) of one chunk, [n, V] float32, in place in the logits' buffer
    (logsumexp needs one more [n, V] temporary while it runs)."""
    z = _linear(hidden, weight, bias).float()
    z.div_(temperature)
    return z.sub_(torch.logsumexp(z, dim=-1, keepdim=True))


def _entropy(log_probs: Tensor) -> Tensor:
    """−Σ p log p per row, [n, V] -> [n]; p log p = 0 where p = 0 (log p = −inf gives 0 · −inf =
    NaN, set to 0). One [n, V] temporary."""
    return -log_probs.exp().mul_(log_probs).nan_to_num_(nan=0.0).sum(-1)


def _forward_chunk(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    ids: Tensor,
    temperature: float,
    rows: slice,
) -> tuple[Tensor, Tensor]:
    """(logp [n], entropy [n]) float32 of the chunk `rows` of hidden [N, H] and ids [N]; its
    [n, V] log-probs freed on return."""
    log_probs = _chunk_log_probs(hidden[rows], weight, bias, temperature)  # [n, V]
    return log_probs.gather(-1, ids[rows, None]).squeeze(-1), _entropy(log_probs)


def _backward_chunks(rows: int, step: int) -> range:
    """The first row of each chunk backward runs: every chunk.

    memory/trace.py, tracing the head's memory, runs fewer (`_head_chunks_elided`), here and in
    place of `_forward_chunk`: each chunk allocates and frees what the one before it did."""
    return range(0, rows, step)


class _FusedHeadLogpEntropy(torch.autograd.Function):
    """(logp [N], entropy [N]) float32 from hidden [N, H], weight [V, H], bias
    [V] or None, ids [N]."""

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        ids: Tensor,  # type: ignore[override]
        temperature: float,
        chunk_size: int,
        skip_gradless: bool,
    ):
        logps, ents = [], []
        for i in range(0, hidden.shape[0], chunk_size):
            logp, entropy = _forward_chunk(
                hidden, weight, bias, ids, temperature, slice(i, i + chunk_size)
            )
            logps.append(logp)
            ents.append(entropy)
        empty = hidden.new_zeros(0, dtype=torch.float32)
        logp = torch.cat(logps) if logps else empty
        entropy = torch.cat(ents) if ents else empty
        ctx.save_for_backward(hidden, weight, bias, ids, entropy)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        ctx.skip_gradless = skip_gradless
        # the autocast the forward ran in (train.precision=bf16-mixed): backward recomputes the
        # logits in it too, so that its probabilities are the forward's (what
        # torch.amp.custom_bwd does, for any device type)
        device = hidden.device.type
        ctx.autocast = (device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):  # type: ignore[override]
        device, dtype, enabled = ctx.autocast
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            return _FusedHeadLogpEntropy._backward(ctx, grad_logp, grad_entropy)

    @staticmethod
    def _backward(ctx, grad_logp: Tensor, grad_entropy: Tensor):
        hidden, weight, bias, ids, entropy = ctx.saved_tensors
        step, tau = ctx.chunk_size, ctx.temperature
        low = gemm_dtype(hidden.device.type)
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        every_row = hidden
        rows = _rows_with_gradient(grad_logp, grad_entropy) if ctx.skip_gradless else None
        if rows is not None:  # the other rows' hidden-state gradient is exactly 0
            hidden, ids, entropy, grad_logp, grad_entropy = (
                t[rows] for t in (hidden, ids, entropy, grad_logp, grad_entropy)
            )
        grad_rows = torch.empty_like(hidden) if want_hidden else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            if want_weight
            else None
        )
        grad_bias = (
            torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device)
            if want_bias
            else None
        )
        for i in _backward_chunks(hidden.shape[0], step):
            sl = slice(i, i + step)
            log_probs = _chunk_log_probs(hidden[sl], weight, bias, tau)  # [n, V] float32
            probs = log_probs.exp()
            # in place on log_probs: g_z = −p (g_logp + g_H (log p + H)); where p = 0 the product is
            # 0 · ±inf = NaN, set to 0 (such a token gets no gradient); then +
            # g_logp at the sampled token
            log_probs.add_(entropy[sl, None]).mul_(grad_entropy[sl, None].float()).add_(
                grad_logp[sl, None].float()
            )
            grad_z = log_probs.mul_(probs).neg_().nan_to_num_(nan=0.0)
            del probs
            grad_z.scatter_add_(-1, ids[sl, None], grad_logp[sl, None].float())
            grad_z.div_(tau)
            if grad_rows is not None:
                grad_rows[sl] = _linear(grad_z.to(weight.dtype), weight.t()).to(
                    hidden.dtype
                )  # g_z W
            if grad_weight is not None:
                add_product(grad_weight, grad_z.t(), hidden[sl], low)
            if grad_bias is not None:
                grad_bias.add_(grad_z.sum(0))
        grad_hidden = grad_rows
        if rows is not None and grad_rows is not None:
            grad_hidden = torch.zeros_like(every_row).index_copy_(0, rows, grad_rows)
        return (
            grad_hidden,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            None,
            None,
            None,
            None,
        )


def gemm_dtype(device: str) -> torch.dtype | None:
    """The dtype the head's weight-gradient GEMM takes its inputs in: the autocast dtype where
    autocast is on for `device` with a 16-bit dtype (train.precision=bf16-mixed), else None
    (float32 inputs)."""
    if not torch.is_autocast_enabled(device):
        return None
    dtype = torch.get_autocast_dtype(device)
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


def add_product(out: Tensor, a: Tensor, b: Tensor, dtype: torch.dtype | None) -> None:
    """out += a @ b in place, `out` float32 [m, n], `a` [m, k], `b` [k, n].

    dtype None: float32 inputs and accumulation. dtype bf16 (fp16): the inputs rounded to it and
    the products summed in float32 into `out`, never rounded to 16 bits (TRL's chunked head adds a
    bf16 GEMM result per chunk instead: trl/kernels/chunked_logprob.py `grad_weight[start:end] +=
    tile.t() @ hidden_chunk`). On CUDA one cuBLAS GEMM with 16-bit inputs and a float32 output
    (aten::addmm.dtype_out, pytorch aten/src/ATen/native/cuda/Blas.cpp `_addmm_dtype_out_cuda`:
    16-bit inputs, out_dtype float32, `self` float32). The CPU has no such kernel (addmm.dtype is
    registered for CUDA only): there the rounded inputs are multiplied in float32, the same
    numbers to summation order (a product of two bf16 values has at most 16 significant bits and
    is exact in float32's 24), so the tests on the CPU measure the GPU path's rounding."""
    if dtype is None:
        out.addmm_(a, b.float())
        return
    a, b = a.to(dtype), b.to(dtype)
    if out.device.type == "cuda":  # not run here: no GPU on these machines
        torch.addmm(out, a, b, out_dtype=torch.float32, out=out)
    else:
        out.addmm_(a.float(), b.float())


def _rows_with_gradient(grad_logp: Tensor, grad_entropy: Tensor) -> Tensor | None:
    """Indices [n] of the rows with a non-zero incoming gradient; None when that is every row."""
    carried = (grad_logp != 0) | (grad_entropy != 0)  # [N]
    if bool(carried.all()):
        return None
    return carried.nonzero().squeeze(1)


def head_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    tokens: Tensor,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    skip_gradless: bool = True,
) -> tuple[Tensor, Tensor]:
    """Log-probs of `tokens` and full-vocabulary entropy of softmax((h W^T + b) / τ), chunked.

    Differentiable in `hidden`, `weight` and `bias` with chunk-bounded extra memory.

    Args:
        hidden: [..., H] float, the final hidden states (after the last norm).
        weight: [V, H] float, the LM head (tied or not).
        tokens: [...] long.
        bias: [V] or None.
        temperature: τ > 0. chunk_size: rows per chunk (> 0).
        skip_gradless: backward skips the rows whose incoming gradients are both 0 (their
            hidden-state gradient is 0); False: every row recomputed (the reference it is tested
            on).

    Returns:
        (logp [...] float32, entropy [...] float32).
    """
    _check(temperature, chunk_size)
    if tokens.shape != hidden.shape[:-1]:
        raise ValueError(
            f"tokens shape {tuple(tokens.shape)} != hidden shape {tuple(hidden.shape[:-1])}"
        )
    rows = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
    logp, entropy = _FusedHeadLogpEntropy.apply(
        rows, weight, bias, tokens.reshape(-1), temperature, chunk_size, skip_gradless
    )
    return logp.reshape(tokens.shape), entropy.reshape(tokens.shape)
