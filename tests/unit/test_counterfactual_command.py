"""`python -m quadrants.counterfactual`'s refusals (quadrants/launch/counterfactual.py `prepare`):
each before anything is loaded, naming the flag (or the file) and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from quadrants.config import RunConfig
from quadrants.launch.counterfactual import prepare


def run_dir(tmp_path: Path, steps=(2, 4), config: bool = True) -> Path:
    """A run directory with complete checkpoints of `steps` (only what `prepare` reads: a state.pt
    with no MLflow run id) and the default config.yaml."""
    root = tmp_path / "run"
    for step in steps:
        (root / "checkpoints" / f"step_{step:07d}").mkdir(parents=True)
        torch.save({"run_id": None}, root / "checkpoints" / f"step_{step:07d}" / "state.pt")
    root.mkdir(exist_ok=True)
    if config:
        (root / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(RunConfig())))
    return root


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--batches", "1"], "--batches 1: the paired interval over batches needs at least 2"),
        (
            ["--arms", "PHR,XYZ"],
            "unknown arm(s) ['XYZ']; choose among PHR,PLR,NHR,NLR,random,all,null",
        ),
        (
            ["--update", "rmsprop"],
            "--update 'rmsprop' is unknown; choose one of adam, sgd, normalized",
        ),
        (["--eta", "0.1"], "--eta 0.1 sets the normalized step's length; pass --update normalized"),
        (["--update", "normalized", "--eta", "0"], "--eta 0.0: give a step length > 0"),
        (["--arms", "PHR,phr"], "--arms names PHR more than once"),
        (["--samples", "0"], "--samples 0: give at least 1"),
        (["--confidence", "1.5"], "--confidence 1.5: give a level in (0, 1)"),
    ],
)
def test_bad_flags_are_refused_before_the_run_is_read(tmp_path, args, says):
    with pytest.raises(ValueError) as err:
        prepare([str(tmp_path / "absent"), *args])
    assert says in str(err.value)


def test_a_missing_run_dir_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="RUN_DIR .* does not exist"):
        prepare([str(tmp_path / "absent")])


def test_a_run_without_checkpoint_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint .* checkpoint.every > 0"):
        prepare([str(run_dir(tmp_path, steps=()))])


def test_a_step_without_checkpoint_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        prepare([str(run_dir(tmp_path)), "--step", "3"])
    assert "--step 3:" in str(err.value) and "checkpoints are of steps 2, 4" in str(err.value)


@pytest.mark.slow  # composes and validates the run's config
def test_random_without_a_match_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"includes random but names no arm .* --match PHR"):
        prepare([str(run_dir(tmp_path)), "--arms", "PHR,random", "--no-mlflow"])


@pytest.mark.slow
def test_a_match_that_names_no_arm_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--match 'all' names no arm"):
        prepare([str(run_dir(tmp_path)), "--arms", "random", "--match", "all", "--no-mlflow"])


@pytest.mark.slow
def test_a_good_request_names_the_newest_checkpoint(tmp_path):
    request = prepare([str(run_dir(tmp_path)), "--arms", "PHR,random", "--match", "PHR",
                       "--no-mlflow"])  # fmt: skip
    assert request.step == 4 and request.arms == ("PHR", "random")
    assert request.control.match[0].value == "PHR" and request.batches == 4
    assert request.out == tmp_path.resolve() / "run" / "counterfactual" / "step_4"
