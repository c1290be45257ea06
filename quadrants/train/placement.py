"""Where a step's work runs: `Placement`, the one object behind which data parallelism sits.

A step deals its generation blocks to ranks, runs each forward over its rank's share of the rows,
and gathers the results, always through a `Placement`. In one process that is `SingleProcess`:
every call is dealt to it, its share is every row, and gathering returns its input, so the step's
code is the plain single-process computation and never opens distributed code. Several ranks use
the sharded form, `quadrants.distributed.placement.Sharded` (the rule of the layout:
distributed/collectives.py), which the loop builds only when a process group exists.

The protocol is structural: the sharded form does not import this module (distributed/ sits below
train/ in the layering).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from torch import Tensor

T = TypeVar("T")


class Placement(Protocol):
    """How the step's rows and calls are spread over ranks (rank `rank` of `world_size`)."""

    rank: int
    world_size: int
    sharded: bool

    def deal(self, calls: int) -> range:
        """The calls of 0 .. calls - 1 this rank makes (call c goes to rank c % W)."""
        ...

    def gather_in_order(self, mine: list[tuple[int, T]]) -> list[T]:
        """Every rank's (call, result) pairs gathered on every rank, the results in call order."""
        ...

    def share(self, rows: int) -> slice:
        """This rank's contiguous share of `rows` rows."""
        ...

    def forward_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options of a forward over this rank's share (sharded: the same calls on every rank,
        whatever its rows)."""
        ...

    def gather_rows(self, own: Tensor) -> Tensor:
        """Every rank's equally shaped share, concatenated in rank order (detached)."""
        ...

    def splice(self, own: Tensor) -> Tensor:
        """The global tensor: the other ranks' detached shares around this rank's own (with
        grad)."""
        ...

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The metrics as rank 0 logs them (per-rank timings: the maximum over ranks)."""
        ...


class SingleProcess:
    """One plain process: every method returns its input (or all of it)."""

    rank = 0
    world_size = 1
    sharded = False

    def deal(self, calls: int) -> range:
        return range(calls)

    def gather_in_order(self, mine: list[tuple[int, T]]) -> list[T]:
        return [result for _, result in sorted(mine, key=lambda pair: pair[0])]

    def share(self, rows: int) -> slice:
        return slice(0, rows)

    def forward_options(self, options: dict[str, Any]) -> dict[str, Any]:
        return options

    def gather_rows(self, own: Tensor) -> Tensor:
        return own.detach()

    def splice(self, own: Tensor) -> Tensor:
        return own

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics

    def __repr__(self) -> str:
        return "SingleProcess()"
