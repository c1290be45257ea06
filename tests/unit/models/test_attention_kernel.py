"""`model.attention`: the trainer's model runs the named attention kernel (transformers'
`attn_implementation`), the same function of the weights as the default one, and the names that
cannot run are refused at compose time, naming the key and the fix.

What only a GPU shows: the flash kernels (flash-attn is not installed here, and runs on CUDA only)
and flex attention's compiled kernel under FSDP2 and bf16 autocast."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.launch.local_checks import check_attention_kernel
from quadrants.models.loading import load_policy
from quadrants.validation import validate_attention_kernel


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]


@pytest.mark.slow
def test_the_named_kernel_is_loaded_and_computes_the_same_logprobs(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    default, tokenizer = load_policy("tiny-random", seed=0)
    eager, _ = load_policy("tiny-random", seed=0, attention="eager")
    assert eager.config._attn_implementation == "eager"
    assert default.config._attn_implementation == "sdpa"  # transformers' default
    ids = torch.tensor([tokenizer("12+34=46, \\boxed{46}")["input_ids"]] * 2)
    # the same weights through two kernels: float32 rounding apart (measured ~1e-7)
    torch.testing.assert_close(_logprobs(eager, ids), _logprobs(default, ids), rtol=0, atol=1e-5)
    # a model directory through from_pretrained, and built on the meta device from its config
    default.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    read, _ = load_policy(str(tmp_path), attention="eager")
    assert read.config._attn_implementation == "eager"
    torch.testing.assert_close(_logprobs(read, ids), _logprobs(default, ids), rtol=0, atol=1e-5)
    meta, _ = load_policy(str(tmp_path), attention="eager", weights=False)
    assert meta.config._attn_implementation == "eager" and meta.lm_head.weight.is_meta


@pytest.mark.parametrize(
    ("attention", "device", "precision", "message"),
    [
        ("fast", "auto", "fp32", r"^model.attention='fast' is unknown; choose one of \['eager'"),
        ("flash_attention_2", "cpu", "bf16-mixed", r"runs on CUDA only, but train.device=cpu"),
        ("flash_attention_3", "cuda", "fp32", r"fp16/bf16 only, but train.precision=fp32"),
    ],
)
def test_kernels_that_cannot_run_are_refused(attention, device, precision, message):
    cfg = RunConfig()
    cfg.model.attention, cfg.train.device, cfg.train.precision = attention, device, precision
    with pytest.raises(ValueError, match=message):
        validate_attention_kernel(cfg)


def test_kernels_that_can_run_pass():
    cfg = RunConfig()
    for attention in (None, "sdpa", "eager", "flex_attention"):
        cfg.model.attention = attention
        validate_attention_kernel(cfg)
    cfg.model.attention, cfg.train.device, cfg.train.precision = "flash_attention_2", "cuda", "auto"
    validate_attention_kernel(cfg)


def test_a_flash_kernel_without_flash_attn_is_refused_here():
    # this machine has no flash-attn: a job that would run here is refused naming the package
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ValueError, match=r"model.attention=flash_attention_2 .*flash-attn"):
        check_attention_kernel("flash_attention_2")
    check_attention_kernel("sdpa")
    check_attention_kernel(None)
