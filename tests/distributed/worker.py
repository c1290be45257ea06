"""A training worker for the distributed tests: run it with plain `python` (one process, no process
group) or under `torchrun --nproc-per-node 2` (two gloo ranks). Same code, same configs.

    python tests/distributed/worker.py OUT_DIR CASE[:STEPS][,CASE[:STEPS]...]

For each case it trains the cached tiny policy for STEPS (default 2) steps into OUT_DIR/CASE
(a torch.distributed.checkpoint checkpoint after every step, the last two kept; none in the
evaluation cases), and rank 0 writes every
metric this process logged to
OUT_DIR/CASE/metrics.json. Re-running resumes from OUT_DIR/CASE's newest checkpoint, whatever the
number of ranks that wrote it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from quadrants.config import RunConfig
from quadrants.distributed.collectives import init_distributed, shutdown
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import NullTracker

CASES: dict[str, dict[str, Any]] = {
    "grpo": dict(objective="grpo", params={}),
    "hapo": dict(objective="hapo", params={"alpha": 0.3}),
    "forking": dict(objective="forking", params={"rho": 0.2}),
    # 2 % of ~500 tokens -> ~10 selected tokens per mini-batch (the default 0.2 % would pick one)
    "kl_cov": dict(objective="kl_cov", params={"fraction": 0.02, "coef": 1.0}),
    "PHR": dict(objective="dapo", params={}, keep="PHR"),
    # the same with micro-batches of 4 sequences (2 per rank): the rows without a kept token still
    # run without grad, the others in grad passes that split evenly over the ranks
    # gradient clipping that acts (the gradient norm is ~0.5 here): every rank scales its shards by
    # the clip coefficient of the global norm
    "grpo_clipped": dict(objective="grpo", params={}, train=dict(max_grad_norm=0.05)),
    "PHR_micro": dict(objective="dapo", params={}, keep="PHR", train=dict(micro_batch_size=4)),
    # DAPO dynamic sampling with refill (up to 3 extra rounds, each dealt to the ranks in blocks) and
    # the overlong penalty over the last 10 of 40 tokens (tests/distributed/test_refill.py)
    "dapo_refill": dict(
        objective="dapo", params={}, rollout=dict(refill_rounds=3, overlong_buffer=10)
    ),
    # micro-batches by a token budget (train/micro_batches.py): 2 steps of DAPO, whose constant
    # groups carry no gradient (tests/distributed/test_packed.py: padded tokens against real ones)
    "dapo_tokens": dict(objective="dapo", params={}, train=dict(micro_batch_tokens=120)),
    # the remaining registered objectives (tests/distributed/test_behaviour_pass.py runs every one)
    "dapo": dict(objective="dapo", params={}),
    "clip_cov": dict(objective="clip_cov", params={"fraction": 0.02}),
    # Clip-Cov where its random draw matters: every token of positive covariance below 5 is a
    # candidate (~1 in 3), and 2 % of the tokens are drawn from them (tests/distributed/
    # test_equivalence.py: every rank must draw the same tokens as the one process)
    "clip_cov_draw": dict(objective="clip_cov", params={"fraction": 0.02, "cov_lb": 0.0}),
    "entroadv": dict(objective="entroadv", params={}),
    "entroreg": dict(objective="entroreg", params={}),
    "w_reinforce": dict(objective="w_reinforce", params={}),
    # the methods of 2025-26 (objectives/gspo.py ... ktae.py) with their registered defaults
    "gspo": dict(objective="gspo", params={}),
    "cispo": dict(objective="cispo", params={}),
    "archer": dict(objective="archer", params={}),
    "steer": dict(objective="steer", params={}),
    "adaptive_entropy": dict(objective="adaptive_entropy", params={}),
    "ktae": dict(objective="ktae", params={}),
    # rollouts from one colocated vLLM engine per rank (the vLLM stage only: tests/vllm/run.sh). vLLM's
    # teardown ends the process group, so a vLLM case must be the last case of a worker invocation
    "grpo_vllm": dict(objective="grpo", params={}, engine="vllm"),
    # evaluation at step 0 and after the last step, its generate calls dealt to the ranks: the task's
    # held-out split (16 problems x 2 samples in 4 calls of 8 sequences), or the same split as a
    # benchmark through quadrants.eval.runner (8 problems x 2 in 4 calls of 4; files in run_dir/eval)
    "grpo_eval": dict(objective="grpo", params={}, eval=dict(problems=16, samples=2, batch_size=8)),
    "grpo_bench": dict(
        objective="grpo", params={}, eval=dict(benchmarks={"arithmetic": 2}, limit=8, batch_size=4)
    ),
    # the benchmark evaluation on vLLM engines with calls that do not divide over 2 ranks: 6 problems
    # x 2 samples in calls of 4 sequences = 3 calls, rank 0 makes calls 0 and 2, rank 1 call 1 (the
    # vLLM stage only: tests/vllm/test_uneven_eval.py)
    "bench_vllm_uneven": dict(
        objective="grpo",
        params={},
        engine="vllm",
        eval=dict(benchmarks={"arithmetic": 2}, limit=6, batch_size=4),
    ),
}


class RecordingTracker(NullTracker):
    """Keeps every logged step in memory (rank 0 writes them out)."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.history[step] = {k: float(v) for k, v in metrics.items()}


