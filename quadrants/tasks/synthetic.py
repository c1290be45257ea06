"""Synthetic verifiable task: multi-step integer arithmetic solved as short written reasoning.

A problem is an expression such as `7+8-5+9`; the prompt is `7+8-5+9=` and the reference solution
evaluates it left to right, one step per intermediate result, and boxes the last one:

    7+8-5+9=  ->  7+8=15,15-5=10,10+9=19 \\boxed{19}

The defaults (four one-digit numbers, + and -) keep each step a small lookup with a carry or a
borrow, so the tiny model learns the arithmetic in a short warm-up and responses stay under 35
characters; `digits=2` gives problems like `37+48-19` (`37+48=85,85-19=66 \\boxed{66}`).

Every running value stays non-negative (the generator rejects the others). With `*` among the
operators, a product that follows a sum is parenthesised in the prompt (`(3+4)*5`) so that the usual
reading of the expression agrees with left-to-right evaluation.

The train and held-out splits are disjoint by construction: a stable hash of the expression puts a
`heldout_fraction` of the whole problem space in the held-out bucket; training never draws from it.

`teacher_solution` is a *noisy teacher*: with probability `error_rate` a trace contains exactly one
realistic mistake in one step (a dropped carry or borrow, so the tens digit is off by one; in a step
without a carry, a units digit off by one), propagated to the boxed answer. A model
fitted to such traces is unsure exactly at the digits that decide correctness and sure of the
formatting. One mistake per trace means mistakes never cancel: a trace's answer is wrong exactly
when the teacher erred.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from quadrants.tasks.base import Problem

_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")
_STEP = re.compile(r"(-?\d+)([+\-*])(\d+)=(-?\d+)")
_TOKEN = re.compile(r"\d+|[+\-*]")
_HASH_BUCKETS = 1_000_000
_MAX_DRAWS_PER_PROBLEM = 10_000


@dataclass(frozen=True)
class Step:
    """One written step `left op right = result` of a solution."""

    left: int
    op: str
    right: int
    result: int

    @property
    def correct(self) -> bool:
        return self.result == _apply(self.left, self.op, self.right)

    def text(self) -> str:
        return f"{self.left}{self.op}{self.right}={self.result}"


def _apply(left: int, op: str, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    raise ValueError(f"unknown operator {op!r}")


def _units_carry(left: int, op: str, right: int) -> bool:
    """Whether the units column produces a carry (+, *) or needs a borrow (-)."""
    if op == "+":
        return left % 10 + right % 10 >= 10
    if op == "-":
        return left % 10 < right % 10
    return (left % 10) * (right % 10) >= 10


def _mistaken_result(left: int, op: str, right: int, rng: random.Random) -> int:
    """A realistic wrong result for one step.

    Where the units column carries (+, *) or borrows (-), the carry is dropped: the tens digit is
    off by one (`7+8=5`, `15-7=18`). Elsewhere the units digit slips by one (`2+3=6`), never below
    0.
    """
    correct = _apply(left, op, right)
    if _units_carry(left, op, right):
        if op == "*":
            return correct - 10 * ((left % 10) * (right % 10) // 10)
        return correct + (10 if op == "-" else -10)
    return correct + 1 if correct == 0 else correct + rng.choice((-1, 1))


def parse_expression(expression: str) -> tuple[list[int], list[str]]:
    """`"(37+48)*19"` -> ([37, 48, 19], ["+", "*"]); parentheses and a trailing `=` are ignored."""
    tokens = _TOKEN.findall(expression)
    terms = [int(t) for t in tokens[0::2]]
    ops = tokens[1::2]
    if not terms or len(ops) != len(terms) - 1 or any(t in "+-*" for t in tokens[0::2]):
        raise ValueError(f"not an arithmetic expression: {expression!r}")
    return terms, ops


def format_expression(terms: list[int], ops: list[str]) -> str:
    """Left-to-right expression text; a `*` after a `+`/`-` parenthesises everything before it."""
    text = str(terms[0])
    has_sum = False
    for op, term in zip(ops, terms[1:]):
        if op == "*" and has_sum:
            text = f"({text})"
            has_sum = False
        has_sum = has_sum or op in "+-"
        text = f"{text}{op}{term}"
    return text


def solution_steps(solution: str) -> list[Step]:
    """The written steps of a solution, in order (tolerates a truncated or garbled tail)."""
    return [Step(int(a), op, int(b), int(c)) for a, op, b, c in _STEP.findall(solution)]


def final_answer(text: str) -> str | None:
    """The integer in the last `\\boxed{...}` of `text`, as a string; None if there is none."""
    found = _BOXED.findall(text)
    return str(int(found[-1])) if found else None


@dataclass(frozen=True)
class ArithmeticTask:
    """Procedurally generated left-to-right integer arithmetic (implements `Task`).

    Attributes:
        num_terms: numbers in each expression (>= 2); the solution has `num_terms - 1` steps.
        digits: digits of each number (1 -> 0..9, 2 -> 10..99, ...).
        operators: the operators to draw from, a subset of "+-*".
        heldout_seed: seed of the held-out draw (the split itself is fixed by the hash).
        heldout_size: number of held-out problems.
        heldout_fraction: share of the problem space reserved for held-out problems.
        name: task name used in reports and metric keys.
    """

    num_terms: int = 4
    digits: int = 1
    operators: str = "+-"
    heldout_seed: int = 1234
    heldout_size: int = 500
    heldout_fraction: float = 0.05
    name: str = "arithmetic"
    prompt_format: ClassVar[str] = (
        "raw"  # `prompt=auto` sends the prompts as they are: the policy was warmed up on them
    )

    def __post_init__(self) -> None:
        if self.num_terms < 2:
            raise ValueError(f"num_terms must be >= 2, got {self.num_terms}")
        if self.digits < 1:
            raise ValueError(f"digits must be >= 1, got {self.digits}")
        if not self.operators or set(self.operators) - set("+-*"):
            raise ValueError(
                f"operators must be a non-empty subset of '+-*', got {self.operators!r}"
            )
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")

    # --- splits ---------------------------------------------------------------------------------

    def is_heldout(self, expression: str) -> bool:
        """Whether an expression lies in the held-out bucket (a stable hash,
        not Python's hash())."""
        digest = hashlib.blake2b(expression.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % _HASH_BUCKETS < self.heldout_fraction * _HASH_BUCKETS

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """`n` training problems drawn with `rng` (repeats possible), never from
        the held-out bucket."""
        return [self._draw(rng, heldout=False) for _ in range(n)]

    def heldout(self, n: int | None = None) -> list[Problem]:
        """The first `n` of `heldout_size` distinct held-out problems (deterministic)."""
        problems = self._heldout_problems
        if n is None:
            return list(problems)
        if n > len(problems):
            raise ValueError(f"asked for {n} held-out problems, the task has {len(problems)}")
        return list(problems[:n])

    @cached_property
    def _heldout_problems(self) -> tuple[Problem, ...]:
        rng = random.Random(self.heldout_seed)
        seen: dict[str, Problem] = {}
        for _ in range(self.heldout_size * 100):
            if len(seen) == self.heldout_size:
                break
            problem = self._draw(rng, heldout=True)
            seen.setdefault(problem.id, problem)
        if len(seen) < self.heldout_size:
            raise ValueError(
                f"the problem space is too small for {self.heldout_size} held-out problems"
            )
        return tuple(seen.values())

    def _draw(self, rng: random.Random, *, heldout: bool) -> Problem:
        low = 0 if self.digits == 1 else 10 ** (self.digits - 1)
        high = 10**self.digits - 1
        for _ in range(_MAX_DRAWS_PER_PROBLEM):
            terms = [rng.randint(low, high) for _ in range(self.num_terms)]
            ops = [rng.choice(self.operators) for _ in range(self.num_terms - 1)]
            if any(value < 0 for value in _running_values(terms, ops)):
                continue
            expression = format_expression(terms, ops)
            if self.is_heldout(expression) == heldout:
                return self.make_problem(terms, ops)
        raise RuntimeError("could not draw a valid problem; check the task settings")

    # --- problems and solutions -------------------------------------------------------------------

    def make_problem(self, terms: list[int], ops: list[str]) -> Problem:
        """The problem for an expression given as its numbers and operators."""
        expression = format_expression(terms, ops)
        answer = _running_values(terms, ops)[-1]
        return Problem(id=expression, prompt=f"{expression}=", answer=str(answer))

    def reference_solution(self, problem: Problem) -> str:
        """The correct solution text, e.g. `37+48=85,85-19=66 \\boxed{66}` (no EOS token)."""
        terms, ops = parse_expression(problem.prompt)
        return _render(terms, ops, mistake_step=None, rng=random.Random(0))

    def teacher_solution(self, problem: Problem, error_rate: float, rng: random.Random) -> str:
        """A noisy-teacher trace: with probability `error_rate`, one step
        (chosen uniformly) is wrong.

        The wrong intermediate result is carried into the following steps, so the boxed answer is
        wrong exactly when the teacher made its mistake.
        """
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
        terms, ops = parse_expression(problem.prompt)
        mistake_step = rng.randrange(len(ops)) if rng.random() < error_rate else None
        return _render(terms, ops, mistake_step=mistake_step, rng=rng)


def _running_values(terms: list[int], ops: list[str]) -> list[int]:
    values = [terms[0]]
    for op, term in zip(ops, terms[1:]):
        values.append(_apply(values[-1], op, term))
    return values


def _render(
    terms: list[int], ops: list[str], *, mistake_step: int | None, rng: random.Random
) -> str:
    steps = []
    value = terms[0]
    for index, (op, term) in enumerate(zip(ops, terms[1:])):
        if index == mistake_step:
            result = _mistaken_result(value, op, term, rng)
        else:
            result = _apply(value, op, term)
        steps.append(Step(value, op, term, result).text())
        value = result
    return ",".join(steps) + f" \\boxed{{{value}}}"
