"""`python -m quadrants.data import NAME FILE` names the line of the user's file that is wrong: the
editor's line (1-based, blank lines counted), not json's position inside the one line it was given
("line 1 column 21") nor the row's index among the non-blank rows. Run in process through the
command's `main`, as a user sees the message (its exit text)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from quadrants.launch.data import main
from quadrants.tasks.data_files import CATALOGUE, DataFile
from tests.data_fixtures import FIXTURE_ROWS

GOOD = '{"question": "1+1?", "answer": "2"}\n'


@pytest.fixture
def toy(monkeypatch) -> DataFile:
    """A 2-row training set (fields question and answer) in the catalogue for these tests."""
    entry = DataFile(
        name="toy",
        relative="toy/train.jsonl",
        rows=2,
        sha256=hashlib.sha256(GOOD.encode() * 2).hexdigest(),
        kind="training",
        used_by="task=dataset",
        origin="these tests",
        hub=None,
        required=(("question",), ("answer",)),
    )
    monkeypatch.setitem(CATALOGUE, "toy", entry)
    return entry


def refused(tmp_path: Path, name: str, content: bytes) -> str:
    """The exit text of `import NAME FILE` on `content`; nothing may be written to the home."""
    brought = tmp_path / "brought.jsonl"
    brought.write_bytes(content)
    home = tmp_path / "home"
    with pytest.raises(SystemExit) as ended:
        main(["--data-dir", str(home), "import", name, str(brought)])
    assert not home.exists()  # refused before the data home is made
    return str(ended.value.code)


def test_a_broken_third_line_is_named_by_its_line_and_column(tmp_path, toy):
    # line 1 a row, line 2 blank, line 3 lacks the comma after "2+2?": `{` is column 1,
    # `"question"` 2-11, `:` 12, space 13, `"2+2?"` 14-19, space 20, so json stops at column 21
    said = refused(tmp_path, "toy", (GOOD + "\n" + '{"question": "2+2?" "answer": "4"}\n').encode())
    assert "brought.jsonl is not a JSON-lines file: line 3, column 21 is not valid JSON" in said
    assert "Expecting ',' delimiter" in said
    assert "line 1 column" not in said  # json's position within the one line it was given


def test_a_row_missing_a_required_field_is_named_by_its_line(tmp_path, toy):
    # two rows (the recorded count, so the fields are checked), the second on line 3 after a blank
    # line: as a row index it would be "row 1"
    said = refused(tmp_path, "toy", (GOOD + "\n" + '{"problem": "2+2?", "answer": "4"}\n').encode())
    assert "toy: line 3 of " in said
    assert "brought.jsonl has none of the fields ['question']" in said


def test_a_line_that_is_not_text_or_not_an_object_is_named(tmp_path, toy):
    # `{"question": "` is 1 + 10 + 1 + 1 + 1 = 14 bytes, so the 0xff is byte 14 (0-based) of line 2
    said = refused(tmp_path, "toy", GOOD.encode() + b'{"question": "\xff"}\n')
    assert "not a JSON-lines file: line 2 is not UTF-8 text (invalid start byte at byte 14" in said
    said = refused(tmp_path, "toy", b"\n\n" + GOOD.encode() + b'["2+2?", "4"]\n')
    assert "not a JSON-lines file: line 4 is a JSON list, not an object" in said


def test_a_benchmark_row_that_does_not_load_is_named_by_its_line(tmp_path, monkeypatch):
    rows = [dict(row) for row in FIXTURE_ROWS["aime25/test.jsonl"]]
    entry = dataclasses.replace(CATALOGUE["aime25"], rows=len(rows))  # the fixture's count
    monkeypatch.setitem(CATALOGUE, "aime25", entry)
    rows[1]["answer"] = " "  # a blank gold: no answer could ever match it
    # a blank first line, so the second row is on line 3 (row index 1, as the loader names it)
    text = "\n" + "".join(json.dumps(row) + "\n" for row in rows)
    said = refused(tmp_path, "aime25", text.encode())
    assert "aime25: line 3 of " in said
    assert "brought.jsonl does not load: aime25 row 1: empty gold answer" in said
