"""The prompt-length limit (`task.max_prompt_tokens`): no prompt longer than the run planned for.

The memory plan sizes every row at `task.max_prompt_tokens + rollout.max_new_tokens` tokens, and
vLLM's `max_model_len` defaults to this limit + the longest response (training or evaluation). A
longer prompt would have vLLM shorten its response (the budget is shared) or, past
`max_model_len`, refuse the request on one rank while the others wait in the next collective. So
a rendered prompt (the text the policy sees, in its own tokens, without special tokens as the
engines encode it: rollout/engine.py `encode_prompts`) over the limit never reaches an engine:

- a task with a fixed list of problems (a dataset: `keep_only`) loses them once, when it loads;
  how many training and held-out problems were dropped is logged and kept on the task
  (`too_long`, `too_long_heldout`);
- a task that generates its problems (arithmetic, reasoning_gym) has an over-long draw replaced by
  the next draw of the same generator, counted in `too_long` and logged; its held-out problems
  over the limit are left out.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from quadrants.tasks.base import Problem, RenderedTask

log = logging.getLogger(__name__)

# draws of a generating task per problem asked for before the limit is called unreachable
_DRAWS_PER_PROBLEM = 100


def prompt_token_counter(tokenizer: Any) -> Callable[[str], int]:
    """The length of a rendered prompt in the policy's tokens, encoded as the engines encode it."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


class LengthLimitedTask:
    """`task` (rendered in the run's prompt format) without prompts over `max_tokens` tokens.

    Other attributes of the wrapped task (its name, counts) read through."""

    def __init__(
        self, task: RenderedTask, count_tokens: Callable[[str], int], max_tokens: int
    ) -> None:
        self.task = task
        self.name = task.name
        self.max_tokens = max_tokens
        self._count = count_tokens
        self.too_long = 0
        self.too_long_heldout = 0
        keep_only = getattr(task.task, "keep_only", None)
        self._fixed = callable(keep_only)
        if self._fixed:
            try:
                self.too_long, self.too_long_heldout = keep_only(
                    lambda problem: self._fits(task.render(problem.prompt))
                )
            except ValueError as error:
                raise ValueError(
                    f"{error}: every training prompt is longer than "
                    f"task.max_prompt_tokens={max_tokens} tokens; raise it"
                ) from None
            log.info(
                "task %s: %d training and %d held-out problems dropped, their prompts longer "
                "than task.max_prompt_tokens=%d tokens",
                self.name,
                self.too_long,
                self.too_long_heldout,
                max_tokens,
            )

    def __getattr__(self, attribute: str) -> object:
        return getattr(self.task, attribute)

    def _fits(self, text: str) -> bool:
        return self._count(text) <= self.max_tokens

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        batch = self.task.train_batch(n, rng)
        if self._fixed:
            return batch
        kept = [problem for problem in batch if self._fits(problem.prompt)]
        draws = n
        while len(kept) < n:
            if draws >= _DRAWS_PER_PROBLEM * n:
                raise ValueError(
                    f"task {self.name}: {draws} draws gave {len(kept)} of {n} prompts within "
                    f"task.max_prompt_tokens={self.max_tokens} tokens; raise it"
                )
            more = self.task.train_batch(1, rng)
            draws += 1
            kept.extend(problem for problem in more if self._fits(problem.prompt))
        dropped = draws - n
        if dropped:
            self.too_long += dropped
            log.info(
                "task %s: %d drawn problems replaced, their prompts longer than "
                "task.max_prompt_tokens=%d tokens (%d in this run)",
                self.name,
                dropped,
                self.max_tokens,
                self.too_long,
            )
        return kept

    def heldout(self, n: int | None = None) -> list[Problem]:
        problems = self.task.heldout(n)
        if self._fixed:
            return problems
        return [problem for problem in problems if self._fits(problem.prompt)]
