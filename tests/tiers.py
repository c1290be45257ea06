"""The test tiers and the stages of .ci/run, by name (tests/conftest.py applies them).

Every test runs in exactly one stage of .ci/run. A test's stage is the first of STAGES whose marker it
carries (its own, or its folder's in FOLDER_MARKERS); a test with none of them is in the `default`
stage, which is what the README's bare `python -m pytest` runs (pyproject's addopts deselect the
rest). `python -m pytest --stage=NAME` runs one stage, `--stage=all` every test. The order matters
only for tests with two stage markers (a vLLM test on SLURM runs with vLLM).

The quick tier (`pytest -m quick`, about a minute) is chosen by what a test does, not by its folder:
every default-stage test that is not marked `slow`, starts no process (`subprocess`: a command, a
pool of workers that import torch, a server) and needs no trained model (MODEL_FIXTURES). While a
quick test runs, starting a process or building the base policy fails it, naming the marker; while
any default-stage test runs, starting one of HEAVY_COMMANDS fails it, naming its stage.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

STAGES = (
    "vllm",
    "browser",
    "real_model",
    "full_data",
    "slurm",
    "distributed",
    "server",
    "pinned",
    "integration",
)
FOLDER_MARKERS = {
    "tests/distributed/": "distributed",
    "tests/slurm/": "slurm",
    "tests/browser/": "browser",
    "tests/real_model/": "real_model",
}
NOT_QUICK_MARKERS = ("slow", "subprocess", "gpu")
MODEL_FIXTURES = ("base_policy",)


# What the default stage never starts, with the stage a test that does belongs to: the README's test
# command installs nothing, starts no rank group, no server and no cluster.
HEAVY_COMMANDS = {
    "apt-get": "slurm",
    "dpkg": "slurm",
    "devcluster.sh": "slurm",
    "slurmctld": "slurm",
    "slurmd": "slurm",
    "torchrun": "distributed",
    "torch.distributed.run": "distributed",
    "server": "server",  # `mlflow server`, `python -m mlflow server`
}


def heavy_command(args) -> str | None:
    """The stage marker a command belongs to, if it is one the default stage must not start."""
    if isinstance(args, (str, bytes)):
        words = shlex.split(os.fsdecode(args))  # shell=True, or one program path
    elif isinstance(args, os.PathLike):
        words = [args]
    else:
        words = list(args)
    names = [Path(os.fsdecode(w)).name for w in words]
    if "server" in names and not any("mlflow" in n for n in names):
        names.remove("server")
    return next((HEAVY_COMMANDS[n] for n in names if n in HEAVY_COMMANDS), None)
