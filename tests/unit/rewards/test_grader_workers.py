"""How many math-verify workers grade (quadrants/rewards/grader.py `grader_workers`): the CPUs the
task holds, less one for the trainer, unless task.grader_workers says otherwise."""

from __future__ import annotations

import os

import pytest

from quadrants.config import RunConfig
from quadrants.rewards.grader import grader_workers, held_cpus
from quadrants.run_plan import RunPlan


def test_a_slurm_task_grades_on_the_cpus_it_asked_for_less_one():
    # sbatch --cpus-per-task=8: 8 CPUs held, 7 grading workers, 1 CPU for the trainer
    assert held_cpus({"SLURM_CPUS_PER_TASK": "8"}) == 8
    assert grader_workers(0, {"SLURM_CPUS_PER_TASK": "8"}) == 7
    assert grader_workers(0, {"SLURM_CPUS_PER_TASK": "1"}) == 1  # never 0 workers


def test_outside_slurm_the_affinity_mask_counts():
    cpus = len(os.sched_getaffinity(0))
    assert held_cpus({}) == cpus
    assert grader_workers(0, {}) == max(1, cpus - 1)
    assert held_cpus({"SLURM_CPUS_PER_TASK": ""}) == cpus  # set but empty: not a count


def test_an_explicit_count_wins_and_a_negative_one_fails_at_compose_time():
    assert grader_workers(3, {"SLURM_CPUS_PER_TASK": "8"}) == 3
    cfg = RunConfig()
    cfg.task.grader_workers = -1
    with pytest.raises(ValueError, match="task.grader_workers"):
        RunPlan.parse(cfg)
