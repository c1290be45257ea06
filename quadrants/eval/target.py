"""What `python -m quadrants.evaluate TARGET` evaluates, resolved before anything is loaded.

TARGET is one of:
- a training run directory (``outputs/<study>/<sweep_id>/<job>``): its newest checkpoint;
- a checkpoint directory (``<run_dir>/checkpoints/step_0000060``);
- a local Hugging Face model directory (written by ``save_pretrained``; has ``config.json``);
- ``tiny`` / ``tiny-random``, the embedded models;
- a Hugging Face hub id (``Qwen/Qwen2.5-Math-7B``), loaded by transformers (from its cache when
  ``HF_HUB_OFFLINE=1``).

A checkpoint holds only weights and optimizer state: the base model (``model.name_or_path``,
``model.dtype``) and the task come from the run's ``config.yaml``, written by every sweep job.
A path that does not exist fails here, naming it, before any model is loaded.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from quadrants.models.loading import SMOLLM2, TINY, TINY_RANDOM

__all__ = [
    "EvalTarget",
    "load_checkpoint_weights",
    "load_target_policy",
    "resolve_target",
    "run_lora",
]

_STEP_DIR = re.compile(r"^step_(\d+)$")
_SHARDS_DIR = (
    "model_optim"  # model + optimizer as torch.distributed.checkpoint shards (run/checkpoint.py)
)


@dataclass(frozen=True)
class EvalTarget:
    """A resolved evaluation target.

    Attributes:
        kind: "checkpoint", "model_dir", "embedded" or "hub".
        label: a short name for run names and directories.
        model: what `load_policy` loads (the run's base model for a checkpoint).
        dtype: the model dtype (the run's for a checkpoint, else None = the config's).
        checkpoint: the ``state.pt`` to load on top of `model`, for checkpoints.
        step: training steps the checkpoint holds (0 otherwise); the MLflow step of the metrics.
        run_config: the training run's config.yaml as a dict, for checkpoints.
        source_run_id: the training run's MLflow run id (from its run.json or checkpoint), if known.
    """

    kind: str
    label: str
    model: str
    dtype: str | None = None
    checkpoint: Path | None = None
    step: int = 0
    run_config: dict[str, Any] | None = None
    source_run_id: str | None = None


def _complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    found = []
    if root.is_dir():
        for path in root.iterdir():
            match = _STEP_DIR.match(path.name)
            if match and (path / "state.pt").is_file():
                found.append((int(match.group(1)), path))
    return sorted(found)


def _from_checkpoint(step: int, path: Path, run_dir: Path) -> EvalTarget:
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"checkpoint {path} has no {config_file}: the base model is unknown. Evaluate "
            "checkpoints of runs started by `python -m quadrants.sweep` (it writes "
            "config.yaml into the run directory)"
        )
    run_config = yaml.safe_load(config_file.read_text()) or {}
    model = run_config.get("model") or {}
    if not model.get("name_or_path"):
        raise ValueError(f"{config_file} has no model.name_or_path")
    run_json = run_dir / "run.json"
    source_run_id = json.loads(run_json.read_text()).get("run_id") if run_json.is_file() else None
    return EvalTarget(
        kind="checkpoint",
        label=f"{run_dir.name}@step_{step}",
        model=str(model["name_or_path"]),
        dtype=model.get("dtype"),
        checkpoint=path / "state.pt",
        step=step,
        run_config=run_config,
        source_run_id=source_run_id,
    )


def resolve_target(target: str) -> EvalTarget:
    """Classify `target` (see the module docstring); raises FileNotFoundError for a missing path."""
    if target in (TINY, TINY_RANDOM, SMOLLM2):  # models quadrants builds itself (no hub lookup)
        return EvalTarget(kind="embedded", label=target, model=target)
    path = Path(target).expanduser()
    if path.is_dir():
        path = path.resolve()
        if _STEP_DIR.match(path.name) and (path / "state.pt").is_file():
            return _from_checkpoint(
                int(_STEP_DIR.match(path.name).group(1)), path, path.parent.parent
            )  # type: ignore[union-attr]
        if (path / "checkpoints").is_dir():
            complete = _complete_checkpoints(path / "checkpoints")
            if not complete:
                raise FileNotFoundError(
                    f"run directory {path} has no complete checkpoint under checkpoints/ "
                    "(set checkpoint.every > 0 when training, or pass a model directory)"
                )
            step, newest = complete[-1]
            return _from_checkpoint(step, newest, path)
        if (path / "config.json").is_file():
            return EvalTarget(kind="model_dir", label=path.name, model=str(path))
        raise FileNotFoundError(
            f"{path} is neither a training run directory (with checkpoints/), a checkpoint "
            "(step_N with state.pt) nor a model directory (with config.json)"
        )
    looks_like_path = target.startswith((".", "/", "~")) or target.count("/") > 1 or path.exists()
    if looks_like_path:
        raise FileNotFoundError(
            f"no model, run or checkpoint directory at {path}. Pass a training run directory, a "
            f"checkpoint directory, a model directory, '{TINY}' / '{TINY_RANDOM}', or a hub id "
            "such as 'Qwen/Qwen2.5-Math-7B'"
        )
    _check_offline_cache(target)
    return EvalTarget(kind="hub", label=target.replace("/", "--"), model=target)


def _check_offline_cache(hub_id: str) -> None:
    """With HF_HUB_OFFLINE set, a hub id must already be in the local Hugging Face cache."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in {"1", "true", "yes", "on"}:
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        raise FileNotFoundError(
            f"{hub_id!r} is neither a local directory nor in the Hugging Face cache, and "
            "HF_HUB_OFFLINE is set. Download it on a machine with network (`huggingface-cli "
            f"download {hub_id}`) and copy the cache or the directory here, or evaluate '{TINY}'"
        )


def load_target_policy(target: EvalTarget, *, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) of `target`; a checkpoint's weights are loaded into
    its run's base model."""
    from quadrants.models.loading import load_policy

    model, tokenizer = load_policy(
        target.model, dtype=target.dtype or dtype, seed=seed, lora=run_lora(target)
    )
    if target.checkpoint is not None:
        load_checkpoint_weights(target, model)
    return model, tokenizer


def load_checkpoint_weights(target: EvalTarget, model: Any) -> None:
    """The checkpoint's model weights loaded into `model` (the run's base model, with its LoRA
    adapters in place for a LoRA run), which is left in eval mode."""
    import torch

    assert target.checkpoint is not None, "not a checkpoint target"
    shards = target.checkpoint.parent / _SHARDS_DIR
    if shards.is_dir():
        _load_sharded_model(shards, model)
    else:  # older checkpoints keep the model in state.pt
        state = torch.load(target.checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    model.eval()


def run_lora(target: EvalTarget) -> Any:
    """The training run's `model.lora` for a checkpoint of a LoRA run (its adapters are loaded
    into the same layers), else None."""
    from quadrants.config import LoraConfig

    lora = ((target.run_config or {}).get("model") or {}).get("lora") or {}
    return LoraConfig(**lora) if lora.get("enabled") else None


def _load_sharded_model(directory: Path, model: Any) -> None:
    """Only the model part of a torch.distributed.checkpoint written by any number of ranks (DCP
    loads the requested keys; the optimizer shards are not read). A LoRA model (frozen base):
    only its trainable keys are requested, as a LoRA run saves them
    (run/distributed_checkpoint.py); the base is the one just loaded from its source."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    from quadrants.models.lora import has_frozen, without_frozen

    options = None
    if has_frozen(model):
        options = StateDictOptions(ignore_frozen_params=True, strict=False)
    state = {"model": without_frozen(model, get_model_state_dict(model, options=options))}
    with (
        warnings.catch_warnings()
    ):  # DCP warns that it runs in single-process mode without a group: meant
        warnings.filterwarnings(
            "ignore", message=".*torch.distributed is (disabled|not initialized|unavailable).*"
        )
        dcp.load(state, checkpoint_id=str(directory))
    set_model_state_dict(model, state["model"], options=options)
