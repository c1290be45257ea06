"""`python -m quadrants.sweep` starts a CPU run's process again with the OpenMP spin count of
`train.cpu.omp_spincount` (libgomp reads it only when torch loads: quadrants/cpu/openmp.py), and
never a run that trains on a GPU, submits to SLURM, or only prints."""

from __future__ import annotations

import pytest
import torch

from quadrants.launch.hydra_setup import cpu_run_environment

SPIN = {"GOMP_SPINCOUNT": "1000"}


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["train.device=cpu"], {}, SPIN),
        (["train.device=cpu", "train.cpu.omp_spincount=50"], {}, {"GOMP_SPINCOUNT": "50"}),
        (["train.device=cpu", "train.cpu.omp_spincount=null"], {}, {}),  # libgomp's default
        (["train.device=cpu"], {"OMP_WAIT_POLICY": "PASSIVE"}, {}),  # the user's setting wins
        (["train.device=cpu"], {"GOMP_SPINCOUNT": "300000"}, {}),
        (["train.device=cuda"], {}, {}),  # a GPU run is left as it is
        (["-m", "launcher=slurm", "train.device=cpu"], {}, {}),  # the cluster's nodes decide
        (["--cfg", "job", "train.device=cpu"], {}, {}),  # prints only
        (["train.device=cpu", "no_such_key=1"], {}, {}),  # preflight names the problem
    ],
)
def test_cpu_run_environment(argv, environ, expected):
    assert cpu_run_environment(argv, environ) == expected


@pytest.mark.parametrize(("cuda", "expected"), [(True, {}), (False, SPIN)])
def test_auto_follows_what_the_machine_has(cuda, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert cpu_run_environment(["train.device=auto"], {}) == expected
