"""fp32 matrix multiplies on the CPU through oneDNN where torch's default kernels are slow.

torch multiplies float32 matrices on the CPU with MKL's sgemm (the x86 Linux wheels link it). On
AMD processors MKL does not use its AVX-512 kernels; oneDNN, built into the same wheel (torch uses
it for bf16), picks its kernels from the processor's features. Measured on an AMD EPYC with AVX-512,
2 threads (benchmarks/cpu_matmul.py): oneDNN takes 0.44–0.58 of MKL's time on the multiplies of a
small Qwen2's decode and update (e.g. [1984, 256] x [256, 688]: 1.43 against 3.28 ms), with fp32
accumulation (largest errors against float64 1.4–2.1x MKL's: 5.8e-5 against 3.5e-5 on that shape;
float32 rounding, not reduced precision, which would be ~1e-2 relative).

Backends (`train.cpu.matmul`):
- `torch`: `F.linear` and `torch.matmul`, unchanged.
- `onednn`: float32 CPU linear maps through oneDNN's matmul (`torch.ops.mkldnn._linear_pointwise`,
  the op torch's own compiler emits), forward and both gradients.
- `auto` (default): `onednn` on x86-64 processors that are not Intel's, where oneDNN is in the
  build; `torch` elsewhere (on Intel processors MKL runs its AVX-512 kernels; not measured here).

Everything else (other dtypes, other devices, empty inputs) goes to `F.linear` whatever the backend.
The results differ from MKL's by float rounding only (another summation order), so the choice is
part of a run's bitwise identity, as the thread count is.

Shape legend: **N...** any leading dimensions · **I** input features · **O** output features.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

BACKENDS = ("auto", "torch", "onednn")
TRANSPOSED_WEIGHT_GRAD_ROWS = 1024  # see linear_grads
# the backend in use, "torch" or "onednn": torch's own until the CPU tuning (quadrants/cpu) sets it
_chosen = "torch"


def onednn_available() -> bool:
    """Whether this torch build has oneDNN and its linear op."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(
        torch.ops.mkldnn, "_linear_pointwise"
    )


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's vendor string ("AuthenticAMD", "GenuineIntel", ...), "" when unknown."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def auto_backend(vendor: str, machine: str, available: bool) -> str:
    """What `auto` means on a processor of `vendor` and architecture `machine`.

    >>> auto_backend("AuthenticAMD", "x86_64", True), auto_backend("GenuineIntel", "x86_64", True)
    ('onednn', 'torch')
    """
    x86 = machine.lower() in ("x86_64", "amd64")
    return "onednn" if available and x86 and vendor not in ("GenuineIntel", "") else "torch"


def set_cpu_matmul(backend: str) -> str:
    """Use `backend` (one of BACKENDS) for this process's CPU linear maps; returns the resolved
    one ("torch" or "onednn")."""
    global _chosen
    if backend not in BACKENDS:
        raise ValueError(f"train.cpu.matmul must be one of {list(BACKENDS)}, got {backend!r}")
    available = onednn_available()
    if backend == "onednn" and not available:
        raise ValueError(
            "train.cpu.matmul=onednn, but this torch build has no oneDNN linear op "
            "(torch.ops.mkldnn._linear_pointwise); use train.cpu.matmul=torch or auto"
        )
    if backend == "auto":
        backend = auto_backend(cpu_vendor(), platform.machine(), available)
    _chosen = backend
    return backend


def cpu_matmul() -> str:
    """The backend in use ("torch" or "onednn"): "torch" unless `set_cpu_matmul` chose oneDNN."""
    return _chosen


def routes(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """Whether `linear(x, weight, bias)` runs through oneDNN: float32 operands on the CPU, outside
    a CPU autocast (under `train.precision=bf16-mixed` F.linear is autocast's to cast to bf16; the
    oneDNN call would bypass it and multiply in float32). A CUDA tensor never routes."""
    return (
        _chosen == "onednn"
        and x.device.type == "cpu"
        and not torch.is_autocast_enabled("cpu")
        and x.dtype == weight.dtype == torch.float32
        and weight.dim() == 2
        and x.shape[-1] == weight.shape[1]
        and x.numel() > 0
        and (bias is None or (bias.dtype == torch.float32 and bias.dim() == 1))
    )


def _nt(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """a [M, K] @ b [O, K]ᵀ (+ bias [O]) through oneDNN: [M, O]; either operand may be strided."""
    return torch.ops.mkldnn._linear_pointwise(a, b, bias, "none", [], "")


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x [N..., I] · weightᵀ (+ bias) through oneDNN: [N..., O]. No checks and no autograd: for
    no-grad callers that asked `routes` once for a whole loop of such calls."""
    y = _nt(x.reshape(-1, x.shape[-1]), weight, bias)  # [N, O]
    return y.view(*x.shape[:-1], weight.shape[0])


def linear_grads(
    grad: Tensor,
    x: Tensor,
    weight: Tensor,
    *,
    input_grad: bool = True,
    weight_grad: bool = True,
    bias_grad: bool = False,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The gradients of `F.linear(x, weight, bias)` given the output's `grad` [N..., O]:
    (g·W [N..., I], gᵀx [O, I], Σg [O]), each None when not asked for."""
    flat_grad = grad.reshape(-1, grad.shape[-1])  # [N, O]
    flat_x = x.reshape(-1, x.shape[-1])  # [N, I]
    grad_x = grad_w = None
    grad_b = flat_grad.sum(0) if bias_grad else None
    if not routes(flat_grad, weight.t()):
        if input_grad:
            grad_x = grad.matmul(weight)
        if weight_grad:
            grad_w = flat_grad.t().matmul(flat_x)
        return grad_x, grad_w, grad_b
    if input_grad:
        grad_x = _nt(flat_grad, weight.t()).view(*grad.shape[:-1], weight.shape[1])
    if weight_grad:
        # both operands are transposed views; which one oneDNN takes first matters (2 threads,
        # benchmarks/cpu_matmul.py): (xᵀg)ᵀ is faster when there are more outputs than inputs
        # and many rows (1,984 x 256 -> 688: 1.8 ms against 2.1 for gᵀx, MKL 3.2), gᵀx otherwise
        # (256 x 576 -> 49,152: 90 ms against 119 for (xᵀg)ᵀ, MKL 92)
        out_features, in_features = weight.shape
        if out_features > in_features and flat_x.shape[0] >= TRANSPOSED_WEIGHT_GRAD_ROWS:
            grad_w = _nt(flat_x.t(), flat_grad.t()).t().contiguous()  # (xᵀg)ᵀ
        else:
            grad_w = _nt(flat_grad.t(), flat_x.t())
    return grad_x, grad_w, grad_b


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        return linear_grads(
            grad,
            x,
            weight,
            input_grad=wanted[0],
            weight_grad=wanted[1],
            bias_grad=ctx.has_bias and wanted[2],
        )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`: x [N..., I], weight [O, I], bias [O] or None -> [N..., O],
    through oneDNN where `routes` says so (differentiable), else F.linear itself."""
    if not routes(x, weight, bias):
        return F.linear(x, weight, bias)
    tracked = x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    if torch.is_grad_enabled() and tracked:
        return _OneDNNLinear.apply(x, weight, bias)
    return onednn_linear(x, weight, bias)
