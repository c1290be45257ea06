"""The on-disk spool alone: durable appends, reads from a cursor, commits, segments, the lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quadrants.tracking.spool import Position, Spool, SpoolBusyError


def test_records_come_back_in_order_from_the_cursor(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    ends = [spool.append({"n": n}) for n in range(5)]
    assert [r.payload["n"] for r in spool.read(spool.cursor, 10)[0]] == [0, 1, 2, 3, 4]
    spool.commit(ends[1])  # 0 and 1 delivered
    assert [r.payload["n"] for r in spool.read(spool.cursor, 2)[0]] == [2, 3]
    spool.close()


def test_cursor_and_records_survive_a_new_process(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    ends = [spool.append({"n": n}) for n in range(4)]
    spool.commit(ends[2])
    spool.update_state(run_id="abc")
    spool.close()
    again = Spool(tmp_path)
    assert again.state["run_id"] == "abc"
    assert [r.payload["n"] for r in again.read(again.cursor, 10)[0]] == [3]
    again.close()


def test_half_written_last_line_is_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append({"n": 0})
    spool.close()
    with open(tmp_path / "000000.jsonl", "ab") as handle:  # a write cut short by a crash
        handle.write(b'{"n": 1, "trunc')
    again = Spool(tmp_path)
    again.append({"n": 2})
    assert [r.payload["n"] for r in again.read(again.cursor, 10)[0]] == [0, 2]
    again.close()


def test_second_owner_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(SpoolBusyError) as refused:
        Spool(tmp_path)
    # the holder (this process: flock locks belong to the open file, so a second open conflicts)
    # is named with its command line, and the message says what to do
    command = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    message = str(refused.value)
    assert f"process {os.getpid()} ({command})" in message, message
    assert f"kill {os.getpid()}" in message and "run the command again" in message, message
    spool.close()
    Spool(tmp_path).close()  # the holder let go: the next one takes the spool over


def test_segments_rotate_and_delivered_ones_are_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=100)  # each record is ~10 bytes: ~10 per segment
    ends = [spool.append({"n": n}) for n in range(40)]
    assert len(list(tmp_path.glob("*.jsonl"))) >= 4
    assert [r.payload["n"] for r in spool.read(spool.cursor, 100)[0]] == list(range(40))
    spool.commit(ends[25])
    assert min(int(p.stem) for p in tmp_path.glob("*.jsonl")) == ends[25].segment
    assert [r.payload["n"] for r in spool.read(spool.cursor, 100)[0]] == list(range(26, 40))
    spool.close()


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.booleans()), min_size=1, max_size=12
    )
)
def test_every_record_is_read_once_across_commits_and_restarts(tmp_path_factory, plan) -> None:
    # plan: rounds of (append k records, commit the first j readable ones, restart the process?)
    directory = tmp_path_factory.mktemp("spool")
    spool = Spool(directory, segment_bytes=64)
    written, delivered = 0, []
    for appends, commits, restart in plan:
        for _ in range(appends):
            spool.append({"n": written})
            written += 1
        records, _ = spool.read(spool.cursor, commits)
        if records:
            delivered += [r.payload["n"] for r in records]
            spool.commit(records[-1].end)
        if restart:
            spool.close()
            spool = Spool(directory, segment_bytes=64)
    delivered += [r.payload["n"] for r in spool.read(spool.cursor, 10_000)[0]]
    spool.close()
    assert delivered == list(range(written))


def test_positions_order_by_segment_then_offset() -> None:
    assert Position(0, 500) < Position(1, 0) < Position(1, 3)


def test_an_empty_segment_left_by_a_crash_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    end = spool.append({"n": 0})
    spool.commit(end)
    spool.close()
    (tmp_path / "000001.jsonl").touch()  # rotated, then killed before the first write
    again = Spool(tmp_path)
    records, reached = again.read(again.cursor, 10)
    assert records == [] and reached == again.end == Position(1, 0)
    again.close()
