"""The step's placement: `SingleProcess` hands every call and row to the one process and gathers
nothing, so a one-process step never opens distributed code. What only several ranks show (the
sharded form's gathers and splices) is tests/distributed/ (test_precision's `Sharded` cases and the
behaviour-pass worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from quadrants.train.placement import SingleProcess

ROOT = Path(__file__).resolve().parents[3]


def test_single_process_hands_everything_to_its_one_process():
    """3 calls: all dealt here (range 0..2); gathered results come back in call order; a share of
    6 rows is rows 0..5; forward options, splices and metrics come back unchanged."""
    one = SingleProcess()
    assert (one.rank, one.world_size, one.sharded) == (0, 1, False)
    assert list(one.deal(3)) == [0, 1, 2]
    assert one.gather_in_order([(2, "c"), (0, "a"), (1, "b")]) == ["a", "b", "c"]
    assert one.share(6) == slice(0, 6)
    options = {"temperature": 1.0, "max_buckets": 4}
    assert one.forward_options(options) == {"temperature": 1.0, "max_buckets": 4}
    own = torch.ones(2, 3, requires_grad=True)
    assert one.splice(own) is own  # the gradient flows through unchanged
    gathered = one.gather_rows(own)
    assert not gathered.requires_grad and torch.equal(gathered, own.detach())
    metrics = {"time/update": 0.5, "train/reward_mean": 0.25}
    assert one.reduce_metrics(metrics) == metrics


STEP = """
import json, sys
import torch
from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.rewards.grader import Grader
from quadrants.rollout.registry import get_engine
from quadrants.tasks import RenderedTask, make_task
from quadrants.tasks.prompts import make_renderer
from quadrants.run.settings import build_step
from quadrants.train.step import train_step
from quadrants.run_plan import RunPlan

cfg = RunConfig(seed=0)
cfg.model.name_or_path = "tiny-random"
cfg.train.prompts_per_step, cfg.rollout.group_size, cfg.train.mini_batch_size = 2, 2, 4
cfg.rollout.max_new_tokens = 8
torch.manual_seed(0)
model, tokenizer = load_policy("tiny-random", seed=0)
engine = get_engine("hf").start(cfg, model, tokenizer, replica=model, world_size=1)
task = make_task(cfg.task.name, cfg.task.heldout_size, dict(cfg.task.params))
task = RenderedTask(task, make_renderer(cfg.prompt.format, tokenizer=tokenizer,
                                        instruction=cfg.prompt.instruction))
optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
with Grader(num_workers=1) as grader:
    ctx = build_step(RunPlan.unchecked(cfg), model, tokenizer=tokenizer, engine=engine, grader=grader, task=task,
                     optimizer=optimizer, scheduler=scheduler)
    metrics = train_step(ctx, 0).metrics
opened = sorted(m for m in sys.modules if m.startswith("quadrants.distributed"))
print(json.dumps({"opened": opened, "step": metrics["train/step"],
                  "length": metrics["train/response_length"]}))
"""


@pytest.mark.subprocess
def test_a_one_process_step_never_imports_distributed_code():
    """A whole step (collect with the HF engine, score, update, telemetry) built by `build_step`
    from real parts in a fresh interpreter: afterwards no module of quadrants.distributed is
    loaded. It sampled real responses (mean length > 0) and counted the step."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", STEP], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["opened"] == []
    assert result["step"] == 1.0 and result["length"] > 0
