"""Answer rules: grading that is not a math-verify comparison (multiple choice, yes/no, graphs).

A rule is built once per problem, when the benchmark is read, and holds everything its grading needs
(the gold letter, the reference answer, the graph of the prompt). `AnswerRule.grade` is pure Python,
cheap and bounded on any input: the completion is cut to its last `MAX_COMPLETION_CHARS`, runs of
whitespace are collapsed before any pattern with optional parts, and no pattern can backtrack more
than a few characters, so a rule never needs the grader's worker processes or their deadlines.

`final_answer_text` finds the part of a completion that states the final answer, in this order:
the last ``\\boxed{...}``; else the rest of the line after the last ``###`` (GraphWiz's own answer
marker); else the rest of the sentence after the last "answer is" / "answer:". No marker: None.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from quadrants.rewards.extract import MAX_ANSWER_CHARS, MAX_COMPLETION_CHARS, last_boxed
from quadrants.rewards.outcome import Outcome

__all__ = ["AnswerRule", "final_answer_text"]

_BLANKS = re.compile(r"[ \t\r\f\v]+")  # whitespace but newlines
_HASHES = "###"
# on text whose blanks are squeezed to single spaces: "answer is", "answer:",
# "Answer is:", "answer ="
_ANSWER_IS = re.compile(r"(?i:answer) ?(?:(?i:is) ?)?[:=]? ?")
_SENTENCE_END = re.compile(r"\.(?= |$)|\n")  # "is 20." ends at the dot, "is 3.5" does not


@runtime_checkable
class AnswerRule(Protocol):
    """How one problem's answers are graded when math-verify is not the judge.

    Attributes:
        chance: the probability that a uniformly random valid answer is correct (1/4 for a
            four-option question, 1/2 for yes/no, 0 where the answers are unbounded).
    """

    chance: float

    def grade(self, completion: str) -> Outcome:
        """correct / wrong / no_answer (nothing to grade); never raises, bounded time."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the rule checks, for the results files (e.g. the option permutation)."""
        ...


def final_answer_text(completion: str) -> str | None:
    """The text that states the final answer (see the module docstring), at most 1000 characters."""
    if not isinstance(completion, str):
        return None
    tail = _BLANKS.sub(" ", completion[-MAX_COMPLETION_CHARS:])
    boxed = last_boxed(tail)
    if boxed:
        return boxed
    marker = tail.rfind(_HASHES)
    if marker >= 0:
        rest = tail[marker + len(_HASHES) :].lstrip(" #\t")
        line = rest.split("\n", 1)[0].strip()
        if line:
            return line[:MAX_ANSWER_CHARS]
    last = None
    for match in _ANSWER_IS.finditer(tail):
        last = match
    if last is None:
        return None
    rest = tail[last.end() : last.end() + MAX_ANSWER_CHARS]
    end = _SENTENCE_END.search(rest)
    rest = (rest[: end.start()] if end else rest).strip()
    return rest or None