def case_config(case: str, run_dir: Path, steps: int, checkpoints: bool = True) -> RunConfig:
    """`case` is a name of CASES, optionally prefixed "always-": train.behaviour_pass=always, or
    "packed-": that and train.attention_layout=packed; either optionally after "bf16-":
    train.precision=bf16-mixed (else fp32)."""
    bf16 = case.startswith("bf16-")
    case = case.removeprefix("bf16-")
    packed = case.startswith("packed-")
    spec = CASES[case.removeprefix("always-").removeprefix("packed-")]
    cfg = RunConfig(seed=3, run_dir=str(run_dir))
    cfg.train.precision = "bf16-mixed" if bf16 else "fp32"
    always = case.startswith("always-") or packed
    cfg.train.behaviour_pass = "always" if always else "auto"
    cfg.train.attention_layout = "packed" if packed else "padded"
    cfg.model.name_or_path = "tiny"
    cfg.objective.name = spec["objective"]
    cfg.objective.params = dict(spec["params"])
    cfg.quadrant.keep = spec.get("keep", "all")
    cfg.rollout.group_size = 4
    cfg.rollout.max_new_tokens = 40
    cfg.train.steps = steps
    cfg.train.prompts_per_step = 4
    cfg.train.mini_batch_size = 8  # 16 sequences -> 2 updates per step, 4 rows per rank each
    cfg.train.threads = 1
    cfg.train.lr = 3e-4
    # sharded ranks run every forward as one bucket (the same calls on every rank); the one-process
    # reference does too, so that both group the same rows per call (buckets' own equivalence:
    # tests/unit/models/test_shared_prompts.py)
    cfg.train.length_buckets = 1
    cfg.distributed.prompts_per_generate = 2  # the same 2 blocks of prompts for 1 or 2 ranks
    cfg.eval.problems = 0
    cfg.checkpoint.every = 1
    cfg.tracking.log_samples_every = 0
    for key, value in spec.get("rollout", {}).items():
        setattr(cfg.rollout, key, value)
    for key, value in spec.get("train", {}).items():
        setattr(cfg.train, key, value)
    for key, value in spec.get("eval", {}).items():
        setattr(cfg.eval, key, value)
    if "eval" in spec:
        cfg.eval.max_new_tokens, cfg.checkpoint.every = 40, 0
    if not checkpoints:
        cfg.checkpoint.every = 0
    if spec.get("engine") == "vllm":
        cfg.rollout.engine = "vllm"
        cfg.rollout.vllm.kv_cache_gib, cfg.rollout.vllm.enforce_eager = 0.25, True
        cfg.rollout.vllm.dtype = "float32"  # the float32 trainer's (the default is bfloat16)
    return cfg


def main(argv: list[str]) -> None:
    out_dir, cases = Path(argv[0]), argv[1].split(",")
    checkpoints = argv[2:] != ["no-checkpoints"]
    torch.set_num_threads(1)
    env = init_distributed("gloo")
    try:
        for item in cases:
            case, _, steps = item.partition(":")
            tracker = RecordingTracker()
            cfg = case_config(case, out_dir / case, int(steps or 2), checkpoints)
            result = run_training(RunPlan.parse(cfg), tracker)
            if env.is_main:
                record = {
                    "world_size": env.world_size,
                    "resumed_from": result.resumed_from,
                    "steps": {str(k): v for k, v in sorted(tracker.history.items())},
                }
                (out_dir / case / "metrics.json").write_text(json.dumps(record, indent=1))
    finally:
        shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
