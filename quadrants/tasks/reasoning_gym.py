"""Procedural curricula from `reasoning-gym` (Apache-2.0, offline generators): `task=reasoning_gym`.

`task.params.dataset` names a reasoning-gym dataset (``basic_arithmetic``, ``chain_sum``,
``gsm_symbolic``, ...); every other key of `task.params` except the ones below is passed to
`reasoning_gym.create_dataset` (``min_digits``, ``max_terms``, ``operators``, ...), so difficulty is
a config, not code. Training items come from a generator seeded with `seed` (item ``i`` of a
seeded dataset is fixed, so a step's draw is deterministic and resume-safe); the held-out problems
from a second generator seeded with the stream `task_split` of (1,) (quadrants/seeds.py), and no
training draw ever equals a held-out question. reasoning-gym draws item i with `Random` seeded by
the dataset's seed plus i (reasoning_gym/arithmetic/basic_arithmetic.py `__getitem__`), so a
held-out seed one above the training seed made held-out item i the training item i + 1; the hashed
seed is nowhere near the training items'.

Reward (`task.params.reward`): ``math_verify`` grades the last ``\\boxed{}`` of a response against
the item's answer with the same math-verify grader as every other task; it is the right rule for the
datasets whose answers are numbers or expressions (the arithmetic and GSM-style families).
reasoning-gym's own per-dataset scorers are not wired in yet: datasets whose answers are not maths
(words, grids, lists) are refused rather than graded wrongly (see `MATH_ANSWER_DATASETS`).
"""

from __future__ import annotations

import random
from typing import Any

from quadrants import seeds
from quadrants.tasks.base import Problem

__all__ = ["MATH_ANSWER_DATASETS", "REWARDS", "ReasoningGymTask"]

REWARDS = ("math_verify",)

MATH_ANSWER_DATASETS = (
    "basic_arithmetic",
    "chain_sum",
    "products",
    "gsm_symbolic",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "fraction_simplification",
    "gcd",
    "lcm",
    "power_function",
    "prime_factorization",
    "count_bits",
    "number_sorting",
    "simple_equations",
    "polynomial_equations",
    "complex_arithmetic",
    "leg_counting",
    "time_intervals",
)
"""Datasets whose answers math-verify can compare (numbers, fractions, expressions)."""

_TRAIN_SIZE = 1_000_000  # items of the training generator; drawn by index, generated on demand


class ReasoningGymTask:
    """A reasoning-gym generator as a training task with a disjoint held-out split.

    Args:
        heldout_size: held-out problems (from the generator seeded `seeds.task_split(seed, 1)`).
        dataset: the reasoning-gym dataset name.
        reward: how responses are graded (`REWARDS`).
        seed: seed of the training generator.
        **params: passed to `reasoning_gym.create_dataset`.
    """

    def __init__(
        self,
        heldout_size: int,
        *,
        dataset: str,
        reward: str = "math_verify",
        seed: int = 0,
        **params: Any,
    ) -> None:
        import reasoning_gym  # optional extra: quadrants[curricula]

        if reward not in REWARDS:
            raise ValueError(
                f"task.params.reward={reward!r} is unknown; choose one of {list(REWARDS)}"
            )
        if dataset not in MATH_ANSWER_DATASETS:
            raise ValueError(
                f"task.params.dataset={dataset!r}: its answers are not maths, so "
                f"reward=math_verify cannot grade them; choose one of {list(MATH_ANSWER_DATASETS)}"
            )
        self.name = f"rg_{dataset}"
        self.prompt_format = None
        self._train = reasoning_gym.create_dataset(dataset, seed=seed, size=_TRAIN_SIZE, **params)
        held = reasoning_gym.create_dataset(
            dataset, seed=seeds.task_split(seed, 1), size=max(heldout_size, 1), **params
        )
        self._heldout = [self._problem(f"heldout/{i}", held[i]) for i in range(heldout_size)]
        self._heldout_questions = {p.prompt for p in self._heldout}

    def _problem(self, key: str, entry: dict[str, Any]) -> Problem:
        return Problem(
            id=f"{self.name}/{key}", prompt=str(entry["question"]), answer=str(entry["answer"])
        )

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """`n` training items at indices drawn with `rng`; a draw equal to a
        held-out question is redrawn."""
        problems: list[Problem] = []
        for _ in range(100 * n):
            if len(problems) == n:
                break
            index = rng.randrange(_TRAIN_SIZE)
            problem = self._problem(str(index), self._train[index])
            if problem.prompt not in self._heldout_questions:
                problems.append(problem)
        if len(problems) < n:
            raise ValueError(
                f"task {self.name}: the generator keeps producing held-out questions; widen its "
                "parameters or shrink task.heldout_size"
            )
        return problems

    def heldout(self, n: int | None = None) -> list[Problem]:
        return list(self._heldout if n is None else self._heldout[:n])
