"""`python -m quadrants.data` and what a machine without the data can still do.

Printing a configuration (`--cfg job`, `--help`) needs no data for any preset; launching a run that
needs a missing file is refused at compose time, before a model loads, naming the file and the
`quadrants.data` command. Real subprocesses, each with an empty data home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quadrants.launch.data import main
from quadrants.tasks import validate_task
from quadrants.tasks.data_files import CATALOGUE

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.stem for p in (REPO / "sweeps" / "experiment").glob("*.yaml"))


def run(args: list[str], data_home: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=data_home.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "QUADRANTS_DATA": str(data_home), **env},
    )


def test_list_says_what_is_missing_and_how_to_fetch_it(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--data-dir", str(tmp_path), "list"])
    assert ended.value.code == 1  # not everything usable
    out = capsys.readouterr().out
    assert f"data home: {tmp_path}" in out
    for name, entry in CATALOGUE.items():
        assert f"{tmp_path / entry.relative}" in out and name in out
    assert out.count("MISSING") == len(CATALOGUE)
    hub_names = " ".join(n for n, e in CATALOGUE.items() if e.hub is not None)
    assert f"fetch: python -m quadrants.data download {hub_names}" in out
    assert "dsr_sub: python -m quadrants.data import dsr_sub FILE" in out


def test_list_reads_the_fixture_home_as_incomplete(fixture_data_dir: Path, capsys):
    with pytest.raises(SystemExit):
        main(["list"])  # the data home of $QUADRANTS_DATA: the session's fixture files
    out = capsys.readouterr().out
    assert f"data home: {fixture_data_dir}" in out
    assert "3/30  INCOMPLETE" in out  # aime24: the fixture's 3 rows of the real 30


def test_import_from_the_command_line(tmp_path: Path, capsys):
    brought = tmp_path / "gsm8k.jsonl"
    brought.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    with pytest.raises(SystemExit) as ended:
        main(["--data-dir", str(tmp_path / "home"), "import", "gsm8k", str(brought)])
    assert "gsm8k.jsonl has 1 rows; the gsm8k file has 1319" in str(ended.value.code)
    with pytest.raises(SystemExit):
        main(["import", "gsm9k", str(brought)])
    assert "unknown data set 'gsm9k'" in capsys.readouterr().err


@pytest.mark.integration  # runs the command as a subprocess
def test_download_offline_says_which_command_to_run_where(tmp_path: Path):
    pytest.importorskip(
        "datasets", reason="needs the `hub` extra (datasets): pip install -e '.[hub]'"
    )
    done = run(
        ["quadrants.data", "download", "aime24"],
        tmp_path / "home",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "could not download HuggingFaceH4/aime_2024" in done.stderr
    assert (
        "On a machine with network, run `python -m quadrants.data download aime24`" in done.stderr
    )
    assert "python -m quadrants.data import aime24 FILE" in done.stderr
    assert not (tmp_path / "home" / "aime24").exists()


@pytest.mark.integration  # runs the command as a subprocess
def test_printing_every_preset_needs_no_data(tmp_path: Path):
    empty = tmp_path / "no-data"
    for experiment in EXPERIMENTS:
        done = run(["quadrants.sweep", "--cfg", "job", f"experiment={experiment}"], empty)
        assert done.returncode == 0, f"{experiment}: {done.stderr[-2000:]}"
        assert "eval:" in done.stdout
    done = run(["quadrants.sweep", "--help"], empty)
    assert done.returncode == 0 and "experiment" in done.stdout
    done = run(["quadrants.evaluate", "tiny", "eval=paper", "--cfg"], empty)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "aime24: 32" in done.stdout
    assert not empty.exists()  # nothing was written into the data home


@pytest.mark.integration  # runs the command as a subprocess
def test_a_run_that_needs_missing_files_stops_at_compose_time(tmp_path: Path):
    empty = tmp_path / "no-data"
    # submitted as a GPU preset is (run locally on this CPU machine it is refused for its device
    # first: tests/unit/sweep/test_local_refusals.py)
    done = run(
        [
            "quadrants.sweep",
            "-m",
            "experiment=paper_main_qwen7b",
            "launcher=slurm",
            "tracking.sqlite_on_slurm=true",
        ],
        empty,
    )
    assert done.returncode == 1
    assert "invalid configuration, nothing was launched" in done.stderr
    assert f"no data file at {empty / 'aime24' / 'test.jsonl'}" in done.stderr
    assert "python -m quadrants.data download aime24" in done.stderr
    assert not (tmp_path / "outputs").exists()  # no run directory, no model
    done = run(["quadrants.evaluate", "tiny", "eval=quick"], empty)
    assert done.returncode == 1 and "nothing was generated" in done.stderr
    assert "python -m quadrants.data download gsm8k" in done.stderr


def test_a_training_set_that_is_missing_names_its_command(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("QUADRANTS_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"python -m quadrants.data download gsm8k_train"):
        validate_task("gsm8k", 200, {})
    with pytest.raises(FileNotFoundError, match=r"python -m quadrants.data import dsr_sub FILE"):
        validate_task("deepscaler", 100, {})
    validate_task("gsm8k", 200, {}, files=False)  # printing: no file asked for
