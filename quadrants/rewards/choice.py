"""Multiple-choice answers (GPQA, MMLU-Pro): the chosen letter, graded against the gold letter.

`extract_choice` reads the letter in the formats models use, first match wins:
1. the last ``\\boxed{...}`` holding a letter: ``\\boxed{C}``, ``\\boxed{(C)}``,
   ``\\boxed{\\text{C}}``, ``\\boxed{C. 42}``, ``\\boxed{\\text{(C) } 42}``;
2. else the last "answer is (C)" / "answer: C" / "The correct answer is **C**";
3. else a last line that is a bare letter: "C", "C.", "(C)", or the letter and its option, "C) 42".

Letters are upper case A-J (MMLU-Pro has up to ten options): "the answer is a" (an article) is no
answer, nor is the pronoun in "the answer is I think (B)" (a bare I before a lower-case word). A
letter outside the question's options (E on a four-option question) is an answer, and wrong. A box
holding something else than a letter (the option's text) does not stop the search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from quadrants.rewards.extract import MAX_COMPLETION_CHARS, last_boxed
from quadrants.rewards.outcome import Outcome

__all__ = ["LETTERS", "ChoiceRule", "extract_choice"]

LETTERS = "ABCDEFGHIJ"
"""Option letters, in order; a question with m options uses the first m."""

# a text or font command around brace-free content, anywhere in the box: \text{(B) } 42 -> (B)  42
_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s?\{([^{}]*)\}")
# "C", "(C)", "C.", "C) 42", "C. 42", and "(C) 42" (a parenthesised letter, then its option)
_BOXED_LETTER = re.compile(r"^(?:\(([A-J])\) .*|\(?([A-J])\)?(?:[.:)]( .*)?)?)$", re.DOTALL)
_BLANKS = re.compile(r"[ \t\r\f\v]+")
# on blank-squeezed text; the letter must not start a word ("The answer is Albert"), nor be the
# pronoun: a bare I before a lower-case word ("the answer is I think (B)") is no letter
_ANSWER_LETTER = re.compile(
    r"(?i:answer) ?(?:(?i:is) ?)?[:=]? ?(?:\*\*|\$)? ?\(?([A-J])\)?(?![A-Za-z0-9])(?<!I(?= [a-z]))"
)
_BARE_LETTER = re.compile(r"^\(?([A-J])\)?(?:[.:)]( .*)?)?$")


def _boxed_letter(text: str) -> str | None:
    content = last_boxed(text)
    if content is None:
        return None
    for _ in range(3):  # innermost first: \text{\textbf{C}} -> \text{C} -> C
        content = _WRAPPER.sub(r"\1", content)
    match = _BOXED_LETTER.match(" ".join(content.split()))
    return (match.group(1) or match.group(2)) if match else None


def extract_choice(completion: str) -> str | None:
    """The letter a completion chose (see the module docstring), or None when it chose none."""
    if not isinstance(completion, str):
        return None
    tail = _BLANKS.sub(" ", completion[-MAX_COMPLETION_CHARS:])
    letter = _boxed_letter(tail)
    if letter:
        return letter
    last = None
    for match in _ANSWER_LETTER.finditer(tail):
        last = match
    if last is not None:
        return last.group(1)
    lines = [line.strip().strip("*").strip() for line in tail.rsplit("\n", 3)]
    final = next((line for line in reversed(lines) if line), "")
    match = _BARE_LETTER.match(final)
    return match.group(1) if match else None


@dataclass(frozen=True)
class ChoiceRule:
    """Grade a multiple-choice completion by its letter.

    Attributes:
        gold: the correct letter.
        options: how many options the question shows (letters ``LETTERS[:options]``).
        permutation: where the displayed options came from: ``permutation[i]`` is the dataset's
            index of the option shown as letter i (GPQA: 0 = the correct answer, 1-3 the incorrect
            ones in their column order); empty when the dataset's order is shown.
    """

    gold: str
    options: int
    permutation: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 2 <= self.options <= len(LETTERS) or self.gold not in LETTERS[: self.options]:
            raise ValueError(f"gold letter {self.gold!r} is not one of {self.options} options")
        if self.permutation and sorted(self.permutation) != list(range(self.options)):
            raise ValueError(f"permutation {self.permutation} is not one of range({self.options})")

    @property
    def chance(self) -> float:
        """One uniform guess among the options: 1 / options."""
        return 1.0 / self.options

    def grade(self, completion: str) -> Outcome:
        letter = extract_choice(completion)
        if letter is None:
            return Outcome.no_answer
        return Outcome.correct if letter == self.gold else Outcome.wrong

    def describe(self) -> dict[str, Any]:
        return {
            "rule": "choice",
            "gold": self.gold,
            "options": self.options,
            "permutation": list(self.permutation),
        }
