"""Detached SLURM submission: `python -m quadrants.submit [sweep args...]
launcher=slurm` returns at once.

    python -m quadrants.submit -m quadrant=PHR,NHR,PLR,NLR launcher=slurm tracking=server \\
        hydra.launcher.partition=gpu
    python -m quadrants.status outputs/quadrants/<sweep_id>          # SLURM states + latest metrics

Takes exactly the arguments of `python -m quadrants.sweep` (`-m` is implied) and runs the same jobs
in the same run directories (same sweep id), but instead of Hydra's launcher blocking until the
array ends, it composes and validates every job itself (launch/hydra_setup.py), submits them as ONE
job array with submitit, using the launcher profile's settings (`hydra.launcher.*` of
`launcher=slurm` or `slurm_dev`), writes the sweep manifest (`<sweep dir>/sweep.json`, see
launch/sweep_manifest.py) and exits. Nothing in the sweep depends on this process afterwards: each
job finds its run directory, checkpoint and MLflow run from its overrides; the last job to end
closes the MLflow parent run, and `quadrants.status` closes it if jobs die without getting there.

Requeue works as with the blocking launcher: on the time-limit/preemption signal the job checkpoints
its last completed step, submitit requeues it (up to `max_num_timeout` time-outs), and it resumes.
Re-running the same submit command after jobs failed or were cancelled resubmits every job: finished
ones end at once (nothing left to train), the others resume from their checkpoints.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from quadrants.launch.hydra_setup import (
    CONFIG_DIR,
    _checked,
    _compose_job,
    expand_jobs,
    hydra_argv,
    name_runs_by_swept_keys,
    preflight,
    prints_only,
    register,
    split_hydra_argv,
    to_run_plan,
    with_sweep_id,
)
from quadrants.launch.slurm_host import SLURM_LAUNCHER, no_slurm_message, slurm_problem
from quadrants.launch.sweep_manifest import (
    JobRecord,
    Manifest,
    close_parent_if_done,
    read_record,
    write_manifest,
)
from quadrants.run_plan import RunPlan

log = logging.getLogger("quadrants.submit")

# hydra-submitit-launcher's BaseQueueConf keys: passed to submitit as they are; every other launcher
# key is SLURM-specific and gets the `slurm_` prefix (as the launcher itself does).
_BASE_KEYS = {
    "timeout_min",
    "cpus_per_task",
    "gpus_per_node",
    "tasks_per_node",
    "mem_gb",
    "nodes",
    "name",
    "stderr_to_stdout",
}


class SubmissionRefused(RuntimeError):
    """SLURM (sbatch) refused the job array; the message is SLURM's reason."""


@dataclass(frozen=True)
class PlannedJob:
    overrides: list[str]  # the job's task overrides (as Hydra's sweeper expands them)
    name: str  # run name = job directory name
    run_dir: str


@dataclass(frozen=True)
class SweepPlan:
    """Everything the submission needs, composed and validated before anything is submitted."""

    study: str
    sweep_id: str
    sweep_dir: Path
    tracking_uri: str
    artifact_location: str | None
    model: str
    hydra_overrides: list[str]  # hydra.* overrides of the command: every job is composed with them
    launcher: dict[str, Any]  # the resolved hydra.launcher node
    jobs: list[PlannedJob]
    # the headline metric keys of its runs (tracking/headline.py): the columns of its runs-page view
    headline: tuple[str, ...] = ()


