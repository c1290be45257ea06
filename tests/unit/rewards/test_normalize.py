"""normalize_answer: the spellings rewritten on both sides before math-verify, and what stays put."""

import pytest

from quadrants.rewards.normalize import normalize_answer


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("4.5e33", "4.5 \\times 10^{33}"),
        ("-4.5E-3", "-4.5 \\times 10^{-3}"),
        ("1e3", "1 \\times 10^{3}"),
        (".5e2", ".5 \\times 10^{2}"),
        ("1.e5", "1 \\times 10^{5}"),  # Python's float literal 1.e5
        ("+2.50E+07", "+2.50 \\times 10^{+07}"),
        ("4.5e33.", "4.5 \\times 10^{33}"),  # period first, then the whole answer is e-notation
        ("-1./3", "-1/3"),
        ("np.arcsin(10/13)", "\\arcsin(10/13)"),
        ("\\frac{1}{2}.", "\\frac{1}{2}"),
        ("x^2+1. ", "x^2+1"),
        ("(0,4].", "(0,4]"),
        ("3.", "3"),
        ("a+$ $b", "a+ b"),
        # an OlympiadBench gold: the % is escaped (math-verify would read 0.625), then the final
        # \% is dropped, as for any percentage: 10\% equals 10
        ("62.5%", "62.5"),
        ("17.5 %", "17.5"),
        ("10\\%", "10"),
        ("10 \\%", "10"),
        ("20\\%.", "20"),  # period first, then the percent
        ("\\frac{1}{2}\\%", "\\frac{1}{2}"),
        ("20\\%, 30\\%", "20\\%, 30"),  # only the final one: the first keeps the answer unreadable
        ("\\frac{41}{12}~\\mathrm{km}", "\\frac{41}{12} \\mathrm{km}"),
        ("3 \\mathrm{~cm}", "3 \\mathrm{ cm}"),  # Minerva's unit spelling
        ("4.5e33~", "4.5 \\times 10^{33}"),  # the space is stripped, then e-notation applies
    ],
)
def test_rewrites(answer, expected):
    assert normalize_answer(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "3.5",
        "[0.5, 1)",
        "(0,4]",
        "0.333...",  # an ellipsis keeps all three dots
        "1, 2, \\ldots",
        "\\.{x}",
        "x\\.",  # the LaTeX accent command, not a period
        "2e",  # Euler's number times 2
        "e^{3}",
        "3e^{x}",  # e-notation only when the whole answer is one
        "10^{33}",
        "\\$5",  # an escaped dollar is text
        "4.5 \\times 10^{33}",
        "20\\%+1",  # a percent not at the end stays: "20+1" would read 21
        "20\\% - 5",
        "x\\\\%",  # a LaTeX line break, then a comment: not an escaped percent
        "\\~{n}",  # the tilde accent, not a space
    ],
)
def test_leaves_other_answers_alone(answer):
    assert normalize_answer(answer) == answer
    assert normalize_answer(normalize_answer(answer)) == answer
