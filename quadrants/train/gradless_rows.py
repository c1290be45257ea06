"""Rows of a mini-batch that carry no gradient (`rows_with_gradient`), and splicing rows computed
with grad into a mini-batch's detached values (`splice_rows`).

A row carries no gradient when none of its response tokens is both in a kept quadrant and in the
objective's denominator, or, for objectives that are inert there and without KL, when its
advantage is exactly 0. The update (train/update.py `backward_minibatch`) runs such rows once
without grad, for their values, and only the other rows with grad; sharded ranks add idle rows to
the grad pass until both passes split evenly over the ranks (`equal_shares`).

Pure torch over a TokenBatch and the objective's spec: no model, no config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from quadrants.objectives.batch import TokenBatch
from quadrants.objectives.loss import LossSettings, behaviour_output, kept_tokens
from quadrants.objectives.registry import ObjectiveSpec


def rows_with_gradient(
    mini: TokenBatch,
    settings: LossSettings,
    spec: ObjectiveSpec | None = None,
    params: Mapping[str, Any] | None = None,
) -> Tensor | None:
    """[B] bool: the rows holding a response token that the loss both keeps (a kept quadrant's) and
    counts (in the objective's denominator); None: every row may carry gradient.

    compute_loss multiplies every per-token term (the objective's, the KL's) by the kept-quadrant
    mask and by the denominator mask, so a row without such a token adds exactly nothing to the
    loss or its gradient, whatever the objective: under `quadrant=PHR` every row with a negative
    advantage, under `NHR` every row with a non-negative one, and under DAPO's dynamic sampling
    every row of a constant group. The denominator is read only from an objective whose spec says
    it depends on the batch alone (`batch_denominator`): it is computed here from the objective
    run on the old log-probs, before any forward. A row whose advantage is exactly 0 (a constant or
    singleton group) also carries nothing when the objective says so (`zero_advantage_inert`: its
    per-token loss is −0·r = 0 whatever the ratio, e.g. GRPO's) and the step adds no KL term."""
    params = params or {}
    tokens, known = mini.response_mask, False
    kept = kept_tokens(mini, settings.quadrant)
    if kept is not None:
        tokens, known = tokens & kept, True
    if spec is not None and spec.denominator_from_batch(params):
        denominator = behaviour_output(spec, params, mini).denominator_mask
        if denominator is not None:
            tokens, known = tokens & denominator, True
    if spec is not None and settings.kl_coef == 0 and spec.inert_at_zero_advantage(params):
        tokens, known = tokens & (mini.advantages != 0)[:, None], True
    return tokens.any(dim=1) if known else None


def equal_shares(carried: Tensor, world_size: int) -> Tensor:
    """`carried` [B] with the first idle rows added until both the rows with grad and the rest
    split into equal shares over `world_size` ranks (B is a multiple of it), and at least one share
    runs with grad: an idle row in the grad pass adds nothing to the gradient, and every rank makes
    the same sharded forward calls. The rows are a function of the mini-batch alone, the same on
    every rank."""
    missing = (-int(carried.sum())) % world_size or (world_size if not carried.any() else 0)
    idle = torch.nonzero(~carried).squeeze(1)[:missing]
    return carried.index_fill(0, idle, True)


def splice_rows(full: Tensor, part: Tensor, rows: Tensor) -> Tensor:
    """`full` [B, T] with rows `rows` [n] replaced by `part` [n, T] (differentiable in `part`)."""
    return full.index_copy(0, rows, part)
