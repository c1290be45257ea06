"""`python -m quadrants.sweep` starts a CPU run's process again with the OpenMP spin count of
`train.cpu.omp_spincount` when one is set (libgomp reads it only when torch loads:
quadrants/cpu/openmp.py), and never a run that keeps libgomp's default (null, the default), trains
on a GPU, submits to SLURM, or only prints."""

from __future__ import annotations

import pytest
import torch

from quadrants.launch.hydra_setup import cpu_run_environment

SPIN = {"GOMP_SPINCOUNT": "1000"}
CPU_1000 = ["train.device=cpu", "train.cpu.omp_spincount=1000"]


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["train.device=cpu"], {}, {}),  # the default: libgomp's own, no second start
        ([*CPU_1000], {}, SPIN),
        (["train.device=cpu", "train.cpu.omp_spincount=50"], {}, {"GOMP_SPINCOUNT": "50"}),
        (["train.device=cpu", "train.cpu.omp_spincount=null"], {}, {}),
        ([*CPU_1000], {"OMP_WAIT_POLICY": "PASSIVE"}, {}),  # the user's setting wins
        ([*CPU_1000], {"GOMP_SPINCOUNT": "300000"}, {}),
        (["train.device=cuda", "train.cpu.omp_spincount=1000"], {}, {}),  # a GPU run: as it is
        (["-m", "launcher=slurm", *CPU_1000], {}, {}),  # the cluster's nodes decide
        (["--cfg", "job", *CPU_1000], {}, {}),  # prints only
        ([*CPU_1000, "no_such_key=1"], {}, {}),  # preflight names the problem
    ],
)
def test_cpu_run_environment(argv, environ, expected):
    assert cpu_run_environment(argv, environ) == expected


@pytest.mark.parametrize(("cuda", "expected"), [(True, {}), (False, SPIN)])
def test_auto_follows_what_the_machine_has(cuda, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert (
        cpu_run_environment(["train.device=auto", "train.cpu.omp_spincount=1000"], {}) == expected
    )
