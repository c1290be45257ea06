"""A real sqlite MLflow store filled with hand-made runs of a small quadrant study.

The sweep "sw1" in experiment "study" has a parent run and five children (the numbers every table
test checks by hand), each evaluated at step 0 (a decoy: 0.1 everywhere) and at step 60 (the final
evaluation the table must use):

    run        aime24 avg/pass@4   math500 avg/pass@4
    PHR s0       0.50 / 0.80         0.70 / 0.90
    PHR s1       0.60 / 0.90         0.80 / 1.00
    NHR s0       0.40 / 0.70         0.75 / 0.95
    NHR s1       0.40 / 0.90         0.85 / 0.80
    PLR s0       0.30 / 0.60         0.90 / 0.95
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

FINAL = {
    ("PHR", 0): {"aime24": (0.50, 0.80), "math500": (0.70, 0.90)},
    ("PHR", 1): {"aime24": (0.60, 0.90), "math500": (0.80, 1.00)},
    ("NHR", 0): {"aime24": (0.40, 0.70), "math500": (0.75, 0.95)},
    ("NHR", 1): {"aime24": (0.40, 0.90), "math500": (0.85, 0.80)},
    ("PLR", 0): {"aime24": (0.30, 0.60), "math500": (0.90, 0.95)},
}


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sqlite file with MLflow's schema: creating one costs seconds of migrations, copying it nothing."""
    path = tmp_path_factory.mktemp("analysis_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def new_store(template: Path, directory: Path) -> tuple[str, MlflowClient]:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, directory / "mlflow.db")
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    return uri, MlflowClient(uri)


def make_parent(
    client: MlflowClient, directory: Path, experiment: str = "study", sweep: str = "sw1"
) -> tuple[str, str]:
    """(experiment id, parent run id) of a sweep, artifacts under `directory`/artifacts."""
    found = client.get_experiment_by_name(experiment)
    exp_id = (
        found.experiment_id
        if found
        else client.create_experiment(
            experiment, artifact_location=(directory / "artifacts").as_uri()
        )
    )
    parent = client.create_run(
        exp_id,
        run_name=sweep,
        tags={
            "quadrants.sweep_id": sweep,
            "quadrants.study": experiment,
            "quadrants.role": "sweep_parent",
        },
    )
    return exp_id, parent.info.run_id


def make_child(
    client: MlflowClient,
    exp_id: str,
    parent: str,
    quadrant: str,
    seed: int,
    metrics: dict[str, float],
    *,
    step: int = 60,
    sweep: str = "sw1",
    objective: str = "dapo",
    status: str = "FINISHED",
    name: str | None = None,
) -> str:
    """A child run with the sweep's tags and `metrics` logged at `step` (plus the 0.1 decoys at step 0)."""
    tags = {
        "quadrants.sweep_id": sweep,
        "quadrants.study": "study",
        "quadrant": quadrant,
        "objective": objective,
        "seed": str(seed),
        "model": "tiny",
        "task": "arithmetic",
        "mlflow.parentRunId": parent,
    }
    run = client.create_run(exp_id, run_name=name or f"quadrant={quadrant},seed={seed}", tags=tags)
    run_id = run.info.run_id
    batch = [Metric(key, 0.1, 0, 0) for key in metrics if key.startswith("eval/")]
    batch += [Metric(key, value, 1, step) for key, value in metrics.items()]
    client.log_batch(run_id, metrics=batch)
    client.set_terminated(run_id, status)
    return run_id


def eval_metrics(values: dict[str, tuple[float, float]], k: int = 4) -> dict[str, float]:
    out = {}
    for bench, (avg, pas) in values.items():
        out[f"eval/{bench}/avg_at_{k}"] = avg
        out[f"eval/{bench}/pass_at_{k}"] = pas
    return out


def sample_file(directory: Path, step: int, advantage_sign: float) -> Path:
    """A samples artifact like quadrants.run.samples writes: two responses of one prompt."""
    path = directory / f"step_{step:06d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens_good = [
        {"text": "1", "entropy": 0.9, "quadrant": "PHR"},
        {"text": "<", "entropy": 0.01, "quadrant": "PLR"},
    ]
    tokens_bad = [
        {"text": "7", "entropy": 1.2, "quadrant": "NHR"},
        {"text": "&", "entropy": 0.02, "quadrant": "NLR"},
        {"text": "\n", "entropy": 0.0, "quadrant": "NLR"},
    ]
    samples = [
        {
            "group": 0,
            "prompt": "12+3=",
            "response": "1<",
            "reward": 1.0,
            "outcome": "correct",
            "advantage": 0.7 * advantage_sign,
            "entropy_threshold": 0.5,
            "tokens": tokens_good,
        },
        {
            "group": 0,
            "prompt": "12+3=",
            "response": "7&\n",
            "reward": 0.0,
            "outcome": "wrong",
            "advantage": -0.7 * advantage_sign,
            "entropy_threshold": 0.5,
            "tokens": tokens_bad,
        },
    ]
    path.write_text(json.dumps({"step": step, "samples": samples}))
    return path


