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
from typing import TYPE_CHECKING, Any

import torch

from quadrants.launch.loaded_run import grader, load_policy, own_run, refusal, target_parser
from quadrants.probe.branching import ProbeSettings
from quadrants.probe.measure import ProbeResult, probe_policy
from quadrants.probe.report import (
    format_summary,
    probe_key,
)
from quadrants.tracking.base import Tracker

log = logging.getLogger("quadrants.probe")

if TYPE_CHECKING:
    from quadrants.eval.target import EvalTarget
    from quadrants.run_plan import RunPlan


# --- standalone: python -m quadrants.probe ------------------------------------------------------


def probe_params(plan: RunPlan, target: EvalTarget) -> dict[str, Any]:
    from dataclasses import asdict

    params: dict[str, Any] = {
        "target": plan.eval.target or target.model,
        "model": target.model,
        "checkpoint_step": target.step,
        "seed": plan.seed,
    }
    params.update({f"probe.{k}": v for k, v in asdict(plan.probe).items()})
    params.update(
        {
            f"rollout.{k}": getattr(plan.rollout, k)
            for k in ("group_size", "temperature", "top_p", "max_new_tokens")
        }
    )
    return params


def run_probe(plan: RunPlan, target: EvalTarget, *, tracker: Tracker | None = None) -> ProbeResult:
    """Probe `target` as `plan.probe` says, in its own MLflow run (`own_run`); `plan` parsed and
    `target` resolved first (`quadrants.launch.evaluate.prepare`)."""
    from quadrants.eval.runner import EvalSettings, eval_tags
    from quadrants.rollout.registry import get_engine
    from quadrants.run.build import make_run_task

    with own_run(
        plan,
        target,
        role="probe",
        doing="probing",
        tags={**eval_tags(EvalSettings.of(plan), target), "quadrants.role": "probe"},
        params=probe_params(plan, target),
        tracker=tracker,
    ) as (tracker, directory):
        torch.manual_seed(plan.seed)
        model, tokenizer = load_policy(plan, target)
        # the run's task in the run's prompt format, as training renders it
        task = make_run_task(plan, tokenizer)
        engine = get_engine(plan.rollout.engine).sampler(plan.cfg, model, tokenizer)
        try:
            with grader(plan) as answers:
                result = probe_policy(
                    model,
                    tokenizer,
                    engine,
                    answers,
                    task,
                    ProbeSettings.of(plan),
                    out_dir=directory / "results",
                )
        finally:
            engine.close()
        tracker.log_metrics(result.metrics, step=target.step)
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
    return target_parser(
        "python -m quadrants.probe",
        "Measure the hindsight credit I(o_t; r | s_t) of response tokens by branching rollouts; "
        "logs an MLflow run (quadrants.role=probe), credit.csv and figures. See docs/probe.md.",
        "Hydra overrides, e.g. probe.positions=16 probe.continuations=8",
    )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from quadrants.launch.evaluate import prepare

    try:
        plan, target = prepare(args.target, list(args.overrides), task_used=True)
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors too; shown trimmed, like a sweep's
        sys.exit(refusal("probe", err))
    if args.cfg:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(OmegaConf.structured(plan.probe)))
        return
    run_probe(plan, target)
