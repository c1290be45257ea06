"""The data home's catalogue: checking a copy, importing a file, and writing a Hub download.

No network here: the Hub conversion is tested on real `datasets.Dataset` tables built from the
fixture rows (the ``test`` extra installs `datasets`), handed to `download` in place of
``datasets.load_dataset``; the offline error is tested with the real ``load_dataset`` under
``HF_HUB_OFFLINE=1`` (tests/unit/test_data_command.py). What only a machine with network can show:
that each Hub copy named in the catalogue still has the recorded number of rows and fields the
loaders read. The ``full_data`` tests check the real files against the recorded checksums.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

from quadrants.tasks import DATASET_PRESETS
from quadrants.tasks.benchmarks import get_spec, known_benchmarks, load_benchmark
from quadrants.tasks.data_files import (
    CATALOGUE,
    DSR_SUFFIX,
    DataFile,
    DataUnavailable,
    check,
    download,
    file_for_path,
    import_file,
    write_rows,
)
from tests.data_fixtures import FIXTURE_ROWS
from tests.unit.tasks.full_data import unverified


@pytest.fixture
def datasets():
    """The `datasets` package (in the ``test`` and ``hub`` extras); its tests skip without it."""
    return pytest.importorskip(
        "datasets", reason="needs the `hub` extra (datasets): pip install -e '.[hub]' or '.[test]'"
    )


TOY_BYTES = b'{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n'


@pytest.fixture
def toy(monkeypatch) -> DataFile:
    """A 2-row training set whose reference copy is `TOY_BYTES`."""
    entry = DataFile(
        name="toy",
        relative="toy/train.jsonl",
        rows=2,
        sha256=hashlib.sha256(TOY_BYTES).hexdigest(),
        kind="training",
        used_by="task=dataset",
        origin="these tests",
        hub=None,
        required=(("question",), ("answer",)),
    )
    monkeypatch.setitem(CATALOGUE, "toy", entry)
    return entry


def sized_to_the_fixture(monkeypatch, name: str) -> DataFile:
    """Record `name` with the fixture's row count, so the fixture rows stand in for the real set."""
    entry = CATALOGUE[name]
    rows = len(FIXTURE_ROWS[entry.relative])
    monkeypatch.setitem(CATALOGUE, name, dataclasses.replace(entry, rows=rows))
    return CATALOGUE[name]


# --- the catalogue ------------------------------------------------------------------------------


def test_the_catalogue_names_the_files_the_loaders_read():
    for name in known_benchmarks():
        assert CATALOGUE[name].relative == get_spec(name).local_file
        assert CATALOGUE[name].hub == get_spec(name).hub
    assert file_for_path(DATASET_PRESETS["gsm8k"]["path"]).name == "gsm8k_train"
    assert file_for_path(DATASET_PRESETS["deepscaler"]["path"]).name == "dsr_sub"
    assert file_for_path("nowhere.jsonl") is None
    # the recorded sizes (rows of the reference copies, tests/data_fixtures.py lists the same files)
    assert {n: e.rows for n, e in CATALOGUE.items()} == {
        "aime24": 30,
        "aime25": 30,
        "amc": 83,
        "math500": 500,
        "minerva": 272,
        "olympiadbench": 675,
        "amc23": 40,
        "gsm8k": 1319,
        "gsm8k_train": 7473,
        "dsr_sub": 1209,
    }
    assert sorted(e.relative for e in CATALOGUE.values()) == sorted(FIXTURE_ROWS)


# --- check --------------------------------------------------------------------------------------


def test_check_tells_missing_incomplete_ok_and_changed(tmp_path: Path, toy: DataFile):
    path = tmp_path / "toy" / "train.jsonl"
    assert (check("toy", tmp_path).state, check("toy", tmp_path).rows) == ("missing", 0)
    path.parent.mkdir()
    path.write_bytes(TOY_BYTES.splitlines(keepends=True)[0])
    assert (check("toy", tmp_path).state, check("toy", tmp_path).rows) == ("incomplete", 1)
    path.write_bytes(TOY_BYTES)
    assert check("toy", tmp_path).state == "ok" and check("toy", tmp_path).usable
    path.write_bytes(TOY_BYTES.replace(b'"4"', b'"5"'))  # same 2 rows, one answer changed
    status = check("toy", tmp_path)
    assert (status.state, status.rows, status.usable) == ("changed", 2, False)


