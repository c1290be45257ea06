"""Entry point: `python -m quadrants.evaluate TARGET [overrides...]` —
evaluate a model on benchmarks.

    # the newest checkpoint of a run
    python -m quadrants.evaluate outputs/quadrants/s1a2b3c4/quadrant=PHR eval=paper
    # one checkpoint
    python -m quadrants.evaluate outputs/.../quadrant=PHR/checkpoints/step_0000060
    # a save_pretrained directory
    python -m quadrants.evaluate ./my_model_dir eval=paper
    # a hub id
    python -m quadrants.evaluate Qwen/Qwen2.5-Math-7B eval=paper model.dtype=bfloat16
    # the embedded model, quick preset
    python -m quadrants.evaluate tiny eval=quick
    # print the config, run nothing
    python -m quadrants.evaluate tiny eval=paper --cfg

Overrides are those of the training tree (sweeps/), so `eval=paper`, `eval.limit=20`,
`eval.benchmarks={aime24:32}`, `tracking=server` mean the same here as in a sweep. The config and
the target are checked before anything is loaded; the evaluation logs to its own MLflow run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from quadrants.config import ModelConfig, PromptConfig, RunConfig, TaskConfig
from quadrants.eval.target import EvalTarget, resolve_target
from quadrants.launch.loaded_run import grader, load_policy, own_run, refusal, target_parser
from quadrants.run_plan import RunPlan

if TYPE_CHECKING:
    from quadrants.eval.runner import SuiteReport
    from quadrants.tracking.base import Tracker


def _quoted(value: str) -> str:
    """A Hydra override value that keeps '=', ',' and spaces of paths like
    `.../quadrant=PHR,seed=1`."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _split_benchmarks(overrides: list[str]) -> tuple[list[str], dict[str, int] | None]:
    """Take ``eval.benchmarks={...}`` out of the overrides: here it *replaces* the preset's mapping
    (Hydra would merge it into the preset's and refuse new names)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    rest, benchmarks = [], None
    for item in overrides:
        if item.split("=", 1)[0] != "eval.benchmarks":
            rest.append(item)
            continue
        value = OverridesParser.create().parse_override(item).value()
        if not isinstance(value, dict) or not all(isinstance(n, int) for n in value.values()):
            raise ValueError(
                f"{item}: expected a mapping benchmark -> samples, e.g. "
                f"eval.benchmarks={{aime24:32,math500:4}}"
            )
        benchmarks = {str(name): int(n) for name, n in value.items()}
    return rest, benchmarks


HOME_KEYS = ("outputs", "study", "tracking")


def in_the_runs_store(
    cfg: RunConfig, run: dict, target: EvalTarget, overrides: list[str]
) -> RunConfig:
    """`cfg` logging where the checkpoint's training run logged: its MLflow store (its
    `tracking.uri`, else the `mlflow.db` of its outputs folder), its study (experiment) and its
    outputs folder, so that the new run and its files land beside the run they measure (and its
    `quadrants.source_run_id` link resolves in the same store), whatever directory the command runs
    in. An override of `outputs`, `study` or `tracking` keeps the command's own choice."""
    from quadrants.tracking.setup import run_outputs

    chosen = {item.lstrip("+~").split("=", 1)[0].split(".", 1)[0] for item in overrides}
    if chosen & set(HOME_KEYS) or target.checkpoint is None:
        return cfg
    run_dir = target.checkpoint.parent.parent.parent  # <run_dir>/checkpoints/step_N/state.pt
    study = str(run.get("study") or cfg.study)
    outputs = run_outputs(run_dir, str(run.get("outputs") or ""), study, run.get("sweep_id"))
    if outputs is None:
        return cfg  # a run directory outside its sweep's layout: the command's defaults
    uri = (run.get("tracking") or {}).get("uri")
    return replace(
        cfg,
        outputs=str(outputs),
        study=study,
        tracking=replace(cfg.tracking, uri=uri if uri else None),
    )


def prepare(
    target: str, overrides: list[str], *, files: bool = True, task_used: bool = False
) -> tuple[RunPlan, EvalTarget]:
    """Compose the config, fit it to the target (its model; a checkpoint's task, prompt format and
    store) and parse it once into the command's `RunPlan`, and resolve the target; raises before
    anything is loaded. ``files=False`` (``--cfg``) does not ask for the benchmark files to exist.
    ``task_used``: the command rolls out the task's prompts whatever the suite (the probe); an
    evaluation uses the task only when its suite names it (`RunPlan.parse`)."""
    from quadrants.launch.hydra_setup import compose_config

    resolved = resolve_target(target)
    overrides, benchmarks = _split_benchmarks(overrides)
    cfg = compose_config([*overrides, f"eval.target={_quoted(target)}"])
    if benchmarks is not None:
        cfg = replace(cfg, eval=replace(cfg.eval, benchmarks=benchmarks))
    if resolved.kind == "checkpoint":
        run = resolved.run_config or {}
        cfg = in_the_runs_store(cfg, run, resolved, overrides)
        model = ModelConfig(name_or_path=resolved.model, dtype=resolved.dtype or cfg.model.dtype)
        task = run.get("task") or {}
        cfg = replace(
            cfg,
            model=model,
            task=replace(
                cfg.task, **{k: v for k, v in task.items() if k in TaskConfig.__dataclass_fields__}
            ),
        )
        prompt = run.get("prompt") or {}
        if not _sets_prompt(overrides):  # the run's own prompt format
            cfg = replace(
                cfg,
                prompt=replace(
                    cfg.prompt,
                    **{k: v for k, v in prompt.items() if k in PromptConfig.__dataclass_fields__},
                ),
            )
    else:
        cfg = replace(cfg, model=replace(cfg.model, name_or_path=resolved.model))
    return RunPlan.parse(cfg, files=files, task_used=task_used), resolved


