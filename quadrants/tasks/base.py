"""The task interface: verifiable problems for training and held-out evaluation.

A task hands out `Problem`s. The gold `answer` is a string that the grader (math-verify) can parse,
e.g. "66". Training draws fresh batches with a caller-owned `random.Random`; the held-out split is a
fixed, deterministic list that no training batch can ever contain.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    """One verifiable problem.

    Attributes:
        id: stable identifier, unique within the task (used to group rollouts and in reports).
        prompt: the text the policy continues.
        answer: the gold answer as a math-verify-parsable string, e.g. "66".
    """

    id: str
    prompt: str
    answer: str


@runtime_checkable
class Task(Protocol):
    """A source of problems with a training stream and a disjoint, deterministic held-out split."""

    name: str

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """`n` training problems drawn with `rng`; never a member of `heldout()`."""
        ...

    def heldout(self, n: int | None = None) -> list[Problem]:
        """The first `n` held-out problems (all of them when `n` is None); the
        same on every call."""
        ...


class RenderedTask:
    """`task` with every problem's prompt put through `render` (the run's prompt format), so
    training and the held-out check send the model exactly what evaluation sends it. Other
    attributes of the wrapped task (its counts, its name) read through."""

    def __init__(self, task: Task, render: Callable[[str], str]) -> None:
        self.task = task
        self.render = render
        self.name = task.name

    def __getattr__(self, attribute: str) -> object:
        return getattr(self.task, attribute)

    def _rendered(self, problems: list[Problem]) -> list[Problem]:
        return [replace(problem, prompt=self.render(problem.prompt)) for problem in problems]

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        return self._rendered(self.task.train_batch(n, rng))

    def heldout(self, n: int | None = None) -> list[Problem]:
        return self._rendered(self.task.heldout(n))
