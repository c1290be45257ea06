"""Confound rewards (`reward=random`, `reward=format_only`): the training reward of a run that asks
whether a gain needs the verifier at all (docs/science.md, "Confound rewards").

Both take the grader's outcomes of a round (rewards/grader.py), so the verifier still grades every
response and the run logs the true solve rate next to the reward it trains on:

- `verifier` (the default): 1.0 for `Outcome.correct`, else 0.0 (the grader's own reward).
- `random`: each response independently 1.0 with probability p, else 0.0, drawn from the caller's
  generator (seeded from the `reward` stream of quadrants/seeds.py). p is `probability` when given
  (Spurious Rewards' `random0.5` is p = 0.5 whatever the policy does: ruixin31/Rethink_RLVR
  README.md, "Rewards"), else the round's true solve rate, the fraction of its responses the
  verifier graded correct: the reward then has the verifier's mean on every batch (the same
  number of rewarded responses in expectation, so the advantage scale and the share of constant
  groups stay comparable with the verifier arm) and carries no information about which response
  was right.
- `format_only`: 1.0 when the grader found a parseable final answer: its outcome is `correct` or
  `wrong` (a closed last ``\\boxed{}`` whose content math-verify parsed, under the run's
  `task.answer_extraction`), else 0.0 (`no_answer`; `timeout` and `error`, where the grader could
  not finish reading it, count as no answer too).

Pure: outcomes (and a generator) in, floats out.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from quadrants.rewards.outcome import Outcome

__all__ = ["CONFOUNDS", "format_rewards", "random_rewards", "training_rewards"]

CONFOUNDS = ("verifier", "random", "format_only")
"""The training rewards `reward.name` chooses from."""

_ANSWERED = (Outcome.correct, Outcome.wrong)


def verifier_rewards(outcomes: Sequence[Outcome]) -> list[float]:
    """1.0 for each `correct` outcome, else 0.0 (the grader's reward)."""
    return [float(o is Outcome.correct) for o in outcomes]


def format_rewards(outcomes: Sequence[Outcome]) -> list[float]:
    """1.0 where the grader read a final answer (outcome `correct` or `wrong`), else 0.0."""
    return [float(o in _ANSWERED) for o in outcomes]


def random_rewards(
    outcomes: Sequence[Outcome], probability: float | None, rng: random.Random
) -> list[float]:
    """One Bernoulli(p) reward per response, in order, from `rng`: p = `probability`, or when it
    is None the fraction of `outcomes` that are `correct` (0 for an empty round)."""
    if probability is None:
        probability = sum(verifier_rewards(outcomes)) / max(len(outcomes), 1)
    return [float(rng.random() < probability) for _ in outcomes]


def training_rewards(
    name: str,
    outcomes: Sequence[Outcome],
    *,
    probability: float | None = None,
    rng: random.Random | None = None,
) -> list[float]:
    """The 0/1 reward `reward.name` gives each response of a round (the module docstring); `rng`
    is used, and needed, only by `random`."""
    if name == "verifier":
        return verifier_rewards(outcomes)
    if name == "format_only":
        return format_rewards(outcomes)
    if name == "random":
        if rng is None:
            raise ValueError("reward.name=random draws its rewards: pass the round's generator")
        return random_rewards(outcomes, probability, rng)
    raise ValueError(f"reward.name={name!r} is unknown; choose one of {list(CONFOUNDS)}")
