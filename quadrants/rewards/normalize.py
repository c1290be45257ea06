"""Answer normalisation applied alike to gold answers and to boxed
predictions: pure string functions.

math-verify reads a few harmless spellings differently from their meaning. The grader rewrites them
on *both* sides before parsing, so an answer is graded the same whichever side wrote it which way:

- E-notation (a whole answer only): ``4.5e33`` is read as 4.5 * e * 33 (Euler's number), so it
  becomes ``4.5 \\times 10^{33}`` (``1.e5`` becomes ``1 \\times 10^{5}``). "e" inside a longer
  answer is Euler's number or a variable and is left alone.
- A Python float literal before a division: ``-1./3`` -> ``-1/3``.
- ``np.arcsin(x)`` -> ``\\arcsin(x)`` (code in Minerva's reference solutions).
- Unescaped ``$`` inside the box are dropped (the grader wraps the answer in ``$...$`` itself).
- A bare ``%`` is escaped: ``62.5%`` -> ``62.5\\%`` (two OlympiadBench golds are written ``62.5%``
  and ``17.5%``; LaTeX's own ``%`` would start a comment, and math-verify reads ``62.5%`` as 0.625).
- One final ``\\%`` is dropped: ``10\\%`` -> ``10``, ``62.5%`` -> ``62.5``. The grader's rule is
  that ``10\\%`` equals ``10`` (a percentage question's gold is often written either way), but the
  grader reads answers with math-verify's LaTeX parser only, which cannot read ``\\%`` at all (the
  answer stays an unparsed string). Only a *final* one goes: ``20\\%+1`` or ``20\\%, 30\\%``
  keep theirs and stay unreadable strings, instead of becoming ``21`` or ``(20, 30)``; and ``0.1``
  still differs from ``10\\%`` (it becomes ``10``).
- ``~`` (LaTeX's non-breaking space) is a space: ``\\frac{41}{12}~\\mathrm{km}`` parsed to nothing
  and ``4.5 \\times 10^{33}~\\mathrm{ergs}`` to 10, while with a space both read as their number.
  The text accent ``\\~`` is kept.
- One trailing sentence period: ``\\frac{1}{2}.`` -> ``\\frac{1}{2}``, ``(0,4].`` -> ``(0,4]``,
  ``3.`` -> ``3`` (the same number). An ellipsis (``0.333...``) and a LaTeX ``\\.`` are kept, and a
  period anywhere but at the very end (``3.5``, ``[0.5, 1)``) is never touched.

An answer with none of these comes back unchanged (up to surrounding whitespace).
"""

from __future__ import annotations

import re

__all__ = ["normalize_answer"]

_SCIENTIFIC = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))[eE]([+-]?\d+)")
_PY_FLOAT_DOT = re.compile(r"(\d)\.(?=\s*/)")  # "-1./3": a Python float literal before a division
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_BARE_PERCENT = re.compile(r"(?<!\\)%")
_TILDE = re.compile(r"(?<!\\)~")  # a non-breaking space; "\~" is the accent
# one final "." not preceded by another "." (an ellipsis) or a backslash (the LaTeX accent \.)
_TRAILING_PERIOD = re.compile(r"(?<![.\\])\.\s*$")
# one final "\%" (not the "%" of a LaTeX line break "\\%"), with the space before it
_TRAILING_PERCENT = re.compile(r"\s*(?<!\\)\\%\s*$")


def normalize_answer(answer: str) -> str:
    """The answer with the spellings above rewritten; whitespace around it stripped.

    Args:
        answer: a gold answer, or the content of a completion's last ``\\boxed{}``.

    Returns:
        The normalised answer (possibly empty when the answer was only a period).
    """
    answer = _UNESCAPED_DOLLAR.sub(
        "", answer.strip()
    ).strip()  # one box holds "...+$ $\dot{x}_{0}..."
    answer = _TILDE.sub(" ", _BARE_PERCENT.sub(r"\\%", answer))
    answer = _TRAILING_PERIOD.sub("", answer).rstrip()
    answer = _TRAILING_PERCENT.sub("", answer)  # after the period: "20\%." is 20
    scientific = _SCIENTIFIC.fullmatch(
        answer
    )  # whole answer only: "e" elsewhere is Euler's or a variable
    if scientific:  # "1.e5" is Python's 1e5: the mantissa loses a bare trailing point
        mantissa, exponent = scientific.group(1), scientific.group(2)
        answer = f"{mantissa.removesuffix('.')} \\times 10^{{{exponent}}}"
    answer = answer.replace("np.", "\\")  # np.arcsin(10/13) -> \arcsin(10/13)
    return _PY_FLOAT_DOT.sub(r"\1", answer)
