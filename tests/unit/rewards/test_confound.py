"""The confound rewards (rewards/confound.py): reward=random's rate and its reproducibility from the
`reward` seed stream, reward=format_only on hand-written completions, graded by the real grader."""

from __future__ import annotations

import math
import random

import pytest

from quadrants import seeds
from quadrants.rewards.confound import (
    box_only_content,
    format_rewards,
    random_rewards,
    training_rewards,
)
from quadrants.rewards.grader import grade_one
from quadrants.rewards.outcome import Outcome

C, W, N = Outcome.correct, Outcome.wrong, Outcome.no_answer


def test_verifier_reward_is_the_correctness():
    assert training_rewards("verifier", [C, W, N, Outcome.timeout]) == [1.0, 0.0, 0.0, 0.0]


def test_random_reward_rate_is_the_rounds_true_solve_rate():
    # 1 correct of 4: p = 0.25. Over 40,000 draws (10,000 rounds of 4) the mean is 0.25 with
    # standard error sqrt(0.25 * 0.75 / 40,000) = 0.002165; allowed 4 se = 0.00866
    rng = random.Random(seeds.reward(0, 0, 0))
    draws = [r for _ in range(10_000) for r in random_rewards([C, W, W, N], None, rng)]
    assert set(draws) == {0.0, 1.0}
    se = math.sqrt(0.25 * 0.75 / 40_000)
    assert abs(sum(draws) / len(draws) - 0.25) < 4 * se


def test_random_reward_fixed_probability_and_its_ends():
    rng = random.Random(1)
    # p = 0 and p = 1 are certain, whatever the outcomes
    assert random_rewards([C, C, C], 0.0, rng) == [0.0, 0.0, 0.0]
    assert random_rewards([W, W, W], 1.0, rng) == [1.0, 1.0, 1.0]
    # a round the verifier found all wrong: p = 0, no reward at all
    assert random_rewards([W, N, W], None, rng) == [0.0, 0.0, 0.0]
    # p = 0.7 fixed on an all-wrong round: mean over 20,000 draws within 4 se of 0.7
    # (se = sqrt(0.7 * 0.3 / 20,000) = 0.00324)
    draws = random_rewards([W] * 20_000, 0.7, rng)
    assert abs(sum(draws) / 20_000 - 0.7) < 4 * math.sqrt(0.21 / 20_000)


def test_random_reward_is_reproducible_from_its_stream():
    outcomes = [C, W, C, W, W, N, C, W] * 4  # p = 12 / 32 = 0.375

    def draw(seed: int, step: int, round_index: int) -> list[float]:
        rng = random.Random(seeds.reward(seed, step, round_index))
        return training_rewards("random_solve_rate", outcomes, rng=rng)

    first = draw(0, 3, 0)
    assert draw(0, 3, 0) == first  # the same (seed, step, round): the same rewards
    # another step, round or run seed: another draw (32 fair-ish coins agree by chance with
    # probability well under 1e-6)
    assert draw(0, 4, 0) != first
    assert draw(0, 3, 1) != first
    assert draw(1, 3, 0) != first
    # the draw is random.Random(seed).random() < p per response, in order
    rng = random.Random(seeds.reward(0, 3, 0))
    assert first == [float(rng.random() < 0.375) for _ in range(32)]


def test_random_is_the_papers_random_one_half_whatever_the_outcomes():
    """reward=random without a probability draws at 0.5 on an all-correct and an all-wrong round
    alike (Spurious Rewards' random0.5: `int(random.random() < rate)`, the completion unused); the
    same generator state gives the same draw as a bare `random() < 0.5`."""
    for outcomes in ([C] * 8, [W] * 8):
        rng = random.Random(seeds.reward(0, 1, 0))
        got = training_rewards("random", outcomes, rng=rng)
        check = random.Random(seeds.reward(0, 1, 0))
        assert got == [float(check.random() < 0.5) for _ in range(8)]
    # the rate over 40,000 all-wrong responses: 0.5 within 4 se (se = sqrt(0.25 / 40,000) = 0.0025)
    draws = training_rewards("random", [W] * 40_000, rng=random.Random(7))
    assert abs(sum(draws) / 40_000 - 0.5) < 4 * 0.0025
    # reward.probability changes it; the solve-rate variant refuses one
    assert training_rewards("random", [W] * 5, probability=1.0, rng=random.Random(1)) == [1.0] * 5
    with pytest.raises(ValueError, match="random_solve_rate draws at the round's solve rate"):
        training_rewards("random_solve_rate", [W], probability=0.5, rng=random.Random(1))


@pytest.mark.parametrize(
    ("completion", "content"),
    [
        # the authors' extract_answer_box_only (ruixin31/Spurious_Rewards
        # code/ttrl/verifier/qwen/qwen_math_parser.py): the last "boxed", its braces matched
        ("the answer is \\boxed{13}", "13"),
        ("\\boxed{\\frac{24}{2}}", "\\frac{24}{2}"),
        ("\\boxed{12", "12"),  # unclosed: to the end of the text
        ("\\boxed 12$ done", "12"),  # no brace: up to the next $
        ("\\boxed{}", ""),
        ("\\boxed{  }", ""),
        ("\\boxed{7} and then \\boxed{}", ""),  # the last box counts
        ("put your answer in \\boxed", ""),
        ("the answer is 12", ""),
        ("\\boxed{\\text{twelve}}", "\\text{twelve}"),
    ],
)
def test_box_only_content_reads_the_last_box_as_the_authors_do(completion, content):
    assert box_only_content(completion) == content
    reward = training_rewards("box_only_format", [N], texts=[completion])
    assert reward == [float(bool(content))]


@pytest.mark.slow
def test_format_only_is_stricter_than_the_papers_box_rule():
    """An unclosed box and a box math-verify cannot parse (graded no_answer by the real grader):
    the paper's rule pays both, format_only (a closed box math-verify parses) neither."""
    for completion in ("the answer is \\boxed{12", "\\boxed{\\ldots}"):
        outcome = grade_one(completion, "12", timeout_s=5.0)
        assert outcome is N, completion
        assert training_rewards("format_only", [outcome]) == [0.0], completion
        assert training_rewards("box_only_format", [outcome], texts=[completion]) == [1.0]


def test_random_reward_needs_its_generator():
    with pytest.raises(ValueError, match="reward.name=random draws"):
        training_rewards("random", [C])


def test_unknown_reward_is_refused():
    with pytest.raises(ValueError, match=r"reward.name='majority' is unknown"):
        training_rewards("majority", [C])


def test_format_only_rewards_an_answer_right_or_wrong():
    assert format_rewards([C, W, N, Outcome.timeout, Outcome.error]) == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("so 7 + 5 = 12, and the answer is \\boxed{12}", 1.0),  # boxed, right
        ("the answer is \\boxed{13}", 1.0),  # boxed, wrong: format only
        ("\\boxed{\\frac{24}{2}}", 1.0),  # boxed LaTeX the grader parses (right: 12)
        ("the answer is 12", 0.0),  # no box
        ("put your answer in \\boxed", 0.0),  # the command without a box
        ("\\boxed{12", 0.0),  # never closed (a truncated completion)
        ("\\boxed{}", 0.0),  # an empty box: nothing to read
    ],
)
def test_format_only_on_hand_written_completions(completion, reward):
    # graded by the grader's own grade_one against gold "12", then the format reward read off
    outcome = grade_one(completion, "12", timeout_s=5.0)
    assert training_rewards("format_only", [outcome]) == [reward]
