"""The user's own code by path: a task factory (`task=custom task.params.target=pkg.mod:make_task`,
tasks/registry.py) or a reward function (`task.reward=pkg.mod:reward`), imported from any module
on the Python path, with no edit to this package.

A reward function takes one completion and the problem's gold answer and says whether it is right:

    def reward(completion: str, answer: str) -> bool | None: ...

True is correct (reward 1), False wrong (0), None no answer (0, counted as `no_answer`); an
`Outcome` may be returned as such. `FunctionGrader` calls it for every completion in place of
math-verify, in training and in the held-out check (not for benchmarks, whose grading is theirs),
in the training process: it has no worker processes and no deadline, so keep it fast and bounded.
An exception grades that completion `error` (logged once) and training goes on.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from quadrants.rewards.grader import GradeBatch
from quadrants.rewards.outcome import Outcome

log = logging.getLogger("quadrants.rewards")


def load_callable(path: Any, key: str) -> Callable[..., Any]:
    """The callable at `path` ("package.module:name"); ValueError naming `key` and what is wrong."""
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ValueError(
            f"{key}={path!r} is not a 'module:function' path; write e.g. {key}=mypkg.rewards:exact "
            "(the module importable from the Python path: PYTHONPATH, or an installed package)"
        )
    module_name, name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"{key}={path}: module {module_name!r} cannot be imported ({error}); put its directory "
            "on PYTHONPATH or install its package"
        ) from None
    found = getattr(module, name, None)
    if not callable(found):
        raise ValueError(f"{key}={path}: {module_name} has no callable {name!r}")
    return found


def _outcome(value: Any) -> Outcome:
    if isinstance(value, Outcome):
        return value
    if value is None:
        return Outcome.no_answer
    if isinstance(value, bool):
        return Outcome.correct if value else Outcome.wrong
    raise TypeError(f"returned {value!r}; a reward returns True, False, None or an Outcome")


class FunctionGrader:
    """A grader (the `Grader.grade` interface) that asks the user's reward function."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.function = load_callable(path, "task.reward")
        self._warned = False

    def __enter__(self) -> FunctionGrader:  # noqa: PYI034 - not meant to be subclassed
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def close(self) -> None:
        pass

    def grade(self, completions: Sequence[str], golds: Sequence[str]) -> GradeBatch:
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} golds")
        outcomes = []
        for completion, gold in zip(completions, golds):
            try:
                outcomes.append(_outcome(self.function(completion, gold)))
            except Exception as error:  # noqa: BLE001 - the user's code: graded error, go on
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "task.reward=%s failed (%s: %s); such completions are graded 'error' "
                        "(further failures are not logged)",
                        self.path,
                        type(error).__name__,
                        error,
                    )
                outcomes.append(Outcome.error)
        return GradeBatch.from_outcomes(outcomes)
