"""The confound presets compose with the quadrant sweep (reward=random, reward=format_only, the
Llama-3.2-1B-Instruct study), and a bad reward fails at compose time naming the key and the fix."""

from __future__ import annotations

import pytest

from quadrants.launch.hydra_setup import compose_run_config, preflight


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "jobs"),
    [
        (["-m", "quadrant=PHR,NHR", "reward=random"], 2),  # the command
        (["-m", "quadrant=PHR,NHR", "reward=format_only"], 2),
        (["-m", "quadrant=PHR,NHR", "reward=random", "reward.probability=0.5"], 2),
        (["-m", "experiment=random_reward", "quadrant=PHR,NHR"], 4),  # x 2 seeds
        (["-m", "experiment=format_reward", "quadrant=PHR,NHR"], 4),
        # a GPU preset, composed as it is submitted (a local job would be refused on this CPU)
        (
            [
                "-m",
                "experiment=llama3.2_1b_quadrants",
                "reward=random",
                "launcher=slurm",
                "tracking.sqlite_on_slurm=true",
            ],
            8,
        ),
    ],
)
def test_confounds_compose_with_the_quadrant_sweep(argv, jobs, tmp_path):
    assert preflight([*argv, f"outputs={tmp_path / 'outputs'}"]) == jobs


@pytest.mark.slow
def test_each_job_carries_its_reward_and_its_quadrant():
    for quadrant in ("PHR", "NHR"):
        cfg = compose_run_config(["experiment=random_reward", f"quadrant={quadrant}", "seed=1"])
        assert (cfg.reward.name, cfg.quadrant.keep, cfg.seed) == ("random", [quadrant], 1)
        assert cfg.reward.probability is None  # the round's true solve rate
        assert cfg.study == "random_reward"
    fmt = compose_run_config(["experiment=format_reward", "quadrant=PHR"])
    assert (fmt.reward.name, fmt.quadrant.keep) == ("format_only", ["PHR"])
    llama = compose_run_config(["experiment=llama3.2_1b_quadrants", "quadrant=PHR"])
    assert llama.model.name_or_path == "meta-llama/Llama-3.2-1B-Instruct"
    assert llama.prompt.format == "chat"
    assert llama.reward.name == "verifier"  # the default reward


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reward.name=majority"], r"reward.name='majority' is unknown; choose one of "),
        (
            ["reward.probability=0.5"],
            r"reward.probability=0.5 is the success rate of reward=random, but "
            r"reward.name=verifier: drop reward.probability, or set reward=random",
        ),
        (["reward=random", "reward.probability=1.5"], r"reward.probability=1.5 is out of range"),
    ],
)
def test_a_bad_reward_is_refused_at_compose_time(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
    assert not (tmp_path / "outputs").exists()
