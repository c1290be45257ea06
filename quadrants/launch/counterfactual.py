"""Entry point: `python -m quadrants.counterfactual RUN_DIR` — paired one-step counterfactuals of a
run's checkpoint (docs/counterfactual.md).

    # the newest checkpoint, every arm, 4 batches
    python -m quadrants.counterfactual outputs/quadrants/s1a2b3c4/default
    # one checkpoint, the quadrants against their random control matched to PHR
    python -m quadrants.counterfactual RUN_DIR --step 20 --arms PHR,NHR,random --match PHR

From the checkpoint, each of `--batches` rollout batches (the run's engine, task and grader, built
from the run's config.yaml by run/build.py) trains one copy of the same weights and optimizer
state per arm with the run's own update (train/update.py), and each arm's effect on the held-out
problems is measured (quadrants/run/one_step_arms.py). The table (CSV and printed), the per-batch
values and a figure go to `RUN_DIR/counterfactual/step_<N>/`, and to the run in MLflow: artifacts
under `counterfactual/step_<N>`, metrics `counterfactual/<arm>/<metric>` (mean, `_low`, `_high`)
at step N, keys the training run never logs.

Every argument, the checkpoint and the run's config are checked before anything is loaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from quadrants.launch.loaded_run import grader, use_threads
from quadrants.ops.quadrants import RandomControl, parse_match
from quadrants.run.one_step_arms import (
    ARMS,
    FIRST_ORDER,
    GRAD_NORM,
    METRICS,
    NULL,
    QUADRANT_ARMS,
    UPDATES,
    arm_quadrant,
    check_update,
    run_quadrant,
)
from quadrants.run_plan import RunPlan

log = logging.getLogger("quadrants.counterfactual")

DEFAULT_ARMS = ",".join(ARMS)


@dataclass(frozen=True)
class Request:
    """A checked command line: the run, its parsed config (`plan`), the checkpoint step and what to
    measure."""

    run_dir: Path
    plan: RunPlan
    step: int
    arms: tuple[str, ...]
    control: RandomControl | None
    batches: int
    problems: int
    samples: int
    confidence: float
    out: Path
    run_id: str | None
    mlflow: bool
    update: str = "adam"
    eta: float | None = None

    @property
    def prefix(self) -> str:
        """The MLflow key prefix and artifact folder name: `counterfactual` for the run's AdamW
        update (as before the other updates existed), `counterfactual_<update>` otherwise."""
        return "counterfactual" if self.update == "adam" else f"counterfactual_{self.update}"

    @property
    def folder(self) -> str:
        """The output folder's (and the artifacts') name: `step_N`, `step_N_<update>`."""
        return f"step_{self.step}" if self.update == "adam" else f"step_{self.step}_{self.update}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m quadrants.counterfactual",
        description="Paired one-step counterfactuals: from one checkpoint, one update per arm on "
        "the same rollout batch, measured on held-out problems, repeated over batches.",
        epilog="See docs/counterfactual.md.",
    )
    p.add_argument("run_dir", help="a training run directory (with checkpoints/ and config.yaml)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint (default: the newest)")
    p.add_argument(
        "--arms",
        default=DEFAULT_ARMS,
        help=f"comma-separated arms among {DEFAULT_ARMS} (default: all of them)",
    )
    p.add_argument(
        "--match",
        default=None,
        help="the arm the random control matches (e.g. PHR; default: the run's quadrant.match)",
    )
    p.add_argument(
        "--match-sign",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw the control per advantage sign (default: the run's quadrant.match_sign)",
    )
    p.add_argument(
        "--reweight",
        choices=("none", "ht"),
        default=None,
        help="Horvitz-Thompson weights on the control (default: the run's quadrant.reweight)",
    )
    p.add_argument(
        "--update",
        default="adam",
        help=f"how each arm steps, one of {', '.join(UPDATES)}: the run's AdamW update from the "
        "checkpoint's moments (adam, default), one plain SGD step at the run's learning rate "
        "(sgd), or theta - eta g/||g|| with one eta for every arm (normalized)",
    )
    p.add_argument(
        "--eta",
        type=float,
        default=None,
        help="--update normalized: the step's length (default: lr x ||g_all|| of each batch)",
    )
    p.add_argument("--batches", type=int, default=4, help="rollout batches (>= 2; default 4)")
    p.add_argument(
        "--problems", type=int, default=None, help="held-out problems (default: eval.problems)"
    )
    p.add_argument(
        "--samples", type=int, default=None, help="samples per problem (default: eval.samples)"
    )
    p.add_argument("--confidence", type=float, default=0.95, help="of the t-intervals")
    p.add_argument(
        "--out", default=None, help="output directory (default: RUN_DIR/counterfactual/step_N)"
    )
    p.add_argument("--no-mlflow", action="store_true", help="write the files only")
    return p


def _arms(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {a.lower(): a for a in ARMS}
    unknown = [n for n in names if n.lower() not in known]
    if not names or unknown:
        raise ValueError(
            f"--arms {text!r}: unknown arm(s) {unknown or '(none given)'}; choose among "
            f"{DEFAULT_ARMS}, e.g. --arms PHR,NHR,all"
        )
    arms = tuple(known[n.lower()] for n in names)
    twice = sorted({a for a in arms if arms.count(a) > 1})
    if twice:
        raise ValueError(f"--arms names {', '.join(twice)} more than once; give each arm once")
    return arms


def load_run_plan(run_dir: Path) -> RunPlan:
    """The run's resolved config (RUN_DIR/config.yaml, written by every sweep job), its `outputs`
    placed where this command runs, parsed once into its `RunPlan`."""

    from quadrants.launch.hydra_setup import saved_config, to_run_plan
    from quadrants.tracking.setup import run_outputs

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the run's config is unknown. Run the counterfactuals on runs "
            "started by `python -m quadrants.sweep` (it writes config.yaml into the run directory)"
        )
    merged = saved_config(path)
    # its store and folders wherever this command runs: `outputs` as the sweep was given it is
    # often relative to the directory the sweep ran in
    outputs = run_outputs(run_dir, merged.outputs, merged.study, merged.sweep_id)
    if outputs is not None:
        merged.outputs = str(outputs)
    return to_run_plan(merged)


def _checked_identity(plan: RunPlan, run_dir: Path, step: int) -> None:
    """Refuse when the checkpoint recorded another config than config.yaml (a resume that changed
    it with checkpoint.allow_config_change): the step would be measured under the wrong one."""
    from quadrants.run.checkpoint import IDENTITY_FILE
    from quadrants.run.resume_identity import config_changes, resume_identity

    path = run_dir / "checkpoints" / f"step_{step:07d}" / IDENTITY_FILE
    if not path.is_file():
        return
    changes = config_changes(json.loads(path.read_text())["config"], resume_identity(plan.cfg))
    if changes:
        lines = "; ".join(str(c) for c in changes)
        raise ValueError(
            f"the checkpoint of step {step} was trained with another config than "
            f"{run_dir / 'config.yaml'} ({lines}); pass --step of a checkpoint written before the "
            "change"
        )


def _run_id(run_dir: Path, state_run_id: str | None) -> str | None:
    """The run's MLflow run id: the checkpoint's, else run.json's, else the one its tracker's
    spool opened (`tracking/state.json`: a run whose store answered late writes no run.json
    before its first checkpoint)."""
    for path in (run_dir / "run.json", run_dir / "tracking" / "state.json"):
        if state_run_id is None and path.is_file():
            state_run_id = json.loads(path.read_text()).get("run_id")
    return state_run_id


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line parsed and its flags checked (`args.arms` the checked tuple of arms),
    nothing read; raises ValueError naming the flag and the fix (`prepare`;
    tests/unit/test_docs_commands.py parses every documented command with it)."""
    args = parser().parse_args(argv)
    if args.batches < 2:
        raise ValueError(
            f"--batches {args.batches}: the paired interval over batches needs at least 2; "
            "pass --batches 2 or more"
        )
    if not 0.0 < args.confidence < 1.0:
        raise ValueError(f"--confidence {args.confidence}: give a level in (0, 1), e.g. 0.95")
    for flag, value in (("--problems", args.problems), ("--samples", args.samples)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} {value}: give at least 1")
    check_update(args.update)
    if args.eta is not None:
        if args.update != "normalized":
            raise ValueError(
                f"--eta {args.eta} sets the normalized step's length; pass --update normalized "
                "with it, or leave --eta out"
            )
        if not args.eta > 0:
            raise ValueError(f"--eta {args.eta}: give a step length > 0 (e.g. --eta 1e-4)")
    args.arms = _arms(args.arms)
    return args