def plan_sweep(argv: list[str]) -> SweepPlan:
    """Compose the command's jobs as Hydra's multirun would (raises ValueError naming the job)."""
    from quadrants.tracking.headline import headline_sources
    from quadrants.tracking.setup import artifact_location, sweep_dir, tracking_uri

    register()
    parsed = OverridesParser.create().parse_overrides(split_hydra_argv(argv)[1])
    hydra_overrides = [o.input_line for o in parsed if o.is_hydra_override()]
    task = [o.input_line for o in parsed if not o.is_hydra_override()]
    fixed = [
        o.input_line for o in parsed if not o.is_hydra_override() and not o.is_sweep_override()
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        base = _checked(
            fixed,
            lambda: compose(
                config_name="config", overrides=[*hydra_overrides, *fixed], return_hydra_config=True
            ),
        )
        params = base.hydra.sweeper.get("params")
        params = OmegaConf.to_container(params, resolve=False) if params else {}
        HydraConfig.instance().set_config(base)
        launcher = _checked(
            fixed, lambda: OmegaConf.to_container(base.hydra.launcher, resolve=True)
        )
        planned, first = [], None
        for job in _checked(task, lambda: expand_jobs(task, params)):
            cfg = _checked(job, lambda job=job: _compose_job([*hydra_overrides, *job]))
            run = _checked(job, lambda cfg=cfg: to_run_plan(cfg))
            planned.append(PlannedJob(list(job), Path(str(run.run_dir)).name, str(run.run_dir)))
            first = first or run
    assert first is not None
    return SweepPlan(
        study=first.study,
        sweep_id=first.sweep_id,
        sweep_dir=sweep_dir(first),
        tracking_uri=tracking_uri(first),
        artifact_location=artifact_location(first),
        model=first.model.name_or_path,
        hydra_overrides=hydra_overrides,
        launcher=launcher,
        jobs=planned,
        headline=tuple(
            headline_sources(first.eval.benchmarks, first.task.name, first.eval.samples)
        ),
    )


def make_executor(launcher: dict[str, Any]) -> submitit.AutoExecutor:
    """A submitit SLURM executor set up from a `hydra.launcher` node, as
    hydra-submitit-launcher does."""
    params = {k: v for k, v in launcher.items() if k != "_target_"}
    folder = params.pop("submitit_folder")
    executor = submitit.AutoExecutor(
        folder=folder, cluster="slurm", slurm_max_num_timeout=params.pop("max_num_timeout")
    )
    executor.update_parameters(
        **{k if k in _BASE_KEYS else f"slurm_{k}": v for k, v in params.items()}
    )
    return executor


class DetachedJob(submitit.helpers.Checkpointable):
    """What runs on the node: compose the job from its overrides, train, close the parent if last.

    Checkpointable: on the time-limit/preemption signal submitit requeues it with the same overrides
    (the training loop has checkpointed the last completed step by then)."""

    def __init__(self, parent_run_id: str | None, jobs: int) -> None:
        self.parent_run_id = parent_run_id
        self.jobs = jobs

    def __call__(self, overrides: list[str]) -> dict[str, Any]:
        from quadrants.launch.job import run_job
        from quadrants.tracking.setup import tracking_uri

        register()
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            job_cfg = _compose_job(overrides)
            run = to_run_plan(job_cfg)
            _log_to(Path(str(run.run_dir)) / "quadrants.log")
            try:
                result = run_job(job_cfg, parent_run_id=self.parent_run_id, plan=run)
            except Exception:
                self._close_parent(tracking_uri(run), run)
                raise
            # (SystemExit: requeued or cancelled; the run and the parent stay open)
            self._close_parent(tracking_uri(run), run)
            return result

    def _close_parent(self, uri: str, run: RunPlan) -> None:
        """Close the parent if this was the sweep's last job; then put the
        summary and report on it."""
        try:
            if close_parent_if_done(uri, self.parent_run_id, self.jobs) is None:
                return
        except Exception as err:  # noqa: BLE001 - bookkeeping never fails a finished job
            log.warning(
                "could not check/close the sweep's parent run %s: %s", self.parent_run_id, err
            )
            return
        try:
            from quadrants.launch.sweep_report import report_on_parent

            out = Path(str(run.run_dir)).parent / "analysis" if run.tracking.report else None
            report_on_parent(uri, run.study, run.sweep_id, str(self.parent_run_id), out)
        except Exception as err:  # noqa: BLE001
            log.warning(
                "could not put the summary and analysis report on the parent run %s: %s",
                self.parent_run_id,
                err,
            )


def _log_to(path: Path) -> None:
    """Hydra's job logging, without Hydra's launcher: INFO to stderr (submitit's log) and the
    run's log, each line naming the run (its directory's name, as sweeps/config.yaml's
    `hydra.job_logging` does for the sweep's jobs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run = path.parent.name.replace("%", "%%")
    fmt = logging.Formatter(f"[%(asctime)s][{run}][%(name)s][%(levelname)s] - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(path)):
        handler.setFormatter(fmt)
        root.addHandler(handler)


def submit(plan: SweepPlan, parent_run_id: str | None) -> list[Any]:
    """Submit the plan's jobs as one array; return submitit's jobs. Raises SubmissionRefused."""
    executor = make_executor(plan.launcher)
    spool = Path(str(plan.launcher["submitit_folder"]).split("%", 1)[0])
    before = set(spool.iterdir()) if spool.is_dir() else set()
    job_args = [[*plan.hydra_overrides, *job.overrides] for job in plan.jobs]
    try:
        return executor.map_array(DetachedJob(parent_run_id, len(plan.jobs)), job_args)
    except (
        submitit.core.utils.FailedJobError,
        submitit.core.utils.FailedSubmissionError,
        OSError,
    ) as err:
        # the pickles and sbatch script of the refused array are of no use:
        # leave the folder as it was
        for path in (set(spool.iterdir()) if spool.is_dir() else set()) - before:
            if path.is_file():
                path.unlink(missing_ok=True)
        reason = str(err).strip() or type(err).__name__
        raise SubmissionRefused(reason) from None


def _open_parent(plan: SweepPlan) -> tuple[str | None, bool]:
    """(the sweep's parent run id, whether this call created it)."""
    from quadrants.tracking.mlflow_tracker import start_parent_run

    before = read_record(plan.sweep_dir).get("parent_run_id")
    try:
        parent = start_parent_run(
            plan.tracking_uri,
            plan.study,
            plan.sweep_id,
            {"quadrants.study": plan.study, "quadrants.sweep_id": plan.sweep_id},
            artifact_location=plan.artifact_location,
        )
    except Exception as err:  # noqa: BLE001 - tracking trouble never stops a sweep
        log.warning(
            "could not open the sweep's parent run at %s (%s); runs will have no parent",
            plan.tracking_uri,
            err,
        )
        return None, False
    return parent, parent != before


def _close_parent_failed(plan: SweepPlan, parent: str, *, delete: bool) -> None:
    """End the parent run FAILED; `delete` it too when this submission created
    it (no trace is left)."""
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(plan.tracking_uri)
        client.set_terminated(parent, "FAILED")
        if delete:
            client.delete_run(parent)
    except Exception as err:  # noqa: BLE001
        log.warning("could not close the parent run %s of the failed submission: %s", parent, err)


def main(argv: list[str] | None = None) -> None:
    argv = hydra_argv(
        list(sys.argv[1:] if argv is None else argv)
    )  # Hydra's flags may stand anywhere
    if prints_only(
        argv
    ):  # --cfg job, --help, --info: Hydra prints (it refuses them with -m); nothing is submitted
        from quadrants.launch.sweep import main as sweep_main

        sweep_main([a for a in argv if a not in ("-m", "--multirun")])
        return
    if "-m" not in argv and "--multirun" not in argv:
        argv = ["-m", *argv]
    argv = name_runs_by_swept_keys(with_sweep_id(argv))
    try:
        preflight(argv)
        plan = plan_sweep(argv)
    except ValueError as err:
        sys.exit(f"quadrants: invalid configuration, nothing was submitted.\n  {err}")
    if plan.launcher.get("_target_") != SLURM_LAUNCHER:
        sys.exit(
            "quadrants: detached submission needs a SLURM launcher profile, "
            "nothing was submitted.\n  add launcher=slurm (a cluster) or "
            "launcher=slurm_dev (slurm/devcluster.sh)"
        )
    problem = slurm_problem()
    if problem is not None:
        sys.exit(no_slurm_message(problem))
    if plan.model == "tiny":
        from quadrants.models.loading import load_policy

        load_policy("tiny")  # build and cache the base policy once, not in every job
    new_dir = not plan.sweep_dir.exists()
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    parent, created = _open_parent(plan)
    try:
        jobs = submit(plan, parent)
    except BaseException as err:
        if parent:  # a parent opened for a submission that failed is never left RUNNING
            _close_parent_failed(plan, parent, delete=created)
        if not isinstance(err, SubmissionRefused):
            raise
        if new_dir:  # leave no trace of a sweep that never was (only empty directories are removed)
            for empty in (plan.sweep_dir / ".submitit", plan.sweep_dir):
                if empty.is_dir() and not any(empty.iterdir()):
                    empty.rmdir()
        reason = "\n  ".join(str(err).splitlines())
        sys.exit(
            "quadrants: SLURM refused the sweep; nothing was submitted and no manifest was "
            f"written.\n  {reason}\n  check the hydra.launcher.* settings (partition, account, "
            "qos, gpus_per_node, mem_gb, timeout_min; `sinfo` lists partitions and their limits)"
        )
    previous = read_record(plan.sweep_dir)
    history = list(previous.get("previous_submissions", []))
    if previous.get("array_job_id"):
        history.append({k: previous.get(k) for k in ("array_job_id", "submitted_at", "command")})
    manifest = Manifest(
        sweep_id=plan.sweep_id,
        study=plan.study,
        sweep_dir=str(plan.sweep_dir),
        tracking_uri=plan.tracking_uri,
        parent_run_id=parent,
        command=argv,
        array_job_id=str(jobs[0].job_id).split("_")[0],
        submitted_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        slurm_conf=os.environ.get("SLURM_CONF"),
        jobs=[
            JobRecord(
                index=i,
                job_id=str(job.job_id),
                name=planned.name,
                overrides=planned.overrides,
                run_dir=planned.run_dir,
                stdout=str(job.paths.stdout),
                stderr=str(job.paths.stderr),
            )
            for i, (job, planned) in enumerate(zip(jobs, plan.jobs))
        ],
        previous_submissions=history,
    )
    path = write_manifest(manifest)
    print(
        f"quadrants: submitted {len(jobs)} jobs as SLURM array {manifest.array_job_id} "
        f"(sweep {plan.sweep_id}, tracking to {plan.tracking_uri})"
    )
    for record in manifest.jobs:
        print(f"  {record.job_id:>12}  {record.name}")
    print(
        f"quadrants: manifest {path}\nquadrants: status with  python -m "
        f"quadrants.status {plan.sweep_dir}"
    )
    from quadrants.tracking.links import experiment_id_of, link_lines
    from quadrants.tracking.view import publish_view

    experiment_id = experiment_id_of(plan.tracking_uri, plan.study)
    view = (
        publish_view(plan.tracking_uri, experiment_id, plan.sweep_id, plan.headline)
        if experiment_id is not None
        else None
    )
    for line in link_lines(
        plan.tracking_uri,
        experiment_id,
        sweep_id=plan.sweep_id,
        view=view,
        runs={"parent run": parent},
    ):
        print(line)


if __name__ == "__main__":
    main()
