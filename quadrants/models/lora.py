"""LoRA adapters on a policy, through peft (`model.lora`): the settings' checks, the adapters put
into the model in place, and the base policy on demand (the adapters switched off).

`apply_lora` calls peft's `get_peft_model` (peft/mapping_func.py) and keeps what it wraps,
`PeftModel.get_base_model()`: the same Hugging Face module, now with every targeted linear layer
replaced by peft's `lora.Linear` (peft/tuners/lora/layer.py) around the original as its
`base_layer`, every other parameter frozen (`BaseTuner._mark_only_adapters_as_trainable`,
peft/tuners/tuners_utils.py) and the adapters' B matrices zero (peft's default init), so the
adapted policy starts as the base policy exactly. The policy keeps its class and attribute paths
(`model.model.layers`, `lm_head`, `generate`), so the trainer, the HF engine and evaluation handle
it as any other policy. The fast HF decode, which reads plain projections, sees a `lora.Linear`
and falls back to its general path (rollout/fast_decode.py `fast_decode_unsupported`).

On the CPU the linear routing (quadrants/cpu/linears.py, applied by `quadrants.cpu.tune_for` after
loading) makes every plain `nn.Linear` a `RoutedLinear`, the adapters' own small linears and the
wrapped `base_layer` included: peft dispatches on `isinstance(base, nn.Linear)` (peft/tuners/lora/
layer.py `dispatch_default`), which a `RoutedLinear` is, and the class swap keeps parameters and
state-dict keys, so the adapted model and its checkpoints are the same on every device.
`all-linear` excludes the LM head (peft's `_maybe_include_all_linear_layers` skips the output
embedding), so the fused LM head (ops/fused_head.py) still applies.

`adapters_disabled` is peft's `PeftModel.disable_adapter()` for LoRA (peft/peft_model.py), done on
the module itself: every `BaseTunerLayer` (`LoraModel._set_adapter_layers`,
peft/tuners/lora/model.py) switched off and back on, so the frozen base policy (the KL reference)
is a forward of the same weights rather than a second copy of the model.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

ALL_LINEAR = "all-linear"


def target_modules(value: Any) -> str | list[str]:
    """`model.lora.target_modules` as peft takes it: "all-linear" or a non-empty list of module
    names. Raises ValueError naming the key."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise ValueError(
        f"model.lora.target_modules={value!r} is not a module selection; use {ALL_LINEAR!r} "
        "(every linear layer but the LM head) or a list of module names such as "
        "[q_proj,k_proj,v_proj,o_proj]"
    )


def peft_config(lora: Any) -> Any:
    """peft's `LoraConfig` of `model.lora` (quadrants.config.LoraConfig: rank, alpha, dropout,
    target_modules; task CAUSAL_LM, no bias trained)."""
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=int(lora.rank),
        lora_alpha=float(lora.alpha),
        lora_dropout=float(lora.dropout),
        target_modules=target_modules(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def wrap_lora(model: nn.Module, lora: Any) -> Any:
    """peft's `PeftModel` around `model`, whose targeted linear layers now hold the adapters in
    place (`get_peft_model`); `wrapped.get_base_model()` is `model` itself. Kept by the export
    (launch/export.py), which merges the adapters with peft's `merge_and_unload`."""
    from peft import get_peft_model

    with warnings.catch_warnings():  # peft reads transformers' deprecated checkpointing flag
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        return get_peft_model(model, peft_config(lora))


def apply_lora(model: nn.Module, lora: Any) -> nn.Module:
    """`model` with LoRA adapters in place (peft's `get_peft_model`); only adapter parameters
    require grad. Returns the same module (its class and attribute paths unchanged)."""
    base = wrap_lora(model, lora).get_base_model()
    if base is not model:  # peft injects in place: a copy would leave the caller's module stale
        raise RuntimeError("peft returned a different module than it was given")
    return base


def has_adapters(model: nn.Module) -> bool:
    """Whether `model` holds peft tuner layers (LoRA adapters)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return any(isinstance(m, BaseTunerLayer) for m in model.modules())


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
    """While inside, `model` computes its base policy: every LoRA layer switched off as peft's
    `disable_adapter()` does (`enable_adapters(False)` on each `BaseTunerLayer`), and back on
    after (those that were on)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not layers:
        raise ValueError("the model has no LoRA adapters to disable")
    were_on = [not layer.disable_adapters for layer in layers]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer, on in zip(layers, were_on):
            if on:
                layer.enable_adapters(True)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer steps: those that require grad (all of them without LoRA,
    only the adapters with it)."""
    return [p for p in model.parameters() if p.requires_grad]


def has_frozen(model: nn.Module) -> bool:
    """Whether some of `model`'s parameters do not train (LoRA's base)."""
    return any(not p.requires_grad for p in model.parameters())


def without_frozen(model: nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """`state` (a model state dict) less every entry that is a frozen parameter's storage: what a
    LoRA checkpoint holds. torch's `StateDictOptions(ignore_frozen_params=True)` drops a frozen
    parameter under the one name `named_parameters` gives it
    (torch/distributed/checkpoint/state_dict.py `_get_model_state_dict`), and a tied weight's
    second name (`lm_head.weight`, tied to `model.embed_tokens.weight`) stays; this drops that
    too. One process (plain tensors): LoRA is not sharded."""
    frozen = {p.data_ptr() for p in model.parameters() if not p.requires_grad}
    if not frozen:
        return state
    return {
        k: v for k, v in state.items() if not (hasattr(v, "data_ptr") and v.data_ptr() in frozen)
    }
