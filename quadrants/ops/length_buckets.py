"""Rows grouped by response length, so that a forward pass computes few padding positions.

Shape legend: **B** sequences · **T** response positions.

Responses are right-padded to the longest one in the batch. A forward over [B, T] computes every
padding position, and in an RL batch that is a large share: responses that stop early beside
responses that run to the token limit. Positions after a row's last real token affect nothing
before them (attention is causal), so a row can be cut there. Rows sorted by that length and split
into a few contiguous buckets, each cut to its own longest row, cost
Σ_buckets rows × longest positions in place of B × T.

`length_buckets` chooses the split that minimises that area for each number of buckets (a small
dynamic programme over the sorted lengths) and adds a bucket only while it saves at least
`min_gain` of B × T: each bucket is one more forward call, with its fixed cost.
"""

from __future__ import annotations

import torch
from torch import Tensor

# an extra bucket must save this share of B × T positions; on the tiny benchmark model a second
# bucket saving 11 % of the positions cut forward + backward by 8 % (benchmarks/length_buckets.py)
MIN_GAIN = 1 / 16


def response_spans(response_mask: Tensor) -> Tensor:
    """[B, T] bool -> [B] long: 1 + the index of each row's last real response token (0 for a
    row without one). Positions from there on can be cut."""
    positions = torch.arange(1, response_mask.shape[1] + 1, device=response_mask.device)
    return (response_mask.long() * positions).amax(dim=1)


def _best_splits(lengths: Tensor, buckets: int) -> list[tuple[int, list[int]]]:
    """For k = 1..`buckets`: (least area, row counts at which the runs end) of `lengths`
    ([n] long, ascending, ≥ 1) cut into at most k contiguous runs, where a run's area is its size ×
    its last (largest) length. A run only ever ends where the length changes, so the programme
    runs over the m distinct lengths: one [m + 1, m + 1] table per extra run."""
    values, counts = torch.unique(lengths, return_counts=True)  # ascending
    ends_at = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).double()  # C[j]
    value = torch.cat([values.new_zeros(1), values]).double()  # value[j]: the j-th length (1-based)
    m = values.shape[0]
    # best[j]: least area of the rows with the j smallest lengths, in the runs allowed so far
    best = ends_at * value
    later = torch.arange(m + 1)[None, :] > torch.arange(m + 1)[:, None]  # [i, j]: i < j
    results = [(int(best[m]), [int(ends_at[m])])]
    choices: list[Tensor] = []
    for _ in range(1, buckets):
        # the last run holds the rows of lengths i+1..j: area (C[j] - C[i]) × value[j]
        table = best[:, None] + (ends_at[None, :] - ends_at[:, None]) * value[None, :]
        best, start = table.masked_fill(~later, float("inf")).min(dim=0)
        best[0], start[0] = 0.0, 0
        choices.append(start)
        j, cuts = m, [m]
        for start_of in reversed(choices):  # walk the chosen runs back from the last one
            j = int(start_of[j])
            if j == 0:
                break
            cuts.append(j)
        results.append((int(best[m]), [int(ends_at[c]) for c in reversed(cuts)]))
    return results


def length_buckets(
    spans: Tensor, *, max_buckets: int, min_gain: float = MIN_GAIN
) -> list[tuple[Tensor, int]]:
    """Rows grouped into at most `max_buckets` buckets by span, each as (row indices [n] long,
    its length = the bucket's largest span, at least 1).

    One bucket (every row, in order, cut to the longest span) unless more save, each, at least
    `min_gain` × B × (longest span) positions. The buckets together hold each row exactly once.
    """
    batch = spans.shape[0]
    longest = max(int(spans.max()), 1) if batch else 1
    everything = [(torch.arange(batch, device=spans.device), longest)]
    if max_buckets <= 1 or batch < 2:
        return everything
    order = torch.argsort(spans, stable=True)
    lengths = spans[order].clamp_min(1).cpu()
    options = _best_splits(lengths, max_buckets)
    chosen = 0
    while (
        chosen + 1 < len(options)
        and options[chosen][0] - options[chosen + 1][0] >= min_gain * batch * longest
    ):
        chosen += 1
    if chosen == 0:
        return everything
    cuts = [0, *options[chosen][1]]
    return [(order[a:b], int(lengths[b - 1])) for a, b in zip(cuts, cuts[1:])]
