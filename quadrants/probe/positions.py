"""Which tokens the probe branches on, and what it will cost.

Positions are drawn from the response tokens of the probe's sampled batch (the tokens a GRPO update
moves: groups whose rewards are not all equal), stratified by quadrant x entropy bin: within each
quadrant the tokens are cut into `entropy_bins` bins at the quadrant's entropy quantiles, and the
`positions` are dealt round-robin over the non-empty cells, uniformly at random within a cell. Each
probed position carries its design weight (cell size / positions drawn from the cell), so weighted
means estimate the population of response tokens, not the stratified sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from quadrants.config_ranges import check_section
from quadrants.ops.quadrants import Quadrant, QuadrantMasks

if TYPE_CHECKING:
    from quadrants.config import ProbeConfig

QUADRANT_ORDER = tuple(q.value for q in Quadrant)  # PHR, PLR, NHR, NLR


def validate_probe(probe: ProbeConfig) -> None:
    """Fail fast, naming the key and its allowed range (the ranges ProbeConfig's fields declare in
    quadrants/config.py: `python -m quadrants.probe` validates only this section)."""
    check_section(probe, "probe")


@dataclass(frozen=True)
class Positions:
    """Probed positions of a [B, T] batch.

    Attributes:
        sequence: [N] long, row of the batch.
        token: [N] long, response position t (the branch replaces response token t).
        quadrant: [N] long, index into QUADRANT_ORDER.
        weight: [N] float, design weight (tokens of the cell / positions drawn from it).
    """

    sequence: Tensor
    token: Tensor
    quadrant: Tensor
    weight: Tensor

    def __len__(self) -> int:
        return int(self.sequence.numel())


def quadrant_index(masks: QuadrantMasks) -> Tensor:
    """[B, T] long: 0..3 for PHR, PLR, NHR, NLR (−1 off the response)."""
    index = torch.full(masks.PHR.shape, -1, dtype=torch.long, device=masks.PHR.device)
    for i, name in enumerate(QUADRANT_ORDER):
        index[masks[name]] = i
    return index


def select_positions(
    entropy: Tensor,
    quadrants: Tensor,
    candidate_mask: Tensor,
    *,
    positions: int,
    entropy_bins: int,
    generator: torch.Generator,
) -> Positions:
    """Stratified draw of up to `positions` tokens (module docstring).

    Args:
        entropy: [B, T] float, H_t.
        quadrants: [B, T] long, `quadrant_index`.
        candidate_mask: [B, T] bool, tokens that may be probed.
        positions: N wanted (fewer when there are fewer candidates).
        entropy_bins: strata per quadrant.
        generator: CPU generator for the draw.
    """
    cells: list[Tensor] = []  # flat indices of each cell, shuffled
    flat_entropy, flat_quadrant = entropy.reshape(-1).cpu(), quadrants.reshape(-1).cpu()
    flat_candidate = candidate_mask.reshape(-1).cpu()
    for q in range(len(QUADRANT_ORDER)):
        members = torch.nonzero(flat_candidate & (flat_quadrant == q)).squeeze(-1)
        if members.numel() == 0:
            continue
        values = flat_entropy[members].double()
        edges = torch.quantile(
            values, torch.linspace(0, 1, entropy_bins + 1, dtype=torch.float64)[1:-1]
        )
        bins = torch.bucketize(values, edges, right=True)
        for b in range(entropy_bins):
            cell = members[bins == b]
            if cell.numel():
                cells.append(cell[torch.randperm(cell.numel(), generator=generator)])
    taken = [0] * len(cells)
    chosen: list[tuple[int, int]] = []  # (cell, flat index)
    while len(chosen) < positions and any(taken[c] < cells[c].numel() for c in range(len(cells))):
        for c, cell in enumerate(cells):
            if len(chosen) < positions and taken[c] < cell.numel():
                chosen.append((c, int(cell[taken[c]])))
                taken[c] += 1
    flat = torch.tensor([i for _, i in chosen], dtype=torch.long)
    weight = torch.tensor([cells[c].numel() / taken[c] for c, _ in chosen], dtype=torch.float64)
    width = entropy.shape[1]
    return Positions(
        sequence=flat // width, token=flat % width, quadrant=flat_quadrant[flat], weight=weight
    )


@dataclass(frozen=True)
class Cost:
    """Rollouts and generated tokens (at most) of one probe."""

    rollouts: int
    max_tokens: int
    generate_calls: int

    def line(self) -> str:
        return (
            f"{self.rollouts} branching rollouts, at most {self.max_tokens} generated tokens, "
            f"{self.generate_calls} generate call(s)"
        )


def branching_cost(
    branch_counts: Tensor, *, continuations: int, max_new_tokens: int, batch_size: int
) -> Cost:
    """The cost of rolling out `branch_counts` [N] branches per position, K continuations each."""
    rollouts = int(branch_counts.sum()) * continuations
    return Cost(
        rollouts=rollouts,
        max_tokens=rollouts * max_new_tokens,
        generate_calls=-(-rollouts // batch_size),
    )
