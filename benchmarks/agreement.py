"""Grading agreement: does the grader accept a benchmark's gold written differently, and only that?

For every problem of a benchmark, the gold answer is written in forms that are genuinely equal to
it (`equivalent_answers`: the gold itself, ``27`` as ``27.0``, ``\\frac{3}{4}`` as ``0.75`` and
``0.15`` as ``\\frac{3}{20}`` where the decimal is exact, ``90^\\circ`` without the degree sign,
``\\text{}`` and unit wrappers removed or added where the dataset gives a unit, ...), each boxed
inside a short sentence, and graded against the gold; each must be graded correct. The gold of a
*different* problem whose value differs (`value_key`) must be graded wrong. The two rates,
correct-as-correct and wrong-as-correct, measure the grader on the answers it will actually see.

The forms are the ways a model writes an answer, and conservative: an integer never gains a unit the
dataset did not give, a non-terminating fraction is never written as a rounded decimal (that is not
the same number), and a number in scientific notation (Minerva's ``4.5 \\times 10^{33}``) keeps
its mantissa (``\\cdot`` for ``\\times``) or, up to 10^9, is written out in full; we do not write
it as an exact fraction (``\\frac{13}{12500}`` for ``1.04 \\times 10^{-3}``) or rescale its
mantissa (``87 \\times 10^{7}``), which nobody does and which math-verify grades wrong whenever
the mantissa is not exact in binary floating point.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import math_verify
import sympy

from quadrants.rewards.grader import Grader, Outcome
from quadrants.tasks.benchmarks import Benchmark

__all__ = [
    "AgreementCase",
    "AgreementReport",
    "GoldParseFinding",
    "audit_gold_parses",
    "completion_for",
    "different_value_partners",
    "equivalent_answers",
    "run_agreement",
    "value_key",
]

_SIGNED_INT = r"[+-]?\d+"
_GROUPED_INT = re.compile(r"([+-]?)(\d{1,3}(?:,(?:\\!)?\s*\d{3})+|\d+)")  # 10,\!080 or 1,450,000
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_FRACTION = re.compile(
    # \frac{3}{4}, \frac34
    r"([+-]?)\\[dt]?frac\s*(?:\{\s*(-?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))"
)
_SLASH_FRACTION = re.compile(r"([+-]?)(\d+)\s*/\s*(\d+)")
_MIXED_NUMBER = re.compile(r"([+-]?)(\d+)\s*(\\[dt]?frac.+)")  # 1\frac{4}{5} = 9/5
_SQRT_BRACED_DIGIT = re.compile(r"\\sqrt\{(\d)\}(?!\d)")  # \sqrt{2} <-> \sqrt2, not \sqrt{2}3
_SQRT_BARE_DIGIT = re.compile(r"\\sqrt(\d)")
_LOOSE_SPACE = re.compile(r"(?<!\\)(?:\s+(?=[^A-Za-z\s])|(?<=[^A-Za-z\s\\])\s+)")
_SCIENTIFIC = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))\s*\\(?:times|cdot)\s*10\^\{?([+-]?\d+)\}?")
_DEGREES = re.compile(r"\s*\^\s*\{?\s*\\circ\s*\}?")
_TEXT_ONLY = re.compile(r"\\(?:text|textbf|mbox|mathrm)\s*\{\s*([^{}]*?)\s*\}")
_TRAILING_UNIT = re.compile(
    r"^(.*?[^\s\\])(?:\s|\\[ ,;:!])*\\(?:text|mbox|mathrm)\s*\{\s*[^{}\d]+\}(?:\^\{?\d\}?)?$"
)
_DOLLAR_PREFIX = re.compile(r"^\\\$\s*")
_MAX_EXPANDED_EXPONENT = 9  # 8.7 \\times 10^{8} may be written 870000000; 10^{33} in full is not
_VARIABLE_PREFIX = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*([^=,]+)$")
_LETTER_OUTSIDE_COMMAND = re.compile(r"(?<![\\A-Za-z])[A-Za-z]")


@dataclass(frozen=True)
class AgreementCase:
    """One graded (gold, answer) pair.

    Attributes:
        problem_id: the problem whose gold is graded against.
        gold: that gold answer.
        form: how the answer was written, e.g. ``"verbatim"``, ``"decimal"``, ``"other problem"``.
        answer: the content of the box in the completion.
        should_match: True for an equivalent form, False for another problem's answer.
        outcome: what the grader said.
    """

    problem_id: str
    gold: str
    form: str
    answer: str
    should_match: bool
    outcome: Outcome

    @property
    def agrees(self) -> bool:
        """Graded correct exactly when it should be."""
        return (self.outcome is Outcome.correct) == self.should_match


@dataclass(frozen=True)
class AgreementReport:
    """Agreement of the grader with the intended labels on one benchmark."""

    benchmark: str
    num_problems: int
    cases: tuple[AgreementCase, ...]

    @property
    def equivalent_cases(self) -> list[AgreementCase]:
        return [case for case in self.cases if case.should_match]

    @property
    def different_cases(self) -> list[AgreementCase]:
        return [case for case in self.cases if not case.should_match]

    @property
    def correct_as_correct(self) -> float:
        """Fraction of equivalent forms graded correct (goal: at least 0.99)."""
        cases = self.equivalent_cases
        return sum(case.outcome is Outcome.correct for case in cases) / max(len(cases), 1)

    @property
    def wrong_as_correct(self) -> float:
        """Fraction of other problems' answers graded correct (goal: at most 0.01)."""
        cases = self.different_cases
        return sum(case.outcome is Outcome.correct for case in cases) / max(len(cases), 1)

    @property
    def disagreements(self) -> list[AgreementCase]:
        return [case for case in self.cases if not case.agrees]


