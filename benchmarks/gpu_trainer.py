"""The library's own training step on a GPU: what only a CUDA device can show of the trainer.

    PYTHONPATH=. python benchmarks/gpu_trainer.py --out gpu_trainer.json      # the GPU machine
    PYTHONPATH=. python benchmarks/gpu_trainer.py --device cpu --smoke       # CI smoke

The run is the main job's (the tiny warm-started policy on the synthetic arithmetic task, 16
prompts x 8 samples, real math-verify rewards), built by the trainer's own `build_context` and
stepped by `train_step` or `run_training`. Sections (`--sections`, default all):

- `tuning`: the default config on the device. Off the CPU, nothing in quadrants/cpu is called (the
  tuning entry returns None; no matmul routing, linear routing, allocator or SDPA setting; the
  fused head's and the fast decode's multiplies call nothing there), the process environment is
  unchanged, every linear layer stays `nn.Linear`, and the rollouts come from HF `generate`. On the
  CPU the counterpart holds (the tuning is applied), so the check can fail.
- `objectives`: every registered objective (ARCA with LoRA) and the variants below, 2 steps each
  under bf16-mixed with `train.micro_batch_tokens=2048`, `train.forward_tokens=4096` and
  checkpointing: every metric finite, at least 99 % of the trainable parameters moved, every
  `.grad` None after the step. Pure bf16 (`train.allow_pure_bf16`) is reported, not checked: its
  rounding is what the refusal is about.
- `learn`: `run_training` for 30 steps, fp32 and bf16-mixed, with the held-out check at 0, 20 and
  30: the mean reward of the last 5 steps above the first 5's (one seed: a smoke test of learning,
  not a comparison of the precisions).
- `resume`: a bf16-mixed run (with `train.offload_optimizer` on CUDA, a GPU-only path) stopped
  after step 13 resumes from its step-10 checkpoint; every step after it equals the uninterrupted
  run's reward, loss, entropy and gradient norm exactly.

The last line is PASS or FAIL; `--out` writes every figure as JSON. On the GPU machine math-verify
is missing: carry its wheels (math-verify, latex2sympy2_extended, antlr4-python3-runtime 4.9.3)
and peft's if its version differs from pyproject's. Figures of a run: docs/cluster.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

BUDGET = {
    "train.precision": "bf16-mixed",
    "train.micro_batch_tokens": 2048,
    "train.forward_tokens": 4096,
    "train.activation_checkpointing": True,
}
VARIANTS = {
    "grpo, KL reference": {"objective.name": "grpo", "objective.kl_coef": 0.001},
    "dapo, PHR only": {"quadrant.keep": "PHR"},
    "dapo, attention-entropy axis": {"quadrant.axis": "attention_entropy"},
    "grpo, LoRA residual telemetry": {"objective.name": "grpo", "model.lora.enabled": True},
    "dapo, behaviour pass always": {"train.behaviour_pass": "always"},
    "dapo, fast decode": {"rollout.hf_decode": "fast"},
    "dapo, token mismatch correction": {"rollout.mismatch_correction": "token"},
}
CPU_FUNCTIONS = {  # module (under quadrants.cpu) -> the functions a CPU run calls
    "matmul": ("set_cpu_matmul", "linear", "routes", "onednn_linear", "linear_grads"),
    "linears": ("route_linears",),
    "allocator": ("retain_freed_memory",),
    "sdpa": ("hand_grouped_heads_to_sdpa",),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--smoke", action="store_true", help="few steps and cases (CI, on the CPU)")
    p.add_argument(
        "--sections",
        default="tuning,objectives,learn,resume",
        help="comma-separated: tuning, objectives, learn, resume",
    )
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


def config(device: str, overrides: dict[str, Any] | None = None):
    """`RunConfig()` (the main job's run) on `device`, no held-out check, no checkpoints, with
    `overrides` as dotted keys."""
    from quadrants.config import RunConfig
    from quadrants.config_ranges import lookup

    cfg = RunConfig(seed=0)
    values = {"train.device": device, "eval.problems": 0, "checkpoint.every": 0}
    for key, value in {**values, **(overrides or {})}.items():
        section, _, leaf = key.rpartition(".")
        node = lookup(cfg, section) if section else cfg
        if not hasattr(node, leaf):
            raise KeyError(f"{key} is not a key of the run config")
        setattr(node, leaf, value)
    return cfg


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_steps(cfg, steps: int, inspect: Callable | None = None) -> dict:
    """`steps` training steps of `cfg` through `build_context` and `train_step`: the figures."""
    from quadrants.rewards.grader import Grader
    from quadrants.run.build import build_context
    from quadrants.run_plan import RunPlan
    from quadrants.train.step import train_step

    plan = RunPlan.parse(cfg)
    torch.manual_seed(cfg.seed)
    device = cfg.train.device
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with Grader(num_workers=2, timeout_s=5.0) as grader:
        ctx = build_context(plan, grader)
        trainable = [p for p in ctx.model.parameters() if p.requires_grad]
        before = [p.detach().clone() for p in trainable]
        seconds, metrics = [], []
        for index in range(steps):
            synchronize(device)
            started = time.perf_counter()
            metrics.append(train_step(ctx, index).metrics)
            synchronize(device)
            seconds.append(time.perf_counter() - started)
        moved = [(b != p.detach()).float().mean().item() for b, p in zip(before, trainable)]
        figures = dict(
            step_s=[round(s, 3) for s in seconds],
            peak_gib=torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            param_dtype=str(trainable[0].dtype),
            param_device=str(trainable[0].device),
            trainable=sum(p.numel() for p in trainable),
            moved=sum(moved) / len(moved),
            grads_none=all(p.grad is None for p in ctx.model.parameters()),
            reward=[m.get("train/reward_mean") for m in metrics],
            loss=[m.get("train/objective/loss") for m in metrics],
            nonfinite=sorted(
                {
                    k
                    for m in metrics
                    for k, v in m.items()
                    if isinstance(v, float) and not math.isfinite(v)
                }
            ),
            timing={k: round(v, 3) for k, v in metrics[-1].items() if k.startswith("time/")},
        )
        if inspect is not None:
            figures.update(inspect(ctx))
    return figures


def tuning(args) -> dict[str, dict]:
    """The default config on the device, with every function of quadrants/cpu counted."""
    import importlib

    from transformers import GenerationMixin

    import quadrants.run.build as build
    from quadrants import cpu

    calls: dict[str, int] = {}
    originals: list[tuple[Any, str, Any]] = []

    def count(owner, name: str) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def counted(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return original(*a, **k)

        setattr(owner, name, counted)

    for module, names in CPU_FUNCTIONS.items():
        owner = importlib.import_module(f"quadrants.cpu.{module}")
        for name in names:
            count(owner, name)
    count(GenerationMixin, "generate")
    returned: list[Any] = []
    tune_for = cpu.tune_for

    def recorded(device, settings, models=()):
        returned.append(tune_for(device, settings, models))
        return returned[-1]

    originals.append((build, "tune_for", tune_for))
    build.tune_for = recorded
    environ = dict(os.environ)

    def inspect(ctx) -> dict:
        return dict(
            cpu_calls={k: v for k, v in calls.items() if k != "generate"},
            generate_calls=calls.get("generate", 0),
            tune_for=[repr(r) for r in returned],
            environ_changed=sorted(
                k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k)
            ),
            linear_classes=sorted(
                {
                    f"{type(m).__module__}.{type(m).__name__}"
                    for m in ctx.model.modules()
                    if isinstance(m, torch.nn.Linear)
                }
            ),
        )

    try:
        figures = run_steps(config(args.device), 1 if args.smoke else 2, inspect)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    tuned = args.device == "cpu"  # the counterpart: on the CPU the tuning must have run
    checks = dict(
        # called once per built context; None off the CPU, what it applied on the CPU
        tune_for=bool(returned) and all((r is None) != tuned for r in returned),
        cpu_calls=bool(figures["cpu_calls"]) == tuned,
        linear_classes=(figures["linear_classes"] == ["torch.nn.modules.linear.Linear"]) != tuned,
        environment=tuned or not figures["environ_changed"],
        generate=(figures["generate_calls"] > 0) != tuned,  # the CPU takes the fast decode
    )
    out = {"default config": {**figures, "checks": checks}}
    report("default config", out["default config"])
    return out


def objectives(args) -> dict[str, dict]:
    from quadrants.objectives.registry import known_objectives

    cases: dict[str, dict[str, Any]] = {}
    names = ["dapo", "arca"] if args.smoke else known_objectives()
    for name in names:
        lora = {"model.lora.enabled": True} if name == "arca" else {}
        cases[name] = {**BUDGET, "objective.name": name, **lora}
    if not args.smoke:
        cases.update({key: {**BUDGET, **over} for key, over in VARIANTS.items()})
        cases["fp32"] = {"train.precision": "fp32"}
        cases["pure bf16 (reported)"] = {"train.precision": "bf16", "train.allow_pure_bf16": True}
    out = {}
    for key, over in cases.items():
        out[key] = guarded(
            lambda over=over: run_steps(config(args.device, over), 1 if args.smoke else 2)
        )
        if "error" not in out[key]:
            f = out[key]
            out[key]["checks"] = dict(
                finite=not f["nonfinite"],
                grads_freed=f["grads_none"],
                on_device=f["param_device"].startswith(args.device),
                moved=f["moved"] >= 0.99 or key.endswith("(reported)"),
            )
        report(key, out[key])
    return out


def learn(args) -> dict[str, dict]:
    from quadrants.run.loop import run_training
    from quadrants.run_plan import RunPlan
    from quadrants.tracking.base import RecordingTracker

    steps = 6 if args.smoke else 30
    out = {}
    for precision in ("fp32", "bf16-mixed"):
        over: dict[str, Any] = {
            "train.precision": precision,
            "train.steps": steps,
            "eval.problems": 20 if args.smoke else 100,
            "eval.every": 20,
        }
        if precision != "fp32":
            over.update({"train.micro_batch_tokens": 2048, "train.activation_checkpointing": True})

        def one(over=over) -> dict:
            tracker = RecordingTracker()
            started = time.perf_counter()
            run_training(RunPlan.parse(config(args.device, over)), tracker)
            rewards = [
                m["train/reward_mean"] for _, m in tracker.history if "train/reward_mean" in m
            ]
            held_out = {
                step: m["eval/arithmetic/avg_at_4"]
                for step, m in tracker.history
                if "eval/arithmetic/avg_at_4" in m
            }
            first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
            return dict(
                seconds=round(time.perf_counter() - started, 1),
                rewards=[round(r, 4) for r in rewards],
                first5=first,
                last5=last,
                held_out_avg_at_4=held_out,
                checks=dict(learned=last > first or args.smoke, held_out=len(held_out) >= 2),
            )

        out[precision] = guarded(one)
        report(precision, out[precision])
    return out


def resume(args) -> dict[str, dict]:
    import quadrants.run.loop as loop
    from quadrants.run_plan import RunPlan
    from quadrants.tracking.base import RecordingTracker

    total, stop_after, every = (6, 4, 2) if args.smoke else (16, 13, 5)
    over = {
        "train.precision": "bf16-mixed",
        "train.steps": total,
        "checkpoint.every": every,
        "train.offload_optimizer": args.device == "cuda",
    }

    def run(run_dir: str, stop: int | None = None) -> dict[int, dict]:
        cfg = config(args.device, over)
        cfg.run_dir = run_dir
        tracker = RecordingTracker()
        step = loop.train_step
        if stop is not None:  # as a kill after `stop` steps: no checkpoint beyond the last saved
            done = [0]

            def stopping(ctx, index):
                if done[0] == stop:
                    raise KeyboardInterrupt
                done[0] += 1
                return step(ctx, index)

            loop.train_step = stopping
        try:
            loop.run_training(RunPlan.parse(cfg), tracker)
        except KeyboardInterrupt:
            pass
        finally:
            loop.train_step = step
        return {s: m for s, m in tracker.history if "train/reward_mean" in m}

    def one() -> dict:
        keys = ("train/reward_mean", "train/objective/loss", "train/entropy", "train/grad_norm")
        straight = run(tempfile.mkdtemp(prefix="straight-"))
        stopped = tempfile.mkdtemp(prefix="resumed-")
        first = run(stopped, stop=stop_after)
        second = run(stopped)
        compared = {s: {k: (straight[s][k], second[s][k]) for k in keys} for s in sorted(second)}
        resumed_from = min(second) - 1
        return dict(
            first_run_steps=sorted(first),
            resumed_from=resumed_from,
            compared=compared,
            checks=dict(
                from_checkpoint=resumed_from == stop_after - stop_after % every,
                exact=all(a == b for row in compared.values() for a, b in row.values()),
            ),
        )

    out = {"bf16-mixed" + (", optimizer offloaded" if args.device == "cuda" else ""): guarded(one)}
    for key, value in out.items():
        report(key, value)
    return out


def guarded(fn: Callable[[], dict]) -> dict:
    started = time.perf_counter()
    try:
        figures = fn()
    except Exception as e:  # noqa: BLE001 - a failing case is a FAIL line, the others still run
        figures = dict(error=repr(e)[:600], traceback=traceback.format_exc()[-3000:])
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    return figures


def passed(figures: dict) -> bool:
    return "error" not in figures and all(figures.get("checks", {}).values())


def report(key: str, figures: dict) -> None:
    if "error" in figures:
        print(f"  {key}: ERROR {figures['error']}\n{figures['traceback']}", flush=True)
        return
    failed = [k for k, ok in figures.get("checks", {}).items() if not ok]
    keys = ("step_s", "moved", "reward", "timing", "first5", "last5", "held_out_avg_at_4")
    shown = {k: figures[k] for k in (*keys, "resumed_from") if k in figures}
    verdict = "ok" if not failed else "FAILED " + ", ".join(failed)
    print(f"  {key}: {verdict}  {json.dumps(shown, default=str)[:400]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_trainer: --device cuda but CUDA is not available (use --device cpu --smoke)")
    sections = {"tuning": tuning, "objectives": objectives, "learn": learn, "resume": resume}
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(sections))
    if unknown:
        sys.exit(f"gpu_trainer: unknown section(s) {unknown}; choose from {sorted(sections)}")
    results: dict[str, Any] = dict(
        device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
    )
    print(f"{results['device']}, torch {results['torch']}, transformers {results['transformers']}")
    for name in wanted:
        print(f"{name}:", flush=True)
        results[name] = sections[name](args)
        if args.out is not None:  # after every section: a run cut short keeps what it did
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    ok = all(passed(case) for name in wanted for case in results[name].values())
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
