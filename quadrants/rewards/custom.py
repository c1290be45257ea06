"""The user's own code by path: a task factory (`task=custom task.params.target=pkg.mod:make_task`,
tasks/registry.py) or a reward function (`task.reward=pkg.mod:reward`), imported from any module
on the Python path, with no edit to this package.

A reward function takes one completion and the problem's gold answer and says whether it is right:

    def reward(completion: str, answer: str) -> bool | None: ...

True is correct (reward 1), False wrong (0), None no answer (0, counted as `no_answer`); an
`Outcome` may be returned as such. `FunctionGrader` calls it for every completion in place of
math-verify, in training and in the held-out check (not for benchmarks, whose grading is theirs),
in the training process: it has no worker processes and no deadline, so keep it fast and bounded.

Before anything is written, `probe_reward` calls it once on one problem of the task (its gold, and
the completion `\\boxed{<gold>}`): a wrong signature, an exception or a value that is not one of
those (NaN, a number, a string) is refused at compose time naming the key and the error. During
training an exception grades that completion `error` (logged once); the run's guard
(run/grading.py) stops the run when a step's completions all fail to grade, or too many of them
over several steps (`task.max_error_frac`, `task.error_steps`).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import traceback
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
    except ModuleNotFoundError as error:
        if error.name is None or not _names_module(module_name, error.name):
            raise ValueError(_import_failure(key, path, module_name, error)) from None
        raise ValueError(
            f"{key}={path}: module {module_name!r} is not on the Python path ({error}); put its "
            "directory on PYTHONPATH or install its package"
        ) from None
    except Exception as error:  # noqa: BLE001 - the user's module raised while importing
        raise ValueError(_import_failure(key, path, module_name, error)) from None
    found = getattr(module, name, None)
    if not callable(found):
        raise ValueError(f"{key}={path}: {module_name} has no callable {name!r}")
    return found


def _names_module(module_name: str, missing: str) -> bool:
    """Whether the module Python could not find is `module_name` itself or one of its packages
    (`a.b.c` not found as `a` or `a.b`): then it is not on the path. Any other missing name is an
    import inside the user's module, which is found but fails."""
    return module_name == missing or module_name.startswith(missing + ".")


def _import_failure(key: str, path: str, module_name: str, error: BaseException) -> str:
    """A user's module that was found but raised while importing: its own exception and the line
    of its code that raised it (the innermost frame outside the import machinery)."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith("<frozen importlib")
    ]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f" at {error.filename}:{error.lineno}"
    return (
        f"{key}={path}: module {module_name!r} was found but raised while importing: "
        f"{type(error).__name__}: {error}{where}. Fix the module (it is imported as is, so "
        f"`python -c 'import {module_name}'` shows the same error)"
    )


def _outcome(value: Any) -> Outcome:
    if isinstance(value, Outcome):
        return value
    if value is None:
        return Outcome.no_answer
    if isinstance(value, bool):
        return Outcome.correct if value else Outcome.wrong
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(
            f"returned {value!r} (not a finite number); a reward returns True, False, None or an "
            "Outcome"
        )
    raise TypeError(f"returned {value!r}; a reward returns True, False, None or an Outcome")


def probe_reward(function: Callable[..., Any], key: str, path: str, gold: str) -> Outcome:
    """Call the reward once as training will, `function("\\boxed{<gold>}", gold)` with the gold of
    one of the task's problems; ValueError naming `key` when it cannot take (completion, answer),
    raises, or returns something that is not True/False/None/an Outcome (NaN included). Returns
    the outcome it gave (any outcome passes: the check is that a reward can be computed)."""
    completion = f"\\boxed{{{gold}}}"
    try:
        inspect.signature(function).bind(completion, gold)
    except TypeError as error:
        raise ValueError(
            f"{key}={path}: it cannot be called as reward(completion, answer) ({error}); a reward "
            "takes two strings, the completion and the problem's gold answer"
        ) from None
    except ValueError:  # no signature to read (some builtins): the call below says
        pass
    called = f"{key}={path} on a problem of the task, reward({completion!r}, {gold!r})"
    try:
        value = function(completion, gold)
    except Exception as error:  # noqa: BLE001 - the user's code: refused, its error named
        frames = traceback.extract_tb(error.__traceback__)[1:]  # from the user's function in
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise ValueError(
            f"{called} raised {type(error).__name__}: {error}{where}. A reward that cannot be "
            "computed grades every completion 'error' and trains on nothing; fix the function"
        ) from None
    try:
        return _outcome(value)
    except TypeError as error:
        raise ValueError(f"{called} {error}") from None


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
