"""The step's per-token signals besides the token entropy, for the TokenBatch: the attention entropy
when `quadrant.axis=attention_entropy` splits the quadrants by it, and the LoRA adapter residual
when the objective is ARCA or `model.lora.residual_telemetry` logs it per quadrant.

`SignalSettings` (train/context.py, part of the score phase's settings) says which; one
call, `token_signals`, from the step's batch builder (train/score.py `build_batch`) returns
`make_token_batch`'s keyword arguments. Each signal is a no-grad pass over the rows
(models/token_signals.py), in chunks of `train.forward_tokens` tokens when set (else
`train.mini_batch_size` rows), under the step's autocast, over this rank's share of the rows,
gathered through the step's placement (train/placement.py), as for the behaviour pass.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from quadrants.models.lora import has_adapters
from quadrants.models.token_signals import adapter_residual_pass, attention_entropy_pass
from quadrants.train.context import Forwards, SignalSettings


def token_signals(
    model: nn.Module,
    forwards: Forwards,
    settings: SignalSettings,
    sequences: Tensor,
    attention_mask: Tensor,
    length: int,
) -> dict[str, Tensor]:
    """`make_token_batch`'s `attention_entropy` and `adapter_residual` ([B, T] each) where the run
    asks for them; {} when it asks for neither."""
    out: dict[str, Tensor] = {}
    passes = forwards.passes
    rows = chunk_rows(passes.batch_size, passes.forward_tokens, sequences.shape[1])
    if settings.attention_layers is not None:
        layers = settings.attention_layers
        out["attention_entropy"] = _over_ranks(
            forwards,
            lambda s, m: attention_entropy_pass(
                model, s, m, length, layers=layers, batch_size=rows
            ),
            sequences,
            attention_mask,
        )
    if settings.residual_layer is not None:
        if not has_adapters(model):
            raise ValueError(
                f"objective.name={settings.objective} needs the LoRA adapter residual but the "
                "policy has no adapters: set model.lora.enabled=true"
            )
        layer = settings.residual_layer
        out["adapter_residual"] = _over_ranks(
            forwards,
            lambda s, m: adapter_residual_pass(
                model, s, m, length, layer=layer, batch_size=rows, layout=passes.layout
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
    forwards: Forwards,
    fn: Callable[[Tensor, Tensor], Tensor],
    sequences: Tensor,
    attention_mask: Tensor,
) -> Tensor:
    """`fn` over this rank's share of the rows, under the step's autocast, gathered. [B, T]."""
    share = forwards.placement.share(sequences.shape[0])
    with forwards.precision.autocast(forwards.device):
        own = fn(sequences[share], attention_mask[share]).float()
    return forwards.placement.gather_rows(own)
