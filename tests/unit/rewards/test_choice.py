"""Multiple-choice letters, graded by hand: each format models use, right, wrong and unparseable."""

from __future__ import annotations

import time

import pytest

from quadrants.rewards.choice import ChoiceRule, extract_choice
from quadrants.rewards.outcome import Outcome
from quadrants.rewards.rules import AnswerRule


@pytest.mark.parametrize(
    ("completion", "letter"),
    [
        # \boxed{...}
        ("so the answer is \\boxed{C}", "C"),
        ("\\boxed{(C)}", "C"),
        ("\\boxed{\\text{C}}", "C"),
        ("\\boxed{\\textbf{C}}.", "C"),
        ("\\boxed{C. 42 kg}", "C"),
        ("\\boxed{C) newton}", "C"),
        ("first \\boxed{A}, on reflection \\boxed{D}", "D"),  # the last box
        ("\\boxed{\\text{(B) } 42}", "B"),  # the letter and its option, the letter in \\text
        ("\\boxed{(B) 42}", "B"),
        (
            "\\boxed{newton} so the answer is (B)",
            "B",
        ),  # a box without a letter does not stop the search
        # "The answer is (C)" and its relatives
        ("Thus, the answer is (C).", "C"),
        ("The answer is C", "C"),
        ("the answer is: J", "J"),
        ("Answer: **B**", "B"),
        ("The correct answer is $C$.", "C"),
        ("answer   is\t(H)", "H"),  # runs of blanks
        ("The answer is (A). Wait, no: the answer is (D).", "D"),  # the last statement
        # a bare letter on the last line
        ("Lots of reasoning.\nC.", "C"),
        ("Lots of reasoning.\n(C)", "C"),
        ("Lots of reasoning.\n**C**", "C"),
        ("reasoning\nB) newton\n", "B"),
        ("E", "E"),
        # no letter
        ("", None),
        ("I think the answer is a trick question.", None),  # "a" is an article, not option A
        ("The answer is Albert Einstein.", None),  # a word that starts with a letter
        ("I cannot decide.", None),
        ("So the answer is I think (B).", None),  # the pronoun, not option I (no letter follows it)
        ("The answer is I.", "I"),  # option I of MMLU-Pro's ten
        ("The answer is (I) because", "I"),
        ("\\boxed{newton}", None),
        ("\\boxed{C", None),  # a box cut off by max_new_tokens
        ("A. First, recall Newton's law.\nThen the force follows.", None),  # a letter, but not last
    ],
)
def test_extract_choice(completion, letter):
    assert extract_choice(completion) == letter


@pytest.mark.parametrize(
    ("completion", "outcome"),
    [
        ("\\boxed{B}", Outcome.correct),
        ("The answer is (B).", Outcome.correct),
        ("...\nB.", Outcome.correct),
        ("\\boxed{C}", Outcome.wrong),
        ("The answer is (A).", Outcome.wrong),
        ("...\nD.", Outcome.wrong),
        (
            "The answer is (E).",
            Outcome.wrong,
        ),  # an answer outside the four options: answered, and wrong
        ("no idea", Outcome.no_answer),
        ("\\boxed{42}", Outcome.no_answer),
    ],
)
def test_four_option_rule_grades_by_hand(completion, outcome):
    rule = ChoiceRule(gold="B", options=4)
    assert rule.grade(completion) is outcome


def test_rule_reports_chance_and_its_permutation():
    rule = ChoiceRule(gold="C", options=4, permutation=(1, 3, 0, 2))
    assert isinstance(rule, AnswerRule)
    assert rule.chance == 0.25 and ChoiceRule(gold="A", options=10).chance == 0.1
    assert rule.describe() == {
        "rule": "choice",
        "gold": "C",
        "options": 4,
        "permutation": [1, 3, 0, 2],
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gold": "E", "options": 4}, "gold letter 'E' is not one of 4 options"),
        ({"gold": "A", "options": 11}, "is not one of 11 options"),
        ({"gold": "A", "options": 4, "permutation": (0, 1, 1, 3)}, "is not one of range"),
    ],
)
def test_bad_rules_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ChoiceRule(**kwargs)


@pytest.mark.parametrize(
    "completion",
    [
        "answer " * 30_000,  # many near-matches
        "The answer is" + " " * 200_000 + "(",  # a long blank run where an optional part may start
        "\\boxed{" * 20_000,
        "(" * 100_000 + "A",
        "\x00\ud800 answer is (C)",  # control characters and a lone surrogate
        None,  # not a string
    ],
)
def test_garbage_is_graded_quickly_and_never_raises(completion):
    rule = ChoiceRule(gold="C", options=4)
    started = time.perf_counter()
    outcome = rule.grade(completion)  # type: ignore[arg-type]
    assert outcome in (Outcome.correct, Outcome.wrong, Outcome.no_answer)
    assert (
        time.perf_counter() - started < 1.0
    )  # ~10 ms each here; a backtracking pattern would take minutes
