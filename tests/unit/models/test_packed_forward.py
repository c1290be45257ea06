"""The packed forward (models/policy.py `packed_logprobs`, ops/packing.py) is the padded forward
without its padding: log-probs, entropies and the gradient of a loss over them agree with the
padded path's to float tolerance, on the fused-head path and the logits path, with left-padded
prompts of different lengths, right-padded responses, and a batch of very unequal rows.

Tolerances (float32, the CPU): the two paths run the same arithmetic over other shapes (N packed
tokens against B x L padded), so matmul blocking and softmax reductions round differently:
1e-5 absolute on log-probs and entropies (values of order 1-10), 1e-5 x the largest entry on each
gradient, as tests/unit/models/test_shared_prompts.py allows the shared-prompt path.

Tolerances (bf16-mixed, the CPU: float32 weights, `torch.autocast("cpu", bfloat16)` as
ops/precision.py runs it; the linears and SDPA compute in bf16 with float32 accumulation and round
their outputs to bf16's 8 significant bits, unit roundoff u = 2^-8 = 3.9e-3). Where the two layouts'
float32 accumulations differ (other shapes: another matmul blocking, the attention's blocks over
N packed keys or L padded ones), an output can round to the neighbouring bf16 number: one spacing
apart, 2^-8 relative for |x| in [0.5, 1), 2^-7 in [1, 2), and such flips propagate to later layers
(measured on the very unequal batch: rows 0 and 1's hidden states bit-identical, row 2's differing
in 0.8 % of its entries after layer 1 and 7.5 % after layer 4, by ~6e-4 relative). Expected:
- log-probs: a flip of the target's logit z moves its log-prob by its spacing / τ (times 1 − p):
  these models' logits have |z| <= 1.14 (95 % under 0.35), so up to 2^-8 / 0.7 = 5.6e-3 for
  |z| < 1 and 1.1e-2 for the largest; entropies feel each logit's flip weighted by
  p_j |log p_j + H|, far less. BF16_ATOL = 1e-2 on both. Measured: log-probs 2.7e-3 (both heads),
  entropies 1.9e-4.
- gradients: each entry is a bf16 GEMM's output (one spacing: 2^-7 of the entry at most) over
  inputs that carry every layer's flips; bf16 against float32 on these gradients measured 1.5-2.2e-2
  of each tensor's largest entry (4-6 u), and packed and padded are two such bf16 evaluations, so
  up to about the sum of their errors: BF16_GRAD = 2^-4 = 6.25e-2 (16 u) of the tensor's largest
  entry. Measured: 9.4e-3 (1.5e-2 on an attention key bias, whose exact gradient is 0: softmax
  ignores a shift common to a query's scores, so all it holds is rounding).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quadrants.models.policy import fused_head, response_logprobs
from tests.unit.small_models import logits_path_llama, small_qwen2

ATOL = 1e-5
BF16_ATOL, BF16_GRAD = 1e-2, 2.0**-4  # bf16-mixed: the module docstring


def _qwen2() -> nn.Module:
    return small_qwen2(5)


def _batch(prompt_lengths: list[int], response_lengths: list[int], width: int, T: int):
    """Rows of left-padded prompts (`prompt_lengths` real tokens of `width`) and right-padded
    responses (`response_lengths` of T), random ids in [5, 40), pads 0."""
    generator = torch.Generator().manual_seed(0)
    rows = len(prompt_lengths)
    sequences = torch.randint(5, 40, (rows, width + T), generator=generator)
    mask = torch.zeros(rows, width + T, dtype=torch.bool)
    for row, (p, t) in enumerate(zip(prompt_lengths, response_lengths)):
        mask[row, width - p : width + t] = True
    return sequences.masked_fill(~mask, 0), mask


def _run(model, sequences, mask, T, layout):
    logp, entropy = response_logprobs(
        model,
        sequences,
        mask,
        T,
        temperature=0.7,
        chunk_size=5,
        with_entropy=True,
        max_buckets=1,
        share_prompts="never",
        layout=layout,
    )
    response = mask[:, -T:]
    weights = torch.linspace(-1.0, 1.0, response.numel()).view(response.shape)
    ((logp * weights * response).sum() + 0.3 * (entropy * response).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp, entropy, grads


CASES = {
    # 4 rows: prompts of 5, 3, 1, 4 real tokens (left-padded to 5), responses of 4, 2, 3, 1
    "mixed": ([5, 3, 1, 4], [4, 2, 3, 1], 5, 4),
    # very unequal: a 1-token prompt with a 1-token response beside a 12 + 20 row, and a row of
    # 2 + 20: the padded batch is 3 x 32 = 96 positions, the packed one 1 + 31 + 21 = 53 tokens fed
    "very-unequal": ([1, 12, 2], [1, 20, 20], 12, 20),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_the_packed_forward_equals_the_padded_one_with_gradients(build, case) -> None:
    torch.set_num_threads(1)
    prompts, responses, width, T = case
    sequences, mask = _batch(prompts, responses, width, T)
    fed: list[tuple[int, ...]] = []
    model = build()
    assert (fused_head(model) is not None) == (build is _qwen2)
    model.model.register_forward_pre_hook(
        lambda _, args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    logp, entropy, grads = _run(model, sequences, mask, T, "packed")
    # one call over one row of every real token but each row's last response token
    assert fed == [(1, sum(prompts) + sum(responses) - len(prompts))]
    logp0, entropy0, grads0 = _run(build(), sequences, mask, T, "padded")
    response = mask[:, -T:]
    torch.testing.assert_close(logp * response, logp0 * response, rtol=0, atol=ATOL)
    torch.testing.assert_close(entropy * response, entropy0 * response, rtol=0, atol=ATOL)
    # packed, every position after a row's last real response token is exactly 0
    assert logp[~response].abs().sum() == 0 and entropy[~response].abs().sum() == 0
    assert (logp[response] != 0).all()
    assert grads.keys() == grads0.keys() and len(grads) > 10
    for name, grad in grads.items():
        scale = grads0[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(grad, grads0[name], rtol=0, atol=ATOL * max(scale, 1.0))


@pytest.mark.parametrize("build", [_qwen2, logits_path_llama], ids=["fused-head", "logits"])
def test_under_bf16_mixed_the_packed_forward_equals_the_padded_one(build) -> None:
    """train.precision=bf16-mixed on the very unequal rows: the packed forward's log-probs,
    entropies and gradients equal the padded one's to bf16 tolerance (module docstring), and both
    differ from the float32 forward's (the compute is bf16)."""
    torch.set_num_threads(1)
    prompts, responses, width, T = CASES["very-unequal"]
    sequences, mask = _batch(prompts, responses, width, T)
    results = {}
    for layout in ("packed", "padded"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[layout] = _run(build(), sequences, mask, T, layout)
    (logp, entropy, grads), (logp0, entropy0, grads0) = results["packed"], results["padded"]
    logp32, _, _ = _run(build(), sequences, mask, T, "padded")
    response = mask[:, -T:]
    torch.testing.assert_close(logp * response, logp0 * response, rtol=0, atol=BF16_ATOL)
    torch.testing.assert_close(entropy * response, entropy0 * response, rtol=0, atol=BF16_ATOL)
    assert logp[~response].abs().sum() == 0 and (logp[response] != 0).all()
    for bf16 in (logp, logp0):  # bf16 rounding (measured 2.7-3.2e-3), not float32's 1e-6
        assert ((bf16 - logp32) * response).abs().max() > 5e-4
    assert grads.keys() == grads0.keys() and len(grads) > 10
    for name, grad in grads.items():
        scale = grads0[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(grad, grads0[name], rtol=0, atol=BF16_GRAD * scale)


def test_rows_do_not_see_each_other() -> None:
    """Changing one row's tokens leaves every other row's packed log-probs bit-identical to
    within rounding (and changes its own): attention stops at row boundaries."""
    torch.set_num_threads(1)
    sequences, mask = _batch([5, 3, 4], [4, 2, 3], 5, 4)
    model = _qwen2()
    options = dict(temperature=1.0, chunk_size=5, with_entropy=False, layout="packed")
    with torch.no_grad():
        before, _ = response_logprobs(model, sequences, mask, 4, **options)
        changed = sequences.clone()
        changed[1, 2:5] = torch.tensor([7, 8, 9])  # row 1's real prompt tokens
        after, _ = response_logprobs(model, changed, mask, 4, **options)
    torch.testing.assert_close(after[[0, 2]], before[[0, 2]], rtol=0, atol=ATOL)
    assert (after[1, :2] - before[1, :2]).abs().max() > 1e-3


@pytest.mark.slow
def test_a_lora_policy_packs_as_it_pads():
    """peft's model passes the packed position ids through: on the very unequal rows, a LoRA
    policy's packed log-probs and adapter gradients equal its padded ones (tolerances above)."""
    from quadrants.config import LoraConfig
    from quadrants.models.loading import load_policy
    from quadrants.models.lora import trainable_parameters

    torch.set_num_threads(1)
    prompts, responses, width, T = CASES["very-unequal"]
    sequences, mask = _batch(prompts, responses, width, T)
    results = []
    for layout in ("packed", "padded"):
        model, _ = load_policy("tiny-random", seed=0, lora=LoraConfig(enabled=True, rank=4))
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():  # off peft's B = 0, so that the adapters change the log-probs
            for p in trainable_parameters(model):
                p.copy_(0.05 * torch.randn(p.shape, generator=generator))
        results.append(_run(model, sequences, mask, T, layout))
    (logp, entropy, grads), (logp0, entropy0, grads0) = results
    response = mask[:, -T:]
    torch.testing.assert_close(logp * response, logp0 * response, rtol=0, atol=ATOL)
    torch.testing.assert_close(entropy * response, entropy0 * response, rtol=0, atol=ATOL)
    assert grads.keys() == grads0.keys() and all("lora" in name for name in grads)
    for name, grad in grads.items():
        scale = grads0[name].abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(grad, grads0[name], rtol=0, atol=ATOL * max(scale, 1.0))
