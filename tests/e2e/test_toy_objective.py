"""Adding an objective touches its own file, its YAML and its test, nothing else: this file plays all
three. It defines `toy_sign_pg`, registers it, checks it by hand, writes its YAML into a config
directory of its own (on Hydra's search path), composes a run with `objective=toy_sign_pg` through
the real tree and trains a step the way tests/e2e/test_objectives_train.py trains the built-ins.

toy_sign_pg: loss_t = -scale · sign(A) · r_t, r_t = π(y_t) / π_old(y_t): every token of a response
pushed by the sign of its group advantage only (A = 0, a constant group, gives no gradient).
"""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.objectives import registry
from quadrants.objectives.batch import ObjectiveOutput, PolicyOutput, TokenBatch
from quadrants.objectives.registry import check_range, get_objective, register_objective
from quadrants.ops.surrogate import importance_ratio
from quadrants.rewards.grader import Grader
from quadrants.run.build import build_context
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.train.step import train_step
from tests.unit.objectives.helpers import batch, close, grad_of, logp_for_ratios, run

YAML = (
    "name: toy_sign_pg\nparams:\n  scale: 1.0\n"  # the signature defaults, as every objective YAML
)


def validate_toy(*, scale: float, **_: object) -> None:
    check_range("scale", scale, low=0.0, low_open=True)


def toy_sign_pg(batch: TokenBatch, policy: PolicyOutput, *, scale: float = 1.0) -> ObjectiveOutput:
    ratio = importance_ratio(policy.logp, batch.old_logp)  # [B, T]
    sign = torch.sign(batch.advantages)[:, None]  # [B, 1]
    return ObjectiveOutput(-scale * sign * ratio * batch.response_mask, {})


@pytest.fixture
def toy_objective(monkeypatch, tmp_path):
    """Register the toy in a copy of the registry; return a config directory holding its YAML."""
    registry.known_objectives()  # the built-ins first
    monkeypatch.setattr(registry, "_OBJECTIVES", dict(registry._OBJECTIVES))
    register_objective("toy_sign_pg", validate=validate_toy)(toy_sign_pg)
    (tmp_path / "objective").mkdir()
    (tmp_path / "objective" / "toy_sign_pg.yaml").write_text(YAML)
    return f"hydra.searchpath=[file://{tmp_path}]"


def test_the_toy_loss_by_hand(toy_objective):
    # group 0: rewards [1, 0] -> A = [+0.5, -0.5]; group 1: rewards [1, 1] -> A = [0, 0].
    # masks [[1, 1], [1, 0], [1, 1], [1, 0]]: 6 tokens; r = 2 at (0, 1), 1 elsewhere; scale 2.
    # per-token -2 · sign(A) · r: seq 0 [-2, -4], seq 1 [+2], seqs 2-3 0 -> token-mean -4 / 6.
    # d/dlogp = -2 · sign(A) · r / 6: seq 0 [-2/6, -4/6], seq 1 [+2/6, 0], seqs 2-3 0.
    tb = batch(
        entropy=[[0.0, 0.0]] * 4,
        rewards=[1.0, 0.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        response_mask=[[1, 1], [1, 0], [1, 1], [1, 0]],
    )
    logp = logp_for_ratios(tb, [[1.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    loss, _ = run("toy_sign_pg", tb, logp, scale=2.0)
    close(loss, -4 / 6)
    close(grad_of(loss, logp), [[-2 / 6, -4 / 6], [2 / 6, 0.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"scale=0.0 is out of range; allowed: \(0, inf\)"):
        run("toy_sign_pg", tb, logp, scale=0.0)


def test_the_toy_yaml_composes_and_restates_the_defaults(toy_objective):
    cfg = compose_run_config([toy_objective, "objective=toy_sign_pg"])
    assert cfg.objective.name == "toy_sign_pg"
    assert dict(cfg.objective.params) == get_objective("toy_sign_pg").defaults() == {"scale": 1.0}
    with pytest.raises(ValueError, match=r"objective \(toy_sign_pg\): scale=-1.0 is out of range"):
        compose_run_config([toy_objective, "objective=toy_sign_pg", "objective.params.scale=-1.0"])


@pytest.mark.subprocess
def test_the_toy_objective_trains_a_step(toy_objective, base_policy):
    cfg = compose_run_config(
        [
            toy_objective,
            "objective=toy_sign_pg",
            "seed=1",
            "train.prompts_per_step=8",
            "rollout.group_size=4",
            "train.mini_batch_size=16",
            "train.threads=1",
            "eval.problems=0",
        ]
    )
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=1) as grader:
        ctx = build_context(RunPlan.parse(cfg), grader)
        assert ctx.objective.spec.fn is toy_sign_pg and ctx.objective.params == {"scale": 1.0}
        before = [p.detach().clone() for p in ctx.model.parameters()]
        metrics = train_step(ctx, 0).metrics
        change = sum(
            (p.detach() - b).abs().sum().item()
            for p, b in zip(ctx.model.parameters(), before, strict=True)
        )
    assert math.isfinite(metrics[keys.objective("loss")])
    assert 0 < metrics[keys.train("solve_rate")] < 1  # some groups carry a sign
    assert change > 0, "parameters did not change"
