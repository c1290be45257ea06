"""The spool on a full disk, with ENOSPC injected at the write call (runs anywhere; the tmpfs version
is tests/e2e/test_full_disk.py): a record is written whole or not at all, never merged with the next."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from quadrants.tracking import spool as spool_module
from quadrants.tracking.disk_full import DiskFullError, is_disk_full
from quadrants.tracking.spool import Spool

_write = os.write  # the real one (the tests patch os.write, which the spool calls)


class FullAfter:
    """os.write that writes `room` more bytes in all (short writes), then fails with ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, fd: int, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = _write(fd, bytes(data[: self.room]))
        self.room -= written
        return written


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_a_cut_write_is_undone_and_the_next_record_starts_clean(
    tmp_path: Path, monkeypatch
) -> None:
    spool = Spool(tmp_path)
    spool.append({"step": 7})
    end = spool.end
    monkeypatch.setattr(spool_module.os, "write", FullAfter(room=10))  # 10 bytes of step 8 fit
    with pytest.raises(DiskFullError, match=rf"^no space left on device: {tmp_path}/000000.jsonl$"):
        spool.append({"step": 8, "metrics": {"train/reward_mean": 0.5}})
    assert spool.end == end and (tmp_path / "000000.jsonl").stat().st_size == end.offset  # cut back
    monkeypatch.undo()  # space again
    spool.append({"step": 9})
    assert [json.loads(line) for line in lines(tmp_path / "000000.jsonl")] == [
        {"step": 7},
        {"step": 9},
    ]
    records, _ = spool.read(spool.cursor, 10)
    assert [r.payload for r in records] == [{"step": 7}, {"step": 9}]  # no corrupt (merged) line
    spool.close()


def test_short_writes_that_complete_keep_the_record_whole(tmp_path: Path, monkeypatch) -> None:
    calls = []

    def three_bytes_at_a_time(fd: int, data: bytes) -> int:
        calls.append(len(data))
        return _write(fd, bytes(data[:3]))

    spool = Spool(tmp_path)
    monkeypatch.setattr(spool_module.os, "write", three_bytes_at_a_time)
    end = spool.append(
        {"n": 12345}
    )  # '{"n":12345}' is 11 bytes + newline = 12 -> 4 calls of 3 bytes
    assert calls == [12, 9, 6, 3] and end.offset == 12
    monkeypatch.undo()
    assert [r.payload for r in spool.read(spool.cursor, 5)[0]] == [{"n": 12345}]
    spool.close()


def test_a_failed_fsync_also_undoes_the_record(tmp_path: Path, monkeypatch) -> None:
    spool = Spool(tmp_path)

    def no_room(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # delayed allocation reports it here

    monkeypatch.setattr(spool_module.os, "fdatasync", no_room)
    with pytest.raises(DiskFullError):
        spool.append({"n": 1})
    assert (tmp_path / "000000.jsonl").stat().st_size == 0
    spool.close()


def test_other_write_errors_are_raised_as_they_are_and_still_cut_back(
    tmp_path: Path, monkeypatch
) -> None:
    spool = Spool(tmp_path)

    def io_error(fd: int, data: bytes) -> int:
        _write(fd, bytes(data[:4]))
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(spool_module.os, "write", io_error)
    with pytest.raises(OSError, match="Input/output error") as caught:
        spool.append({"n": 1})
    assert not isinstance(caught.value, DiskFullError)
    assert (tmp_path / "000000.jsonl").stat().st_size == 0
    spool.close()


def test_disk_full_is_found_inside_torch_style_errors() -> None:
    # torch.save: RuntimeError("unexpected pos ...") raised while handling the OSError
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:  # torch chains implicitly (__context__), never with `from`
            raise RuntimeError(  # noqa: B904
                "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
            )
    except RuntimeError as error:
        torch_save = error
    assert is_disk_full(torch_save)

    class CheckpointException(BaseException):  # torch.distributed.checkpoint's: failures per rank
        def __init__(self, failures: dict) -> None:
            self.failures = failures

    assert is_disk_full(CheckpointException({0: (torch_save, "traceback")}))
    assert not is_disk_full(CheckpointException({0: (RuntimeError("other"), "traceback")}))
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
