"""`python -m quadrants.export` refuses a folder it could not write before it looks at the run or
loads a checkpoint (launch/export.py): a path under a file, a read-only place. The run named here
does not even exist, so a refusal about the folder shows the folder is checked first."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from quadrants.launch.export import main


def _read_only() -> Path:
    for candidate in ("/sys", "/proc/sys"):
        if Path(candidate).is_dir() and not os.access(candidate, os.W_OK):
            return Path(candidate)
    pytest.skip("no read-only file system on this machine")


@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_an_unwritable_export_folder_is_refused_first_writing_nothing(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a directory\n")
    if where == "under_a_file":
        out, said = tmp_path / "a_file" / "exported", "a_file is a file, not a directory"
    else:
        if os.geteuid() != 0:
            (tmp_path / "ro").mkdir(mode=0o555)
            out = tmp_path / "ro" / "exported"
        else:  # root writes through modes: a read-only file system
            out = _read_only() / "exported"
        said = "is not writable here (read-only)"
    before = sorted(tmp_path.rglob("*"))
    started = time.perf_counter()
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "no_such_run"), str(out)])
    assert time.perf_counter() - started < 10
    message = str(refused.value.code)
    assert message.startswith("quadrants.export: the export folder") and said in message
    assert "no_such_run" not in message  # the folder is checked before the run is read
    assert sorted(tmp_path.rglob("*")) == before and not out.exists()
