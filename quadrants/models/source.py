"""Where a model comes from, decided without loading anything: the embedded tiny models, a local
directory, or a Hugging Face hub id. Shared by the compose-time check and the loader."""

from __future__ import annotations

from pathlib import Path

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
