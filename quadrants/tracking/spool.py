"""A crash-safe, append-only on-disk queue of tracking records, with a persisted delivery cursor.

The training thread appends one JSON line per record and fsyncs it before `append` returns, so a
record survives a SIGKILL (and a power cut) the moment it is accepted. A delivery thread reads
records from the cursor on, hands them to the tracking store and then `commit`s the cursor, which is
written atomically to `state.json`. A later process opening the same directory starts from that
cursor, so it re-sends at most what was in flight when the earlier one died.

Layout of a spool directory (one directory per run; only one process may hold it at a time):

    lock            flock'd by the owning process; the kernel releases it when that process dies
    state.json      {"cursor": [segment, offset], "spool_id": ..., plus whatever the owner stores}
    000000.jsonl    segments: one JSON record per line; a new one starts after `segment_bytes`;
    000001.jsonl    a segment is deleted once the cursor has moved past it
    artifacts/      copies of small artifact files, kept until they are delivered
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quadrants.tracking.disk_full import DiskFullError, is_disk_full

log = logging.getLogger("quadrants.tracking")

_STATE = "state.json"
_SUFFIX = ".jsonl"


class SpoolBusyError(RuntimeError):
    """Another live process holds the spool directory (the message names it and what to do)."""


def _write_holder(lock_fd: int) -> None:
    """Put this process's id and command line in the lock file it holds, for `busy_message`. (A
    holder that dies lets go of the lock with it: the next process takes the spool over.)"""
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    record = json.dumps({"pid": os.getpid(), "command": command}).encode()
    try:
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, record, 0)
    except OSError:  # a full disk: the lock holds all the same, the message names no process
        pass


def busy_message(directory: Path) -> str:
    """What a process finds when another holds `directory`'s lock: who, and what to do."""
    try:
        holder = json.loads((Path(directory) / "lock").read_text())
        pid, command = int(holder["pid"]), str(holder["command"])
    except (OSError, ValueError, KeyError, TypeError):
        pid, command = None, ""
    who = (
        f"process {pid} ({command or 'command unknown'})"
        if pid is not None
        else "another process (it did not record its id)"
    )
    return (
        f"the tracking spool {directory} is held by {who}, still running: the same run is being "
        f"trained (or its records delivered) there, perhaps by an earlier command that is still "
        f"going. Wait for it to end, or stop it"
        + (f" (kill {pid}: it checkpoints its last step and exits)" if pid is not None else "")
        + "; then run the command again: it resumes the run and takes the spool over."
    )


@dataclass(frozen=True, order=True)
class Position:
    """A place in the spool: byte `offset` into segment number `segment`."""

    segment: int
    offset: int


@dataclass(frozen=True)
class SpoolRecord:
    """One appended record and the position just after it (what to commit once it is delivered)."""

    payload: dict[str, Any]
    end: Position


