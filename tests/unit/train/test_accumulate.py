"""train.micro_batch_size: a mini-batch's gradient accumulated over micro-batches equals the unsplit
one, for every registered objective (the mini-batch's normaliser, constant groups dropped globally,
batch-level selections over the whole mini-batch)."""

from __future__ import annotations

import copy

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.models.policy import behaviour_pass
from quadrants.objectives.batch import make_token_batch
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.train.accumulate import backward_minibatch
from quadrants.train.context import PassSettings
from quadrants.train.step import StepContext
from quadrants.validation import loss_settings

PARAMS = {"clip_cov": {"fraction": 0.05}, "kl_cov": {"fraction": 0.05}}


def seeded_batch(model, *, rows=6, prompt=4, length=5):
    # 3 groups of 2 sequences, rewards [1, 0 | 1, 1 | 0, 1]: the middle group is constant (DAPO drops it);
    # responses of lengths 5, 3, 5, 2, 4, 5 (right padding); old log-probs from the model, perturbed
    # so that the ratios are not all 1
    gen = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, 60, (rows, prompt + length), generator=gen)
    response_mask = torch.arange(length)[None] < torch.tensor([5, 3, 5, 2, 4, 5])[:, None]
    attention_mask = torch.cat([torch.ones(rows, prompt, dtype=torch.bool), response_mask], dim=1)
    logp, entropy = behaviour_pass(
        model, sequences, attention_mask, length, temperature=1.0, chunk_size=7, batch_size=rows
    )
    logp = logp + 0.05 * torch.randn(rows, length, generator=gen)
    return make_token_batch(
        sequences=sequences,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logp=logp * response_mask,
        entropy=entropy * response_mask,
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
    )


def gradients(objective: str, micro: int, model, batch):
    cfg = RunConfig()
    cfg.objective.name = objective
    cfg.objective.params = PARAMS.get(objective, {})
    cfg.train.micro_batch_size = micro
    cfg.train.entropy_chunk_size = 7
    spec, params = resolve_objective(objective, cfg.objective.params)
    model = copy.deepcopy(model)
    ctx = StepContext(
        cfg=cfg,
        model=model,
        tokenizer=None,
        ref_model=None,
        engine=None,
        grader=None,
        task=None,
        optimizer=None,
        scheduler=None,
        spec=spec,
        params=params,
        loss_settings=loss_settings(cfg.objective, QuadrantSettings.from_config(cfg.quadrant)),
        passes=PassSettings.from_config(cfg.rollout, cfg.train),
    )
    loss, metrics = backward_minibatch(ctx, batch, None)
    return (
        loss,
        metrics,
        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
    )


@pytest.mark.parametrize("objective", known_objectives())
def test_micro_batches_accumulate_the_unsplit_gradient(objective):
    torch.manual_seed(0)
    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    loss, metrics, whole = gradients(objective, 0, model, batch)
    assert sum(g.abs().sum() for g in whole.values()) > 0
    for micro in (1, 2, 4):  # 6 of 1; 3 of 2; one of 4 and one of 2 (rows dealt by length)
        split_loss, split_metrics, split = gradients(objective, micro, model, batch)
        torch.testing.assert_close(split_loss, loss, rtol=0, atol=1e-6)
        for name, value in metrics.items():
            torch.testing.assert_close(
                split_metrics[name], value, rtol=0, atol=1e-6, msg=f"{micro}: {name}"
            )
        assert set(split) == set(whole)
        for name, grad in whole.items():  # float32 sums in another order
            torch.testing.assert_close(
                split[name], grad, rtol=1e-4, atol=1e-6, msg=f"{micro}: {name}"
            )


def test_micro_batches_hold_rows_of_similar_length(monkeypatch):
    """Rows are dealt by response length (stable): lengths 5 3 5 2 4 5 -> rows 3 1 | 4 0 | 2 5,
    so each micro-batch's forward is cut after its own longest row (2+3, 4+5, 5+5 positions)."""
    import quadrants.train.accumulate as accumulate

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)
    seen = []
    real = accumulate.sharded_policy_output

    def spy(env, model, mini, **passes):
        if torch.is_grad_enabled():
            seen.append(mini.response_mask.sum(1).tolist())
        return real(env, model, mini, **passes)

    monkeypatch.setattr(accumulate, "sharded_policy_output", spy)
    gradients("grpo", 2, model, batch)
    assert seen == [[2, 3], [4, 5], [5, 5]]
