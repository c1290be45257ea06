"""The test tiers hold: pyproject's default selection is the default stage of tests/conftest.py, and
the default stage refuses to start what belongs to another stage (checked before anything starts:
the guard raises inside Popen, so these tests install, start and bring up nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import STAGES, heavy_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_selection_deselects_every_stage():
    pyproject = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+; the project runs on 3.10
    (addopts,) = re.findall(r"^addopts = (.*)$", pyproject, flags=re.M)
    assert f"-m 'not ({' or '.join(STAGES)})'" in addopts
    declared = set(re.findall(r'^    "(\w+): ', pyproject, flags=re.M))
    assert set(STAGES) | {"quick", "slow", "subprocess"} <= declared


@pytest.mark.parametrize(
    ("command", "stage"),
    [
        (["apt-get", "install", "-y", "slurm-wlm"], "slurm"),
        ("apt-get update -qq", "slurm"),  # shell=True
        (["bash", "/x/slurm/devcluster.sh", "up"], "slurm"),
        ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"], "distributed"),
        (["/venv/bin/torchrun", "--standalone"], "distributed"),
        (["/venv/bin/mlflow", "server", "--port", "5001"], "server"),
        ([sys.executable, "-m", "mlflow", "server"], "server"),
        ([sys.executable, "-m", "quadrants.sweep", "-m", "quadrant=PHR"], None),
        (["/usr/bin/server-less", "server"], None),  # `server` alone is not MLflow's
    ],
)
def test_heavy_commands_are_named_by_their_stage(command, stage):
    assert heavy_command(command) == stage


@pytest.mark.subprocess  # not quick: in the quick tier any command is refused, with another message
def test_the_default_stage_refuses_torchrun_before_it_starts():
    with pytest.raises(AssertionError, match=r"default stage .* mark it @pytest.mark.distributed"):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], check=False)


def test_a_quick_test_may_start_no_command():
    with pytest.raises(AssertionError, match=r"quick tier .* mark it @pytest.mark.subprocess"):
        subprocess.run([sys.executable, "--version"], check=False)
