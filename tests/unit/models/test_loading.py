import pytest
import torch

from quadrants.models import loading, warmup
from quadrants.models.loading import load_policy
from quadrants.models.tiny import random_tiny_policy
from quadrants.tasks.synthetic import ArithmeticTask

SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
}


def test_tiny_random_is_seeded_and_left_padded():
    model, tokenizer = load_policy("tiny-random", seed=1)
    again, _ = load_policy("tiny-random", seed=1)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert not model.training
    torch.testing.assert_close(model.lm_head.weight, again.lm_head.weight, rtol=0, atol=0)


def test_dtype():
    model, _ = load_policy("tiny-random", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny-random", dtype="float64")


def test_local_directory_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = random_tiny_policy(0, **SMALL)
    tokenizer.padding_side = "right"  # load_policy must turn it back to left
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_policy(str(tmp_path))
    assert loaded_tokenizer.padding_side == "left"
    assert loaded_tokenizer.pad_token_id == tokenizer.pad_token_id
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight, rtol=0, atol=0)


def test_a_saved_tiny_folder_encodes_blanks_and_newlines_as_it_was_saved(tmp_path, monkeypatch):
    # the character tokenizer (models/tokenizer.py): ids 0-3 special, '\n' = 4, then chr(32..126)
    # at 5 + (code - 32): ' ' = 5, 'a' (97) = 70, 'b' = 71, 'c' = 72; so
    # 'a b\nc' is [70, 5, 71, 4, 72]. transformers' AutoTokenizer alone gives [70, 71, 72] for a
    # qwen2 folder (its registered Qwen2Tokenizer drops the blank and the newline)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = random_tiny_policy(0, **SMALL)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _, loaded = load_policy(str(tmp_path))
    assert tokenizer("a b\nc")["input_ids"] == [70, 5, 71, 4, 72]
    assert loaded("a b\nc")["input_ids"] == [70, 5, 71, 4, 72]
    assert loaded.decode([70, 5, 71, 4, 72]) == "a b\nc"


def test_without_weights_the_model_is_built_on_meta_from_the_directory(tmp_path, monkeypatch):
    """`weights=False` (the ranks other than 0 of a sharded run): the same architecture, dtype and
    generation config, every tensor on the meta device, and the weights file is never opened (it is
    deleted here before the load)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = random_tiny_policy(0, **SMALL)
    model.generation_config.eos_token_id = [2, 7]  # what only generation_config.json says
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    for weights_file in tmp_path.glob("*.safetensors"):
        weights_file.unlink()
    meta, meta_tokenizer = load_policy(str(tmp_path), dtype="bfloat16", weights=False)
    assert all(t.is_meta for t in (*meta.parameters(), *meta.buffers()))
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in meta.state_dict().items()}
    assert shapes == {k: (tuple(v.shape), torch.bfloat16) for k, v in model.state_dict().items()}
    assert meta.lm_head.weight is meta.model.embed_tokens.weight  # tied, as the tiny config says
    assert meta.generation_config.eos_token_id == [2, 7]
    assert meta_tokenizer.padding_side == "left" and not meta.training
    with pytest.raises(OSError):  # with weights the load needs the file just deleted
        load_policy(str(tmp_path))
    # tiny-random has no file to spare reading: it is built from its seed on every rank, and
    # rank 0's fill overwrites it (models/loading.py)
    random_built, _ = load_policy("tiny-random", weights=False, seed=3)
    random_loaded, _ = load_policy("tiny-random", seed=3)
    assert not any(p.is_meta for p in random_built.parameters())
    for a, b in zip(random_built.parameters(), random_loaded.parameters(), strict=True):
        assert torch.equal(a, b)


def test_missing_path_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        load_policy(str(tmp_path / "nowhere"))


def test_unknown_hub_id_offline_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        load_policy("no-such-org/no-such-model")


@pytest.mark.slow
def test_tiny_uses_the_cached_base_policy(tmp_path, monkeypatch):
    fast = warmup.WarmupSettings(
        task=ArithmeticTask(heldout_size=4),
        steps=1,
        batch_size=2,
        lr_warmup_steps=1,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        intermediate_size=64,
        eval_size=4,
        max_new_tokens=4,
    )
    monkeypatch.setattr(loading, "WarmupSettings", lambda: fast)
    model, tokenizer = load_policy("tiny", cache_root=tmp_path)
    assert model.config.hidden_size == 32
    assert tokenizer.padding_side == "left"
    assert warmup.base_policy_dir(fast, tmp_path).is_dir()
