"""`python -m quadrants.data` and what a machine without the data can still do.

Printing a configuration (`--cfg job`, `--help`) needs no data for any preset; launching a run that
needs a missing file is refused at compose time, before a model loads, naming the file and the
`quadrants.data` command. Real subprocesses, each with an empty data home (the prints of every
preset share one: `run_in_one_process`).
"""

from __future__ import annotations

import json
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
    """`python -m ARGS` with `data_home` as the data home."""
    return python(["-m", *args], data_home, **env)


def python(
    args: list[str], data_home: Path, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=data_home.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
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


# Runs each (module, args) of argv[1] (JSON) as `python -m MODULE ARGS` would, one after another in
# this one process (runpy, sys.argv set, stdout and stderr captured), and prints one JSON line per
# call: its args, exit status and output. The commands differ only in what they print, so they share
# one interpreter's start-up and imports (about 10 s of CPU each) instead of paying it per preset.
ONE_PROCESS = """
import contextlib, io, json, runpy, sys
for module, args in json.loads(sys.argv[1]):
    sys.argv = [module, *args]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as ended:
            code = ended.code if isinstance(ended.code, int) else int(ended.code is not None)
    print(json.dumps([args, code, out.getvalue(), err.getvalue()]))
"""


def run_in_one_process(
    calls: list[tuple[str, list[str]]], data_home: Path
) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each `python -m MODULE ARGS` of `calls`, run in turn in one
    subprocess (ONE_PROCESS) with `data_home` as the data home."""
    done = python(["-c", ONE_PROCESS, json.dumps(calls)], data_home, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [args for args, *_ in lines] == [args for _, args in calls]
    return [(code, out, err) for _, code, out, err in lines]


@pytest.mark.integration  # runs the command as a subprocess
def test_printing_every_preset_needs_no_data(tmp_path: Path):
    """Every preset's `python -m quadrants.sweep --cfg job experiment=NAME`, the sweep's `--help`
    and `python -m quadrants.evaluate tiny eval=paper --cfg`, with an empty data home: each exits 0
    and prints its config, and nothing is written into the data home. They run in one subprocess
    (ONE_PROCESS); that it prints what a fresh process prints is checked on the last preset, which
    follows every other composition of that process, against its own `python -m` command."""
    empty = tmp_path / "no-data"
    calls = [("quadrants.sweep", ["--cfg", "job", f"experiment={e}"]) for e in EXPERIMENTS]
    calls += [
        ("quadrants.sweep", ["--help"]),
        ("quadrants.evaluate", ["tiny", "eval=paper", "--cfg"]),
    ]
    results = run_in_one_process(calls, empty)
    for experiment, (code, out, err) in zip(EXPERIMENTS, results):
        assert code == 0, f"{experiment}: {err[-2000:]}"
        assert "eval:" in out
    code, out, _ = results[len(EXPERIMENTS)]
    assert code == 0 and "experiment" in out
    code, out, err = results[-1]
    assert code == 0, err[-2000:]
    assert "aime24: 32" in out
    alone = run(["quadrants.sweep", "--cfg", "job", f"experiment={EXPERIMENTS[-1]}"], empty)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout == results[len(EXPERIMENTS) - 1][1]  # the same print as its own process
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
