"""Rank 0 reads the weights, the other ranks build the model on the meta device: a worker for
tests/distributed/test_rank0_fill.py, run as 2 gloo ranks under torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node 2 fill_worker.py OUT.json

On ranks other than 0 every function that reads a checkpoint's weights (`from_pretrained` of any
model class, safetensors' readers) raises, so a run that reads the weights there fails. Then it
builds the training context (`build_context`: policy, KL reference, HF engine replica) twice:

- `meta`: as a run does (rank 0 loads, rank 1 on the meta device);
- `loaded`: every rank loads the weights itself (the layout before rank-0 filling; the readers
  are put back for it),

runs one training step of each from the same seeds, and rank 0 writes what it compared to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from quadrants.config import RunConfig
from quadrants.distributed.collectives import gather_objects, init_distributed, shutdown
from quadrants.models.loading import load_policy
from quadrants.rewards.grader import Grader
from quadrants.run import build as run_build
from quadrants.run_plan import RunPlan
from quadrants.train.step import train_step


def config() -> RunConfig:
    cfg = RunConfig(seed=3)
    cfg.model.name_or_path = "tiny"
    cfg.objective.name = "grpo"
    cfg.objective.kl_coef = 0.05  # a KL reference model too, filled like the policy
    cfg.rollout.group_size = 4
    cfg.rollout.max_new_tokens = 40
    cfg.train.prompts_per_step = 4
    cfg.train.mini_batch_size = 8
    cfg.train.threads = 1
    cfg.train.lr = 3e-4
    cfg.train.length_buckets = 1
    cfg.distributed.prompts_per_generate = 2
    cfg.eval.problems = 0
    return cfg


class _Forbidden:
    """Replaces the weight readers on ranks other than 0 while `on` is set."""

    on = False
    hits: list[str] = []

    @classmethod
    def install(cls) -> None:
        import safetensors
        import safetensors.torch
        import transformers.modeling_utils as modeling_utils
        from transformers import PreTrainedModel

        def guard(name: str, original: Any) -> Any:
            def guarded(*args: Any, **kwargs: Any) -> Any:
                if cls.on:
                    cls.hits.append(name)
                    raise RuntimeError(f"rank != 0 read the weights: {name}")
                return original(*args, **kwargs)

            return guarded

        original_fp = PreTrainedModel.from_pretrained.__func__
        PreTrainedModel.from_pretrained = classmethod(guard("from_pretrained", original_fp))
        for module in (safetensors, safetensors.torch, modeling_utils):
            for name in ("safe_open", "load_file", "load"):
                if hasattr(module, name) and callable(getattr(module, name)):
                    setattr(module, name, guard(f"{module.__name__}.{name}", getattr(module, name)))


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every entry of a (sharded) model's state dict, whole, plus its buffers (a collective)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    state = {k: v.detach().clone() for k, v in state.items()}
    state.update({f"buffer:{k}": v.detach().clone() for k, v in model.named_buffers()})
    return state


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def build(cfg: RunConfig, grader: Grader, env: Any, *, meta: bool) -> Any:
    _Forbidden.on = meta and not env.is_main
    if meta:
        return run_build.build_context(RunPlan.parse(cfg), grader)
    original = run_build.load_policy
    run_build.load_policy = lambda *a, **k: original(*a, **{**k, "weights": True})
    try:
        return run_build.build_context(RunPlan.parse(cfg), grader)
    finally:
        run_build.load_policy = original


def main(out: Path) -> None:
    torch.set_num_threads(1)
    env = init_distributed("gloo")
    if not env.is_main:
        _Forbidden.install()
    report: dict[str, Any] = {"world_size": env.world_size}
    try:
        with Grader(num_workers=0, timeout_s=5.0) as grader:
            results = {}
            for meta in (True, False):
                torch.manual_seed(3)
                ctx = build(config(), grader, env, meta=meta)
                _Forbidden.on = False
                before = full_state(ctx.model)
                reference = full_state(ctx.ref_model)
                replica = {k: v.clone() for k, v in ctx.engine.model.state_dict().items()}
                replica.update(
                    {f"buffer:{k}": v.clone() for k, v in ctx.engine.model.named_buffers()}
                )
                metrics = dict(train_step(ctx, 0).metrics)
                after = full_state(ctx.model)
                results[meta] = (before, reference, replica, metrics, after)
            # what rank 0 read from the file itself, cast as the trainer stores it (float32)
            disk, _ = load_policy("tiny", dtype=config().model.dtype)
            disk_state = {k: v.float() for k, v in disk.state_dict().items()}
            disk_state.update({f"buffer:{k}": v for k, v in disk.named_buffers()})
            meta_before, meta_ref, meta_replica, meta_metrics, meta_after = results[True]
            mine = {
                "rank": env.rank,
                "hits": list(_Forbidden.hits),
                "policy_is_file": equal(meta_before, disk_state),
                "reference_is_file": equal(meta_ref, disk_state),
                "replica_is_file": equal(meta_replica, disk_state),
                "meta_equals_loaded_before": equal(meta_before, results[False][0]),
                "meta_equals_loaded_after": equal(meta_after, results[False][4]),
                "step_moved": max(
                    (meta_after[k] - meta_before[k]).abs().max().item()
                    for k in meta_before
                    if not k.startswith("buffer:")
                ),
                "metrics_equal": {  # {} when equal; the timings differ, of course
                    k: (v, results[False][3].get(k))
                    for k, v in meta_metrics.items()
                    if not k.startswith("time/") and results[False][3].get(k) != v
                },
                "metrics": len(meta_metrics),
                "reward_mean": meta_metrics.get("train/reward_mean"),
                "entries": len(meta_before),
            }
            report["ranks"] = gather_objects(mine, env)
    finally:
        shutdown()
    if env.is_main:
        out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
