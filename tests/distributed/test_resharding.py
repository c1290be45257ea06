"""A checkpoint written by 2 ranks resumes in 1 process, and one written by 1 process resumes in 2
ranks (torch.distributed.checkpoint reshards model and optimizer state to the loading layout).

Each resumes the grpo run of `equivalent_runs` from its step-1 checkpoint (the step-2 one is
removed) and trains step 2 with the other number of ranks; the result must equal step 2 of the
uninterrupted run with that number of ranks: same logged step, same loss (atol 1e-6), same
parameters (tolerances as in test_equivalence.py). Adam's moments matter here: a resume that lost
them would move parameters by up to lr = 3e-4 differently.
"""

from __future__ import annotations

import shutil

import pytest
import torch


def resume_from_step_1(source, target):
    shutil.copytree(source, target)
    shutil.rmtree(target / "checkpoints" / "step_0000002")
    (target / "metrics.json").unlink()


@pytest.mark.slow
@pytest.mark.parametrize("written_by,resumed_by", [("two", 1), ("one", 2)])
def test_checkpoint_resumes_with_another_number_of_ranks(
    equivalent_runs, worker, tmp_path, written_by, resumed_by
):
    resume_from_step_1(equivalent_runs / written_by / "grpo", tmp_path / "grpo")
    worker.run(tmp_path, ["grpo"], ranks=resumed_by)
    resumed = worker.logged(tmp_path / "grpo")
    assert (resumed["world_size"], resumed["resumed_from"]) == (resumed_by, 1)
    assert list(resumed["steps"]) == ["2"]  # step 2 only: step 1 was logged by the first run
    # the uninterrupted run with the resuming run's number of ranks
    uninterrupted = "one" if resumed_by == 1 else "two"
    reference = worker.logged(equivalent_runs / uninterrupted / "grpo")["steps"]["2"]
    for key in ("train/reward_mean", "train/entropy", "train/objective/loss"):
        assert resumed["steps"]["2"][key] == pytest.approx(reference[key], abs=1e-6), key
    expected = worker.parameters(equivalent_runs / uninterrupted / "grpo", 2)
    got = worker.parameters(tmp_path / "grpo", 2)
    assert set(got) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(
            got[name],
            value,
            rtol=0,
            atol=worker.parameter_atol(name),
            msg=lambda m, name=name: f"{name}: {m}",
        )
