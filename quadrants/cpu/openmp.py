"""How long torch's idle OpenMP threads busy-wait between parallel regions
(`train.cpu.omp_spincount`).

torch's CPU kernels run in OpenMP parallel regions; the Linux wheels use GNU libgomp (MKL's
matrix multiplies use the same threads). Between two regions an idle thread spins
`GOMP_SPINCOUNT` times, then sleeps on a futex; libgomp's default is 300,000 spins (0 under
`OMP_WAIT_POLICY=PASSIVE`), cut to 100 only when one process runs more OpenMP threads than it has
CPUs (gcc-mirror/gcc, libgomp/config/linux/wait.h `do_spin`, libgomp/env.c): libgomp does not see
other processes. Measured on the tiny workload of benchmarks/vs_trl.py, 2 threads
(docs/performance.md, "OpenMP waiting"): alone, 1,000 spins took 1.36x the step of libgomp's
default on an Intel Xeon VM (waking a sleeping thread is dear there) and 1.08x on AMD; with another
job on the same cores, libgomp's default took 4.5x the step of 1,000 spins. The default is
therefore libgomp's own, as in any torch program (the local launcher never runs more threads than
cores), and `train.cpu.omp_spincount=1000` is the setting for a machine shared with other CPU jobs.

libgomp reads these variables once, when it is loaded (its `initialize_env` constructor, which
runs when torch is first imported), and has no call that changes them later. So the spin count
can only be given to a process before it starts: `spin_environment` says which variables a CPU
run's process should start with, and `python -m quadrants.sweep` starts itself again with them
when its runs train on this machine's CPU (quadrants/launch/sweep.py). Nothing sets them on
import, and an explicit `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` always wins.
"""

from __future__ import annotations

from collections.abc import Mapping

VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # libgomp's; either one set by the user wins


def spin_environment(spincount: int | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to `environ` so that libgomp spins `spincount` times: {} when
    `spincount` is None (libgomp's own default) or the user set either variable.

    >>> spin_environment(1000, {}), spin_environment(1000, {"OMP_WAIT_POLICY": "PASSIVE"})
    ({'GOMP_SPINCOUNT': '1000'}, {})
    """
    if spincount is None or any(name in environ for name in VARIABLES):
        return {}
    return {"GOMP_SPINCOUNT": str(int(spincount))}


def spin_in_effect(environ: Mapping[str, str]) -> str:
    """What libgomp of a process started with `environ` does, in words (for the log)."""
    if "GOMP_SPINCOUNT" in environ:
        return f"GOMP_SPINCOUNT={environ['GOMP_SPINCOUNT']}"
    if "OMP_WAIT_POLICY" in environ:
        return f"OMP_WAIT_POLICY={environ['OMP_WAIT_POLICY']}"
    return "libgomp's default (300,000 spins)"
