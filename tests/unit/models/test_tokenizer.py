import pytest
from transformers import AutoTokenizer

from quadrants.models.tokenizer import CHARACTERS, char_tokenizer

SAMPLES = [
    "37+48-19=",
    "37+48=85,85-19=66 \\boxed{66}",
    "(3+4)*5=\nAnswer: x, y and z!",
    "",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_one_token_per_character(text):
    tokenizer = char_tokenizer()
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text)  # no BOS/EOS added, no merges
    assert tokenizer.decode(ids) == text


def test_special_tokens():
    tokenizer = char_tokenizer()
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert len(tokenizer) == 4 + len(CHARACTERS)
    ids = tokenizer("12<eos>")["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and len(ids) == 3
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12"


def test_left_padding():
    tokenizer = char_tokenizer()
    batch = tokenizer(["1+2=", "10+20="], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, :2].tolist() == [tokenizer.pad_token_id] * 2
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6]


def test_save_and_reload_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    char_tokenizer().save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert reloaded.padding_side == "left"
    assert reloaded.pad_token == "<pad>" and reloaded.eos_token == "<eos>"
    for text in SAMPLES:
        ids = reloaded(text)["input_ids"]
        assert ids == char_tokenizer()(text)["input_ids"]
        assert reloaded.decode(ids) == text
