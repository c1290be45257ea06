"""train.attention_layout=packed: every pass of the step gives what the padded layout gives.

The update (one call, micro-batches by a token budget, rows without gradient under quadrant
isolation) for every registered objective: loss, logged metrics and gradients; and the no-grad
passes (behaviour, reference, |Δ log-prob|: `no_grad_pass`), one call and by token budget. The batch
has left-padded prompts of 8, 1 and 4 tokens (one per group of 2) and responses of 12, 1, 3, 12, 2
and 7 tokens: very unequal rows, 6 x 20 = 120 padded positions against 59 real tokens.

Tolerances (float32 on the CPU, hand-set): the packed forward runs the same arithmetic over other
shapes, so its log-probs round differently at ~1e-6 (tests/unit/models/test_packed_forward.py);
through the loss that gives 1e-5 absolute on the loss and on each metric (means of log-prob
ratios, entropies and fractions of order 1) and 1e-4 relative + 1e-6 absolute on each gradient
entry, the tolerance tests/unit/train/test_accumulate.py allows sums in another order.

Tolerances (train.precision=bf16-mixed: float32 weights, the forwards and backward under the CPU's
bf16 autocast): the packed and padded log-probs differ by bf16 roundings landing one spacing apart
(tests/unit/models/test_packed_forward.py): up to a logit's spacing, 2^-8 = 3.9e-3 for |z| < 1
and 2^-7 for this policy's largest (|z| = 1.19 at τ = 1); measured 1.9e-3 (the no-grad pass
below). The loss and each metric are means over the batch's 59 tokens (or a quadrant's) of
terms with coefficients of order 1 (ratios within the noise of 1, |advantages| <= 1), so they move
by at most about the per-token difference and, with mixed signs, ~1.9e-3 / sqrt(59) = 2.5e-4
typically: 1e-3 absolute (a token crossing a clip boundary would move a clip fraction by 1/59, but
the ratios lie within ~0.05 of 1, far from 1 +- 0.2). Gradients: 2^-4 of each tensor's largest
entry, the bound test_packed_forward.py derives (16 u; bf16 against float32 on these gradients
measured 1.5-2.7e-2). Measured over every objective and the three cases: loss 2.4e-4 (CISPO,
KTAE), metrics 2.5e-4 (STEER's token_weight_mean), gradients 3.0e-2 of the largest entry (GSPO;
3.6e-2 on an attention key bias, whose exact gradient is 0). Both layouts compute in bf16: a hook
on a linear sees only bf16 outputs.
"""

from __future__ import annotations

import copy

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.models.policy import behaviour_pass
from quadrants.objectives.batch import make_token_batch
from quadrants.objectives.registry import known_objectives
from quadrants.ops.precision import resolve_precision
from quadrants.run.settings import build_step
from quadrants.run_plan import RunPlan
from quadrants.train.context import Forwards, PassSettings
from quadrants.train.forwards import no_grad_pass
from quadrants.train.update import backward_minibatch
from tests.unit.train.test_accumulate import PARAMS

PROMPTS = (8, 8, 1, 1, 4, 4)  # real prompt tokens, left-padded to 8 (a group shares its prompt)
RESPONSES = (12, 1, 3, 12, 2, 7)  # real response tokens of T = 12
WIDTH, T = 8, 12


def unequal_batch(model, noise: float = 0.05):
    """Rewards [1, 0 | 1, 1 | 0, 1]: the middle group is constant (DAPO drops it), rows 0 and 5
    positive, 1 and 4 negative. Old log-probs from the padded behaviour pass, perturbed by
    `noise` so that the ratios are not all 1."""
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 60, (3, WIDTH), generator=gen).repeat_interleave(2, dim=0)
    sequences = torch.cat([prompts, torch.randint(3, 60, (6, T), generator=gen)], dim=1)
    columns = torch.arange(WIDTH + T)
    starts = torch.tensor([WIDTH - p for p in PROMPTS])
    ends = torch.tensor([WIDTH + r for r in RESPONSES])
    attention_mask = (columns[None] >= starts[:, None]) & (columns[None] < ends[:, None])
    sequences = sequences.masked_fill(~attention_mask, 0)
    response_mask = attention_mask[:, WIDTH:]
    logp, entropy = behaviour_pass(
        model, sequences, attention_mask, T, temperature=1.0, chunk_size=7, batch_size=6
    )
    logp = logp + noise * torch.randn(6, T, generator=gen)
    return make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logp=logp * response_mask,
        entropy=entropy * response_mask,
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
    )


