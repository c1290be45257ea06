"""last_boxed: which box counts, brace matching, and bounded work on adversarial text."""

from __future__ import annotations

import random
import time

import pytest

from quadrants.rewards.extract import MAX_ANSWER_CHARS, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the answer is \\boxed{42}.", "42"),
        ("\\boxed{1} first, then \\boxed{2}", "2"),  # the last box wins
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("\\fbox{7}", "7"),
        ("\\boxed {5}", "5"),  # space before the brace is valid LaTeX
        ("\\boxed{ 3 }", "3"),  # surrounding whitespace is stripped
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces do not nest
        ("\\boxed{a \\\\ b}", "a \\\\ b"),  # an escaped backslash does not escape the brace
        ("\\boxed{3} (put it in \\boxed)", "3"),  # \boxed without a brace is not a box
        ("\\boxed{\\boxed{5}}", "5"),  # the innermost box opens last
        ("$\\boxed{x}$ and $\\fbox{y}$", "y"),
        ("\\boxed{}", ""),
        ("\\boxed{9}}}}", "9"),  # stray closing braces after the box are ignored
    ],
)
def test_last_boxed(text: str, expected: str) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The answer is 42.",
        "\\boxed",
        "\\boxedx{3}",  # another command
        "\\boxed{12",  # truncated completion
        "\\boxed{1} but finally \\boxed{2",  # the last box is unclosed: no fallback to the first
        "\\boxed{{{{1}",
    ],
)
def test_last_boxed_absent(text: str) -> None:
    assert last_boxed(text) is None


def test_answer_length_cap() -> None:
    # content of exactly max_chars is kept; one more character is degenerate output
    assert last_boxed("\\boxed{" + "1" * 10 + "}", max_chars=10) == "1" * 10
    assert last_boxed("\\boxed{" + "1" * 11 + "}", max_chars=10) is None
    assert last_boxed("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}") is None


@pytest.mark.parametrize(
    "text",
    [
        "x" * 100_000,
        "\\boxed{" * 15_000,  # 15k unclosed boxes
        "\\boxed" * 17_000,  # 17k commands without braces
        "\\boxed{" + "{" * 50_000 + "1" + "}" * 50_000,  # 50k nested braces
        "{" * 50_000 + "\\boxed{1}" + "}" * 50_000,
        "\\boxed" + " " * 100_000 + "x",
        "\\" * 100_000,
    ],
)
def test_adversarial_text_is_fast(text: str) -> None:
    # a correctness bound, not a benchmark: each of these takes ~1 ms
    start = time.perf_counter()
    answer = last_boxed(text)
    assert time.perf_counter() - start < 0.5
    assert answer in (None, "1")


def test_nested_braces_within_cap() -> None:
    # 400 levels of braces is 801 characters of content: under the 1000-character cap
    assert last_boxed("\\boxed{" + "{" * 400 + "1" + "}" * 400 + "}") == "{" * 400 + "1" + "}" * 400


def _random_text(rng: random.Random, alphabet: str, max_len: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(max_len)))


def test_random_text_never_raises() -> None:
    # seeded fuzz over the characters that matter to the scan, plus a lone surrogate
    rng = random.Random(0)
    pieces = ["\\boxed", "\\fbox", "{", "}", "\\", " ", "\n", "1", "x", "$", "\udc80"]
    for _ in range(2_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(60)))
        answer = last_boxed(text, max_chars=20)
        assert answer is None or len(answer) <= 20


def test_brace_free_content_round_trips() -> None:
    rng = random.Random(1)
    for _ in range(500):
        prefix = _random_text(rng, "\\boxed{} 1", 30)
        content = _random_text(rng, "ab 1+^_.$\n\t", 40)
        assert last_boxed(prefix + "\\boxed{" + content + "}") == content.strip()


def test_boxed_or_last_number_reads_the_box_first_then_the_last_number():
    from quadrants.rewards.extract import boxed_or_last_number

    assert boxed_or_last_number("so \\boxed{3}, then 5") == "so \\boxed{3}, then 5"  # a box wins
    assert boxed_or_last_number("3 + 4 = 7.") == "3 + 4 = 7. \\boxed{7}"  # trailing period dropped
    assert (
        boxed_or_last_number("He pays $1,234.50 total")
        == "He pays $1,234.50 total \\boxed{1234.50}"
    )
    assert boxed_or_last_number("it is -4") == "it is -4 \\boxed{-4}"
    assert boxed_or_last_number("no digits here") == "no digits here"
    assert (
        boxed_or_last_number("\\boxed{unclosed 12") == "\\boxed{unclosed 12 \\boxed{12}"
    )  # no closed box


def test_last_number_extraction_is_linear_on_hostile_input():
    import time

    from quadrants.rewards.extract import boxed_or_last_number

    text = "1," * 200_000 + "x"  # a comma-joined run that a backtracking pattern would choke on
    started = time.perf_counter()
    boxed_or_last_number(text)
    assert time.perf_counter() - started < 2.0


def test_grader_with_the_fallback_rule_rewards_a_bare_final_number():
    from quadrants.rewards.grader import Grader

    with (
        Grader(num_workers=0, extraction="boxed_or_last_number") as fallback,
        Grader(num_workers=0) as boxed,
    ):
        texts, golds = ["The answer is 17.", "\\boxed{16} not 17", "none"], ["17", "17", "17"]
        assert fallback.grade(texts, golds).rewards == [1.0, 0.0, 0.0]
        assert boxed.grade(texts, golds).rewards == [0.0, 0.0, 0.0]
