"""quadrants/train/replay.py: when the step records the decode's outputs and replays them. One
setting at a time is turned against the default (which records up to `train.decode_replay_mb`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.replay import OutputStorage
from quadrants.models.tiny import random_tiny_policy
from quadrants.objectives.registry import resolve_objective
from quadrants.rollout.engine import Rollouts
from quadrants.train.replay import decode_replay, record_budget_mb


def context(objective: str = "dapo", world_size: int = 1, **changes):
    cfg = RunConfig()
    cfg.objective.name = objective
    for key, value in changes.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    spec, params = resolve_objective(objective, cfg.objective.params)
    model, _ = random_tiny_policy(0)
    return SimpleNamespace(
        cfg=cfg, spec=spec, params=params, model=model, dist=SimpleNamespace(world_size=world_size)
    )


def test_the_default_records_up_to_the_budget():
    assert record_budget_mb(context()) == RunConfig().train.decode_replay_mb == 4096


@pytest.mark.parametrize(
    "why, ctx",
    [
        ("turned off", lambda: context(train__decode_replay_mb=0)),
        ("two ranks", lambda: context(world_size=2)),
        ("the pass is recomputed", lambda: context(train__behaviour_pass="always")),
        ("KL-Cov recomputes old log-probs", lambda: context("kl_cov")),
        ("vLLM samples", lambda: context(rollout__engine="vllm")),
        ("mismatch correction", lambda: context(rollout__mismatch_correction="token")),
        ("bf16-mixed trainer", lambda: context(train__precision="bf16-mixed")),
        ("refill rounds", lambda: context(rollout__refill_rounds=2)),
        ("several generate calls", lambda: context(distributed__prompts_per_generate=4)),
    ],
)
def test_what_records_nothing(why, ctx):
    assert record_budget_mb(ctx()) == 0.0, why


def test_a_model_with_dropout_records_nothing():
    ctx = context()
    ctx.model.config.attention_dropout = 0.1
    assert record_budget_mb(ctx) == 0.0


def rollouts(prompt_ids: torch.Tensor, linear_outputs) -> Rollouts:
    rows = prompt_ids.shape[0]
    return Rollouts(
        prompt_ids=prompt_ids,
        prompt_mask=torch.ones_like(prompt_ids, dtype=torch.bool),
        response_ids=torch.zeros(rows, 4, dtype=torch.long),
        response_mask=torch.ones(rows, 4, dtype=torch.bool),
        behaviour_logp=torch.zeros(rows, 4),
        texts=[""] * rows,
        group_ids=torch.zeros(rows, dtype=torch.long),
        finished=torch.ones(rows, dtype=torch.bool),
        behaviour_entropy=torch.zeros(rows, 4),
        linear_outputs=linear_outputs,
    )


def test_only_the_recorded_batch_replays():
    """Outputs recorded for these prompts over P + T = 7 columns replay; none, other prompts, a
    later loan of the storage, or a setting that records nothing do not."""
    ctx = context()
    ids = torch.tensor([[5, 6, 7]] * 2)
    storage = OutputStorage(ctx.model, 2, 7)
    outputs = storage.lend(ids, 7)
    replay = decode_replay(ctx, rollouts(ids, outputs))
    assert replay is not None and replay.rows.tolist() == [0, 1]
    assert decode_replay(ctx, rollouts(ids, None)) is None
    assert decode_replay(ctx, rollouts(ids + 1, outputs)) is None
    assert decode_replay(context(train__behaviour_pass="always"), rollouts(ids, outputs)) is None
    storage.lend(ids, 7)
    assert decode_replay(ctx, rollouts(ids, outputs)) is None
