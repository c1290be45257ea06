"""When the step may take old log-probs and entropy from the rollout engine
(`train.behaviour_pass`).

The behaviour pass recomputes, with the trainer's module, the log-prob of every sampled token and
the entropy of every step's distribution at the sampling temperature. The HF engine records both
while it samples (quadrants/rollout/decode.py), from the same numbers: same module (one process)
or a per-rank replica synced with the trainer before every step, same temperature, before top-p
truncation, in eval mode. What separates the two is float32 summation order (the engine decodes
token by token through a KV cache, the pass runs the whole sequence): observed differences ~1e-6.
`auto` therefore skips the pass exactly when all of these hold, and recomputes otherwise:
- the HF engine sampled the batch and recorded the entropy (vLLM samples from its own kernels,
  and is the case the mismatch metrics are for);
- no mismatch correction (`rollout.mismatch_correction=none`: with engine numbers as π_old the
  importance weights would be 1 by construction);
- the objective's gradient is continuous at logπ = logπ_old (not KL-Cov:
  `ObjectiveSpec.recomputed_old_logp`, its |logπ − logπ_old| turns rounding into a gradient sign);
- the trainer computes in the dtype its parameters are stored in (`train.precision` fp32, or pure
  bf16; not bf16-mixed, `train_computes_in_storage_dtype`: its bf16 autocast or FSDP2 bf16 compute
  differs from the engine's decode over the stored weights by far more than float32 rounding).
The frozen reference policy's pass (a KL term) is never skipped: the engine does not sample from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from quadrants.objectives.registry import ObjectiveSpec
from quadrants.ops.precision import resolve_precision
from quadrants.rollout.engine import Rollouts
from quadrants.rollout.registry import get_engine

if TYPE_CHECKING:
    from quadrants.config import RunConfig


def engine_numbers_may_stand_in(cfg: RunConfig, spec: ObjectiveSpec) -> bool:
    """The settings' half of `engine_behaviour_is_exact`: true when `train.behaviour_pass=auto`
    and an engine that records entropy would give the numbers the trainer's pass would."""
    return (
        cfg.train.behaviour_pass == "auto"
        and not spec.recomputed_old_logp
        and get_engine(cfg.rollout.engine).samples_from_trainer_weights
        and cfg.rollout.mismatch_correction == "none"
        and train_computes_in_storage_dtype(cfg)
    )


def train_computes_in_storage_dtype(cfg: RunConfig) -> bool:
    """False when `train.precision` resolves to bf16-mixed on this run's training device (`auto`:
    on CUDA, which `train.device` auto or cuda trains on wherever CUDA is available)."""
    name = cfg.train.precision
    if name == "auto":
        return cfg.train.device == "cpu" or not torch.cuda.is_available()
    return not resolve_precision(name, torch.device("cpu")).mixed


def engine_behaviour_is_exact(cfg: RunConfig, spec: ObjectiveSpec, rollouts: Rollouts) -> bool:
    """True when `train.behaviour_pass=auto` and the engine's log-probs and entropy
    stand in for the pass."""
    return engine_numbers_may_stand_in(cfg, spec) and rollouts.behaviour_entropy is not None
