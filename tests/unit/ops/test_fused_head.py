"""The fused LM head (hidden states -> log-probs and entropy in row chunks) against the direct path."""

from __future__ import annotations

import math

import torch

from quadrants.models.loading import load_policy
from quadrants.models.policy import fused_head, position_ids_from_mask, response_logprobs
from quadrants.ops.entropy import logprobs_and_entropy
from quadrants.ops.fused_head import head_logprobs_and_entropy


def test_one_row_by_hand():
    # h = [1, 0], W = [[0, 0], [ln 3, 0]] -> logits [0, ln 3] -> p = [1/4, 3/4]; token 1
    # logp = ln(3/4); H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335
    hidden, weight = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0], [math.log(3), 0.0]])
    logp, entropy = head_logprobs_and_entropy(hidden, weight, torch.tensor([1]))
    torch.testing.assert_close(logp, torch.tensor([math.log(0.75)]), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        entropy, torch.tensor([-(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]), rtol=0, atol=1e-6
    )


def direct(hidden, weight, bias, tokens, temperature):
    log_probs = torch.log_softmax((hidden @ weight.T + bias) / temperature, dim=-1)
    return log_probs.gather(-1, tokens[..., None]).squeeze(-1), -(log_probs.exp() * log_probs).sum(
        -1
    )


def test_values_and_gradients_equal_the_direct_path():
    # seeded [2, 7, 16] hidden states, V = 50, chunks of 3 rows (the last chunk partial), τ = 0.7
    gen = torch.Generator().manual_seed(0)
    leaves = [
        torch.randn(2, 7, 16, generator=gen),
        torch.randn(50, 16, generator=gen),
        torch.randn(50, generator=gen),
    ]
    tokens = torch.randint(0, 50, (2, 7), generator=gen)
    g_logp, g_entropy = torch.randn(2, 7, generator=gen), torch.randn(2, 7, generator=gen)
    grads, values = [], []
    for fn in ("fused", "direct"):
        hidden, weight, bias = (x.clone().requires_grad_(True) for x in leaves)
        if fn == "fused":
            logp, entropy = head_logprobs_and_entropy(
                hidden, weight, tokens, bias, temperature=0.7, chunk_size=3
            )
        else:
            logp, entropy = direct(hidden, weight, bias, tokens, 0.7)
        (logp * g_logp + entropy * g_entropy).sum().backward()
        values.append((logp.detach(), entropy.detach()))
        grads.append([hidden.grad, weight.grad, bias.grad])
    for a, b in zip(values[0], values[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-6)
    for a, b in zip(grads[0], grads[1]):  # float32 sums of up to 14 rows x 50 terms
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)


def test_the_policy_forward_through_the_fused_head_equals_the_logits_path():
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    assert fused_head(model) is model.lm_head  # a plain (tied) linear head
    sequences = torch.randint(3, 60, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[0, :2] = False  # left padding
    weights = torch.randn(3, 4)
    logp, entropy = response_logprobs(
        model, sequences, mask, 4, temperature=0.8, chunk_size=5, with_entropy=True
    )
    (logp * weights + entropy).sum().backward()
    fused = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    out = model(
        input_ids=sequences,
        attention_mask=mask.long(),
        position_ids=position_ids_from_mask(mask),
        logits_to_keep=5,
        use_cache=False,
    )
    ref_logp, ref_entropy = logprobs_and_entropy(out.logits[:, :-1], sequences[:, -4:], 0.8, 5)
    (ref_logp * weights + ref_entropy).sum().backward()
    torch.testing.assert_close(logp, ref_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, rtol=0, atol=1e-5)
    for name, param in model.named_parameters():
        # float32 sums in another order; gradients reach ~15 (the tied embedding), ulp ~1e-6 there
        torch.testing.assert_close(fused[name], param.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert "forward" not in vars(model.lm_head)  # the head is restored after the call


def test_backward_skips_rows_without_gradient_by_hand(monkeypatch):
    # rows h0 = [1, 0], h1 = [0, 1]; W = [[0, 0], [ln 3, 0]]; tokens 1, 0.
    # Row 0: logits [0, ln 3] -> p = [1/4, 3/4]; with g_logp = 1, g_H = 0:
    #   g_z = 1[j = 1] - p = [-1/4, 1/4]; hidden grad g_z W = [ln 3 / 4, 0];
    #   head grad g_z^T h0 = [[-1/4, 0], [1/4, 0]].
    # Row 1: both incoming gradients 0 -> hidden grad [0, 0], nothing added to the head's;
    # backward recomputes row 0 only.
    import quadrants.ops.fused_head as fused

    seen = []
    real = fused._chunk_log_probs
    monkeypatch.setattr(
        fused, "_chunk_log_probs", lambda h, *rest: seen.append(h.shape[0]) or real(h, *rest)
    )
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    weight = torch.tensor([[0.0, 0.0], [math.log(3), 0.0]], requires_grad=True)
    logp, entropy = head_logprobs_and_entropy(hidden, weight, torch.tensor([1, 0]))
    (logp * torch.tensor([1.0, 0.0]) + entropy * 0.0).sum().backward()
    assert seen == [2, 1]  # forward: both rows; backward: row 0 only
    torch.testing.assert_close(
        hidden.grad, torch.tensor([[math.log(3) / 4, 0.0], [0.0, 0.0]]), rtol=0, atol=1e-7
    )
    torch.testing.assert_close(
        weight.grad, torch.tensor([[-0.25, 0.0], [0.25, 0.0]]), rtol=0, atol=1e-7
    )


def test_skipping_rows_without_gradient_equals_recomputing_every_row():
    # seeded [24, 16] hidden states, V = 50, chunks of 5, τ = 0.9; incoming gradients zeroed on
    # 16 of 24 rows (as a quadrant's mask does); of the 8 others, 2 carry only g_logp, 2 only g_H
    gen = torch.Generator().manual_seed(1)
    leaves = [torch.randn(24, 16, generator=gen), torch.randn(50, 16, generator=gen)]
    leaves.append(torch.randn(50, generator=gen))
    tokens = torch.randint(0, 50, (24,), generator=gen)
    g_logp, g_entropy = torch.randn(24, generator=gen), torch.randn(24, generator=gen)
    dead = torch.randperm(24, generator=gen)[:16]
    g_logp[dead], g_entropy[dead] = 0.0, 0.0
    live = torch.ones(24, dtype=torch.bool)
    live[dead] = False
    only = live.nonzero().squeeze(1)
    g_entropy[only[:2]], g_logp[only[2:4]] = 0.0, 0.0
    grads = {}
    for skip in (True, False):
        hidden, weight, bias = (x.clone().requires_grad_(True) for x in leaves)
        logp, entropy = head_logprobs_and_entropy(
            hidden, weight, tokens, bias, temperature=0.9, chunk_size=5, skip_gradless=skip
        )
        (logp * g_logp + entropy * g_entropy).sum().backward()
        grads[skip] = [hidden.grad, weight.grad, bias.grad]
    assert grads[True][0][~live].abs().max() == 0  # exactly 0, as when every row is recomputed
    assert grads[False][0][~live].abs().max() == 0
    # the live rows' chunks group other rows into each matmul: float32 rounding (entries ~0.1-1);
    # the head's gradients are sums of 8 rows against 24 (16 of them 0)
    for a, b in zip(grads[True], grads[False]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def head_weight_gradient(hidden, weight, tokens, g_logp, g_entropy, *, mixed, gemm_in_fp32=False):
    """The head's weight gradient of Σ g_logp·logp + g_entropy·H through the fused head, in
    float32 or under bf16 autocast (train.precision=bf16-mixed); `gemm_in_fp32`: the weight
    gradient's GEMM with float32 inputs (the path before bf16 inputs)."""
    import quadrants.ops.fused_head as module

    h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    real = module.gemm_dtype
    if gemm_in_fp32:
        module.gemm_dtype = lambda device: None
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            logp, entropy = head_logprobs_and_entropy(h, w, tokens, chunk_size=256)
        (logp * g_logp + entropy * g_entropy).sum().backward()
    finally:
        module.gemm_dtype = real
    return w.grad


def test_bf16_weight_gradient_gemm_against_float32():
    """Under bf16-mixed the head's weight-gradient GEMM takes bf16 inputs (g_z and h) and sums
    in float32 (ops/fused_head.py `add_product`). N = 1,024 rows in 4 chunks, H = 64, V = 2,000.

    Tolerance, derived: bf16 keeps 8 significant bits, so rounding an input to it moves it by a
    relative δ with |δ| <= u = 2^-8 (round to nearest); a product of two rounded inputs is off by
    at most 2u + u² ~ 2^-7 of itself, and float32 adds it exactly (16 significant bits in 24).
    Each entry sums N = 1,024 such products: float32's own summation error is at most
    N·2^-24 ~ 6e-5 relative to Σ|terms| (negligible), and the rounding errors, of either sign,
    add up to at most 2^-7 · Σ|terms|; with terms of mixed sign they add like a random walk,
    ~ (u/√3)·√2 ~ 0.8u = 3.2e-3 of the entry's size. The bound tested is 2^-7 = 7.8e-3 on
    the relative Frobenius error against the same run with a float32 GEMM; measured: 2.35e-3.
    Against a float64 reference the bf16-mixed gradient was already 7.7e-3 off with the float32
    GEMM (its logits come from a bf16 matmul) and is 8.1e-3 off with the bf16 GEMM: the two
    errors add in quadrature. A float32 run is 6.8e-7 off (docs/performance.md)."""
    gen = torch.Generator().manual_seed(0)
    n, h, v = 1024, 64, 2000
    hidden, weight = torch.randn(n, h, generator=gen), torch.randn(v, h, generator=gen) * 0.3
    tokens = torch.randint(0, v, (n,), generator=gen)
    g_logp, g_entropy = torch.randn(n, generator=gen) / n, torch.randn(n, generator=gen) / n
    args = (hidden, weight, tokens, g_logp, g_entropy)
    bf16 = head_weight_gradient(*args, mixed=True)
    fp32_gemm = head_weight_gradient(*args, mixed=True, gemm_in_fp32=True)
    relative = float((bf16 - fp32_gemm).norm() / fp32_gemm.norm())
    assert relative < 2**-7, relative
    assert relative > 2**-12, relative  # the inputs were rounded: the bf16 path ran
    plain = head_weight_gradient(*args, mixed=False)  # float32 throughout: float32 GEMM inputs
    assert torch.equal(plain, head_weight_gradient(*args, mixed=False, gemm_in_fp32=True))
