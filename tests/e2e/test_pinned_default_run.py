"""The one-seed default-run table of the dated record benchmarks/results/2026-11_cpu-intel-avx512.md is what the command prints, pinned per machine kind.

That record (linked from docs/results.md) prints the summary table of ``python -m quadrants.sweep -m quadrant=PHR,NHR,PLR,NLR``
(60 steps, seed 0, held-out check on 100 problems) and names the machine kind and the commit it was
measured on. ``pinned/default_run.json`` holds, per machine kind (the same key as
``pinned/behaviour.json``: torch's CPU capability, the CPU matmul backend ``train.cpu_matmul=auto``
picks, torch's version), the commit, the torch threads each job ran with and the exact ``repr`` of
every value in that table, read back from MLflow the way the sweep's summary reads them.

- ``test_the_docs_table_is_the_pinned_one`` (fast): the table in the docs, its kind and its commit
  equal the pin's, digit for digit as the summary prints them (3 decimals). Skips, naming the kinds
  it has, when the docs name a kind with no pin.
- ``test_the_default_run_logs_the_pinned_values`` and ``..._prints_the_pinned_table`` (the
  `pinned` stage; one run of the documented command in an empty directory, about 5 minutes on 2
  cores, shared by both): the exact values MLflow holds and the printed table equal the pin for
  this machine's kind. Skips on another kind or another thread count:
  there the kernels round differently and one rounding difference carried through 60 steps moves
  the table (the docs show by how much), so no tolerance would mean anything.

The 60-step values are not in ``behaviour.json`` (its runs are 2 steps), so they have their own pin.
Regenerate it for an intended behaviour change, together with ``behaviour.json``, and paste the
printed table into a dated record under benchmarks/results/ with the kind and commit
(and point DOC at it):
    QUADRANTS_PIN_WRITE=1 QUADRANTS_PIN_COMMIT=<commit> \\
        python -m pytest --stage=pinned tests/e2e/test_pinned_default_run.py -k values
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from quadrants.launch.hydra_setup import register
from quadrants.tracking.summary import sweep_runs

from .test_pinned_behaviour import cpu_capability

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "benchmarks" / "results" / "2026-11_cpu-intel-avx512.md"
PIN_FILE = Path(__file__).with_name("pinned") / "default_run.json"
WRITE = os.environ.get("QUADRANTS_PIN_WRITE") == "1"
COMMAND = ["-m", "quadrant=PHR,NHR,PLR,NLR"]
# The summary's columns (quadrants/tracking/summary.py) and the MLflow keys behind them.
TEXT_COLUMNS = {
    "status": "status",
    "quadrant": "tags.quadrant",
    "objective": "tags.objective",
    "seed": "tags.seed",
}
NUMBER_COLUMNS = {
    "step": "metrics.train/step",
    "solve_rate": "metrics.train/solve_rate",
    "entropy": "metrics.train/entropy",
    "arithmetic/avg_at_4": "metrics.eval/arithmetic/avg_at_4",
    "arithmetic/pass_at_4": "metrics.eval/arithmetic/pass_at_4",
}
HEADER = ["run", *TEXT_COLUMNS, *NUMBER_COLUMNS]


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """{run: {column: cell}} from the summary table's lines (header `run status ...`, one row a run)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    start = next((i for i, cells in enumerate(lines) if cells[:2] == ["run", "status"]), None)
    assert start is not None, "no summary table (a header line starting `run status`)"
    assert lines[start] == HEADER, f"summary columns {lines[start]} != {HEADER}"
    rows = {}
    for cells in lines[start + 1 :]:
        if len(cells) != len(HEADER) or not cells[0].startswith("quadrant="):
            break
        rows[cells[0]] = dict(zip(HEADER[1:], cells[1:], strict=True))
    return rows


def as_printed(value: str) -> str:
    """A pinned repr as the summary prints it (float_format 3 decimals)."""
    return f"{float(value):.3f}"


def doc_table() -> tuple[str, str, dict[str, dict[str, str]]]:
    """(machine kind, commit, table) of the one-seed default-run table in DOC: the first
    code block after the sentence naming `machine kind `...`` and `commit `...``."""
    text = DOC.read_text()
    match = re.search(
        r"machine kind `([^`]+)`.*?commit `([0-9a-f]{7,40})`.*?\n```\n(.*?)\n```", text, re.S
    )
    assert match, f"{DOC.name}: no table after a sentence naming its machine kind and commit"
    return match.group(1), match.group(2), parse_table(match.group(3))


def pins() -> dict:
    return json.loads(PIN_FILE.read_text()) if PIN_FILE.exists() else {"kinds": {}}


def threads_per_job() -> int:
    """The torch threads each job of the command gets here, from the launcher's own resolvers
    (sweeps/launcher/local.yaml: cores // jobs)."""
    register()
    node = OmegaConf.create(
        {"jobs": "${quadrants.parallel_jobs:}", "threads": "${quadrants.threads_per_job:${jobs}}"}
    )
    return int(node.threads)


