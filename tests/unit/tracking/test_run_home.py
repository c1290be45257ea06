"""Commands that read a training run (evaluate, probe, the counterfactual) log into the run's own
store and folders, whatever directory they run in (tracking/setup.py `run_outputs`,
launch/evaluate.py `in_the_runs_store`). A run's config.yaml keeps `outputs` as the sweep was given
it, usually the relative `outputs`; read from another directory it would name a store there."""

from __future__ import annotations

from pathlib import Path

from quadrants.config import RunConfig, TrackingConfig
from quadrants.eval.target import EvalTarget
from quadrants.launch.evaluate import in_the_runs_store
from quadrants.tracking.setup import run_outputs, tracking_uri


def _run_dir(root: Path) -> Path:
    # the sweep's layout: <outputs>/<study>/<sweep_id>/<job>
    run_dir = root / "outs" / "mystudy" / "s1a2" / "quadrant=PHR,seed=0"
    (run_dir / "checkpoints" / "step_0000004").mkdir(parents=True)
    return run_dir


def test_the_outputs_folder_is_found_from_the_run_directorys_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = _run_dir(tmp_path / "a")
    # relative `outputs` as given to the sweep: the layout says where it was
    assert run_outputs(run_dir, "outs", "mystudy", "s1a2") == tmp_path / "a" / "outs"
    # the tree moved after the run (config.yaml's absolute outputs is stale): the layout wins
    assert run_outputs(run_dir, "/gone/outs", "mystudy", "s1a2") == tmp_path / "a" / "outs"
    # a run directory outside the layout (another study name on the path): an absolute outputs is
    # taken as it is, a relative one cannot be placed
    assert run_outputs(run_dir, "/data/outs", "other", "s1a2") == Path("/data/outs")
    assert run_outputs(run_dir, "outs", "other", "s1a2") is None
    assert run_outputs(run_dir, "outs", "mystudy", None) is None


def _target(run_dir: Path) -> EvalTarget:
    return EvalTarget(
        kind="checkpoint",
        label="x",
        model="tiny",
        checkpoint=run_dir / "checkpoints" / "step_0000004" / "state.pt",
        step=4,
    )


def test_evaluate_and_probe_log_into_the_runs_store_unless_told_otherwise(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    run_dir = _run_dir(tmp_path)
    run = {"study": "mystudy", "sweep_id": "s1a2", "outputs": "outs", "tracking": {"uri": None}}
    cfg = in_the_runs_store(RunConfig(), run, _target(run_dir), [])
    assert cfg.outputs == str(tmp_path / "outs") and cfg.study == "mystudy"
    # the default store is the run's mlflow.db, not ./outputs/mlflow.db of the scratch directory
    assert tracking_uri(cfg) == f"sqlite:///{tmp_path / 'outs' / 'mlflow.db'}"

    # a run tracked to a server: the same server
    served = {**run, "tracking": {"uri": "http://10.0.0.5:5000"}}
    assert tracking_uri(in_the_runs_store(RunConfig(), served, _target(run_dir), [])) == (
        "http://10.0.0.5:5000"
    )

    # the command's own choice of any of the three keys keeps the command's config whole
    for override in ("outputs=/elsewhere", "study=probes", "tracking.uri=sqlite:////x/m.db"):
        mine = RunConfig(tracking=TrackingConfig(uri="sqlite:////x/m.db"))
        assert in_the_runs_store(mine, run, _target(run_dir), [override]) is mine, override
    # a run directory the layout cannot place: the command's defaults
    moved = {**run, "study": "renamed"}
    assert in_the_runs_store(RunConfig(), moved, _target(run_dir), []) == RunConfig()
