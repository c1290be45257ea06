"""A refusal writes nothing, and a read-only query never creates a store: each command run from a
scratch working directory, then `find` lists nothing there (issue 61, "Nothing outside the run's
folders")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quadrants.launch.analysis_command import main


def created(directory: Path) -> list[str]:
    """What `find .` lists under `directory` (itself left out): every file and folder, hidden ones
    too (os.walk, as find walks; a quick test may start no process)."""
    found = []
    for root, folders, files in os.walk(directory):
        found += [os.path.join(root, name) for name in [*folders, *files]]
    return found


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "scratch"
    directory.mkdir()
    monkeypatch.chdir(directory)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return directory


@pytest.mark.slow
def test_compare_with_an_unknown_row_writes_no_table(study_store, scratch, capsys):
    # the table would go to ./outputs/analysis/sw1 (no --out): the row is checked first
    code = main(["--tracking-uri", study_store["uri"], "--sweep-id", "sw1", "--compare", "PHR",
                 "XYZ", "--no-log"])  # fmt: skip
    assert code == 2
    assert "no row 'XYZ' for --compare" in capsys.readouterr().err
    assert created(scratch) == []


@pytest.mark.parametrize("command", [["power"], ["export", "--out", "study.csv"], []])
def test_a_read_only_query_of_a_new_path_creates_no_store(scratch, command, capsys):
    store = scratch.parent / "nowhere" / "mlflow.db"
    code = main([*command, "--tracking-uri", f"sqlite:///{store}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"no MLflow SQLite store at {store}" in err and "does not create a store" in err
    assert not store.parent.exists()
    assert created(scratch) == []


def test_a_margin_that_is_not_positive_is_refused_before_a_store_is_opened(scratch):
    with pytest.raises(SystemExit, match=r"--margin 0.0: .* pass e\.g\. --margin 0\.05"):
        main(["--tracking-uri", "sqlite:///nowhere.db", "--compare", "PHR", "all",
              "--margin", "0"])  # fmt: skip
    assert created(scratch) == []
