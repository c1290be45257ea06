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
        (["-m", "quadrant=PHR,NHR", "reward=box_only_format"], 2),
        (["-m", "quadrant=PHR,NHR", "reward=random_solve_rate"], 2),
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
        assert cfg.reward.probability == 0.5  # Spurious Rewards' random0.5, whatever the policy
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
        (
            ["reward=random_solve_rate", "reward.probability=0.5"],
            r"reward.probability=0.5 is the success rate of reward=random, but "
            r"reward.name=random_solve_rate: drop reward.probability, or set reward=random",
        ),
    ],
)
def test_a_bad_reward_is_refused_at_compose_time(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_the_random_reward_is_the_papers_random_and_its_variants_have_their_own_names():
    """`python -m quadrants.sweep --cfg job reward=random` prints the composed job: probability
    0.5 (the paper's random0.5); reward.probability changes it; the solve-rate variant is its own
    name with no probability; the paper's format rule is box_only_format."""
    assert compose_run_config(["reward=random"]).reward.probability == 0.5
    assert compose_run_config(["reward=random", "reward.probability=0.2"]).reward.probability == 0.2
    solve = compose_run_config(["reward=random_solve_rate"]).reward
    assert (solve.name, solve.probability) == ("random_solve_rate", None)
    assert compose_run_config(["reward=box_only_format"]).reward.name == "box_only_format"
