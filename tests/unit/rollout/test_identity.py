"""The rollout identity guard: at a weight push the engine and the trainer score one probe batch;
a gap over the tolerance or an engine that did not move while the trainer did stops the run."""

from __future__ import annotations

import copy

import pytest
import torch

from quadrants.config import IdentityCheckConfig, RunConfig
from quadrants.ops.precision import FP32
from quadrants.rollout.hf import ReplicaHFEngine
from quadrants.rollout.identity import (
    TOLERANCE_BF16,
    TOLERANCE_FP32,
    IdentityCheckedEngine,
    RolloutIdentityError,
    default_tolerance,
    judge,
    probe_batch,
)
from quadrants.run.loop import run_training
from quadrants.tracking.base import RecordingTracker


def test_the_gap_and_the_stale_engine_by_hand():
    engine = torch.tensor([[0.0, -1.0]])
    trainer = torch.tensor([[-0.02, -1.04]])
    # gap: (0.02 + 0.04) / 2 = 0.03, max 0.04
    figures = judge(engine, trainer, None, tolerance=0.05)
    assert figures.gap == pytest.approx(0.03) and figures.gap_max == pytest.approx(0.04)
    assert figures.engine_moved is None  # the first check has nothing to compare with
    with pytest.raises(RolloutIdentityError, match=r"differ by 0.0300 on average \(max 0.0400\)"):
        judge(engine, trainer, None, tolerance=0.01)
    # stale: the trainer moved by (0.2 + 0.2) / 2 = 0.2 since the last check, the engine by 0
    # (under a tenth of the tolerance 0.05: 0.005)
    moved = trainer - 0.2
    with pytest.raises(RolloutIdentityError, match=r"moved by only 0.00e\+00 .*moved by 0.2000"):
        judge(engine, moved, (engine, trainer), tolerance=0.05)
    # the engine moved by 0.004 (< 0.005) while the trainer moved 0.2: stale too
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        judge(engine - 0.004, moved, (engine, trainer), tolerance=0.05)
    # both moved alike: a healthy push (engine 0.1 + 0.1 -> 0.1, trainer 0.1; gap 0.03)
    figures = judge(engine - 0.1, trainer - 0.1, (engine, trainer), tolerance=0.05)
    assert figures.engine_moved == pytest.approx(0.1) and figures.trainer_moved == pytest.approx(
        0.1
    )


def test_the_tolerance_follows_the_precision_pair():
    assert default_tolerance(torch.float32, torch.float32) == TOLERANCE_FP32 == 1e-3
    assert default_tolerance(torch.bfloat16, torch.bfloat16) == TOLERANCE_BF16 == 0.05
    assert default_tolerance(torch.bfloat16, torch.float32) == TOLERANCE_BF16


def test_the_probe_is_fixed_and_leaves_the_global_stream_alone():
    torch.manual_seed(1)
    state = torch.random.get_rng_state()
    first, mask, length = probe_batch(vocab_size=50, size=3, tokens=8, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, probe_batch(50, 3, 8, 0)[0]) and length == 4 and bool(mask.all())


def _perturbed(model: torch.nn.Module, scale: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))


def test_a_skipped_push_to_the_hf_engine_is_caught_and_a_normal_one_passes():
    """The HF engine over a replica (a sharded run's engine: it samples from its own copy, synced
    at each push), fp32 on both sides (tolerance 1e-3). Push 1: the replica equals the policy, gap
    0. The policy moves; push 2 reaches the replica: gap 0 again, both moved alike. The policy
    moves again and push 3 is skipped: the engine did not move while the trainer did."""
    from quadrants.models.loading import load_policy

    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    engine = ReplicaHFEngine(copy.deepcopy(model), tokenizer)
    guarded = IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64)
    guarded.sync_weights(model)
    assert guarded.figures == {"train/identity_gap": 0.0, "train/identity_gap_max": 0.0}
    _perturbed(model, 0.05, seed=1)
    guarded.sync_weights(model)
    assert guarded.figures["train/identity_gap"] == 0.0
    assert guarded.figures["train/identity_engine_moved"] > TOLERANCE_FP32
    _perturbed(model, 0.05, seed=2)
    engine.sync_weights = lambda model: None  # the push that never reaches the engine
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        guarded.sync_weights(model)


@pytest.mark.slow
def test_a_normal_run_passes_and_logs_the_gap_per_push(tmp_path):
    """2 steps of the default world with the check at every push (the default): each step logs
    the gap of its push, 0 (the one-process HF engine samples from the policy itself)."""
    cfg = RunConfig(seed=3, run_dir=str(tmp_path))
    cfg.model.name_or_path = "tiny-random"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.rollout.group_size = 2, 2, 2
    cfg.train.mini_batch_size, cfg.rollout.max_new_tokens = 4, 8
    cfg.train.threads, cfg.eval.problems, cfg.tracking.log_samples_every = 1, 0, 0
    tracker = RecordingTracker()
    run_training(cfg, tracker)
    gaps = [m["train/identity_gap"] for _, m in tracker.history if "train/identity_gap" in m]
    assert gaps == [0.0, 0.0]


@pytest.mark.slow
def test_the_guard_sees_the_adapted_policy_under_lora():
    """LoRA: the trainer scores the policy with its adapters; a push sends the merged weights
    (rollout/weights.py `merged_lora_weights`) to a replica of the base architecture. Adapters
    made non-zero (peft starts lora_B at 0, so the adapted policy would equal the base): push 1
    reaches the replica, gap 0 to float rounding (W + B·A merged in float32 against the adapter
    path's x·W + (x·A)·B: the same sums in another order, far under the 1e-3 tolerance). Only the
    adapters move; push 2 reaches it: gap small, both moved alike. The adapters move again and
    push 3 is skipped: the engine did not move while the trainer did."""
    from quadrants.config import LoraConfig
    from quadrants.models.loading import load_policy
    from quadrants.models.lora import apply_lora

    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    engine = ReplicaHFEngine(copy.deepcopy(model), tokenizer)  # the base architecture, no peft
    apply_lora(model, LoraConfig(enabled=True, rank=4, alpha=8.0))
    adapters = [p for n, p in model.named_parameters() if ".lora_" in n]
    assert adapters and all(p.requires_grad for p in adapters)

    def move_adapters(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in adapters:
                p.add_(0.05 * torch.randn(p.shape, generator=generator))

    move_adapters(1)
    guarded = IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64)
    # before any push the replica holds the base: the adapters' part is what the check sees
    with pytest.raises(RolloutIdentityError, match="does not sample from the trainer's weights"):
        IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64).check(model)
    guarded.sync_weights(model)
    assert guarded.figures["train/identity_gap_max"] < 1e-4
    move_adapters(2)
    guarded.sync_weights(model)
    assert guarded.figures["train/identity_gap_max"] < 1e-4
    assert guarded.figures["train/identity_engine_moved"] > TOLERANCE_FP32
    move_adapters(3)
    engine.sync_weights = lambda model: None  # the push that never reaches the engine
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        guarded.sync_weights(model)
