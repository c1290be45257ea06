"""When the step's first update replays the decode's projection outputs (`train.decode_replay_mb`).

The replay (quadrants/models/replay.py) gives the plain update's loss and gradient to float
tolerance only if the recorded outputs are what the update's forward would compute: the same
weights, in the same dtype, over the same rows and columns. So the step asks the engine to record
(`record_budget_mb`) and replays (`decode_replay`) only when all of these hold:
- the old log-probs and entropy come from the engine (`engine_behaviour_is_exact`: the HF engine
  sampling from the trainer's own weights, no mismatch correction, no bf16 trainer, and an objective
  that does not need them recomputed by the trainer's forward, as KL-Cov does);
- one process (the decode that records is the trainer's module; ranks would each hold others' rows);
- the module replays (`replay_unsupported`: plain projections, no dropout, no checkpointing);
- the fast decode recorded the batch, within the budget, and the batch is the rollout as recorded
  (a refill or multi-block batch is assembled from several rollouts: nothing is recorded for it,
  and outputs that reach such a batch anyway are dropped with it);
- and only the first mini-batch of the first epoch: after an optimizer step the weights differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from quadrants.distributed.collectives import generation_block
from quadrants.models.replay import Replay, replay_unsupported
from quadrants.rollout.engine import Rollouts
from quadrants.train.behaviour import engine_numbers_may_stand_in

if TYPE_CHECKING:
    from quadrants.train.context import StepContext


def record_budget_mb(ctx: StepContext) -> float:
    """MiB of projection outputs the step's rollout may record for the update (0: record none)."""
    cfg = ctx.cfg
    if cfg.train.decode_replay_mb <= 0 or ctx.dist.world_size != 1:
        return 0.0
    if cfg.rollout.refill_rounds or generation_block(cfg, 1) < cfg.train.prompts_per_step:
        return 0.0  # the batch is assembled from several generate calls: nothing would replay
    if not engine_numbers_may_stand_in(cfg, ctx.spec) or replay_unsupported(ctx.model):
        return 0.0
    return float(cfg.train.decode_replay_mb)


def decode_replay(ctx: StepContext, rollouts: Rollouts) -> Replay | None:
    """The replay of `rollouts`' recorded outputs for the step's first update, or None."""
    outputs = rollouts.linear_outputs
    # the budget's conditions hold those of engine_behaviour_is_exact but the recorded entropy
    if outputs is None or rollouts.behaviour_entropy is None or record_budget_mb(ctx) == 0:
        return None
    columns = rollouts.prompt_ids.shape[1] + rollouts.response_ids.shape[1]
    if not outputs.matches(rollouts.prompt_ids, columns):
        return None
    rows = torch.arange(rollouts.prompt_ids.shape[0], device=outputs.prompt_ids.device)
    return Replay(outputs, rows)
