"""`python -m quadrants.evaluate`'s checks (launch/evaluate.py `prepare`): the task is checked
against the model only when the evaluation gives the model the task's prompts."""

from __future__ import annotations

import pytest

from quadrants.launch.evaluate import prepare

HUB = "Qwen/Qwen2.5-Math-7B"  # named, never fetched: nothing is loaded before these checks


@pytest.mark.slow
def test_the_task_is_checked_against_the_model_only_when_it_is_used(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # docs/evaluation.md's hub-id command: eval=paper's suite (aime24, ...) does not name the default
    # task (arithmetic, the embedded character-level world), so none of its prompts reach the model
    plan, target = prepare(
        HUB, ["eval=paper", "prompt=qwen_math", "model.dtype=bfloat16"], files=False
    )
    assert target.kind == "hub" and plan.task.name == "arithmetic"
    assert "arithmetic" not in plan.eval.benchmarks
    # eval=toy evaluates the task's own held-out split: arithmetic prompts for a pretrained model
    with pytest.raises(ValueError, match="task=arithmetic is the embedded character-level world"):
        prepare(HUB, ["eval=toy"], files=False)
    # the probe (task_used=True) rolls out the task's prompts whatever the suite
    with pytest.raises(ValueError, match="task=arithmetic is the embedded character-level world"):
        prepare(HUB, ["eval=paper"], files=False, task_used=True)