def test_the_docs_table_is_the_pinned_one():
    kind, commit, table = doc_table()
    kinds = pins()["kinds"]
    if kind not in kinds:
        pytest.skip(f"{DOC.name}'s table was measured on {kind!r}, not pinned ({sorted(kinds)})")
    pin = kinds[kind]
    assert commit == pin["commit"], f"docs name commit {commit}, the pin {pin['commit']}"
    assert sorted(table) == sorted(pin["runs"]), "the docs' runs differ from the pinned ones"
    for run, want in pin["runs"].items():
        for column in TEXT_COLUMNS:
            assert table[run][column] == want[column], f"{run} {column}"
        for column in NUMBER_COLUMNS:
            got, pinned = table[run][column], as_printed(want[column])
            assert got == pinned, f"docs: {run} {column} {got} != pinned {pinned}"


def test_parse_table_reads_the_printed_layout():
    """The parser against a table in the summary's own layout, and its refusals."""
    printed = (
        "quadrants: sweep abc (1 runs)\n"
        "         run   status quadrant objective seed   step  solve_rate  entropy  "
        "arithmetic/avg_at_4  arithmetic/pass_at_4\n"
        "quadrant=NHR FINISHED      NHR      dapo    0 60.000       0.656    0.030"
        "                0.667                 0.730\n"
        "quadrants: browse with ...\n"
    )
    assert parse_table(printed) == {
        "quadrant=NHR": {
            "status": "FINISHED",
            "quadrant": "NHR",
            "objective": "dapo",
            "seed": "0",
            "step": "60.000",
            "solve_rate": "0.656",
            "entropy": "0.030",
            "arithmetic/avg_at_4": "0.667",
            "arithmetic/pass_at_4": "0.730",
        }
    }
    # 0.6665 is stored as 0.66649999... in binary, so it prints 0.666: the pin's repr is rounded by
    # the same format call as the summary's
    assert as_printed("0.6665") == "0.666" and as_printed("60.0") == "60.000"
    with pytest.raises(AssertionError, match="summary columns"):
        parse_table("run status quadrant seed\nquadrant=PHR FINISHED PHR 0\n")


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, base_policy) -> tuple[str, dict[str, dict[str, str]]]:
    """The documented command, run once for the tests below: (its stdout, {run: pinned columns}
    read back from MLflow as the summary reads them). Skips where no pin can apply."""
    kind, threads = cpu_capability(), threads_per_job()
    kinds = pins()["kinds"]
    if not WRITE and kind not in kinds:
        pytest.skip(f"no default-run pin for this machine kind ({kind!r}; pinned: {sorted(kinds)})")
    if not WRITE and kinds[kind]["threads_per_job"] != threads:
        pytest.skip(
            f"the pin ran {kinds[kind]['threads_per_job']} torch thread(s) per job, "
            f"this machine gives {threads}: intra-op threads change the rounding"
        )
    cwd = tmp_path_factory.mktemp("default_run")
    done = subprocess.run(
        [sys.executable, "-m", "quadrants.sweep", *COMMAND],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    sweep_id = re.search(r"quadrants: sweep (\S+) \(\d+ runs\)", done.stdout)
    assert sweep_id, done.stdout[-2000:]
    frame = sweep_runs(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}", "quadrants", sweep_id.group(1))
    runs = {
        row["tags.mlflow.runName"]: {
            **{column: str(row[key]) for column, key in TEXT_COLUMNS.items()},
            **{column: repr(float(row[key])) for column, key in NUMBER_COLUMNS.items()},
        }
        for _, row in frame.iterrows()
    }
    if WRITE:
        all_pins = pins()
        all_pins["kinds"][kind] = {
            "commit": os.environ.get("QUADRANTS_PIN_COMMIT", "unknown"),
            "command": "python -m quadrants.sweep " + " ".join(COMMAND),
            "threads_per_job": threads,
            "runs": runs,
        }
        PIN_FILE.write_text(json.dumps(all_pins, indent=1, sort_keys=True) + "\n")
        print(done.stdout[sweep_id.start() :].split("\nquadrants: ")[0])  # the table for the docs
        pytest.skip(f"wrote the default-run pin for {kind!r} to {PIN_FILE.name}")
    return done.stdout, runs


@pytest.mark.pinned
def test_the_default_run_logs_the_pinned_values(default_run):
    pin = pins()["kinds"][cpu_capability()]
    assert default_run[1] == pin["runs"], f"values differ from the pin of {pin['commit']}"


@pytest.mark.pinned
def test_the_default_run_prints_the_pinned_table(default_run):
    pin = pins()["kinds"][cpu_capability()]
    printed = parse_table(default_run[0])
    assert sorted(printed) == sorted(pin["runs"]), "the printed runs differ from the pinned ones"
    for run, want in pin["runs"].items():
        for column in TEXT_COLUMNS:
            assert printed[run][column] == want[column], f"{run} {column}"
        for column in NUMBER_COLUMNS:
            got, pinned = printed[run][column], as_printed(want[column])
            assert got == pinned, f"printed: {run} {column} {got} != pinned {pinned}"