def update(objective: str, layout: str, model, batch, *, keep="all", tokens=0, precision="fp32"):
    model = copy.deepcopy(model)
    cfg = RunConfig()
    cfg.train.precision = precision
    cfg.quadrant.keep = keep
    cfg.objective.name = objective
    cfg.objective.params = PARAMS.get(objective, {})
    cfg.train.micro_batch_size = 0
    cfg.train.micro_batch_tokens = tokens
    cfg.train.entropy_chunk_size = 7
    cfg.train.attention_layout = layout
    ctx = build_step(RunPlan.unchecked(cfg), model)
    assert ctx.forwards.passes.layout == layout
    draws = torch.Generator().manual_seed(0)  # the same draws in both layouts (Clip-Cov)
    loss, metrics = backward_minibatch(
        ctx.model, ctx.objective, ctx.forwards, ctx.update, batch, None, draws
    )
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss, metrics, grads


# (keep, micro_batch_tokens): one call; micro-batches of at most 24 tokens (padded: rows of
# 8 + span, at most 2 x 9 or one longer row per call; packed: real tokens, e.g. rows 2 + 4 + 5 ...
# so the two layouts split the mini-batch differently and must still agree); rows without a kept
# token (PHR: the negative rows 1 and 4 and the constant group carry no gradient under most
# objectives) run without grad
CASES = (("all", 0), ("all", 24), ("PHR", 0))
# precision: (absolute tolerance on the loss and each metric, gradient tolerance (rtol, atol) given
# the padded gradient): the module docstring
TOLERANCES = {
    "fp32": (1e-5, lambda grad: (1e-4, 1e-6)),
    "bf16-mixed": (1e-3, lambda grad: (0.0, 2.0**-4 * grad.abs().max().item())),
}


@pytest.mark.slow
@pytest.mark.parametrize("precision", TOLERANCES)
@pytest.mark.parametrize("objective", known_objectives())
def test_packed_update_equals_the_padded_one(objective, precision):
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    batch = unequal_batch(model)
    atol, grad_tolerance = TOLERANCES[precision]
    computed_in: set[torch.dtype] = set()  # the update's copies share the hook
    model.model.layers[0].mlp.down_proj.register_forward_hook(
        lambda _module, _inputs, out: computed_in.add(out.dtype)
    )
    for keep, tokens in CASES:
        where = f"keep={keep} micro_batch_tokens={tokens}"
        options = dict(keep=keep, tokens=tokens, precision=precision)
        loss, metrics, grads = update(objective, "packed", model, batch, **options)
        loss0, metrics0, grads0 = update(objective, "padded", model, batch, **options)
        torch.testing.assert_close(loss, loss0, rtol=0, atol=atol, msg=where)
        assert set(metrics) == set(metrics0) and metrics0, where
        for name, value in metrics0.items():
            torch.testing.assert_close(
                metrics[name], value, rtol=0, atol=atol, equal_nan=True, msg=f"{where}: {name}"
            )
        assert set(grads) == set(grads0), where
        if keep == "all":
            assert sum(g.abs().sum() for g in grads0.values()) > 0, where
        for name, grad in grads0.items():
            rtol, grad_atol = grad_tolerance(grad)
            torch.testing.assert_close(
                grads[name], grad, rtol=rtol, atol=grad_atol, msg=f"{where}: {name}"
            )
    bf16 = precision == "bf16-mixed"
    assert computed_in == {torch.bfloat16 if bf16 else torch.float32}


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("forward_tokens", [0, 24])
def test_packed_no_grad_pass_equals_the_padded_one(forward_tokens, precision):
    """Log-probs and entropies to 1e-5 in float32; under bf16-mixed to the packed forward's 1e-2
    (tests/unit/models/test_packed_forward.py: this policy's logits reach |z| = 1.19 at τ = 1,
    one bf16 spacing 2^-7 = 7.8e-3; measured 1.9e-3 and 1.0e-4)."""
    model, _ = load_policy("tiny-random", seed=0)
    batch = unequal_batch(model)
    args = (model, batch.sequences, batch.attention_mask, T)
    results = {}
    for layout in ("packed", "padded"):
        passes = PassSettings(
            temperature=1.0,
            chunk_size=7,
            batch_size=6,
            length_buckets=1,
            forward_tokens=forward_tokens,
            layout=layout,
        )
        forwards = Forwards(passes, precision=resolve_precision(precision, torch.device("cpu")))
        results[layout] = no_grad_pass(forwards, *args)
    mask = batch.response_mask
    atol = 1e-5 if precision == "fp32" else 1e-2
    for packed, padded in zip(results["packed"], results["padded"]):
        torch.testing.assert_close(packed * mask, padded * mask, rtol=0, atol=atol)
        assert (packed[mask] != 0).all()