def test_without_a_recorded_checksum_the_rows_decide_and_an_import_is_recorded(
    tmp_path: Path, toy: DataFile, monkeypatch
):
    # AMC's entry has no checksum (none could be verified offline): a file with the recorded rows
    # is another copy; an imported one carries its origin, and a change after that is caught
    monkeypatch.setitem(CATALOGUE, "toy", dataclasses.replace(toy, sha256=None))
    path = tmp_path / "toy" / "train.jsonl"
    path.parent.mkdir()
    path.write_bytes(TOY_BYTES)
    status = check("toy", tmp_path)
    assert (status.state, status.usable, status.note) == (
        "other copy",
        True,
        "no reference checksum recorded",
    )
    brought = tmp_path / "brought.jsonl"
    brought.write_bytes(TOY_BYTES)
    status = import_file("toy", brought, tmp_path / "home")
    assert status.state == "other copy" and status.note == f"imported from {brought}"
    status.path.write_bytes(TOY_BYTES.replace(b'"4"', b'"5"'))
    assert check("toy", tmp_path / "home").state == "changed"
    assert CATALOGUE["amc"].sha256 is None and CATALOGUE["amc"].rows == 83


def test_the_fixture_data_home_is_incomplete_by_the_records(fixture_data_dir: Path):
    status = check("aime24", fixture_data_dir)
    assert (status.state, status.rows, status.usable) == ("incomplete", 3, False)  # 3 of 30


# --- import -------------------------------------------------------------------------------------


def test_import_copies_a_reference_copy_byte_for_byte(tmp_path: Path, toy: DataFile):
    brought = tmp_path / "brought.jsonl"
    brought.write_bytes(TOY_BYTES)
    status = import_file("toy", brought, tmp_path / "home")
    assert status.state == "ok" and status.path.read_bytes() == TOY_BYTES
    assert not (tmp_path / "home" / "toy" / "train.jsonl.origin.json").exists()


def test_import_of_another_copy_is_recorded_and_a_later_change_is_caught(
    tmp_path: Path, toy: DataFile
):
    brought = tmp_path / "brought.jsonl"
    brought.write_text('{"question": "1+1?", "answer": "2"}\n{"answer": "4", "question": "2+2?"}\n')
    status = import_file("toy", brought, tmp_path / "home")
    assert (status.state, status.rows) == ("other copy", 2) and status.usable
    assert status.note == f"imported from {brought}"
    with status.path.open("a") as out:
        out.write("\n")  # a blank line: still 2 rows, another checksum
    assert check("toy", tmp_path / "home").state == "changed"


def test_import_refuses_a_wrong_file_and_writes_nothing(tmp_path: Path, toy: DataFile):
    home = tmp_path / "home"
    short = tmp_path / "short.jsonl"
    short.write_text('{"question": "1+1?", "answer": "2"}\n')
    with pytest.raises(ValueError, match=r"short.jsonl has 1 rows; the toy file has 2"):
        import_file("toy", short, home)
    fields = tmp_path / "fields.jsonl"
    fields.write_text('{"question": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": "4"}\n')
    with pytest.raises(
        ValueError, match=r"line 2 of .*fields.jsonl has none of the fields \['question'\]"
    ):
        import_file("toy", fields, home)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="is not a JSON-lines file"):
        import_file("toy", binary, home)
    with pytest.raises(FileNotFoundError, match="import toy: no file at"):
        import_file("toy", tmp_path / "absent.jsonl", home)
    assert not (home / "toy").exists()


def test_import_checks_that_a_benchmark_loads(tmp_path: Path, monkeypatch):
    sized_to_the_fixture(monkeypatch, "aime25")
    rows = [dict(row) for row in FIXTURE_ROWS["aime25/test.jsonl"]]
    rows[1]["answer"] = " "  # a blank gold: no answer could ever match it
    brought = tmp_path / "aime25.jsonl"
    brought.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(
        ValueError, match=r"aime25: line 2 of .* does not load: aime25 row 1: empty gold"
    ):
        import_file("aime25", brought, tmp_path / "home")


def test_import_converts_deepscalers_verl_parquet(tmp_path: Path, monkeypatch):
    import pandas as pd

    monkeypatch.setitem(CATALOGUE, "dsr_sub", dataclasses.replace(CATALOGUE["dsr_sub"], rows=2))
    verl = [
        {
            "data_source": "deepscaler",
            "prompt": [{"content": "Find $x$ if $x+1=3$." + DSR_SUFFIX, "role": "user"}],
            "ability": "math",
            "reward_model": {"ground_truth": "2", "style": "rule"},
            "extra_info": {"index": 7, "split": "train"},
        },
        {
            "data_source": "deepscaler",
            "prompt": [{"content": "Name the set $\\{1\\}$." + DSR_SUFFIX, "role": "user"}],
            "ability": "math",
            "reward_model": {"ground_truth": "", "style": "rule"},  # empty, as real row 265
            "extra_info": {"index": 8, "split": "train"},
        },
    ]
    parquet = tmp_path / "dsr_sub.parquet"
    pd.DataFrame(verl).to_parquet(parquet)
    status = import_file("dsr_sub", parquet, tmp_path / "home")
    assert (status.state, status.rows) == ("other copy", 2)
    # the prompt without its instruction suffix, the ground truth, the index; json.dumps spacing
    assert status.path.read_text() == (
        '{"problem": "Find $x$ if $x+1=3$.", "answer": "2", "index": 7}\n'
        '{"problem": "Name the set $\\\\{1\\\\}$.", "answer": "", "index": 8}\n'
    )
    verl[0]["prompt"] = [{"content": "No suffix.", "role": "user"}]
    pd.DataFrame(verl).to_parquet(parquet)
    with pytest.raises(ValueError, match="without the DeepScaleR instruction suffix"):
        import_file("dsr_sub", parquet, tmp_path / "other")