def completion_for(answer: str) -> str:
    """A short completion whose last box holds `answer`."""
    return (
        "Checking the steps once more, the result holds. The final answer is "
        f"$\\boxed{{{answer}}}$."
    )


# --- equivalent forms ---------------------------------------------------------------------------


def _integer(text: str) -> int | None:
    match = _GROUPED_INT.fullmatch(text.strip())
    if not match:
        return None
    return int(match.group(1) + re.sub(r"[^\d]", "", match.group(2)))


def _exact_decimal(value: Fraction) -> str | None:
    """``3/4`` -> ``"0.75"``; None when the decimal does not terminate."""
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1:
        return None
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _latex_fraction(value: Fraction) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _number(text: str) -> Fraction | None:
    """The exact value of a plain number written as an integer, decimal, fraction or 10-power."""
    text = text.strip()
    integer = _integer(text)
    if integer is not None:
        return Fraction(integer)
    if _DECIMAL.fullmatch(text):
        return Fraction(Decimal(text))
    for pattern in (_FRACTION, _SLASH_FRACTION):
        match = pattern.fullmatch(text)
        if match:
            sign, *parts = match.groups()
            numerator, denominator = [int(p) for p in parts if p is not None]
            if denominator:
                return Fraction(numerator, denominator) * (-1 if sign == "-" else 1)
    match = _SCIENTIFIC.fullmatch(text)
    if match:
        return Fraction(Decimal(match.group(1)).scaleb(int(match.group(2))))
    match = _MIXED_NUMBER.fullmatch(text)
    if match:
        sign, whole, fraction_text = match.groups()
        fraction = _FRACTION.fullmatch(fraction_text)
        part = _number(fraction_text) if fraction else None
        if part is not None and 0 < part < 1:
            return (int(whole) + part) * (-1 if sign == "-" else 1)
    return None


def _numeric_forms(gold: str, value: Fraction) -> list[tuple[str, str]]:
    scientific = _SCIENTIFIC.fullmatch(gold)
    if scientific:  # written as a physicist would: the same mantissa, or the digits in full
        mantissa, exponent = scientific.groups()
        forms = [("\\cdot 10^k", f"{mantissa} \\cdot 10^{{{exponent}}}")]
        if -_MAX_EXPANDED_EXPONENT <= int(exponent) <= _MAX_EXPANDED_EXPONENT:
            forms.append(("expanded", format(Decimal(mantissa).scaleb(int(exponent)), "f")))
        return forms
    if value.denominator == 1:
        integer = int(value)
        forms = [("integer", str(integer)), ("trailing .0", f"{integer}.0")]
        if abs(integer) >= 1000 and "," not in gold:
            forms.append(("thousands commas", f"{integer:,}"))
        return forms
    forms = [
        ("fraction", _latex_fraction(value)),
        ("dfrac", _latex_fraction(value).replace("\\frac", "\\dfrac")),
    ]
    decimal = _exact_decimal(value)
    if decimal is not None:
        forms.append(("decimal", decimal))
    return forms


