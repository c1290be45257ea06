"""task=reasoning_gym: deterministic draws, a disjoint held-out split, params passed through, math
answers graded by the real grader."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("reasoning_gym")

from quadrants.rewards.grader import Grader
from quadrants.tasks import make_task, validate_task

PARAMS = {
    "dataset": "basic_arithmetic",
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
}


def test_draws_are_deterministic_and_never_heldout():
    task = make_task("reasoning_gym", 30, dict(PARAMS))
    first = task.train_batch(8, random.Random(5))
    assert task.train_batch(8, random.Random(5)) == first
    held = {p.prompt for p in task.heldout()}
    assert len(task.heldout()) == 30 and not held & {p.prompt for p in first}
    assert all(p.id.startswith("rg_basic_arithmetic/") for p in first)


def test_params_reach_the_generator():
    """Two one-digit terms: every question is 'Calculate a op b.' with a, b < 10 (possibly negated)."""
    task = make_task("reasoning_gym", 5, dict(PARAMS))
    for problem in task.train_batch(20, random.Random(0)):
        digits = [
            token.strip("()-.") for token in problem.prompt.split() if token.strip("()-.").isdigit()
        ]
        assert len(digits) == 2 and all(len(d) == 1 for d in digits)


def test_answers_grade_with_math_verify():
    task = make_task("reasoning_gym", 3, dict(PARAMS))
    golds = [p.answer for p in task.heldout()]
    with Grader(num_workers=0) as grader:
        right = grader.grade([f"so \\boxed{{{g}}}" for g in golds], golds)
        wrong = grader.grade([f"\\boxed{{{int(g) + 1}}}" for g in golds], golds)
    assert right.rewards == [1.0, 1.0, 1.0] and wrong.rewards == [0.0, 0.0, 0.0]


def test_bad_settings_fail_at_compose_time():
    with pytest.raises(
        ValueError, match=r"task.params.dataset='word_ladder'.*choose one of \['basic_arithmetic'"
    ):
        validate_task("reasoning_gym", 5, {"dataset": "word_ladder"})
    with pytest.raises(
        ValueError, match=r"task.params.reward='judge' is unknown; choose one of \['math_verify'\]"
    ):
        validate_task("reasoning_gym", 5, {"dataset": "chain_sum", "reward": "judge"})
