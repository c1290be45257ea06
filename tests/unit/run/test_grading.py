"""The run's guard against rewards that cannot be computed (run/grading.py), by hand-made step
error shares: which step stops, and which never does."""

from __future__ import annotations

import pytest

from quadrants.run.grading import ERROR_FRAC, GradingFailed, GradingGuard


def _feed(guard: GradingGuard, shares: list[float]) -> int | None:
    """The step (1-based) at which the guard stops, None if it never does."""
    for step, share in enumerate(shares, start=1):
        try:
            guard.check(step, {ERROR_FRAC: share, "train/reward_mean": 0.0})
        except GradingFailed:
            return step
    return None


def test_a_step_with_no_grade_at_all_stops_at_once_whatever_the_threshold():
    assert _feed(GradingGuard(0.5, 5, "m:f"), [1.0]) == 1
    assert _feed(GradingGuard(None, 5, None), [0.0, 0.2, 1.0]) == 3


def test_the_mean_share_over_the_window_stops_only_above_the_threshold():
    # window 3, threshold 0.5: steps 1-3 mean (0.4+0.6+0.6)/3 = 0.533 > 0.5 -> stops at step 3
    assert _feed(GradingGuard(0.5, 3), [0.4, 0.6, 0.6]) == 3
    # (0.5+0.5+0.5)/3 = 0.5, not above -> never; then (0.5+0.5+0.9)/3 = 0.633 -> step 4
    assert _feed(GradingGuard(0.5, 3), [0.5, 0.5, 0.5, 0.9]) == 4
    # 0.9 on the first two steps: no full window yet -> goes on; null threshold never stops on mean
    assert _feed(GradingGuard(0.5, 3), [0.9, 0.9]) is None
    assert _feed(GradingGuard(None, 3), [0.9] * 10) is None
    # a bad start that recovers: windows (0.9, 0.9, 0.0) = 0.6 -> stops at 3 with threshold 0.5,
    # but with 0.7 the window means are 0.6, 0.3, 0.0: never
    assert _feed(GradingGuard(0.5, 3), [0.9, 0.9, 0.0, 0.0, 0.0]) == 3
    assert _feed(GradingGuard(0.7, 3), [0.9, 0.9, 0.0, 0.0, 0.0]) is None


def test_timeouts_and_missing_answers_are_not_errors():
    # a step of hard problems: every answer timed out or had no box; the error share is 0
    guard = GradingGuard(0.5, 1)
    guard.check(1, {ERROR_FRAC: 0.0, "train/outcome/timeout_frac": 1.0})
    guard.check(2, {ERROR_FRAC: 0.0, "train/outcome/no_answer_frac": 1.0})


def test_the_error_names_the_reward_the_key_and_the_fix():
    with pytest.raises(GradingFailed, match=r"step 1: task.reward=mod:fn could not grade any"):
        GradingGuard(0.5, 5, "mod:fn").check(1, {ERROR_FRAC: 1.0})
    with pytest.raises(GradingFailed, match=r"the grader \(math-verify\).*gold answers"):
        GradingGuard(0.5, 5).check(1, {ERROR_FRAC: 1.0})
    with pytest.raises(GradingFailed, match=r"steps 1-2: .*task.max_error_frac=0.5 over"):
        _feed_raising(GradingGuard(0.5, 2), [0.6, 0.6])


def _feed_raising(guard: GradingGuard, shares: list[float]) -> None:
    for step, share in enumerate(shares, start=1):
        guard.check(step, {ERROR_FRAC: share})