def parser() -> argparse.ArgumentParser:
    """The command line (`main`); `prepare` checks what it names (tests/unit/test_docs_commands.py
    parses every documented command with both)."""
    return target_parser(
        "python -m quadrants.evaluate",
        "Evaluate a run, a checkpoint, a model directory, 'tiny' or a hub id on benchmarks "
        "(Avg@n, Pass@k with standard errors, logged to MLflow).",
        "Hydra overrides of the sweeps/ tree, e.g. eval=paper eval.limit=10",
        epilog="presets: eval=quick (seconds, toy + two real benchmarks), eval=paper (the paper's "
        "protocol), eval=paper_ood (GPQA, MMLU-Pro, GraphWiz), eval=toy (the task's held-out "
        "split). See docs/evaluation.md.",
    )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan, target = prepare(args.target, list(args.overrides), files=not args.cfg)
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors too; shown trimmed, like a sweep's
        sys.exit(refusal("evaluation", err))
    if args.cfg:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(OmegaConf.structured(plan.cfg)))
        return
    note = prompt_note(target, list(args.overrides))
    if note:
        print(note, file=sys.stderr)
    run_evaluation(plan, target)


def run_evaluation(
    plan: RunPlan, target: EvalTarget, *, tracker: Tracker | None = None
) -> SuiteReport:
    """Evaluate `target` as `plan.eval` says, in its own MLflow run (`plan.tracking`; `own_run`);
    returns the report.

    `plan` is the command's parsed configuration and `target` resolved (`resolve_target`) first
    (`prepare`): both fail before anything is loaded. Pass `tracker` to log elsewhere (tests use
    `RecordingTracker`)."""
    from quadrants.eval.generation import TextEngine
    from quadrants.eval.runner import (
        EvalSettings,
        eval_params,
        eval_tags,
        format_table,
        run_suite,
        too_long_params,
    )
    from quadrants.tracking.mlflow_tracker import MlflowTracker
    from quadrants.tracking.setup import tracking_uri

    settings = EvalSettings.of(plan)
    with own_run(
        plan,
        target,
        role="eval",
        doing="evaluating",
        tags=eval_tags(settings, target),
        params=eval_params(settings, target),
        tracker=tracker,
    ) as (tracker, directory):
        # generation on train.device; results on the CPU
        model, tokenizer = load_policy(plan, target)
        with grader(plan) as answers:
            report = run_suite(
                TextEngine(model, tokenizer),
                answers,
                plan.eval,
                plan.task,
                tokenizer=tokenizer,
                prompt_cfg=plan.prompt,
                seed=plan.seed,
                out_dir=directory / "results",
            )
        tracker.log_metrics(report.metrics, step=target.step)
        tracker.log_params(too_long_params(report))
    print(format_table(report), flush=True)
    print(
        f"quadrants: {len(report.results)} benchmark(s) in {report.seconds:.1f} s; files "
        f"in {directory / 'results'}",
        flush=True,
    )
    if isinstance(tracker, MlflowTracker):
        from quadrants.tracking.links import experiment_id_of, link_lines

        uri = tracking_uri(plan)
        for line in link_lines(
            uri, experiment_id_of(uri, plan.study), runs={"eval run": tracker.run_id}
        ):
            print(line, flush=True)
    return report


def _sets_prompt(overrides: list[str]) -> bool:
    """Whether the command line sets the prompt format (`prompt=...` or `prompt.<key>=...`)."""
    return any(o.startswith(("prompt=", "prompt.")) for o in overrides)


def prompt_note(target: EvalTarget, overrides: list[str]) -> str | None:
    """A line for a model given by hub id or directory without `prompt=`: it has no run to take the
    prompt format from, so `auto` (its chat template) is used, which is not what a base model's
    runs train with (Qwen2.5-Math-7B: `prompt=qwen_math`); None otherwise."""
    if target.kind in ("checkpoint", "embedded") or _sets_prompt(overrides):
        return None
    return (
        "quadrants: no prompt= given for a model without a training run: prompts use prompt=auto "
        "(the chat template when the tokenizer has one). To compare with trained runs, pass the "
        "format they train with, e.g. prompt=qwen_math for Qwen2.5-Math-7B."
    )


if __name__ == "__main__":
    main()