class Spool:
    """Append records durably; read them back from a cursor; persist the
    cursor and a small state."""

    def __init__(
        self, directory: Path, *, segment_bytes: int = 32 << 20, fsync: bool = True
    ) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self._lock_fd)
            raise SpoolBusyError(busy_message(self.directory)) from err
        _write_holder(self._lock_fd)
        self._write_lock = threading.Lock()
        self._broken: OSError | None = None
        self._state_lock = threading.Lock()
        self._state: dict[str, Any] = self._load_state()
        segments = self._segments()
        self._segment = segments[-1] if segments else 0
        path = self._segment_path(self._segment)
        _drop_torn_tail(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._end = Position(self._segment, os.fstat(self._fd).st_size)
        cursor = Position(*self._state["cursor"])
        if cursor > self._end or cursor.segment not in segments + [self._segment]:
            cursor = Position(segments[0], 0) if segments else Position(0, 0)
        self._cursor = min(cursor, self._end)

    # ---- writing (training thread) -------------------------------------------------------------

    def append(self, payload: dict[str, Any]) -> Position:
        """Write one record and make it durable; return the position after it.

        All or nothing: a write that fails or stops short (a full disk) is cut back to the previous
        end, so the segment never holds half a record for the next one to be appended onto, and
        raises (`DiskFullError` for ENOSPC/EDQUOT). The record then is not in the spool."""
        line = (json.dumps(payload, separators=(",", ":")) + "\n").encode()
        with self._write_lock:
            if self._broken is not None:
                raise self._broken
            if self._end.offset >= self._segment_bytes:
                self._rotate()
            try:
                written = 0
                while written < len(
                    line
                ):  # os.write may write part of the line (a nearly full disk)
                    written += os.write(self._fd, line[written:])
                if self._fsync:
                    os.fdatasync(self._fd)
            except OSError as error:
                self._cut_back(self._end)
                if is_disk_full(error):
                    raise DiskFullError(self._segment_path(self._segment)) from None
                raise
            self._end = Position(self._segment, self._end.offset + len(line))
            return self._end

    def _cut_back(self, end: Position) -> None:
        """Drop what a failed append left after `end`; if even that fails, refuse further appends
        (a later record would be glued onto the torn one)."""
        try:
            os.ftruncate(self._fd, end.offset)
        except OSError as error:
            self._broken = OSError(
                error.errno,
                f"spool segment {self._segment_path(end.segment)} holds a torn "
                f"record that could not be cut off ({error.strerror})",
            )
            raise self._broken from error

    @property
    def end(self) -> Position:
        """Position after the last record appended so far."""
        return self._end

    def _rotate(self) -> None:
        path = self._segment_path(self._segment + 1)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            if is_disk_full(error):
                raise DiskFullError(path) from None
            raise
        os.close(self._fd)
        self._fd = fd
        self._segment += 1
        _fsync_dir(self.directory)
        self._end = Position(self._segment, 0)

    # ---- reading and committing (delivery thread) ---------------------------------------------

    @property
    def cursor(self) -> Position:
        """Everything before this position has been delivered (or deliberately dropped)."""
        return self._cursor

    def pending(self) -> bool:
        return self._cursor < self._end

    def read(self, start: Position, max_records: int) -> tuple[list[SpoolRecord], Position]:
        """Up to `max_records` complete records from `start` on, never past what was appended, and
        the position the scan reached (past emptied segments: committing it skips nothing)."""
        stop = self._end
        records: list[SpoolRecord] = []
        position = start
        while len(records) < max_records and position < stop:
            path = self._segment_path(position.segment)
            last = position.segment == stop.segment
            at_eof = False
            try:
                with open(path, "rb") as handle:
                    handle.seek(position.offset)
                    offset = position.offset
                    while len(records) < max_records and not (last and offset >= stop.offset):
                        line = handle.readline()
                        if not line.endswith(b"\n"):
                            at_eof = True
                            break
                        offset += len(line)
                        end = Position(position.segment, offset)
                        try:
                            records.append(SpoolRecord(json.loads(line), end))
                        except ValueError:
                            log.error(
                                "skipping an unreadable spool line in %s before byte %d",
                                path,
                                offset,
                            )
                            records.append(SpoolRecord({"kind": "corrupt"}, end))
                    position = Position(position.segment, offset)
            except FileNotFoundError:
                at_eof = True
            if last or not at_eof:
                break
            position = Position(position.segment + 1, 0)  # an older segment is complete: move on
        return records, position

    def commit(self, position: Position) -> None:
        """Record that everything before `position` is done; drop segments wholly before it."""
        if position <= self._cursor:
            return
        self._cursor = position
        self.update_state(cursor=[position.segment, position.offset])
        for segment in self._segments():
            if segment < position.segment:
                self._segment_path(segment).unlink(missing_ok=True)

    # ---- small persistent state -----------------------------------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        return dict(self._state)

    def update_state(self, **fields: Any) -> None:
        """Merge `fields` into state.json, replacing the file atomically.

        Not fsync'd: after a power loss an older state only means re-sending records, which the
        delivery side deduplicates; an fsync per commit would compete with the training thread's."""
        with self._state_lock:
            self._state.update(fields)
            tmp = self.directory / f"{_STATE}.tmp"
            try:
                tmp.write_text(json.dumps(self._state))
            except OSError as error:
                if is_disk_full(error):
                    raise DiskFullError(tmp) from None
                raise
            os.replace(tmp, self.directory / _STATE)

    def close(self) -> None:
        """Close files and release the directory lock (idempotent)."""
        with self._write_lock:
            for fd in (self._fd, self._lock_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fd = self._lock_fd = -1

    # ---- helpers --------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        path = self.directory / _STATE
        state: dict[str, Any] = {}
        if path.exists():
            try:
                state = json.loads(path.read_text())
            except ValueError:
                log.error("unreadable %s: delivering this spool from its start again", path)
        state.setdefault("cursor", [0, 0])
        state.setdefault("spool_id", uuid.uuid4().hex)
        return state

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{_SUFFIX}") if p.stem.isdigit())

    def _segment_path(self, segment: int) -> Path:
        return self.directory / f"{segment:06d}{_SUFFIX}"


def _drop_torn_tail(path: Path) -> None:
    """Cut a half-written last line (a write interrupted by a crash) so appends start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        log.warning(
            "dropping %d bytes of a half-written record at the end of %s", len(data) - keep, path
        )
        handle.truncate(keep)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
