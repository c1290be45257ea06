"""The step's per-token signals besides the token entropy, for the TokenBatch: the attention entropy
when `quadrant.axis=attention_entropy` splits the quadrants by it, and the LoRA adapter residual
when the objective is ARCA or `model.lora.residual_telemetry` logs it per quadrant.

One call, `token_signals`, from the step's batch builder (train/step.py `build_batch`); it returns
`make_token_batch`'s keyword arguments. Each signal is a no-grad pass over the rows
(models/token_signals.py), in chunks of `train.forward_tokens` tokens when set (else
`train.mini_batch_size` rows), under the step's autocast; with several ranks each rank computes its
equal share of the rows and the shares are gathered (distributed/collectives.py), as for the
behaviour pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from quadrants.distributed.collectives import all_gather_rows, row_share
from quadrants.models.lora import has_adapters
from quadrants.models.token_signals import adapter_residual_pass, attention_entropy_pass
from quadrants.validation import NEEDS_LORA

if TYPE_CHECKING:
    from quadrants.train.context import StepContext


def wants_adapter_residual(ctx: StepContext) -> bool:
    """ARCA always; any other objective under LoRA when `model.lora.residual_telemetry`."""
    cfg = ctx.cfg
    if cfg.objective.name in NEEDS_LORA:
        return True
    return bool(cfg.model.lora.enabled and cfg.model.lora.residual_telemetry)


def token_signals(
    ctx: StepContext, sequences: Tensor, attention_mask: Tensor, length: int
) -> dict[str, Tensor]:
    """`make_token_batch`'s `attention_entropy` and `adapter_residual` ([B, T] each) where the run
    asks for them; {} when it asks for neither."""
    cfg = ctx.cfg
    out: dict[str, Tensor] = {}
    rows = chunk_rows(ctx.passes.batch_size, ctx.passes.forward_tokens, sequences.shape[1])
    if cfg.quadrant.axis == "attention_entropy":
        layers = cfg.quadrant.attention_layers
        out["attention_entropy"] = _over_ranks(
            ctx,
            lambda s, m: attention_entropy_pass(
                ctx.model, s, m, length, layers=layers, batch_size=rows
            ),
            sequences,
            attention_mask,
        )
    if wants_adapter_residual(ctx):
        if not has_adapters(ctx.model):
            raise ValueError(
                f"objective.name={cfg.objective.name} needs the LoRA adapter residual but the "
                "policy has no adapters: set model.lora.enabled=true"
            )
        layer = cfg.model.lora.residual_layer
        out["adapter_residual"] = _over_ranks(
            ctx,
            lambda s, m: adapter_residual_pass(
                ctx.model, s, m, length, layer=layer, batch_size=rows
            ),
            sequences,
            attention_mask,
        )
    return out


def chunk_rows(batch_size: int, forward_tokens: int, width: int) -> int:
    """Rows per call of a signal pass: as many [width]-token rows as `train.forward_tokens` holds
    (at least one) when it is set, the behaviour pass's budget; else `train.mini_batch_size`."""
    return max(1, forward_tokens // width) if forward_tokens > 0 else batch_size


def _over_ranks(
    ctx: StepContext,
    fn: Callable[[Tensor, Tensor], Tensor],
    sequences: Tensor,
    attention_mask: Tensor,
) -> Tensor:
    """`fn` over this rank's share of the rows, under the step's autocast, gathered. [B, T]."""
    env = ctx.dist
    share = row_share(sequences.shape[0], env) if env.sharded else slice(None)
    with ctx.precision.autocast(ctx.device):
        own = fn(sequences[share], attention_mask[share]).float()
    return torch.cat(all_gather_rows(own, env))
