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
from quadrants.distributed.collectives import current
from quadrants.launch.local_checks import check_attention_kernel
from quadrants.models.loading import agreed_attention, attention_of, load_policy, packed_attention
from quadrants.run.build import attention_kernel
from quadrants.run_plan import RunPlan
from quadrants.run_plan.composition import validate_attention_kernel


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
    cfg.rollout.engine = "vllm"  # samples from its own copy, in its own dtype
    validate_attention_kernel(cfg)
    # the HF engine samples from the policy module: fine where its parameters are bf16 (pure bf16)
    # or, under LoRA, where the frozen base is stored in bf16 (autocast turns on, rollout/hf.py)
    cfg.rollout.engine, cfg.train.precision = "hf", "bf16"
    validate_attention_kernel(cfg)
    cfg.train.precision, cfg.model.lora.enabled = "bf16-mixed", True
    validate_attention_kernel(cfg)


@pytest.mark.parametrize("precision", ["auto", "bf16-mixed"])
def test_a_flash_kernel_with_the_hf_engine_on_float32_parameters_is_refused(precision):
    # the HF engine would hand flash-attn float32 queries at the first rollout
    cfg = RunConfig()
    cfg.model.attention, cfg.train.device, cfg.train.precision = (
        "flash_attention_2",
        "cuda",
        precision,
    )
    cfg.rollout.engine = "hf"
    with pytest.raises(ValueError, match=r"rollout.engine=hf: .*Fix: rollout.engine=vllm"):
        validate_attention_kernel(cfg)


BF16, FP32 = torch.bfloat16, torch.float32
PACKED_ON_CUDA = dict(layout="packed", device_type="cuda", compute_dtype=BF16, flash=True)


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ({}, "flash_attention_2"),  # every condition holds
        ({"compute_dtype": torch.float16}, "flash_attention_2"),
        ({"layout": "padded"}, None),  # padded rows keep transformers' default
        ({"device_type": "cpu"}, None),
        ({"compute_dtype": FP32}, None),  # flash-attn computes in 16 bits only
        ({"flash": False}, None),  # not installed: SDPA's block-diagonal mask (a warning)
        ({"samples_from_policy": True}, None),  # the HF engine generates in float32
    ],
)
def test_null_picks_flash_for_packed_rows_on_cuda_only_where_it_can_run(changed, expected):
    conditions = {**PACKED_ON_CUDA, "samples_from_policy": False, **changed}
    assert packed_attention(**conditions) == expected


def test_ranks_must_agree_on_the_kernel():
    assert agreed_attention(["flash_attention_2"] * 3) == "flash_attention_2"
    assert agreed_attention([None, None]) is None
    # rank 2 lacks flash-attn: every rank gets the same list, so every rank raises the same error
    with pytest.raises(ValueError, match=r"rank 0: flash_attention_2, ranks \[2\]: \['None'\]"):
        agreed_attention(["flash_attention_2", "flash_attention_2", None])


@pytest.mark.slow
def test_a_cpu_run_resolves_null_to_the_default_and_names_it(monkeypatch):
    # one process, the CPU: null stays null (transformers' default, SDPA, is what the model runs)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = RunConfig()
    cfg.train.attention_layout = "packed"
    plan = RunPlan.parse(cfg, files=False)
    assert attention_kernel(plan, torch.device("cpu"), current()) is None
    cfg.model.attention = "eager"  # an explicit kernel is kept as written
    plan = RunPlan.parse(cfg, files=False)
    assert attention_kernel(plan, torch.device("cpu"), current()) == "eager"
    model, _ = load_policy("tiny-random", seed=0)
    assert attention_of(model) == "sdpa"  # the value a run logs as model.attention_ran


def test_a_flash_kernel_without_flash_attn_is_refused_here():
    # this machine has no flash-attn: a job that would run here is refused naming the package
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ValueError, match=r"model.attention=flash_attention_2 .*flash-attn"):
        check_attention_kernel("flash_attention_2")
    check_attention_kernel("sdpa")
    check_attention_kernel(None)
