"""Tasks: sources of verifiable problems. `make_task` builds one from the run config."""

from __future__ import annotations

from typing import Any

from quadrants.tasks.base import Problem, Task

__all__ = ["Problem", "Task", "make_task", "known_tasks"]


def known_tasks() -> list[str]:
    return ["arithmetic"]


def make_task(name: str, heldout_size: int, params: dict[str, Any]) -> Task:
    """The task called `name` with its keyword `params`; unknown names list the known ones."""
    if name == "arithmetic":
        from quadrants.tasks.synthetic import ArithmeticTask

        return ArithmeticTask(heldout_size=heldout_size, **params)
    raise ValueError(f"unknown task {name!r}; known tasks: {known_tasks()}")
