"""The training loop when a step cannot be recorded (ENOSPC injected into the tracker): it stops
after checkpointing the step with its metrics inside, naming the path; the resumed run logs those
metrics first, so every step reaches the tracker exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.config import ObjectiveConfig, RunConfig
from quadrants.run.checkpoint import load_latest
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking.base import RecordingTracker
from quadrants.tracking.disk_full import DiskFullError


class FullAtStep(RecordingTracker):
    """Records like RecordingTracker, but the disk is full when step `full_at` is logged."""

    def __init__(self, full_at: int, path: Path) -> None:
        super().__init__()
        self.full_at, self.path = full_at, path

    def log_metrics(self, metrics, step):
        if step == self.full_at:
            raise DiskFullError(self.path)
        super().log_metrics(metrics, step)


def small(run_dir: Path) -> RunConfig:
    cfg = RunConfig(seed=3, run_dir=str(run_dir), objective=ObjectiveConfig(name="grpo"))
    cfg.model.name_or_path = "tiny-random"
    cfg.train.steps, cfg.train.prompts_per_step, cfg.rollout.group_size = 5, 2, 2
    cfg.rollout.max_new_tokens = cfg.eval.max_new_tokens = 6
    cfg.train.threads, cfg.eval.problems, cfg.tracking.log_samples_every = 1, 0, 0
    cfg.checkpoint.every = 4  # the regular checkpoint after step 4; the full disk hits step 3
    return cfg


@pytest.mark.subprocess
def test_stop_checkpoints_the_unrecorded_step_and_the_resume_logs_it_once(tmp_path: Path) -> None:
    spool_file = tmp_path / "run" / "tracking" / "000000.jsonl"
    full = FullAtStep(3, spool_file)
    with pytest.raises(
        DiskFullError,
        match=rf"^no space left on device: {spool_file} \(stopped at step 3: step 3 "
        r"is checkpointed with its metrics; free space",
    ):
        run_training(RunPlan.parse(small(tmp_path / "run")), full)
    assert [step for step, _ in full.history] == [0, 1, 2]
    checkpoint = load_latest(tmp_path / "run")
    assert checkpoint.step == 3 and list(checkpoint.state["unlogged_metrics"]) == [3]

    again = RecordingTracker()
    result = run_training(RunPlan.parse(small(tmp_path / "run")), again)
    assert result.resumed_from == 3
    assert [step for step, _ in again.history] == [
        3,
        4,
        5,
    ]  # step 3 from the checkpoint, then 4 and 5
    assert again.history[0][1] == checkpoint.state["unlogged_metrics"][3]

    # the same run without a full disk logs the same step 3
    plain = RecordingTracker()
    run_training(RunPlan.parse(small(tmp_path / "plain")), plain)
    assert dict(plain.history)[3]["train/reward_mean"] == again.history[0][1]["train/reward_mean"]
    assert dict(plain.history)[3]["train/entropy"] == again.history[0][1]["train/entropy"]


@pytest.mark.slow
def test_the_full_disk_save_brings_offloaded_optimizer_states_back_first(
    tmp_path: Path, monkeypatch
):
    """train.offload_optimizer keeps AdamW's states on the host between steps; every checkpoint
    save (run/records.py `save_step`) loads them onto the device first, the full-disk one included
    (it did not before). Real parts: the tiny model, AdamW after one step, the offload with the
    CPU standing in for the device (real copies, as tests/unit/run/test_offload.py), the real
    save_checkpoint, observed by a wrapper that records whether the states were on the host when
    it was called. What only a GPU shows: that the states are then on the GPU, not in host memory."""
    from types import SimpleNamespace

    import torch

    import quadrants.run.records as records
    from quadrants.models.tiny import random_tiny_policy
    from quadrants.run.offload import OptimizerOffload

    model, _ = random_tiny_policy(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    offload = OptimizerOffload(optimizer, torch.device("cpu"))
    assert offload.offload() > 0 and offload.on_host
    cfg = RunConfig()
    cfg.checkpoint.every = 1
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    ctx = SimpleNamespace(
        plan=RunPlan.parse(cfg, files=False),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        params={},
    )
    on_host_at_save = []
    real_save = records.save_checkpoint

    def recording_save(*args, **kwargs):
        on_host_at_save.append(offload.on_host)
        return real_save(*args, **kwargs)

    monkeypatch.setattr(records, "save_checkpoint", recording_save)
    tracker = RecordingTracker()
    with pytest.raises(DiskFullError, match="step 1 is checkpointed with its metrics"):
        with records.stop_if_disk_full(ctx, tmp_path, tracker, 1, {"m": 1.0}, offload):
            raise DiskFullError(tmp_path / "spool")
    assert on_host_at_save == [False]  # loaded for the save
    assert offload.on_host  # and offloaded again after it
    assert load_latest(tmp_path).state["unlogged_metrics"] == {1: {"m": 1.0}}
