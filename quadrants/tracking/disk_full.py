"""A full disk, said once and plainly: `DiskFullError` ("no space left on device: <path>") and
`is_disk_full`, which recognises ENOSPC/EDQUOT however deep a library buried it (torch.save's
"unexpected pos" RuntimeError carries it as its context; torch.distributed.checkpoint wraps that in
a CheckpointException per rank).

Policy (docs/reliability.md): a record that cannot be written whole is not written at all, and the
run stops after trying to checkpoint the step, naming the path; a re-run with space resumes and
re-sends every step MLflow lacks. Nothing waits for space to come back.
"""

from __future__ import annotations

import errno
from pathlib import Path

_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """A write failed for lack of space (or quota) on the device holding `path`."""

    def __init__(self, path: Path | str, detail: str = "") -> None:
        super().__init__(errno.ENOSPC, "no space left on device", str(path))
        self.path = Path(path)
        self.detail = detail

    def __str__(self) -> str:
        return f"no space left on device: {self.path}" + (
            f" ({self.detail})" if self.detail else ""
        )


def is_disk_full(error: BaseException | None) -> bool:
    """Whether `error`, its cause/context chain, or a per-rank failure it wraps is ENOSPC/EDQUOT."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return True
        pending += [current.__cause__, current.__context__]
        failures = getattr(
            current, "failures", None
        )  # torch.distributed.checkpoint's CheckpointException
        if isinstance(failures, dict):  # rank -> (exception, traceback)
            for failure in failures.values():
                inner = failure[0] if isinstance(failure, tuple) and failure else failure
                if isinstance(inner, BaseException):
                    pending.append(inner)
    return False
