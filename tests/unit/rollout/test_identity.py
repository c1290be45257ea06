"""The rollout identity guard: the engine samples a probe at start, the start-up check calibrates
the tolerance, and at a weight push an engine that did not move while the trainer did, or a gap over
the tolerance, stops the run."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from quadrants.config import IdentityCheckConfig, RunConfig
from quadrants.ops.precision import FP32
from quadrants.rollout.engine import Rollouts
from quadrants.rollout.hf import ReplicaHFEngine
from quadrants.rollout.identity_guard import (
    STALE_MARGIN,
    STARTUP_LIMIT_BF16,
    STARTUP_LIMIT_FP32,
    IdentityCheckedEngine,
    RolloutIdentityError,
    calibrated_tolerance,
    compare,
    judge,
    probe_from_rollouts,
    push_figures,
    startup_limit,
)
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker

ALL = torch.ones(1, 2, dtype=torch.bool)


def test_the_figures_by_hand():
    engine = torch.tensor([[0.0, -1.0]])
    trainer = torch.tensor([[-0.02, -1.04]])
    figures = compare(engine, trainer, ALL)
    # log space: (0.02 + 0.04) / 2 = 0.03, max 0.04
    assert figures.gap == pytest.approx(0.03) and figures.gap_max == pytest.approx(0.04)
    # probability space (verl's): |1 - e^-0.02| = 0.019801, |e^-1 - e^-1.04| = 0.367879 -
    # 0.353455 = 0.014425; mean 0.017113, max 0.019801
    assert figures.prob_gap == pytest.approx(0.017113, abs=1e-6)
    assert figures.prob_gap_max == pytest.approx(0.019801, abs=1e-6)
    # two points rising together: Pearson correlation 1
    assert figures.prob_corr == pytest.approx(1.0)
    # a masked position (padding) counts nowhere, however far apart
    padded = compare(
        torch.tensor([[0.0, -1.0, 5.0]]),
        torch.tensor([[-0.02, -1.04, -9.0]]),
        torch.tensor([[True, True, False]]),
    )
    assert padded.gap == pytest.approx(0.03) and padded.gap_max == pytest.approx(0.04)
    # one token: no correlation to speak of
    assert compare(engine[:, :1], trainer[:, :1], ALL[:, :1]).prob_corr is None


def test_the_stale_rule_is_near_determinism_not_the_tolerance():
    engine = torch.tensor([[0.0, -1.0]])
    trainer = torch.tensor([[-0.02, -1.04]])
    before = (engine, trainer)
    # the engine did not move (0 <= 1e-4) while the trainer moved by 0.01 (> 2 x 1e-4): stale,
    # although the gap, 0.03 + 0.01 = 0.04, is under the tolerance 0.05
    with pytest.raises(
        RolloutIdentityError, match=r"moved by only 0.00e\+00 .*trainer's moved by 1.00e-02"
    ):
        judge(engine, trainer - 0.01, ALL, before, tolerance=0.05, stale_threshold=1e-4)
    # the engine moved by 5e-5 (<= 1e-4): stale too
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        judge(engine - 5e-5, trainer - 0.01, ALL, before, tolerance=0.05, stale_threshold=1e-4)
    # the trainer moved by only 1.5e-4 (not over 2 x 1e-4 = 2e-4): recomputation noise at most,
    # nothing to miss, no verdict
    quiet = judge(engine, trainer - 1.5e-4, ALL, before, tolerance=0.05, stale_threshold=1e-4)
    # (float32 inputs: 1.04 has an ulp of 1.2e-7, 8e-4 of 1.5e-4; the mean of two tokens 4e-4)
    assert quiet.trainer_moved == pytest.approx(1.5e-4, rel=1e-3) and quiet.engine_moved == 0.0
    assert STALE_MARGIN == 2.0
    # ... while a move of 3e-4 (> 2e-4) with the engine still is a dropped push
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        judge(engine, trainer - 3e-4, ALL, before, tolerance=0.05, stale_threshold=1e-4)
    # both moved alike: a healthy push (engine 0.01, trainer 0.01; the gap stays 0.03)
    healthy = judge(engine - 0.01, trainer - 0.01, ALL, before, 0.05, 1e-4)
    assert healthy.engine_moved == pytest.approx(0.01) and healthy.gap == pytest.approx(0.03)
    # the gap rule: 0.03 over a tolerance of 0.02
    with pytest.raises(RolloutIdentityError, match=r"differ by 0.0300 on average \(max 0.0400\)"):
        judge(engine, trainer, ALL, None, tolerance=0.02, stale_threshold=1e-4)


def test_the_tolerance_is_calibrated_with_a_floor_and_the_start_has_a_limit():
    assert calibrated_tolerance(0.03, 4.0, 1e-3) == pytest.approx(0.12)  # 4 x 0.03
    assert calibrated_tolerance(0.0, 4.0, 1e-3) == 1e-3  # identical numbers: the floor
    assert startup_limit(torch.float32, torch.float32) == STARTUP_LIMIT_FP32 == 1e-3
    assert startup_limit(torch.bfloat16, torch.bfloat16) == STARTUP_LIMIT_BF16 == 0.15
    assert startup_limit(torch.bfloat16, torch.float32) == STARTUP_LIMIT_BF16


def test_the_probe_is_the_rollouts_layout():
    """A prompt left-padded, a response right-padded after its stop token: the sequence is the two
    side by side, the scored tokens the response's real ones (2 here)."""
    rollouts = Rollouts(
        prompt_ids=torch.tensor([[0, 5, 6]]),
        prompt_mask=torch.tensor([[False, True, True]]),
        response_ids=torch.tensor([[7, 2, 0]]),
        response_mask=torch.tensor([[True, True, False]]),
        behaviour_logp=torch.zeros(1, 3),
        texts=["x"],
        group_ids=torch.tensor([0]),
        finished=torch.tensor([True]),
    )
    probe = probe_from_rollouts(rollouts)
    assert probe.sequences.tolist() == [[0, 5, 6, 7, 2, 0]]
    assert probe.attention_mask.tolist() == [[False, True, True, True, True, False]]
    assert probe.response_length == 3 and probe.tokens == 2


