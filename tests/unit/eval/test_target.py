"""What `python -m quadrants.evaluate TARGET` resolves TARGET to, before anything is loaded."""

from __future__ import annotations

import json

import pytest
import yaml

from quadrants.eval.target import resolve_target


def make_run(root, steps=(2, 5), config=True):
    """A run directory as a sweep job leaves it: config.yaml, run.json, checkpoints/step_N/state.pt
    (the state files are empty: resolving never reads them)."""
    run = root / "quadrant=PHR,seed=1"
    for step in steps:
        (run / "checkpoints" / f"step_{step:07d}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{step:07d}" / "state.pt").write_bytes(b"")
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run / "checkpoints" / "step_0000009.tmp").mkdir()  # a half-written checkpoint is never picked
    if config:
        cfg = {
            "model": {"name_or_path": "tiny-random", "dtype": "float32"},
            "task": {"name": "arithmetic"},
            "sweep_id": "s1",
            "seed": 1,
            "objective": {"name": "dapo"},
        }
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "run.json").write_text(json.dumps({"run_id": "abc123"}))
    return run


def test_run_directory_means_its_newest_complete_checkpoint(tmp_path):
    run = make_run(tmp_path)
    target = resolve_target(str(run))
    assert (target.kind, target.step, target.model, target.dtype) == (
        "checkpoint",
        5,
        "tiny-random",
        "float32",
    )
    assert target.checkpoint == run.resolve() / "checkpoints" / "step_0000005" / "state.pt"
    assert target.source_run_id == "abc123" and target.label == "quadrant=PHR,seed=1@step_5"


def test_checkpoint_directory_is_that_checkpoint(tmp_path):
    run = make_run(tmp_path)
    target = resolve_target(str(run / "checkpoints" / "step_0000002"))
    assert (target.kind, target.step, target.model) == ("checkpoint", 2, "tiny-random")


def test_run_without_checkpoints_or_config_fails_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        resolve_target(str(make_run(tmp_path / "a", steps=())))
    with pytest.raises(FileNotFoundError, match="config.yaml: the base model is unknown"):
        resolve_target(str(make_run(tmp_path / "b", config=False)))


def test_model_directory_embedded_models_and_hub_ids(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert resolve_target(str(tmp_path / "model")).kind == "model_dir"
    assert (
        resolve_target("tiny").kind == "embedded"
        and resolve_target("tiny-random").model == "tiny-random"
    )
    hub = resolve_target("Qwen/Qwen2.5-Math-7B")  # online: transformers downloads it at load time
    assert (hub.kind, hub.model, hub.label) == (
        "hub",
        "Qwen/Qwen2.5-Math-7B",
        "Qwen--Qwen2.5-Math-7B",
    )


def test_offline_hub_id_must_be_in_the_local_cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        FileNotFoundError,
        match="'quadrants-tests/no-such-model' is neither a local directory nor in",
    ):
        resolve_target("quadrants-tests/no-such-model")  # an id no cache holds


@pytest.mark.parametrize(
    "missing", ["./no/such/model", "/no/such/dir", "~/no/such/dir", "no/such/dir"]
)
def test_a_path_that_does_not_exist_is_named(missing):
    with pytest.raises(FileNotFoundError, match="no model, run or checkpoint directory at"):
        resolve_target(missing)


def test_an_unrelated_directory_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a training run directory"):
        resolve_target(str(tmp_path))


@pytest.mark.parametrize("layout", ["state_pt", "sharded"])
def test_checkpoint_weights_are_loaded_into_the_runs_base_model(tmp_path, layout):
    """Both checkpoint layouts: the model in state.pt (older), or torch.distributed.checkpoint shards
    in model_optim/ next to it (what run/checkpoint.py writes now)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from quadrants.eval.target import load_target_policy
    from quadrants.models.loading import load_policy

    run = make_run(tmp_path, steps=(3,))
    trained, _ = load_policy("tiny-random", seed=0)
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(0.5)  # weights no fresh tiny-random model has
    step_dir = run / "checkpoints" / "step_0000003"
    if layout == "state_pt":
        torch.save({"step": 3, "model": trained.state_dict()}, step_dir / "state.pt")
    else:
        torch.save({"step": 3}, step_dir / "state.pt")
        dcp.save(
            {"model": trained.state_dict(), "optim": {}},
            checkpoint_id=str(step_dir / "model_optim"),
        )
    model, _ = load_target_policy(resolve_target(str(run)), dtype="float32")
    for (name, loaded), expected in zip(model.state_dict().items(), trained.state_dict().values()):
        torch.testing.assert_close(loaded, expected, rtol=0, atol=0, msg=name)


def test_a_model_without_a_run_is_told_to_pass_its_prompt_format():
    from quadrants.eval.target import EvalTarget
    from quadrants.launch.evaluate import prompt_note

    hub = EvalTarget(kind="hub", label="Qwen--Qwen2.5-Math-7B", model="Qwen/Qwen2.5-Math-7B")
    assert "prompt=qwen_math" in prompt_note(hub, ["eval=paper"])
    assert prompt_note(hub, ["eval=paper", "prompt=qwen_math"]) is None
    assert prompt_note(hub, ["prompt.instruction=x"]) is None
    assert prompt_note(EvalTarget(kind="embedded", label="tiny", model="tiny"), []) is None
