"""Answer extraction from model completions: pure string functions, no math-verify.

The final answer of a completion is the content of its last ``\\boxed{...}`` (or ``\\fbox{...}``),
the convention of the Qwen2.5-Math evaluation and of the prompts we train with. Extraction runs on
untrusted model output before anything expensive sees it, so it must be cheap on any input: one
forward regex scan for box openings and then a brace scan bounded by the answer length, neither of
which can backtrack, so a 100 KB string or thousands of nested braces cost about a millisecond.
"""

from __future__ import annotations

import re

__all__ = [
    "EXTRACTIONS",
    "MAX_ANSWER_CHARS",
    "MAX_COMPLETION_CHARS",
    "boxed_or_last_number",
    "last_boxed",
]

MAX_ANSWER_CHARS = 1_000
"""Longest answer we accept; anything longer is degenerate output, not an answer."""

MAX_COMPLETION_CHARS = 100_000
"""Completions are cut to their last this-many characters, which hold the final answer."""

# `\boxed {5}` is valid LaTeX; `\boxedx{` is another command and `\boxed` alone (as in "put it in
# \boxed") is no box. One forward scan: each hit is a fixed prefix plus one run of whitespace.
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)[ \t\n]*\{")

# One token of a brace scan: an escaped character (``\{``, ``\}``, ``\\`` do not nest), or a brace.
# Each alternative consumes a fixed one or two characters, so the scan is linear.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def last_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """Return the content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``.

    Braces are matched with a depth counter; escaped braces (``\\{``, ``\\}``) do not count. Only
    the last box counts: if it is never closed (a truncated completion), the answer is missing
    even when an earlier box is complete, so a model is not rewarded for an answer it abandoned.
    A command not followed by ``{`` (``"put it in \\boxed"``) is not a box and is skipped;
    whitespace before the brace is allowed (``\\boxed {5}``).

    Args:
        text: a model completion, any length.
        max_chars: longest content accepted; a box whose content would be longer gives None.

    Returns:
        The box content with surrounding whitespace stripped (possibly ``""`` for ``\\boxed{}``),
        or None when there is no closed box or its content is longer than ``max_chars``.
    """
    open_brace = _last_box_open(text)
    if open_brace is None:
        return None
    depth = 0
    # Scanning at most max_chars + 2 characters bounds the work whatever follows the box.
    for token in _BRACE_TOKEN.finditer(text, open_brace, open_brace + max_chars + 2):
        if token.group() == "{":
            depth += 1
        elif token.group() == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : token.start()].strip()
    return None


def _last_box_open(text: str) -> int | None:
    """Index of the ``{`` that opens the last box command in ``text``, or None."""
    last = None
    for match in _BOX_OPEN.finditer(text):
        last = match
    return None if last is None else last.end() - 1


EXTRACTIONS = ("boxed", "boxed_or_last_number")
"""How a completion's final answer is read (`task.answer_extraction`): only its last box, or its
last box and, when it has none, the last number it writes (GSM8K's "flexible" rule, for small models
that answer in words)."""

# A number as models write it: optional sign, digits with optional thousands commas, optional
# decimals. One pass over the text, no nested quantifiers, so any input costs linear time.
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


def boxed_or_last_number(text: str) -> str:
    """`text` unchanged when it has a closed box; else with ``\\boxed{N}`` appended, N its last
    number (thousands commas removed, a trailing period dropped); unchanged when it has no number.

    The grader then reads the appended box like any other, so both rules share one grading path.
    """
    if last_boxed(text) is not None:
        return text
    last = None
    for match in _NUMBER.finditer(text[-MAX_ANSWER_CHARS * 10 :]):
        last = match
    if last is None:
        return text
    number = last.group().replace(",", "").rstrip(".")
    return f"{text} \\boxed{{{number}}}"
