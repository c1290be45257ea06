"""`Sharded`: the step's `Placement` (quadrants/train/placement.py) over W ranks of a process group.

Every rank holds the whole batch; each runs its contiguous 1/W of a forward's rows and the shares
are gathered (no-grad passes) or spliced around the rank's own share with grad (the update), and
generation blocks are dealt round-robin and gathered in block order (collectives.py). A sharded
forward runs with `share_prompts="always"` and one length bucket, so that every rank makes the
same FSDP forward calls whatever its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from quadrants.distributed.collectives import (
    DistEnv,
    all_gather_rows,
    dealt,
    gather_objects,
    in_call_order,
    reduce_metrics,
    row_share,
    splice,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Sharded:
    """The placement of rank `env.rank` of `env.world_size` (a process group exists)."""

    env: DistEnv

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def sharded(self) -> bool:
        return self.env.sharded

    def deal(self, calls: int) -> range:
        return dealt(calls, self.env)

    def gather_in_order(self, mine: list[tuple[int, T]]) -> list[T]:
        return in_call_order(gather_objects(mine, self.env))

    def share(self, rows: int) -> slice:
        return row_share(rows, self.env)

    def forward_options(self, options: dict[str, Any]) -> dict[str, Any]:
        if not self.env.sharded:
            return options
        return {**options, "share_prompts": "always", "max_buckets": 1}

    def gather_rows(self, own: Tensor) -> Tensor:
        return torch.cat(all_gather_rows(own, self.env))

    def splice(self, own: Tensor) -> Tensor:
        return splice(own, self.env)

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return reduce_metrics(metrics, self.env)
