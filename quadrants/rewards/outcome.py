"""How one answer was graded: the outcomes every grader (math-verify or an answer rule) reports."""

from __future__ import annotations

from enum import Enum

__all__ = ["Outcome"]


class Outcome(str, Enum):
    """How one completion was graded; only `correct` earns reward."""

    correct = "correct"
    wrong = "wrong"
    # no closed \boxed{}, or nothing math-verify (or the rule) could extract from it
    no_answer = "no_answer"
    timeout = "timeout"  # math-verify's alarm fired, or the worker missed its hard deadline
    error = "error"  # invalid gold or input type, a math-verify exception, a crashed worker