# --- download: the Hub rows in the loaders' layout -----------------------------------------------


@pytest.mark.parametrize("name", known_benchmarks())
def test_a_hub_table_is_written_in_the_layout_the_loader_reads(
    name: str, tmp_path: Path, monkeypatch, datasets
):
    entry = sized_to_the_fixture(monkeypatch, name)
    rows = FIXTURE_ROWS[entry.relative]
    table = datasets.Dataset.from_list(rows)  # what load_dataset returns for one split
    calls = []

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        return table

    status = download(name, tmp_path, load_dataset=load_dataset)
    assert calls == [(entry.hub.path, entry.hub.config, entry.hub.split)]
    assert status.path == tmp_path / get_spec(name).local_file
    assert (status.state, status.rows) == ("other copy", len(rows))
    assert status.note.startswith(f"hub {entry.hub.path}")
    written = [json.loads(line) for line in status.path.read_text(encoding="utf-8").splitlines()]
    assert written == [dict(row) for row in table]  # one JSON object per row, as the Hub gave it
    # and the loader reads it as it reads the fixture file
    assert load_benchmark(name, data_dir=tmp_path).items == load_benchmark(name).items


def test_a_training_set_download_and_a_wrong_sized_table(tmp_path: Path, monkeypatch, datasets):
    entry = sized_to_the_fixture(monkeypatch, "gsm8k_train")
    rows = FIXTURE_ROWS[entry.relative]
    status = download(
        "gsm8k_train", tmp_path, load_dataset=lambda *a, **k: datasets.Dataset.from_list(rows)
    )
    assert status.path == tmp_path / "gsm8k" / "train.jsonl" and status.rows == len(rows)
    short = datasets.Dataset.from_list(rows[:5])
    with pytest.raises(ValueError, match=rf"has 5 rows; the gsm8k_train file has {len(rows)}"):
        download("gsm8k_train", tmp_path / "b", load_dataset=lambda *a, **k: short)
    assert not (tmp_path / "b" / "gsm8k").exists()


def test_download_failures_say_what_to_run_where(tmp_path: Path, monkeypatch):
    def offline(path, config, split):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    with pytest.raises(DataUnavailable) as failed:
        download("math500", tmp_path, load_dataset=offline)
    message = str(failed.value)
    assert "math500: could not download HuggingFaceH4/MATH-500 from the Hugging Face Hub" in message
    assert "ConnectionError: Couldn't reach" in message
    assert "On a machine with network, run `python -m quadrants.data download math500`" in message
    assert (
        f"`python -m quadrants.data import math500 FILE` (this machine's data home: {tmp_path})"
        in message
    )
    with pytest.raises(
        DataUnavailable, match=r"dsr_sub is not on the Hugging Face Hub.*import dsr_sub FILE"
    ):
        download("dsr_sub", tmp_path)
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails
    with pytest.raises(
        DataUnavailable, match=r"needs the `datasets` package: pip install -e '.\[hub\]'"
    ):
        download("gsm8k", tmp_path)
    with pytest.raises(ValueError, match=r"unknown data set 'gsm8k_test'; known: \['aime24'"):
        write_rows("gsm8k_test", [], tmp_path, origin="x")


# --- the complete real files (.ci/run's full-data stage) ------------------------------------------


@pytest.mark.full_data
def test_every_real_file_matches_its_record(full_data_dir: Path):
    states = {name: check(name, full_data_dir).state for name in CATALOGUE}
    # with no reference checksum (tests/unit/tasks/full_data.py), a copy can only be "other copy",
    # and the complete data home may not have one yet
    expected = {
        name: state if unverified(name) and state in ("missing", "other copy") else "ok"
        for name, state in states.items()
    }
    assert states == expected
    assert any(state == "ok" for state in states.values())


@pytest.mark.full_data
def test_importing_the_real_files_reproduces_the_reference_copies(
    full_data_dir: Path, tmp_path: Path
):
    status = import_file("aime25", full_data_dir / "aime25" / "test.jsonl", tmp_path)
    assert (status.state, status.rows) == ("ok", 30)
    parquet = full_data_dir / "dsr_sub" / "dsr_sub.parquet"
    if parquet.is_file():  # the verl file dsr_sub.jsonl was derived from
        status = import_file("dsr_sub", parquet, tmp_path)
        assert (status.state, status.rows) == ("ok", 1209)  # byte for byte the reference copy