@pytest.fixture(scope="module")
def study_store(template_db: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The study of the module docstring, with training curves, dlogp and entropy-change telemetry,
    samples, one (n, c) table."""
    directory = tmp_path_factory.mktemp("study")
    uri, client = new_store(template_db, directory)
    exp_id, parent = make_parent(client, directory)
    run_ids = {}
    for (quadrant, seed), values in FINAL.items():
        run_id = make_child(client, exp_id, parent, quadrant, seed, eval_metrics(values))
        curves = []
        for step in (1, 2, 3):
            curves += [
                Metric("train/solve_rate", 0.1 * step + 0.01 * seed, 0, step),
                Metric("train/entropy", 0.5 / step, 0, step),
            ]
            curves += [
                Metric(f"train/quadrant/{q}/{stat}", value, 0, step)
                for i, q in enumerate(("PHR", "PLR", "NHR", "NLR"))
                for stat, value in (
                    ("dlogp_abs", 10.0 ** -(i + step)),
                    ("cov", 0.1 * step * (i + 1)),
                    ("entropy_change", -0.01 * step * (i + 1)),
                    ("flip_frac_shared", 0.1 * (i + 1)),
                    ("flip_frac_unique", 0.05 * step),
                    ("dlogp_signed_shared", -0.001 * step),
                    ("dlogp_signed_unique", 0.002 * (i + 1)),
                )
            ]
        client.log_batch(run_id, metrics=curves)
        local = directory / "local" / run_id
        client.log_artifact(run_id, str(sample_file(local / "samples", 3, 1.0)), "samples")
        run_ids[(quadrant, seed)] = run_id
    # PHR s0 also has the runner's per-problem tables for aime24 (eval/step_<N>/<bench>/counts.csv and
    # counts.json): at step 60 (n, c) = (4, 2), (4, 0); at step 0 a decoy (4, 4), (4, 4)
    for step, rows in ((60, "0,4,2\n1,4,0\n"), (0, "0,4,4\n1,4,4\n")):
        folder = directory / "local" / f"step_{step}" / "aime24"
        folder.mkdir(parents=True)
        (folder / "counts.csv").write_text("problem_id,n,c,wrong\n" + rows)
        (folder / "counts.json").write_text(
            json.dumps({"benchmark": "aime24", "problems": [{"n": 9, "c": 9}]})
        )
        client.log_artifacts(run_ids[("PHR", 0)], str(folder), f"eval/step_{step:07d}/aime24")
    return {
        "uri": uri,
        "client": client,
        "parent": parent,
        "runs": run_ids,
        "dir": directory,
        "exp_id": exp_id,
    }


@pytest.fixture(scope="module")
def study_frames(study_store: dict):
    """(runset, eval points) of the study's sweep sw1, read back through analysis.load."""
    from quadrants.analysis import load

    client = study_store["client"]
    runset = load.select_runs(client, load.Selection(study_store["uri"], "study", "sw1"))
    return runset, load.eval_points(load.final_metrics(client, runset.run_ids))
