"""MlflowTracker across processes: a SIGKILLed writer's spool, and several writers on one sqlite store."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from quadrants.tracking.mlflow_tracker import SENTINEL_KEY, MlflowTracker

from .conftest import WRITER
from .helpers import KEYS, duplicates, history, step_metrics

pytestmark = pytest.mark.integration  # each writer process imports MLflow (~5 s)


def run_writer(python: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(WRITER), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def run_id_of(output: str) -> str:
    return next(line.split()[1] for line in output.splitlines() if line.startswith("RUN "))


def undelivered_bytes(spool: Path) -> int:
    segment, offset = json.loads((spool / "state.json").read_text())["cursor"]
    return sum(p.stat().st_size for p in spool.glob("*.jsonl") if int(p.stem) >= segment) - offset


def test_spool_of_a_killed_process_is_delivered_exactly_once(
    store_uri: str, tmp_path: Path, python: str
) -> None:
    spool = tmp_path / "spool"
    # the job delivers steps 1..50, logs 51..150 faster than sqlite takes them, then is SIGKILLed
    killed = run_writer(
        python,
        "--uri",
        store_uri,
        "--experiment",
        "kill",
        "--spool",
        str(spool),
        "--last",
        "150",
        "--flush-after",
        "50",
        "--flush-every-s",
        "3600",
        "--kill",
    )
    assert killed.returncode == -9, killed.stderr
    run_id = run_id_of(killed.stdout)
    assert undelivered_bytes(spool) > 0  # it did leave records behind
    delivered_before = {step for step, _ in history(MlflowClient(store_uri), run_id)[SENTINEL_KEY]}
    assert set(range(1, 51)) <= delivered_before < set(range(1, 151))

    # the requeued job: same spool_dir, resumes from its checkpoint at step 40 and runs to 170
    requeued = MlflowTracker(store_uri, "kill", spool_dir=spool, flush_every_s=0.2)
    assert requeued.start() == run_id
    for step in range(41, 171):
        requeued.log_metrics(step_metrics(step, offset=0.5), step=step)
    requeued.finish()

    hist = history(MlflowClient(store_uri), run_id)
    assert duplicates(hist) == {}
    # first value wins: 1..150 as the killed job logged them, 151..170 from the requeued job
    for key in KEYS:
        assert hist[key] == [
            (s, step_metrics(s, 0.5 if s > 150 else 0.0)[key]) for s in range(1, 171)
        ], key
    assert [s for s, _ in hist[SENTINEL_KEY]] == list(range(1, 171))
    assert undelivered_bytes(spool) == 0


def test_four_processes_on_one_sqlite_store_lose_nothing(
    store_uri: str, tmp_path: Path, python: str
) -> None:
    writers = [
        subprocess.Popen(
            [
                python,
                str(WRITER),
                "--uri",
                store_uri,
                "--experiment",
                "concurrent",
                "--spool",
                str(tmp_path / f"spool{n}"),
                "--last",
                "200",
                "--offset",
                str(n),
                "--flush-every-s",
                "0.2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    outputs = [w.communicate(timeout=180) for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0, 0], [err[-2000:] for _, err in outputs]
    client = MlflowClient(store_uri)
    run_ids = [run_id_of(out) for out, _ in outputs]
    assert len(set(run_ids)) == 4
    for n, run_id in enumerate(run_ids):
        hist = history(client, run_id)
        assert duplicates(hist) == {}
        # every (run, key, step) exactly once, with the value that writer logged
        for key in KEYS:
            assert hist[key] == [(s, step_metrics(s, float(n))[key]) for s in range(1, 201)]
        assert client.get_run(run_id).info.status == "FINISHED"


def test_resume_while_the_store_is_away_deduplicates_once_it_is_back(
    template_db: Path, tmp_path: Path, python: str
) -> None:
    db_dir = tmp_path / "store"
    db_dir.mkdir()
    shutil.copy(template_db, db_dir / "mlflow.db")
    uri = f"sqlite:///{db_dir / 'mlflow.db'}"
    spool = tmp_path / "spool"
    first = run_writer(
        python, "--uri", uri, "--experiment", "away", "--spool", str(spool), "--last", "30"
    )
    assert first.returncode == 0, first.stderr
    run_id = run_id_of(first.stdout)

    db_dir.rename(tmp_path / "store_away")  # the store goes away; a file where its directory was
    db_dir.write_text("not a directory")  # makes sqlite fail at once, like a refused connection
    requeued = MlflowTracker(uri, "away", spool_dir=spool, flush_every_s=0.2, max_backoff_s=0.5)
    assert requeued.start(run_id) == run_id  # known without asking the store
    for step in range(21, 41):  # resumed from a checkpoint at step 20
        requeued.log_metrics(step_metrics(step, offset=0.5), step=step)
    assert not requeued.flush(timeout_s=1.0)
    db_dir.unlink()
    (tmp_path / "store_away").rename(db_dir)
    assert requeued.flush(timeout_s=60.0)
    requeued.finish()

    hist = history(MlflowClient(uri), run_id)
    assert duplicates(hist) == {}
    expected = [(s, step_metrics(s, 0.5 if s > 30 else 0.0)[KEYS[0]]) for s in range(1, 41)]
    assert hist[KEYS[0]] == expected
