"""The rollout identity guard on the vLLM engine for real (opt-in stage): a run whose weight pushes
reach vLLM passes and logs the gap per push; a push that never reaches it stops the run."""

from __future__ import annotations

import pytest

from quadrants.config import RunConfig
from quadrants.rollout.identity import RolloutIdentityError
from quadrants.run.loop import run_training
from quadrants.tracking.base import RecordingTracker

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _cfg() -> RunConfig:
    cfg = RunConfig()
    cfg.model.name_or_path = "tiny-random"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.train.threads, cfg.train.lr = 2, 4, 1, 1e-3
    cfg.objective.name = "w_reinforce"  # moves every token of the random model (test_train.py)
    cfg.eval.problems, cfg.checkpoint.every = 0, 0
    cfg.rollout.engine, cfg.rollout.group_size, cfg.rollout.max_new_tokens = "vllm", 4, 16
    cfg.rollout.vllm.kv_cache_gib, cfg.rollout.vllm.enforce_eager = 0.25, True
    cfg.rollout.vllm.dtype = "float32"  # float32 on both sides: tolerance 1e-3
    return cfg


def test_pushes_that_reach_vllm_pass_and_the_gap_is_logged_per_push():
    tracker = RecordingTracker()
    run_training(_cfg(), tracker)
    gaps = [m["train/identity_gap"] for _, m in tracker.history if "train/identity_gap" in m]
    assert len(gaps) == 2 and max(gaps) < 1e-3, gaps  # vLLM's CPU kernels vs HF's: ~1e-5
    moved = [m for _, m in tracker.history if "train/identity_engine_moved" in m]
    assert moved and all(m["train/identity_engine_moved"] > 1e-3 for m in moved)


def test_a_push_that_never_reaches_vllm_stops_the_run(monkeypatch):
    from quadrants.rollout.vllm import VLLMEngine

    real, pushes = VLLMEngine.sync_weights, []

    def first_only(self, model):  # the engine's start pushes the weights, no later push arrives
        pushes.append(1)
        if len(pushes) == 1:
            real(self, model)

    monkeypatch.setattr(VLLMEngine, "sync_weights", first_only)
    with pytest.raises(RolloutIdentityError, match="did not reach the engine"):
        run_training(_cfg())
