"""The memory plan under LoRA: the adapters' parameter count, gradients and AdamW states by hand,
the frozen base held without either, and the 1-GPU 7B LoRA preset fitting 80 GB."""

from __future__ import annotations

import pytest
from transformers import Qwen2Config

from quadrants.launch.hydra_setup import compose_run_plan, preflight
from quadrants.memory.check import plan_for, plan_inputs
from quadrants.memory.peaks import PlanInputs, make_plan
from quadrants.memory.trace import LoraSpec, TraceSpec, trace_step


# hidden 64, 4 query heads of 16 (q_proj 64 -> 64), 2 key/value heads (v_proj 64 -> 32), MLP 96
def qwen2(layers: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )


CONFIG = qwen2(2)
SHAPE = dict(seq_len=16, response_tokens=8, update_rows=2, forward_rows=2, chunk_size=8)
LORA = LoraSpec(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj"))


@pytest.mark.slow
def test_lora_trace_by_hand():
    """Rank 4 on q_proj and v_proj of 2 layers: r x (d_in + d_out) per module,
    q_proj 4 x (64 + 64) = 512, v_proj 4 x (64 + 32) = 384, so 896 a layer, 1792 in all. In float32
    (bf16-mixed stores parameters in float32): gradients 1792 x 4 = 7168 bytes; AdamW's two moments
    2 x 7168 = 14336 bytes plus one float32 `step` per adapter tensor (fused AdamW: 2 layers x
    2 modules x A and B = 8 tensors, 32 bytes) = 14368. The base's own parameters stay, frozen,
    with no gradient or moment of their own; under bf16-mixed its linears are stored in bf16
    (ops/precision.py `store_parameters`). The base's 78400 elements: a layer's linears
    q 64x64 + 64 bias, k and v 64x32 + 32 bias each, o 64x64, gate, up, down 64x96 each =
    4160 + 2080 + 2080 + 4096 + 3 x 6144 = 30848, and 2 norms of 64; the LM head 128 x 64 = 8192
    (a linear, untied); the embedding 8192 and the final norm 64. Held bytes: 2 x 30848 + 8192 =
    69888 linear elements x 2 = 139776, embedding and norms 8192 + 2 x 128 + 64 = 8512 x 4 =
    34048, adapters 7168: 180992, against 78400 x 4 + 7168 = 320768 with the base in float32
    (fp32 precision, where nothing is cast)."""
    full = trace_step(TraceSpec(CONFIG, layers=2, sharded=False, **SHAPE))
    lora = trace_step(TraceSpec(CONFIG, layers=2, sharded=False, lora=LORA, **SHAPE))
    assert lora.trainable == 1792
    assert lora.parameters == full.parameters == full.trainable  # the base, adapters apart
    assert full.resident.parameters == 78400 * 4 == 313600
    assert lora.resident.parameters == (2 * 30848 + 8192) * 2 + 8512 * 4 + 1792 * 4 == 180992
    fp32 = trace_step(
        TraceSpec(CONFIG, layers=2, sharded=False, lora=LORA, precision="fp32", **SHAPE)
    )
    assert fp32.resident.parameters == 78400 * 4 + 1792 * 4 == 320768
    assert lora.resident.gradients == 0
    assert lora.resident.optimizer == 2 * 1792 * 4 + 8 * 4 == 14368
    assert lora.update.gradients == 1792 * 4  # adapters' gradients only, the base has none
    assert lora.optimizer.gradients == 7168 and lora.optimizer.optimizer == 14368
    # full fine-tuning of the same model: gradients for every parameter
    assert full.update.gradients == full.parameters * 4


@pytest.mark.slow
def test_lora_plan_extrapolates_adapters_and_drops_the_reference():
    """The plan at 6 layers from traces at 2 and 3: 6 x 896 = 5376 adapter elements; the KL
    reference of a LoRA run is the policy with its adapters off, so a kl_coef adds no copy."""
    config = qwen2(6)
    inputs = PlanInputs(
        config,
        world_size=1,
        gpus_per_node=1,
        sharded=False,
        precision="bf16-mixed",
        checkpointing=False,
        micro_batches=2,
        lora=LORA,
        **SHAPE,
    )
    plan = make_plan(inputs)
    assert plan.trainable == 6 * 896
    rollout = next(p for p in plan.phases if p.phase == "rollout")
    assert rollout.trainer.optimizer == 2 * 5376 * 4 + 6 * 4 * 4  # moments + a step per tensor
    run = compose_run_plan(
        ["model=tiny_random", "model.lora.enabled=true", "objective.kl_coef=0.1"]
    )
    assert plan_inputs(run, 1, 1).reference_dtype_bytes == 0
    assert plan_inputs(run, 1, 1).lora == LoraSpec(rank=16, alpha=32.0, target_modules="all-linear")


@pytest.mark.slow
def test_tiny_lora_plan_counts_all_linear_adapters():
    """tiny-random with the default LoRA (rank 16, all-linear): the plan's trainable elements are
    peft's own count on the real model (models/lora.py `apply_lora`)."""
    from quadrants.models.loading import load_policy

    run = compose_run_plan(["model=tiny_random", "model.lora.enabled=true"])
    model, _ = load_policy("tiny-random", lora=run.model.lora)
    expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert plan_for(run, 1, 1).trainable == expected


@pytest.mark.slow  # in the suite; the trace is shared with test_compose's (one per process)
def test_the_7b_lora_preset_fits_one_80gb_gpu():
    """sweeps/experiment/paper_quadrants_qwen7b_lora_1gpu.yaml: Qwen2.5-Math-7B with LoRA on one
    80 GB GPU, a float32 vLLM colocated at 0.70 of it, the frozen base's linears in bf16. Composed
    and checked as the sweep does at compose time (the plan refuses a job that does not fit), one
    process (launcher=slurm). Traces a 7B-wide model at 2 and 3 layers (about 4 s on 2 CPU
    cores: memory/trace.py's shortcuts). Planned 2026-11-26: peak 67.8 GiB in rollout, 77.8 GB with the allocator's headroom
    (with the base in float32 and vLLM at 0.45: 62.4 GiB, 76.2 GB)."""
    assert (
        preflight(
            [
                "-m",
                "experiment=paper_quadrants_qwen7b_lora_1gpu",
                "launcher=slurm",
                "tracking.sqlite_on_slurm=true",
            ]
        )
        == 8
    )
