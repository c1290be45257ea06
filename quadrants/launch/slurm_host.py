"""Is this machine a SLURM submit host? Asked before a SLURM launcher writes anything (a sweep
directory, `.submitit/`, an MLflow parent run), by `quadrants.sweep -m ... launcher=slurm` and by
`quadrants.submit`, which give the same message."""

from __future__ import annotations

import shutil
import subprocess

SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
_PING_TIMEOUT_S = 15.0


def slurm_problem() -> str | None:
    """Why SLURM cannot take a job array from here (None: sbatch is there and
    the controller answers)."""
    if shutil.which("sbatch") is None:
        return "sbatch is not on PATH: this machine is not a SLURM submit host"
    if shutil.which("scontrol") is None:
        return None  # no way to ask the controller; sbatch will say
    try:
        ping = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=_PING_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"the SLURM controller did not answer `scontrol ping` within {_PING_TIMEOUT_S:.0f} s"
    text = " ".join((ping.stdout + ping.stderr).split())
    if ping.returncode != 0 or "DOWN" in text:
        return (
            "the SLURM controller does not answer: `scontrol ping` says "
            f"{text[:300] or f'exit {ping.returncode}'}"
        )
    return None


def no_slurm_message(reason: str) -> str:
    """What `quadrants.sweep` and `quadrants.submit` print when SLURM is not available."""
    return (
        "quadrants: SLURM is not available, nothing was submitted and nothing was written.\n"
        f"  {reason}\n"
        "  run the command on a SLURM login node; or start the one-machine dev "
        "cluster (slurm/devcluster.sh) and use launcher=slurm_dev; or drop "
        "launcher=slurm to train on this machine"
    )
