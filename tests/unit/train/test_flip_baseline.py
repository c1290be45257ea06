"""The flip diagnostics' baseline is the trainer's own before-update log-probs (train/telemetry.py
`trainer_logp_before`): where the batch's old log-probs are another engine's (offset from the
trainer's), the flips and signed Δ log-prob do not move with the offset; where they are the
trainer's own (the behaviour pass, the HF engine), they are reused and nothing changes."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from quadrants.models.loading import load_policy
from quadrants.tracking import keys
from quadrants.train.forwards import no_grad_pass
from quadrants.train.telemetry import (
    measure_dlogp,
    quadrant_telemetry,
    trainer_logp_before,
)
from tests.unit.train.test_accumulate import context, seeded_batch

FLIP_KEYS = ("flip_frac", "dlogp_signed", "flip_frac_shared", "dlogp_signed_unique")


def flips(offset: float, *, reuse: bool) -> dict[str, float]:
    """The per-quadrant flip metrics of one fixed "update" (every parameter moved by a seeded
    0.02-scale perturbation: the update is not under test) on the 6-row seeded batch whose old
    log-probs are the trainer's plus `offset` nats (an engine's numbers), measured on every row
    with the baseline `reuse`d from the batch or recomputed by the trainer."""
    model, _ = load_policy("tiny-random", seed=0)
    ctx = context("grpo", 0, model)
    update = dataclasses.replace(ctx.update, dlogp_rows=0)  # every row
    batch = seeded_batch(model)
    trainer, _ = no_grad_pass(
        ctx.forwards, model, batch.sequences, batch.attention_mask, batch.response_length
    )
    engine = (trainer + offset) * batch.response_mask  # the engine's numbers: offset everywhere
    batch = dataclasses.replace(batch, old_logp=engine)
    before = trainer_logp_before(model, ctx.forwards, update, batch, 0, reuse=reuse)
    updated = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))
    dlogp, entropy, rows = measure_dlogp(updated, ctx.forwards, batch, before)
    metrics = quadrant_telemetry(batch, dlogp, rows, entropy)
    return {k: v for k, v in metrics.items() if k.rsplit("/", 1)[-1] in FLIP_KEYS}


@pytest.mark.slow
def test_the_flip_fraction_does_not_move_with_the_engines_offset():
    exact = flips(0.0, reuse=True)  # the engine's numbers are the trainer's: reused
    # some token moved with and some against its advantage, so a shift can change the count
    flip = keys.quadrant("PHR", "flip_frac")
    assert any(0 < v < 1 for k, v in exact.items() if k.endswith("/flip_frac"))
    for offset in (0.3, -0.2, 0.01):
        recomputed = flips(offset, reuse=False)  # another engine's: the trainer's own pass
        assert recomputed == pytest.approx(exact, abs=1e-6), offset
    # what the recomputation prevents: the offset numbers taken as the baseline shift every
    # token's Δ by -0.3 (the mean signed Δ of each quadrant by exactly -0.3) and turn moves into
    # flips
    naive = flips(0.3, reuse=True)
    for key, value in exact.items():
        if key.endswith("/dlogp_signed") and value != 0.0:
            assert naive[key] == pytest.approx(value - 0.3, abs=1e-5)
    assert naive != pytest.approx(exact, abs=1e-3)
    assert flip in exact


@pytest.mark.slow
def test_reused_baseline_is_the_batch_old_logp_on_the_measured_rows():
    model, _ = load_policy("tiny-random", seed=0)
    ctx = context("grpo", 0, model)
    update = dataclasses.replace(ctx.update, dlogp_rows=3)
    batch = seeded_batch(model)
    before = trainer_logp_before(model, ctx.forwards, update, batch, 4, reuse=True)
    assert before.rows.numel() == 3
    assert torch.equal(before.logp, batch.old_logp[before.rows])  # no pass, the same numbers
    # recomputed: the model's own, which differ from seeded_batch's perturbed old log-probs
    own = trainer_logp_before(model, ctx.forwards, update, batch, 4, reuse=False)
    assert torch.equal(own.rows, before.rows)  # the same rows: one telemetry draw
    assert not torch.allclose(own.logp, before.logp)