def _unit_text(unit: str) -> str:
    if unit == "%":
        return "\\%"
    if unit.startswith("^"):
        return unit
    return f"\\ \\text{{{unit}}}"


def equivalent_answers(
    gold: str, *, unit: str | None = None, zero_padded: bool = False
) -> list[tuple[str, str]]:
    """Answers equal to `gold`, as (form name, LaTeX) pairs, the gold itself first, no repeats.

    Args:
        gold: the benchmark's gold answer (`Problem.answer`).
        unit: the unit the dataset gives for the answer (`BenchmarkItem.unit`), added as text.
        zero_padded: also write an integer below 100 with three digits (``025``, AIME's style).
    """
    forms: list[tuple[str, str]] = [("verbatim", gold)]
    bare = gold
    if _DEGREES.search(gold):
        bare = _DEGREES.sub("", gold)
        forms.append(("no degree sign", bare))
        if "," not in bare:
            forms.append(("degrees in words", f"{bare}\\text{{ degrees}}"))
    trailing_unit = _TRAILING_UNIT.match(bare)
    if trailing_unit:
        bare = trailing_unit.group(1)
        forms.append(("no unit", bare))
    if _DOLLAR_PREFIX.match(bare):
        bare = _DOLLAR_PREFIX.sub("", bare)
        forms.append(("no dollar sign", bare))
    text_only = _TEXT_ONLY.fullmatch(bare)
    if text_only:
        forms.append(("no \\text", text_only.group(1)))
    variable = _VARIABLE_PREFIX.fullmatch(bare)
    if variable and not _LETTER_OUTSIDE_COMMAND.search(variable.group(1)):  # k=3, not y=2x+3
        forms.append(("value only", variable.group(1).strip()))
    value = _number(bare)
    if value is not None:
        forms += _numeric_forms(bare, value)
        if zero_padded and value.denominator == 1 and 0 <= value < 100:
            forms.append(("zero-padded", f"{int(value):03d}"))
        if unit:
            forms.append(("with unit", f"{bare}{_unit_text(unit)}"))
    elif "\\frac" in bare:
        forms.append(("dfrac", bare.replace("\\frac", "\\dfrac")))
    if "," in bare and value is None:  # lists, tuples, intervals: spacing after commas
        spaced = re.sub(r",\s*", ", ", bare)
        forms.append(("comma spacing", spaced if spaced != bare else bare.replace(", ", ",")))
    if _SQRT_BRACED_DIGIT.search(bare):
        forms.append(("\\sqrt shorthand", _SQRT_BRACED_DIGIT.sub(r"\\sqrt\1", bare)))
    elif _SQRT_BARE_DIGIT.search(bare):
        forms.append(("\\sqrt braces", _SQRT_BARE_DIGIT.sub(r"\\sqrt{\1}", bare)))
    compact = _LOOSE_SPACE.sub("", bare)
    if compact != bare:
        forms.append(("no spaces", compact))
    if "\\left" in bare and "\\right" in bare:
        forms.append(("no \\left\\right", re.sub(r"\\(?:left|right)(?![a-zA-Z])\s*", "", bare)))
    unique: dict[str, str] = {}
    for name, answer in forms:
        unique.setdefault(answer.strip(), name)
    return [(name, answer) for answer, name in unique.items()]


# --- answers of other problems ------------------------------------------------------------------


def value_key(gold: str) -> str:
    """Equal keys for golds that are certainly the same value; the pairing avoids those.

    Plain numbers (integer, decimal, fraction, 10-power; units, degree and dollar signs stripped)
    key by their exact value (percentages apart), everything else by its text without spacing and
    wrappers.
    """
    bare = _DEGREES.sub("", gold)
    trailing_unit = _TRAILING_UNIT.match(bare)
    bare = _DOLLAR_PREFIX.sub("", trailing_unit.group(1) if trailing_unit else bare)
    percent = re.fullmatch(r"(.*?)\s*\\%", bare)
    value = _number(percent.group(1) if percent else bare)
    if value is not None:
        return f"number:{value}{'%' if percent else ''}"
    text = _TEXT_ONLY.sub(r"\1", bare)
    text = re.sub(r"\\(?:left|right)(?![a-zA-Z])|\\[!,;: ]|\s|\$", "", text)
    return "text:" + text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def different_value_partners(golds: list[str], seed: int) -> list[int | None]:
    """For each problem, a random other problem whose gold has a different `value_key`.

    None when every other gold has the same key. Deterministic given `seed`.
    """
    rng = random.Random(seed)
    keys = [value_key(gold) for gold in golds]
    partners: list[int | None] = []
    for key in keys:
        candidates = [other for other in range(len(golds)) if keys[other] != key]
        partners.append(rng.choice(candidates) if candidates else None)
    return partners


