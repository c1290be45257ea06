"""Rank agreement: the few ways the ranks of one run come to the same answer.

Each is one collective (`collectives.gather_objects`, an `all_gather_object`) that every rank of
the group calls at the same point; in one process (`DistEnv.sharded` False) it is a plain call
with no exchange. The run uses four:

- `exchange`: every rank's value, in rank order, on every rank (the preemption signals each rank
  noted, run/preemption.py);
- `first_flag`: any rank's flag reaches every rank: the lowest rank that raised one, and its flag;
- `raise_on_every_rank`: one rank's failure stops every rank at the same point (a rank with its own
  error raises it, the others an error rebuilt from its description), instead of the others
  waiting in the next collective until the process group times out (run/records.py's full disk);
- `on_rank0`: rank 0 does the work and every rank learns the outcome (run/checkpoint.py's files
  that only rank 0 writes), in place of a barrier;
- `min_over_ranks`: the smallest value over the ranks, None when any rank has none (eval/sizing.py:
  the KV cache every rank's engine holds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from quadrants.distributed.collectives import DistEnv, current, gather_objects

T = TypeVar("T")


def exchange(value: T, env: DistEnv | None = None) -> list[T]:
    """[value of rank 0, value of rank 1, ...] on every rank ([value] in one process); `env`
    defaults to the process group this process is in (`collectives.current`)."""
    return gather_objects(value, env if env is not None else current())


def first_flag(flag: T | None, env: DistEnv) -> tuple[int, T] | None:
    """(rank, flag) of the lowest rank whose `flag` is not None, the same on every rank; None when
    no rank raised one."""
    for rank, raised in enumerate(exchange(flag, env)):
        if raised is not None:
            return rank, raised
    return None


def raise_on_every_rank(
    error: Exception | None,
    env: DistEnv,
    describe: Callable[[Exception], Any],
    rebuild: Callable[[int, Any], Exception],
) -> None:
    """Raise on every rank when any rank has an `error`: a rank with one raises its own, the others
    `rebuild(rank, description)` of the lowest such rank (`describe(error)` travels, not the error:
    an exception need not pickle). Nothing raised when no rank has one."""
    flagged = first_flag(None if error is None else describe(error), env)
    if error is not None:
        raise error
    if flagged is not None:
        raise rebuild(*flagged)


def on_rank0(
    work: Callable[[], None],
    env: DistEnv,
    describe: Callable[[Exception], Any],
    rebuild: Callable[[int, Any], Exception],
) -> None:
    """`work` on rank 0 only, then every rank raises if it failed (`raise_on_every_rank`): rank 0
    its own exception, the others `rebuild(0, describe(exception))`."""
    failure: Exception | None = None
    if env.is_main:
        try:
            work()
        except Exception as error:  # noqa: BLE001 - raised below, after the others learnt of it
            failure = error
    raise_on_every_rank(failure, env, describe, rebuild)


def min_over_ranks(value: int | None, env: DistEnv) -> int | None:
    """The smallest `value` over the ranks; None when any rank has None."""
    everyone = exchange(value, env)
    return None if any(v is None for v in everyone) else min(everyone)
