"""Hydra's flags (`--cfg job`, `--resolve`, ...) may stand before or after the overrides, for every
entry point: quadrants.sweep, quadrants.submit and quadrants.distributed_main (issue 14)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from quadrants.launch.hydra_setup import hydra_argv, prints_only, split_hydra_argv, with_sweep_id


@pytest.mark.parametrize(
    ("argv", "flags", "overrides"),
    [
        (["experiment=x", "--cfg", "job"], ["--cfg", "job"], ["experiment=x"]),
        (["--cfg", "job", "experiment=x"], ["--cfg", "job"], ["experiment=x"]),
        (["a=1", "-m", "b=2,3", "--cfg=hydra"], ["-m", "--cfg=hydra"], ["a=1", "b=2,3"]),
        (["a=1", "-c", "all", "--resolve", "b=2"], ["-c", "all", "--resolve"], ["a=1", "b=2"]),
        (["a=1", "--info", "b=2"], ["--info"], ["a=1", "b=2"]),  # --info's value is optional
        (["a=1", "--info", "defaults", "b=2"], ["--info", "defaults"], ["a=1", "b=2"]),
        (
            ["-cn", "config", "a=1", "-p", "objective"],
            ["-cn", "config", "-p", "objective"],
            ["a=1"],
        ),
        (["a=1", "b=2"], [], ["a=1", "b=2"]),
    ],
)
def test_flags_and_their_values_are_told_from_overrides(argv, flags, overrides):
    assert split_hydra_argv(argv) == (flags, overrides)
    assert hydra_argv(argv) == [*flags, *overrides]


def test_a_flag_value_is_not_an_override():
    # "job" after --cfg used to count as an override: the sweep id of `--cfg job` differed from the run's
    assert with_sweep_id(["a=1", "--cfg", "job"])[-1] == with_sweep_id(["a=1"])[-1]
    assert prints_only(["a=1", "--cfg", "job"]) and prints_only(["--info", "a=1"])
    assert not prints_only(["-m", "a=1,2"]) and not prints_only(["job=1"])


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.mark.integration  # runs the command as a subprocess
@pytest.mark.parametrize(
    "module", ["quadrants.sweep", "quadrants.submit", "quadrants.distributed_main"]
)
def test_cfg_job_after_the_overrides(module):
    # the command, on the default (tiny) tree so no benchmark data is needed: the flags after
    # the overrides print the same config as before them, and nothing is run or submitted
    after = _run(module, "objective=grpo", "objective.params.clip_ratio_c=3", "--cfg", "job")
    assert after.returncode == 0, after.stderr[-2000:]
    before = _run(module, "--cfg", "job", "objective=grpo", "objective.params.clip_ratio_c=3")
    assert before.returncode == 0, before.stderr[-2000:]
    assert after.stdout == before.stdout
    assert "name: grpo" in after.stdout and "clip_ratio_c: 3" in after.stdout
