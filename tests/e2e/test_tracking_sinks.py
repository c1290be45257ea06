"""`tracking=tensorboard` and `tracking.sinks=[tensorboard,wandb]` on a sweep, as a user types them:
the event files and the offline W&B run hold every metric MLflow holds, at the same steps."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY
from tests.event_files import tensorboard_scalars, wandb_offline_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def mlflow_series(cwd) -> dict[str, list[tuple[int, float]]]:
    """key -> [(step, value)] of the sweep's one training run (the sentinel left out)."""
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    (run,) = [r for r in client.search_runs([experiment.experiment_id]) if "steps" in r.data.params]
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
        if key != "tracking/step_logged"
    }


def test_tensorboard_and_wandb_get_what_mlflow_gets(tmp_path):
    env = commands.command_env(WANDB_SILENT="true")
    env.pop("WANDB_MODE", None)  # offline by default
    done = commands.run(
        "quadrants.sweep",
        "sweep_id=X",
        "train.steps=2",
        "tracking=tensorboard",
        "tracking.sinks=[mlflow,tensorboard,wandb]",
        *TINY,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "outputs" / "quadrants" / "X" / "default"
    expected = mlflow_series(tmp_path)
    assert {"train/reward_mean", "train/entropy"} <= set(expected) and len(expected) > 20
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    assert set(scalars) == set(expected)
    for key, series in expected.items():  # event files keep float32
        assert [s for s, _ in scalars[key]] == [s for s, _ in series], key
        assert [v for _, v in scalars[key]] == pytest.approx([v for _, v in series], rel=1e-6), key

    deadline = time.monotonic() + 60
    while not (run := wandb_offline_run(run_dir))["exited"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (run["project"], run["group"], run["name"]) == ("quadrants", "X", "default")
    history: dict[str, list[tuple[int, float]]] = {}
    for row in run["history"]:
        for key, value in row.items():
            if not key.startswith("_"):
                history.setdefault(key, []).append((row["_step"], value))
    assert history == expected
