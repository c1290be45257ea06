"""The held-out evaluation's cadence in the loop (run/held_out.py): step 0 of a run that starts
there, every `eval.every` steps, the last step (with the headline keys), counted on the steps a
run (or a resumed run) goes through. The evaluation itself is replaced by a recorder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import quadrants.run.held_out as held_out
from quadrants.config import RunConfig
from quadrants.run.held_out import HeldOutEvaluation
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import RecordingTracker

AVG = keys.evaluation("arithmetic", keys.avg_at(2))  # the task's held-out split at n = 2


def _evaluation(monkeypatch, *, every: int, total: int) -> tuple[HeldOutEvaluation, list[int]]:
    """The component over a stand-in run whose evaluation records its step and returns Avg@2 =
    step / 100."""
    evaluated: list[int] = []

    def evaluate_policy(engine, grader, task, tokenizer, settings, dist, step, tracker):
        evaluated.append(step)
        return {AVG: step / 100}

    monkeypatch.setattr(held_out, "evaluate_policy", evaluate_policy)
    cfg = RunConfig()
    cfg.eval.every, cfg.eval.samples, cfg.train.steps = every, 2, total
    ctx = SimpleNamespace(
        plan=RunPlan.parse(cfg, files=False), task=SimpleNamespace(name="arithmetic"), engine=None, grader=None,
        tokenizer=None, dist=None,
    )  # fmt: skip
    return HeldOutEvaluation(ctx, RecordingTracker()), evaluated


def _steps(evaluation: HeldOutEvaluation, first: int, total: int) -> dict[int, dict[str, float]]:
    """The metrics of steps first+1..total after the component saw them."""
    seen = {}
    for step in range(first + 1, total + 1):
        metrics = {keys.train("entropy"): 1.23456}
        evaluation.maybe(step, metrics)
        seen[step] = metrics
    return seen


@pytest.mark.parametrize(
    ("every", "first", "expected"),
    [
        (4, 0, [4, 8, 10]),  # multiples of 4 up to 10 (4, 8), then the last step 10
        (5, 0, [5, 10]),  # 10 is a multiple and the last step: evaluated once
        (0, 0, [10]),  # every 0: only the last step
        (1, 0, list(range(1, 11))),  # every step
        (4, 5, [8, 10]),  # resumed after step 5, mid-interval: 6, 7 skipped, 8 due, 10 last
        (4, 8, [10]),  # resumed after step 8 (evaluated there before the stop): only the last
    ],
)
def test_evaluated_steps(monkeypatch, every: int, first: int, expected: list[int]) -> None:
    evaluation, evaluated = _evaluation(monkeypatch, every=every, total=10)
    seen = _steps(evaluation, first, 10)
    assert evaluated == expected
    assert [s for s, m in seen.items() if AVG in m] == expected
    assert [s for s, m in seen.items() if evaluation.due(s)] == expected


def test_the_last_step_alone_carries_the_headline_keys(monkeypatch) -> None:
    evaluation, _ = _evaluation(monkeypatch, every=4, total=10)
    seen = _steps(evaluation, 0, 10)
    assert [s for s, m in seen.items() if any(k.startswith("final/") for k in m)] == [10]
    # step 10's Avg@2 is 10 / 100 = 0.1; the entropy 1.23456 rounded to 4 places: 1.2346
    assert seen[10]["final/avg_at_2"] == 0.1 and seen[10]["final/entropy"] == 1.2346
    assert evaluation.final(seen[10]) == {AVG: 0.1}


def test_step_0_is_evaluated_and_logged_only_by_a_run_that_starts_there(monkeypatch) -> None:
    evaluation, evaluated = _evaluation(monkeypatch, every=4, total=10)
    assert evaluation.start(0) == {AVG: 0.0}
    assert evaluation.tracker.history == [(0, {AVG: 0.0})]
    resumed, evaluated_resumed = _evaluation(monkeypatch, every=4, total=10)
    assert resumed.start(5) == {} and evaluated_resumed == [] and resumed.tracker.history == []
    assert evaluated == [0]


def test_a_run_of_no_steps_has_no_final_metrics(monkeypatch) -> None:
    evaluation, evaluated = _evaluation(monkeypatch, every=4, total=0)
    assert _steps(evaluation, 0, 0) == {} and evaluation.final({}) == {} and evaluated == []
