"""`python -m quadrants.evaluate tiny eval=paper_ood eval.limit=2` offline, end to end: made-up files in
the GPQA, MMLU-Pro and GraphWiz hub schemas (nothing is downloaded), the tiny model, a real MLflow
store; the printed table has every benchmark, its groups and their chance levels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from quadrants.eval.results import benchmark_metrics, read_counts
from quadrants.tasks.ood import GRAPHWIZ_TASKS
from tests.ood_samples import write_ood_samples

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_paper_ood_preset_runs_offline_and_prints_chance_levels(tmp_path, base_policy):
    write_ood_samples(tmp_path / "data")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "QUADRANTS_DATA": str(tmp_path / "data"),
        "OMP_NUM_THREADS": "1",
    }
    # the preset's 3072 new tokens are for real models; 24 keep the tiny model's run short
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quadrants.evaluate",
            "tiny",
            "eval=paper_ood",
            "eval.limit=2",
            "eval.max_new_tokens=24",
            "train.threads=1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("benchmark"))
    assert "chance" in header.split() and "chance@n" in header.split()
    rows = {
        line.split()[0]: line.split()
        for line in lines
        if line.split() and line.split()[0] in ("gpqa", "mmlu_pro", "graphwiz")
    }
    # problems, n, ..., chance, chance@n: 2 per GPQA domain x 3, n = 16: chance 1/4, chance@16 = 1 - 0.75^16 = 0.990
    assert rows["gpqa"][1:3] == ["6", "16"] and rows["gpqa"][6:8] == ["0.250", "0.990"]
    # MMLU-Pro: 2 per category x 3; five 10-option questions and one 4-option: (5 * 0.1 + 0.25) / 6 = 0.125
    assert rows["mmlu_pro"][1:3] == ["6", "1"] and rows["mmlu_pro"][6] == "0.125"
    # GraphWiz: 2 per task x 9; yes/no on 5 of the 9 tasks: 10 * 0.5 / 18 = 0.278
    assert rows["graphwiz"][1:3] == ["18", "1"] and rows["graphwiz"][6] == "0.278"
    for task in GRAPHWIZ_TASKS:
        assert any(line.split()[:2] == ["task", task] for line in lines), task
    assert any(line.split()[:2] == ["domain", "computer_science"] for line in lines)
    assert (
        "25 % GPQA, 10 % MMLU-Pro, 50 % yes/no tasks" in done.stdout
        and "ood avg column" in done.stdout
    )

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("quadrants").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["eval.benchmarks.gpqa"] == "16"
    metrics = run.data.metrics
    assert metrics["eval/gpqa/chance"] == 0.25 and metrics["eval/graphwiz/task/cycle/chance"] == 0.5
    assert {
        "eval/mmlu_pro/domain/history/avg_at_1",
        "eval/graphwiz/task/topology/pass_at_1",
        "eval/ood_avg",
    } <= set(metrics)
    local = Path(client.download_artifacts(run.info.run_id, "eval", str(tmp_path / "downloaded")))
    for name in ("gpqa", "mmlu_pro", "graphwiz"):
        ns, cs = read_counts(local / name / "counts.csv")
        for key, value in benchmark_metrics(
            name, ns, cs
        ).items():  # every number follows from the files
            assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-15, nan_ok=True), key
