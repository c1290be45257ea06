"""The resume identity (quadrants/run/resume_identity.py): which keys are compared, how a change is said,
and the refusal / opt-in against a checkpoint's recorded config."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from quadrants.config import CheckpointConfig, ObjectiveConfig, RunConfig, TrainConfig
from quadrants.run.checkpoint import IDENTITY_FILE
from quadrants.run.resume_identity import (
    Change,
    ConfigChangedError,
    ResumeChange,
    change_params,
    check_resume,
    config_changes,
    flat_config,
    history_name,
    identity_hash,
    identity_record,
    may_change,
    resume_identity,
)
from quadrants.run_plan import RunPlan


def _plan(cfg: RunConfig) -> RunPlan:
    """`cfg` parsed as a run parses it (its data files are not the point here)."""
    return RunPlan.parse(cfg, files=False)


def test_may_change_matches_keys_and_what_lies_under_them():
    # "tracking" is listed: tracking.uri lies under it; "train.steps" is, "train.steps_x" is not
    assert may_change("tracking.uri") and may_change("tracking")
    assert may_change("train.steps") and may_change("train.threads")
    assert not may_change("train.steps_x")
    assert not may_change("train.lr") and not may_change("objective.name")


def test_flat_config_flattens_dataclasses_and_free_form_params():
    cfg = RunConfig(objective=ObjectiveConfig(name="dapo", params={"clip_high": 0.28}))
    flat = flat_config(cfg)
    assert flat["objective.name"] == "dapo"
    assert flat["objective.params.clip_high"] == 0.28  # a changed clip names its own key
    assert flat["train.betas"] == [0.9, 0.999]  # a tuple as JSON keeps it (a list)
    assert flat["train.lr"] == 1e-4


def test_identity_leaves_out_the_keys_that_may_change():
    identity = resume_identity(RunConfig(outputs="/a", train=TrainConfig(steps=2, threads=3)))
    assert "train.steps" not in identity and "train.threads" not in identity
    assert "outputs" not in identity and "tracking.uri" not in identity
    assert "checkpoint.allow_config_change" not in identity
    assert identity["train.lr"] == 1e-4


def test_the_hash_ignores_allowed_keys_and_follows_the_others():
    base = identity_record(_plan(RunConfig()))["hash"]
    extended = RunConfig(outputs="/elsewhere", train=TrainConfig(steps=400, threads=8))
    assert identity_record(_plan(extended))["hash"] == base
    assert identity_record(_plan(RunConfig(train=TrainConfig(lr=1e-3))))["hash"] != base
    assert identity_hash({"a": 1, "b": 2}) == identity_hash({"b": 2, "a": 1})  # key order


def test_changes_are_said_old_to_new_sorted_and_absent_keys_named():
    old = {"train.lr": 0.0001, "objective.name": "dapo", "objective.params.clip_high": 0.28}
    new = {"train.lr": 0.001, "objective.name": "grpo", "train.steps": 4}
    changes = config_changes(old, new)
    # train.steps may change; the rest differ (clip_high is gone under grpo)
    assert [str(c) for c in changes] == [
        "objective.name: dapo → grpo",
        "objective.params.clip_high: 0.28 → (absent)",
        "train.lr: 0.0001 → 0.001",
    ]
    assert config_changes(old, dict(old)) == []


def test_a_schema_key_the_record_predates_counts_only_off_its_default():
    # a checkpoint recorded before the schema had `reward.name` (default "verifier") and
    # `reward.probability` (default None): resuming at the defaults is no change; a non-default
    # value is (absent → random); an objective param the record lacks is always said (a new
    # param's default may change the recipe)
    old = {"train.lr": 0.0001}
    at_default = {"train.lr": 0.0001, "reward.name": "verifier", "reward.probability": None}
    assert config_changes(old, at_default) == []
    moved = {**at_default, "reward.name": "random", "objective.params.kl_normaliser": "response"}
    assert [str(c) for c in config_changes(old, moved)] == [
        "objective.params.kl_normaliser: (absent) → response",
        "reward.name: (absent) → random",
    ]


def _with_checkpoint(tmp_path, cfg: RunConfig, step: int = 2) -> None:
    """A complete checkpoint directory of `step` holding `cfg`'s identity record."""
    path = tmp_path / "checkpoints" / f"step_{step:07d}"
    path.mkdir(parents=True)
    (path / "state.pt").write_bytes(b"")  # what makes it complete (checkpoint._complete)
    (path / IDENTITY_FILE).write_text(json.dumps(identity_record(_plan(cfg))))


def test_a_resume_under_another_config_is_refused_naming_each_change(tmp_path):
    first = RunConfig(run_dir=str(tmp_path), train=TrainConfig(steps=2))
    _with_checkpoint(tmp_path, first)
    extended = replace(first, train=TrainConfig(steps=4))
    assert check_resume(_plan(extended)) is None  # extended: allowed
    changed = replace(
        first,
        train=TrainConfig(steps=4, lr=1e-3),
        objective=ObjectiveConfig(name="grpo"),
    )
    with pytest.raises(ConfigChangedError) as refused:
        check_resume(_plan(changed))
    said = str(refused.value)
    assert "checkpoint of step 2" in said
    assert "train.lr: 0.0001 → 0.001" in said and "objective.name: dapo → grpo" in said
    assert "checkpoint.allow_config_change=true" in said
    assert "train.steps" not in said


def test_the_opt_in_returns_the_change_with_its_step(tmp_path):
    first = RunConfig(run_dir=str(tmp_path))
    _with_checkpoint(tmp_path, first, step=2)
    allowed = replace(
        first,
        train=TrainConfig(lr=1e-3),
        checkpoint=CheckpointConfig(allow_config_change=True),
    )
    change = check_resume(_plan(allowed))
    assert change == ResumeChange(2, (Change("train.lr", 0.0001, 0.001),))
    assert change_params(change) == {"config_change/2/train.lr": "0.0001 → 0.001"}
    assert history_name(change) == "config.2.yaml" and history_name(None) == "config.yaml"


def test_no_checkpoint_or_an_old_one_without_a_record_is_not_checked(tmp_path):
    cfg = RunConfig(run_dir=str(tmp_path), train=TrainConfig(lr=1e-3))
    assert check_resume(_plan(cfg)) is None  # nothing to resume
    old = tmp_path / "checkpoints" / "step_0000002"
    old.mkdir(parents=True)
    (old / "state.pt").write_bytes(b"")
    assert check_resume(_plan(cfg)) is None  # written before identities were recorded
    assert check_resume(_plan(RunConfig(run_dir=None))) is None
