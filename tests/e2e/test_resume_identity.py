"""A resume under a changed configuration, as a user makes it: the same command with `sweep_id=X`
twice, the second with other overrides, which names the same run directory (sweeps/config.yaml:
`run_dir` is outputs/study/sweep_id/<the swept overrides>, and a single run's shared overrides are
left out of it). Refused before anything is written; with the opt-in, recorded on the MLflow run."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def sweep(cwd: Path, *args: str):
    return commands.run("quadrants.sweep", *args, *TINY, cwd=cwd)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def the_run(cwd: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if "steps" in r.data.params]
    assert len(runs) == 1, [r.data.params for r in runs]
    return client, runs[0]


def test_a_changed_resume_is_refused_and_the_opt_in_is_recorded(tmp_path):
    first = sweep(tmp_path, "sweep_id=X", "train.steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "outputs" / "quadrants" / "X" / "default"
    assert (run_dir / "checkpoints" / "step_0000002" / "config.json").exists()
    before = tree(tmp_path)

    changed = ["sweep_id=X", "train.steps=4", "train.lr=1e-3", "objective=grpo"]
    refused = sweep(tmp_path, *changed)
    assert refused.returncode != 0
    said = refused.stderr
    assert "nothing was launched" in said and "checkpoint of step 2" in said, said[-3000:]
    assert "train.lr: 0.0001 → 0.001" in said and "objective.name: dapo → grpo" in said
    assert "checkpoint.allow_config_change=true" in said
    assert tree(tmp_path) == before  # no file written or touched, the MLflow store included

    allowed = sweep(tmp_path, *changed, "checkpoint.allow_config_change=true")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    client, run = the_run(tmp_path)
    params = run.data.params
    assert params["config_change/2/train.lr"] == "0.0001 → 0.001"
    assert params["config_change/2/objective.name"] == "dapo → grpo"
    assert params["objective"] == "dapo" and params["lr"] == "0.0001"  # the first steps' values
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/step"))
    assert steps == [1, 2, 3, 4]  # resumed, not restarted
    assert "name: dapo" in (run_dir / "config.yaml").read_text()  # the first config, kept
    assert "name: grpo" in (run_dir / "config.2.yaml").read_text()  # the change after step 2
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "config")}
    assert artifacts == {"config/config.yaml", "config/config.2.yaml"}
