"""Equivalent forms, value keys and partners of the grading-agreement check (benchmarks/agreement.py,
which benchmarks/grading_agreement.py runs over whole benchmarks), by hand."""

from __future__ import annotations

import pytest

from benchmarks.agreement import (
    audit_gold_parses,
    completion_for,
    different_value_partners,
    equivalent_answers,
    value_key,
)
from quadrants.rewards.extract import last_boxed
from quadrants.rewards.grader import Grader
from quadrants.tasks.base import Problem
from quadrants.tasks.benchmarks import Benchmark, BenchmarkItem


def answers(gold: str, **kwargs: object) -> dict[str, str]:
    return {name: answer for name, answer in equivalent_answers(gold, **kwargs)}


def test_completion_boxes_the_answer_last():
    assert last_boxed(completion_for("\\frac{1}{2}")) == "\\frac{1}{2}"


def test_integer_forms():
    assert answers("27") == {"verbatim": "27", "trailing .0": "27.0"}
    assert answers("1625")["thousands commas"] == "1,625"
    assert answers("25", zero_padded=True)["zero-padded"] == "025"


def test_grouped_integer_forms():
    # 10,\!080 is 10080; the verbatim form keeps the LaTeX thin-space comma
    forms = answers("10,\\!080")
    assert forms["integer"] == "10080" and forms["trailing .0"] == "10080.0"


def test_fraction_and_exact_decimal_both_ways():
    assert answers("\\frac{3}{4}")["decimal"] == "0.75"
    assert answers("-\\frac{3}{8}")["decimal"] == "-0.375"
    assert answers("\\frac43")["fraction"] == "\\frac{4}{3}"
    assert answers("0.15")["fraction"] == "\\frac{3}{20}"
    assert answers("1\\frac{4}{5}")["decimal"] == "1.8"  # a mixed number: 1 + 4/5


def test_no_rounded_decimal_for_a_repeating_fraction():
    # 1/3 = 0.333... has no exact decimal: writing 0.3333 would be a different number
    assert "decimal" not in answers("\\frac{1}{3}")


def test_degree_sign_unit_and_text_wrappers():
    assert answers("90^\\circ")["no degree sign"] == "90"
    assert answers("90^\\circ")["degrees in words"] == "90\\text{ degrees}"
    assert answers("864 \\mbox{ inches}^2")["no unit"] == "864"
    assert answers("\\$18.90")["no dollar sign"] == "18.90"
    assert answers("\\text{(C)}")["no \\text"] == "(C)"
    assert answers("45", unit="minute")["with unit"] == "45\\ \\text{minute}"
    assert answers("4.2", unit="%")["with unit"] == "4.2\\%"


def test_scientific_notation_keeps_its_mantissa():
    forms = answers("8.7 \\times 10^{8}")
    assert forms["\\cdot 10^k"] == "8.7 \\cdot 10^{8}"
    assert forms["expanded"] == "870000000"
    assert "fraction" not in forms
    assert "expanded" not in answers("4.5 \\times 10^{33}")  # nobody writes 34 digits


def test_value_only_for_a_numeric_assignment_only():
    assert answers("k=1")["value only"] == "1"
    assert "value only" not in answers("y = 2x + 3")  # the equation of a line is not 2x + 3


def test_spacing_and_shorthand_forms():
    assert answers("1,-2")["comma spacing"] == "1, -2"
    assert answers("3 \\sqrt{5}")["\\sqrt shorthand"] == "3 \\sqrt5"
    assert answers("3 \\sqrt{5}")["no spaces"] == "3\\sqrt{5}"
    assert (
        answers("\\left( 3, \\frac{\\pi}{2} \\right)")["no \\left\\right"]
        == "( 3, \\frac{\\pi}{2} )"
    )
    assert "\\sqrt shorthand" not in answers("\\sqrt{2}3")  # \sqrt23 would be sqrt(23)


def test_forms_are_unique_and_start_with_the_gold():
    forms = equivalent_answers("56.0")
    assert forms[0] == ("verbatim", "56.0")
    assert len({answer for _, answer in forms}) == len(forms)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac12", "\\dfrac{1}{2}"),
        ("90^\\circ", "90"),
        ("\\$36", "36"),
        ("1,000", "1000"),
        ("\\frac{-1}{1997}", "-\\frac{1}{1997}"),
        ("\\text{ east}", "east"),
    ],
)
def test_same_value_same_key(first, second):
    assert value_key(first) == value_key(second)


@pytest.mark.parametrize(("first", "second"), [("1", "2"), ("8\\%", "8"), ("(1,2)", "(2,1)")])
def test_different_value_different_key(first, second):
    assert value_key(first) != value_key(second)


def test_partners_have_another_value_and_are_seeded():
    golds = ["1", "\\frac{2}{2}", "1.0", "2", "3"]
    partners = different_value_partners(golds, seed=0)
    assert partners == different_value_partners(golds, seed=0)
    for index, partner in enumerate(partners):
        assert partner is not None and value_key(golds[partner]) != value_key(golds[index])
    assert different_value_partners(["1", "1.0"], seed=0) == [None, None]


def test_audit_flags_golds_math_verify_does_not_read_whole():
    # "6m": the m (a variable) is taken for metres, so the bare 6 is accepted;
    # "E_{1},E_{2}" does not parse at all and is compared as text; "12" is fine.
    items = tuple(
        BenchmarkItem(Problem(f"toy/{i}", "q", gold), "q", None)
        for i, gold in enumerate(["6m", "E_{1},E_{2}", "12"])
    )
    with Grader(num_workers=0) as grader:
        findings = audit_gold_parses(Benchmark("toy", items, samples=4), grader)
    assert [(f.problem_id, f.kind, f.parsed, f.decoy_correct) for f in findings] == [
        ("toy/0", "number from non-number", "6", True),
        ("toy/1", "text only", "E_{1},E_{2}", None),
    ]
