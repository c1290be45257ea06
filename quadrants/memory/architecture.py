"""The architecture a memory plan traces: a transformers config, found without weights or network.

`model.name_or_path` resolves, in this order, to
1. the config of a shipped preset model (`architectures/*.json`, written from the public
   `config.json` of each: Qwen/Qwen2.5-Math-7B, the DeepScaleR-1.5B models (DeepSeek-R1-Distill-
   Qwen-1.5B's architecture), HuggingFaceTB/SmolLM2-135M-Instruct and meta-llama/Llama-3.2-1B-
   Instruct (its config.json at Hub commit 4e20de36, as kevinstephano/thunder_model_blocks
   hf_llama/llama_config.py copies it; the plan reads no token ids, and a run stops generating
   at the downloaded model's own stop tokens, rollout/hf.py `stop_ids`),
   so the plan of a paper preset works offline on a laptop;
2. the embedded tiny models (`tiny`, `tiny-random`: quadrants/models/tiny.py's config);
3. a local directory holding a `config.json`.

Anything else is an error naming `model.name_or_path` and what to do.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoConfig, PretrainedConfig

from quadrants.models.source import local_model_config

ARCHITECTURES = Path(__file__).resolve().parent / "architectures"

# model.name_or_path (as the presets and the Hub spell it) -> shipped config file
SHIPPED: dict[str, str] = {
    "Qwen/Qwen2.5-Math-7B": "qwen2.5-math-7b.json",
    "cmu-deepscaler-colab/DeepScaleR-8K": "deepscaler-1.5b.json",  # the paper's 8K checkpoint
    "agentica-org/DeepScaleR-1.5B-Preview": "deepscaler-1.5b.json",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "deepscaler-1.5b.json",
    "smollm2-135m": "smollm2-135m.json",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m.json",
    "meta-llama/Llama-3.2-1B-Instruct": "llama3.2-1b-instruct.json",
}


def shipped_config(filename: str) -> PretrainedConfig:
    """One of the shipped configs by file name (e.g. "qwen2.5-math-7b.json")."""
    values = json.loads((ARCHITECTURES / filename).read_text())
    return AutoConfig.for_model(values.pop("model_type"), **values)


def model_config(name_or_path: str, key: str = "model.name_or_path") -> PretrainedConfig:
    """The transformers config of `name_or_path`, without weights and without network."""
    if name_or_path in SHIPPED:
        return shipped_config(SHIPPED[name_or_path])
    config = local_model_config(name_or_path)
    if config is not None:
        return config
    raise ValueError(
        f"{key}={name_or_path}: the memory plan needs the model's architecture and has none for "
        f"it. Point {key} at a local directory with a config.json, or use one of "
        f"{sorted(SHIPPED)} (whose configs ship with quadrants), or set "
        "cluster.gpu_memory_gib=null to skip the plan."
    )
