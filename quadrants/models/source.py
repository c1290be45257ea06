"""Where a model comes from, decided without loading anything: the embedded tiny models, a local
directory, or a Hugging Face hub id. Shared by the compose-time check and the loader."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

TINY = "tiny"
TINY_RANDOM = "tiny-random"


def looks_like_path(name_or_path: str) -> bool:
    """A name meant as a local path (`./m`, `/m`, `~/m`, `a/b/c`) rather than a
    hub id (`org/name`)."""
    return name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1


def check_model_source(key: str, name_or_path: str) -> None:
    """Raise FileNotFoundError naming `key` when `name_or_path` looks like a local path and no
    directory is there (a hub id is resolved when the model is loaded)."""
    if name_or_path in (TINY, TINY_RANDOM) or not looks_like_path(name_or_path):
        return
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"{key}={name_or_path}: no model directory at {path}. Pass an existing directory "
            f"written by save_pretrained, a hub id such as 'Qwen/Qwen2.5-Math-1.5B', or '{TINY}' "
            f"/ '{TINY_RANDOM}' for the embedded tiny model."
        )


def local_model_config(name_or_path: str):
    """The transformers config of the embedded tiny models or of a local directory with a
    config.json, read without weights or network; None for anything else (a hub id)."""
    if name_or_path in (TINY, TINY_RANDOM):
        from quadrants.models.tiny import tiny_config
        from quadrants.models.tokenizer import char_tokenizer

        tokenizer = char_tokenizer()
        return tiny_config(
            len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path, local_files_only=True)
    return None


# one short look at the Hub before a job that needs it starts: huggingface_hub itself waits
# DEFAULT_ETAG_TIMEOUT = 10 s per request (huggingface_hub/constants.py) and retries with
# exponential backoff, 1 s doubling to 8 s, up to 5 times (huggingface_hub/utils/_http.py
# `http_backoff`), and transformers asks for several files: 86 s measured on a machine without
# network before the job failed
HUB_CHECK_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub/constants.py `_is_true`


def hub_offline(environ: os._Environ | dict | None = None) -> bool:
    """Whether the Hub is switched off, as huggingface_hub reads it (huggingface_hub 2.x,
    constants.py: `HF_HUB_OFFLINE = _is_true(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)`)."""
    env = os.environ if environ is None else environ
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


def hub_unreachable(timeout_s: float = HUB_CHECK_TIMEOUT_S) -> str | None:
    """Why the Hub's endpoint (`HF_ENDPOINT`, else https://huggingface.co) cannot be reached, or
    None: one TCP connection with a short timeout, no request. Behind a proxy (HTTPS_PROXY,
    ALL_PROXY) a direct connection says nothing, so None."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = urlparse(endpoint)
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"{endpoint} did not answer within {timeout_s:.0f} s ({error})"