# --- the run ------------------------------------------------------------------------------------


def run_agreement(
    benchmark: Benchmark, grader: Grader, *, max_problems: int | None = None, seed: int = 0
) -> AgreementReport:
    """Grade every problem's equivalent forms and another problem's answer (see module docstring).

    Args:
        benchmark: the benchmark; partners are drawn from all of its problems.
        grader: the real grader (its process pool grades the whole benchmark in one call).
        max_problems: grade a seeded random subset of this many problems (all when None).
        seed: seeds the subset and the partners.
    """
    items = benchmark.items
    golds = [item.problem.answer for item in items]
    partners = different_value_partners(golds, seed)
    indices = list(range(len(items)))
    if max_problems is not None and max_problems < len(items):
        indices = sorted(random.Random(seed + 1).sample(indices, max_problems))
    pending: list[tuple[str, str, str, str, bool]] = []  # (id, gold, form, answer, should_match)
    zero_padded = benchmark.name.startswith("aime")
    for index in indices:
        item = items[index]
        gold = item.problem.answer
        for form, answer in equivalent_answers(gold, unit=item.unit, zero_padded=zero_padded):
            pending.append((item.problem.id, gold, form, answer, True))
        partner = partners[index]
        if partner is not None:
            pending.append((item.problem.id, gold, "other problem", golds[partner], False))
    graded = grader.grade(
        [completion_for(case[3]) for case in pending], [case[1] for case in pending]
    )
    cases = tuple(
        AgreementCase(problem_id, gold, form, answer, should_match, outcome)
        for (problem_id, gold, form, answer, should_match), outcome in zip(pending, graded.outcomes)
    )
    return AgreementReport(benchmark=benchmark.name, num_problems=len(indices), cases=cases)


# --- how math-verify reads the golds ------------------------------------------------------------


@dataclass(frozen=True)
class GoldParseFinding:
    """A gold that math-verify does not read as a whole expression.

    Attributes:
        problem_id: the problem.
        gold: its gold answer.
        kind: ``"text only"``: no sympy parse, so answers are compared as exact strings (spacing
            matters); ``"number from non-number"``: the gold is not a plain number but parses to one
            (part of it dropped, e.g. a variable taken for a unit), so that
            number alone is accepted.
        parsed: what math-verify extracted, as text.
        decoy_correct: for ``"number from non-number"``, whether ``\\boxed{<that number>}`` is
            graded correct (a wrong answer accepted, unless the dropped part was only a unit); else
            None.
    """

    problem_id: str
    gold: str
    kind: str
    parsed: str
    decoy_correct: bool | None


def audit_gold_parses(
    benchmark: Benchmark, grader: Grader, *, timeout_s: float = 5.0
) -> list[GoldParseFinding]:
    """Parse every gold as the grader does (``$gold$``) and report the ones it cannot read whole.

    Parses in the calling process, which must be the main thread (math-verify's alarm); the
    decoys of ``"number from non-number"`` golds are graded by `grader`.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("audit_gold_parses must run in the main thread: math-verify uses alarms")
    findings: list[tuple[str, str, str, str]] = []
    for item in benchmark.items:
        gold = item.problem.answer
        parsed = math_verify.parse(f"${gold}$", parsing_timeout=max(1, round(timeout_s)))
        expressions = [entry for entry in parsed if not isinstance(entry, str)]
        if not expressions:
            findings.append((item.problem.id, gold, "text only", gold))
        elif isinstance(expressions[0], sympy.Number) and value_key(gold).startswith("text:"):
            findings.append((item.problem.id, gold, "number from non-number", str(expressions[0])))
    decoys = [(index, f) for index, f in enumerate(findings) if f[2] == "number from non-number"]
    graded = grader.grade(
        [completion_for(sympy.latex(sympy.sympify(f[3]))) for _, f in decoys],
        [f[1] for _, f in decoys],
    )
    decoy_correct = {index: o is Outcome.correct for (index, _), o in zip(decoys, graded.outcomes)}
    return [
        GoldParseFinding(*finding, decoy_correct=decoy_correct.get(index))
        for index, finding in enumerate(findings)
    ]