def _perturbed(model: torch.nn.Module, scale: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))


def test_a_skipped_push_to_the_hf_engine_is_caught_and_a_normal_one_passes(caplog):
    """The HF engine over a replica (a sharded run's engine: it samples from its own copy, synced
    at each push), fp32 on both sides. Start: the replica equals the policy, gap 0, so the
    tolerance is the floor 1e-3; the start samples the probe with the global random state left as
    it was. The policy moves; push 1 reaches the replica: gap 0 again, both moved alike. The policy
    moves again and push 2 is skipped: the engine did not move while the trainer did."""
    from quadrants.models.loading import load_policy

    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    engine = ReplicaHFEngine(copy.deepcopy(model), tokenizer)
    guarded = IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64)
    torch.manual_seed(1)
    state = torch.random.get_rng_state()
    with caplog.at_level(logging.INFO, logger="quadrants.rollout.identity_guard"):
        guarded.start(model)
    assert torch.equal(torch.random.get_rng_state(), state)  # the run's stream is untouched
    assert guarded.startup_gap == 0.0 and guarded.tolerance == 1e-3
    assert guarded.probe.sequences.shape[0] == 4 and guarded.probe.tokens > 4
    assert (
        "start-up gap 0 " in caplog.text and "tolerance 0.001 = max(4 x start-up gap" in caplog.text
    )
    _perturbed(model, 0.05, seed=1)
    guarded.sync_weights(model)
    figures = push_figures(guarded)
    assert figures["train/identity_gap"] == 0.0 and figures["train/identity_startup_gap"] == 0.0
    assert figures["train/identity_engine_moved"] == figures["train/identity_trainer_moved"] > 1e-3
    assert figures["train/identity_tolerance"] == 1e-3 and figures["train/identity_prob_gap"] == 0.0
    assert push_figures(guarded) == {}  # reported once, by the step that made the check
    _perturbed(model, 0.05, seed=2)
    engine.sync_weights = lambda model: None  # the push that never reaches the engine
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        guarded.sync_weights(model)


def test_an_engine_started_on_other_weights_stops_the_run_at_start():
    from quadrants.models.loading import load_policy

    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    other, _ = load_policy("tiny-random", seed=1)  # another checkpoint of the same architecture
    guarded = IdentityCheckedEngine(
        ReplicaHFEngine(other, tokenizer), IdentityCheckConfig(), FP32, chunk_size=64
    )
    with pytest.raises(RolloutIdentityError, match=r"at start: .* over the start-up limit 0.001"):
        guarded.start(model)


@pytest.mark.slow
def test_a_normal_run_passes_and_logs_the_gap_per_push(tmp_path, caplog):
    """2 steps of the default world with the check at every push (the default): each step logs
    the gap of its push, 0 (the one-process HF engine samples from the policy itself), and the log
    has no per-step line of the guard at INFO (its decision once, at start)."""
    cfg = RunConfig(seed=3, run_dir=str(tmp_path))
    cfg.model.name_or_path = "tiny-random"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.rollout.group_size = 2, 2, 2
    cfg.train.mini_batch_size, cfg.rollout.max_new_tokens = 4, 8
    cfg.train.threads, cfg.eval.problems, cfg.tracking.log_samples_every = 1, 0, 0
    tracker = RecordingTracker()
    with caplog.at_level(logging.INFO):
        run_training(RunPlan.parse(cfg), tracker)
    gaps = [m["train/identity_gap"] for _, m in tracker.history if "train/identity_gap" in m]
    assert gaps == [0.0, 0.0]
    lines = [r for r in caplog.records if r.name == "quadrants.rollout.identity_guard"]
    assert [r.levelno for r in lines] == [logging.INFO], [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("rollout identity guard: probe of ")


@pytest.mark.slow
def test_the_guard_sees_the_adapted_policy_under_lora():
    """LoRA: the trainer scores the policy with its adapters; a push sends the merged weights
    (rollout/weights.py `merged_lora_weights`) to a replica of the base architecture. Adapters
    made non-zero (peft starts lora_B at 0, so the adapted policy would equal the base): push 1
    reaches the replica, gap 0 to float rounding (W + B·A merged in float32 against the adapter
    path's x·W + (x·A)·B: the same sums in another order, far under the 1e-3 tolerance). Only the
    adapters move; push 2 reaches it: gap small, both moved alike. The adapters move again and
    push 3 is skipped: the engine did not move while the trainer did. Before any push the replica
    holds the base, which the start-up check refuses."""
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
    # before any push the replica holds the base: the adapters' part is what the check sees
    with pytest.raises(RolloutIdentityError, match="does not sample from the trainer's weights"):
        IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64).start(model)
    engine.sync_weights(model)
    guarded = IdentityCheckedEngine(engine, IdentityCheckConfig(), FP32, chunk_size=64)
    guarded.start(model)
    assert guarded.startup_gap < 1e-4 and guarded.tolerance == STARTUP_LIMIT_FP32
    move_adapters(2)
    guarded.sync_weights(model)
    assert guarded.figures["train/identity_gap_max"] < 1e-4
    assert guarded.figures["train/identity_engine_moved"] > STARTUP_LIMIT_FP32
    move_adapters(3)
    engine.sync_weights = lambda model: None  # the push that never reaches the engine
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        guarded.sync_weights(model)