def prepare(argv: list[str]) -> Request:
    """Parse and check the command line, the checkpoint and the run's config; raises ValueError or
    FileNotFoundError naming the flag (or file) and the fix, before anything is loaded."""
    args = parse(argv)
    arms = args.arms
    run_dir = Path(args.run_dir).expanduser().resolve()
    from quadrants.run.checkpoint import complete_steps

    if not run_dir.is_dir():
        raise FileNotFoundError(f"RUN_DIR {run_dir} does not exist; pass a training run directory")
    steps = complete_steps(run_dir)
    if not steps:
        raise FileNotFoundError(
            f"RUN_DIR {run_dir} has no complete checkpoint under checkpoints/; train it with "
            "checkpoint.every > 0 (a checkpoint every N steps and at the end)"
        )
    step = steps[-1] if args.step is None else args.step
    if step not in steps:
        raise FileNotFoundError(
            f"--step {args.step}: {run_dir} has no checkpoint of step {args.step}; its "
            f"checkpoints are of steps {', '.join(map(str, steps))} (leave --step out for the "
            "newest)"
        )
    plan = load_run_plan(run_dir)
    _checked_identity(plan, run_dir, step)
    control = None
    if "random" in arms:
        match = args.match if args.match is not None else plan.quadrant.match
        if match is None:
            raise ValueError(
                "--arms includes random but names no arm for it to match: pass --match PHR (the "
                "arm whose token count the control draws on each batch), or leave random out"
            )
        try:
            parsed = parse_match(match)
        except ValueError as err:
            raise ValueError(str(err).replace("quadrant.match=", "--match ")) from None
        sign = plan.quadrant.match_sign if args.match_sign is None else args.match_sign
        reweight = plan.quadrant.reweight if args.reweight is None else args.reweight
        try:
            control = RandomControl(parsed, match_sign=bool(sign), reweight=reweight)
            # ht needs all tokens
            arm_quadrant("random", run_quadrant(plan.quadrant_settings), control)
        except ValueError as err:
            raise ValueError(
                f"the random arm: {err} (flags --match, --match-sign, --reweight)"
            ) from None
    elif args.match is not None:
        try:
            parse_match(args.match)
        except ValueError as err:
            raise ValueError(str(err).replace("quadrant.match=", "--match ")) from None
    from quadrants.run.checkpoint import load_step

    checkpoint = load_step(run_dir, step)
    assert checkpoint is not None
    run_id = _run_id(run_dir, checkpoint.run_id)
    mlflow = not args.no_mlflow and run_id is not None
    if mlflow:
        from quadrants.tracking.attach import run_problem
        from quadrants.tracking.setup import tracking_uri

        problem = run_problem(tracking_uri(plan), run_id)
        if problem is not None:
            raise ValueError(
                f"the run's MLflow store at {tracking_uri(plan)} cannot take the results: "
                f"{problem}; start it, or pass --no-mlflow to write the files only"
            )
    folder = f"step_{step}" if args.update == "adam" else f"step_{step}_{args.update}"
    out = Path(args.out) if args.out else run_dir / "counterfactual" / folder  # = Request.folder
    return Request(
        run_dir=run_dir,
        plan=plan,
        step=step,
        arms=arms,
        control=control,
        batches=args.batches,
        problems=args.problems or plan.eval.problems,
        samples=args.samples or plan.eval.samples,
        confidence=args.confidence,
        out=out,
        run_id=run_id,
        mlflow=mlflow,
        update=args.update,
        eta=args.eta,
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        request = prepare(argv)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"quadrants: invalid counterfactual, nothing was run.\n  {err}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # every arm pushes its weights twice (update, restore): the per-push check's line is noise here
    logging.getLogger("quadrants.rollout.identity_guard").setLevel(logging.WARNING)
    outcomes = run_request(request)
    report(request, outcomes)


def run_request(request: Request):  # noqa: ANN201 - run/one_step_arms.py Outcomes
    """Build the run's step from its plan, restore the checkpoint, and run the arms."""
    from quadrants.distributed.collectives import DistEnv
    from quadrants.eval.sizing import call_size
    from quadrants.objectives.control import restore_state
    from quadrants.rollout.engine import SamplingSettings
    from quadrants.run.build import build_context
    from quadrants.run.checkpoint import load_step, restore
    from quadrants.run.one_step_arms import Arm, Plan, run_arms

    plan = request.plan
    use_threads(plan)
    checkpoint = load_step(request.run_dir, request.step)
    assert checkpoint is not None
    with grader(plan) as answers:
        # the model on train.device, the CPU tuned for it
        ctx = build_context(plan, answers)
        try:
            restore(checkpoint, model=ctx.model, optimizer=ctx.optimizer, scheduler=ctx.scheduler)
            restore_state(ctx.objective.params, checkpoint.state.get("objective_state"))
            ctx.engine.sync_weights(ctx.model)
            log.info("restored %s (step %d)", checkpoint.path, checkpoint.step)
            run = run_quadrant(plan.quadrant_settings)
            arms = [Arm(name, arm_quadrant(name, run, request.control)) for name in request.arms]
            evaluation = plan.eval
            sampling = SamplingSettings(
                n=request.samples,
                temperature=evaluation.temperature,
                top_p=evaluation.top_p,
                max_new_tokens=evaluation.max_new_tokens,
            )
            problems = ctx.task.heldout(request.problems)
            # problems per generate call, as the in-training held-out check sizes them
            prompts = [p.prompt for p in problems]
            size = call_size(ctx.engine, prompts, evaluation.batch_size, request.samples, DistEnv())
            measured = Plan(
                step=request.step,
                seed=plan.seed,
                batches=request.batches,
                problems=problems,
                sampling=sampling,
                chunk=max(1, size // request.samples),
                update=request.update,
                eta=request.eta,
            )
            return run_arms(ctx, arms, measured, progress=log.info)
        finally:
            ctx.engine.close()


def report(request: Request, outcomes) -> None:  # noqa: ANN001 - run/one_step_arms.py Outcomes
    """Print the table, write the CSVs and the figure, and log them to the run in MLflow."""
    from quadrants.analysis import counterfactual_table as table
    from quadrants.analysis.figures import counterfactual_effects

    effects, arms, conf = outcomes.effects, list(request.arms), request.confidence
    lines = table.arm_lines(effects, arms, METRICS, conf)
    differences, shown = [], []
    # under AdamW every arm also takes the checkpoint's momentum step, which null takes alone:
    # each arm's own effect is its effect minus null's on the same batch
    for baseline in ([NULL] if request.update == "adam" and NULL in arms else []) + (
        ["random"] if "random" in arms else []
    ):
        differences += table.difference_lines(effects, arms, baseline, METRICS, conf)
        shown.append(baseline)
    checks = []
    if set(QUADRANT_ARMS) | {"all"} <= set(arms):
        # the first-order effects add up; the actual step's, shown beside them, need not (AdamW)
        checks = [
            table.additivity(effects, m)
            for m in (*FIRST_ORDER, "logl", "entropy")
            if not any(math.isnan(effects[b][a][m]) for b in effects for a in effects[b])
        ]
    title = (
        f"{request.run_dir.name} step {request.step}, --update {request.update}: one-step effects "
        f"on {request.problems} held-out problems x {request.samples} ({outcomes.correct} of "
        f"{outcomes.responses} responses correct), {request.batches} batches"
    )
    before = ", ".join(f"{k} {v:.4f}" for k, v in outcomes.before.items())
    printed = [title, f"before the update: {before}"]
    if outcomes.etas:
        printed.append(
            "normalized step length eta per batch (the same for every arm): "
            + ", ".join(f"{eta:.3e}" for eta in outcomes.etas.values())
            + (" (--eta)" if request.eta is not None else " (lr x ||g_all|| of the batch)")
        )
    printed += ["", table.to_text(lines, METRICS, conf, f"Δ ({GRAD_NORM}: ‖g_arm‖, not a Δ)")]
    for baseline in shown:
        part = [d for d in differences if d.arm.endswith(f" − {baseline}")]
        printed += ["", table.to_text(part, METRICS, conf, f"paired Δ − Δ {baseline}")]
    if checks:
        printed += ["", table.additivity_text(checks)]
    text = "\n".join(printed)
    print(text)
    out = request.out
    out.mkdir(parents=True, exist_ok=True)
    frame = table.to_frame(lines)
    files = [out / "effects.csv", out / "summary.txt"]
    frame.to_csv(files[0], index=False)
    files[1].write_text(text + "\n")
    if differences:
        files.append(out / "differences.csv")
        table.to_frame(differences).to_csv(files[-1], index=False)
    files += counterfactual_effects(frame, METRICS, out, title=title, confidence=conf)
    print(f"\nwritten: {', '.join(str(f) for f in files)}")
    if not request.mlflow:
        why = "--no-mlflow" if request.run_id else "the run recorded no MLflow run id"
        print(f"not logged to MLflow ({why})")
        return
    from quadrants.tracking.attach import log_to_run
    from quadrants.tracking.setup import tracking_uri

    metrics = {}
    for line in [*lines, *differences]:
        key = f"{request.prefix}/{line.arm.replace(' − ', '_minus_')}/{line.metric}"
        if line.estimate is not None:
            metrics[key] = line.estimate.mean
            if line.estimate.has_ci:
                metrics[f"{key}_low"] = line.estimate.low
                metrics[f"{key}_high"] = line.estimate.high
    for check in checks:
        metrics[f"{request.prefix}/additivity/{check.metric}_relative_residual"] = check.worst
    assert request.run_id is not None
    log_to_run(
        tracking_uri(request.plan),
        request.run_id,
        metrics,
        request.step,
        files,
        f"counterfactual/{request.folder}",
    )
    print(f"logged to MLflow run {request.run_id}: {len(metrics)} {request.prefix}/ metrics")


if __name__ == "__main__":
    main()
