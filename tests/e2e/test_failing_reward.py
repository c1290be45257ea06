"""A reward that cannot be computed stops the run (issue 61, item 1): a user's `task.reward` module
written into a temporary directory, as a user's own is, with four real ways to fail (it raises, it
returns NaN, it takes the wrong arguments, its module fails to import) refused at compose time with
nothing written; and one that passes the compose-time call but fails on every completion of
training, stopped at step 1 with a non-zero exit, its checkpoint saved and its MLflow run FAILED.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = [pytest.mark.integration]

MODULES = {
    "raising": """
        def reward(completion, answer):
            return int(answer) / 0 == 1
    """,
    "nan": """
        def reward(completion, answer):
            return float("nan")
    """,
    "one_argument": """
        def reward(completion):
            return True
    """,
    "broken_import": """
        import json


        def helper():
            return 1


        import no_such_package_for_quadrants_tests  # noqa: line 9 of the file


        def reward(completion, answer):
            return True
    """,
    # right on the compose-time call (the gold boxed), an exception on anything the model writes
    "training_only": """
        def reward(completion, answer):
            if completion == "\\\\boxed{" + answer + "}":
                return True
            raise KeyError("grading table has no entry for " + repr(completion[:10]))
    """,
}


def _sweep(tmp_path, module: str, *extra: str):
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / f"{module}.py").write_text(textwrap.dedent(MODULES[module]))
    path = os.pathsep.join(p for p in (str(tmp_path / "pkg"), os.environ.get("PYTHONPATH")) if p)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    done = commands.run(
        "quadrants.sweep",
        "sweep_id=X",
        f"task.reward={module}:reward",
        *TINY,
        *extra,
        cwd=work,
        env=commands.command_env(PYTHONPATH=path),
    )
    return done, work


@pytest.mark.parametrize(
    ("module", "said"),
    [
        ("raising", "raised ZeroDivisionError: division by zero at "),
        ("nan", "returned nan (not a finite number)"),
        ("one_argument", "cannot be called as reward(completion, answer)"),
        (
            "broken_import",
            "module 'broken_import' was found but raised while importing: ModuleNotFoundError: "
            "No module named 'no_such_package_for_quadrants_tests'",
        ),
    ],
)
def test_a_reward_that_cannot_be_computed_is_refused_before_anything_is_written(
    tmp_path, module, said
):
    done, work = _sweep(tmp_path, module, "train.steps=1")
    assert done.returncode != 0
    assert "task.reward=" + module + ":reward" in done.stderr, done.stderr[-3000:]
    assert said in done.stderr, done.stderr[-3000:]
    assert "PYTHONPATH" not in done.stderr  # the module was found: its own error, not the path
    assert list(work.iterdir()) == []  # no outputs/, no store, no run directory
    if module == "broken_import":  # the user's line, not the import machinery's
        assert f"{tmp_path / 'pkg' / 'broken_import.py'}:9" in done.stderr


@pytest.mark.slow
def test_a_reward_failing_on_every_completion_stops_the_run_at_step_1_failed(tmp_path):
    done, work = _sweep(tmp_path, "training_only", "train.steps=3", "checkpoint.every=5")
    assert done.returncode != 0, done.stderr[-3000:]
    assert "GradingFailed" in done.stderr and "step 1: task.reward=training_only:reward" in (
        done.stderr
    ), done.stderr[-3000:]
    # the reward's own exception, logged once (Hydra's job log goes to stdout)
    assert "grading table has no entry" in done.stdout + done.stderr
    (run_dir,) = (work / "outputs" / "quadrants" / "X").iterdir()
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step_0000001"], checkpoints  # saved at the failing step, not at 5
    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    runs = client.search_runs([experiment.experiment_id])
    (run,) = [r for r in runs if r.data.tags.get("quadrants.role") == "train"]
    assert run.info.status == "FAILED"
    errors = client.get_metric_history(run.info.run_id, "train/outcome/error_frac")
    assert [(m.step, m.value) for m in errors] == [(1, 1.0)]  # one step, every completion error
    assert all(r.info.status != "FINISHED" for r in runs)  # nor the sweep's parent
