"""Run the hindsight-credit probe on a target, in its own MLflow run (the probe itself: measure.py).

The command line (`main`), `python -m quadrants.probe TARGET [overrides...]`:

    # the newest checkpoint of a run
    python -m quadrants.probe outputs/quadrants/s1a2b3c4/quadrant=PHR
    # one checkpoint
    python -m quadrants.probe outputs/.../quadrant=PHR/checkpoints/step_0000040
    # the embedded policy
    python -m quadrants.probe tiny probe.positions=16 probe.continuations=16
    # print the config, run nothing
    python -m quadrants.probe tiny --cfg

TARGET is resolved as `python -m quadrants.evaluate` resolves it (quadrants.eval.target); overrides
are those of the training tree (`probe.*`, `rollout.*`, `tracking=server`, `seed=`).

`python -m quadrants.probe TARGET` runs `run_probe`: files under
``<outputs>/<study>/probe/<target>/<UTC time>/`` and an MLflow run tagged ``quadrants.role=probe``,
linked to the training run as evaluation runs are (``quadrants.source_run_id``). With
``probe.every=N`` the training loop calls `measure.probe_in_training` every N steps.
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from quadrants.cpu import tune_for
from quadrants.probe.measure import ProbeResult, probe_policy
from quadrants.probe.report import (
    format_summary,
    probe_key,
)
from quadrants.rewards.grader import Grader
from quadrants.tasks.read_log import files_read
from quadrants.tracking import provenance
from quadrants.tracking.base import Tracker

log = logging.getLogger("quadrants.probe")

if TYPE_CHECKING:
    from quadrants.config import RunConfig
    from quadrants.eval.target import EvalTarget


# --- standalone: python -m quadrants.probe ------------------------------------------------------


def probe_dir(cfg: RunConfig, target: EvalTarget) -> Path:
    """``<outputs>/<study>/probe/<target label>/<UTC time>``: one directory
    (and MLflow run) per command."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    label = "".join(ch if ch.isalnum() or ch in "-_.@=" else "_" for ch in target.label)
    return Path(cfg.outputs).expanduser().resolve() / cfg.study / "probe" / label / stamp


def probe_params(cfg: RunConfig, target: EvalTarget) -> dict[str, Any]:
    from dataclasses import asdict

    params: dict[str, Any] = {
        "target": cfg.eval.target or target.model,
        "model": target.model,
        "checkpoint_step": target.step,
        "seed": cfg.seed,
    }
    params.update({f"probe.{k}": v for k, v in asdict(cfg.probe).items()})
    params.update(
        {
            f"rollout.{k}": getattr(cfg.rollout, k)
            for k in ("group_size", "temperature", "top_p", "max_new_tokens")
        }
    )
    return params


def run_probe(cfg: RunConfig, target: EvalTarget, *, tracker: Tracker | None = None) -> ProbeResult:
    """Probe `target` as `cfg.probe` says, in its own MLflow run; `cfg` validated and
    `target` resolved first."""
    from quadrants.device import resolve_device
    from quadrants.eval.runner import GRADER_TIMEOUT_S, _grader_workers, eval_tags
    from quadrants.eval.target import load_target_policy
    from quadrants.rollout.registry import get_engine
    from quadrants.run.build import make_run_task
    from quadrants.tracking.mlflow_tracker import MlflowTracker
    from quadrants.tracking.setup import artifact_location, tracking_uri

    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    directory = probe_dir(cfg, target)
    directory.mkdir(parents=True, exist_ok=True)
    own_tracker = tracker is None
    if tracker is None:
        tags = {**eval_tags(cfg, target), "quadrants.role": "probe"}
        tracker = MlflowTracker(
            tracking_uri(cfg),
            cfg.study,
            run_name=f"probe {target.label}",
            tags=tags,
            spool_dir=directory / "tracking",
            artifact_location=artifact_location(cfg),
        )
    run_id = tracker.start()
    if isinstance(tracker, MlflowTracker):
        print(
            f"quadrants: probing {target.label} ({target.kind}); MLflow run {run_id} "
            f"at {tracking_uri(cfg)}",
            flush=True,
        )
    tracker.log_params(probe_params(cfg, target))
    tracker.log_params(provenance.params(files_read()))
    try:
        torch.manual_seed(cfg.seed)
        model, tokenizer = load_target_policy(target, dtype=cfg.model.dtype, seed=cfg.seed)
        device = resolve_device(cfg.train.device)
        tune_for(device, cfg.train.cpu, [model])  # nothing unless device is the CPU
        model = model.to(device)
        task = make_run_task(
            cfg, tokenizer
        )  # the run's task in the run's prompt format, as training renders it
        engine = get_engine(cfg.rollout.engine).sampler(cfg, model, tokenizer)
        try:
            with Grader(
                num_workers=_grader_workers(cfg.task.grader_workers),
                timeout_s=GRADER_TIMEOUT_S,
                extraction=cfg.task.answer_extraction,
            ) as grader:
                result = probe_policy(
                    model, tokenizer, engine, grader, task, cfg, out_dir=directory / "results"
                )
        finally:
            engine.close()
        tracker.log_metrics(result.metrics, step=target.step)
        tracker.log_params(provenance.params(files_read(), environment=False))  # the task's data
        tracker.log_artifact(directory / "results", "probe")
    except BaseException:
        if own_tracker:
            tracker.finish("FAILED")
        raise
    if own_tracker:
        tracker.finish("FINISHED")
    print(format_summary(result.metrics), flush=True)
    print(
        f"quadrants: probe took {result.seconds:.1f} s "
        f"({result.metrics[probe_key('rollouts')]:.0f} rollouts, "
        f"{result.metrics[probe_key('rollouts_per_s')]:.1f} rollouts/s); files in "
        f"{directory / 'results'}",
        flush=True,
    )
    return result


# --- the command line -------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The command line (`main`); its target and overrides are checked by
    `quadrants.launch.evaluate.prepare`, as `python -m quadrants.evaluate` checks them."""
    parser = argparse.ArgumentParser(
        prog="python -m quadrants.probe",
        description="Measure the hindsight credit I(o_t; r | s_t) of response tokens by "
        "branching rollouts; logs an MLflow run (quadrants.role=probe), credit.csv and "
        "figures. See docs/probe.md.",
    )
    parser.add_argument("target", help="run dir | checkpoint dir | model dir | tiny | hub id")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides, e.g. probe.positions=16 probe.continuations=8",
    )
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from quadrants.launch.evaluate import prepare

    try:
        cfg, target = prepare(args.target, list(args.overrides), task_used=True)
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors too; shown trimmed, like a sweep's
        message = str(err).split("\nConfig search path:")[0].strip()
        sys.exit(f"quadrants: invalid probe, nothing was generated.\n  {message}")
    if args.cfg:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(OmegaConf.structured(cfg.probe)))
        return
    run_probe(cfg, target)
