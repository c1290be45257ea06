"""The data an objective may read: TokenBatch (built once per step), PolicyOutput; and what it
returns: ObjectiveOutput, whose metrics that read the policy are PolicyMetrics.

Shape legend: **B** sequences (prompts x G) · **G** rollouts per prompt · **P** prompt tokens ·
**T** response tokens · **L** = P + T · **N** response tokens in the whole rollout batch.

Layout: prompts are left-padded to P, responses right-padded to T, so response token t of every
sequence sits at position P + t of `sequences`.

Statistics that must see the whole rollout batch (advantages, group entropy mean/std, the quadrant
split, the sorted batch entropies used by batch quantiles) are computed before the batch is cut into
mini-batches and travel with it, so a mini-batch never recomputes a group
statistic on part of a group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from quadrants.ops.advantages import constant_reward_groups, group_advantages
from quadrants.ops.aggregation import masked_mean
from quadrants.ops.groups import group_token_mean_std
from quadrants.ops.quadrants import (
    QuadrantMasks,
    QuadrantSettings,
    masked_quantile,
    split_quadrants,
)


@dataclass(frozen=True)
class TokenBatch:
    """Everything an objective may read about one rollout batch (or a mini-batch of it).

    Attributes:
        sequences: [B, L] long, prompt + response token ids.
        attention_mask: [B, L] bool.
        response_mask: [B, T] bool, True on generated tokens (EOS included, padding excluded).
        old_logp: [B, T] float, behaviour log-probs recomputed by the trainer before the update.
        entropy: [B, T] float, behaviour-policy entropy (nats, full vocabulary,
            rollout temperature).
        rewards: [B] float.
        correct: [B] float, the graded correctness (1 = correct) without any shaping term (the
            overlong penalty); the rewards themselves when there is none.
        advantages: [B] float, GRPO group advantages.
        group_ids: [B] long.
        constant_group_mask: [B] bool, True when the sequence's whole group has equal rewards
            (computed on the full rollout batch; DAPO's dynamic sampling drops these groups).
        quadrants: the PHR/PLR/NHR/NLR split of the full rollout batch (sliced with it).
        group_entropy_mean: [B] float, mean token entropy over the sequence's group.
        group_entropy_std: [B] float, population std of the same.
        rollout_entropy_sorted: [N] float, every response-token entropy of the full rollout batch,
            ascending (not sliced: shared by all mini-batches, for rollout-batch quantiles).
        mixed_entropy_sorted: [M] float, the same over the groups with reward variance only (not
            `constant_group_mask`): the tokens DAPO's dynamic sampling trains on, whose batch never
            held the constant groups (not sliced either).
        ref_logp: [B, T] float or None, frozen reference-policy log-probs (only when a KL is on).
        num_rollout_tokens: response tokens in the full rollout batch (N), for global normalisers.
        adapter_residual: [B, T] float or None, ||h_adapted − h_base||_2 per token under LoRA
            (models/token_signals.py); None without adapters, where the residual is 0.
        attention_entropy: [B, T] float or None, the behaviour policy's attention entropy per token
            (nats; only with `quadrant.axis=attention_entropy`, whose split it is).
        control_mask: [B, T] bool or None, the matched random control's draw for this step
            (`quadrant=random`, ops/random_control.py; drawn on the full rollout batch, sliced
            with it); None for every other arm.
        control_weight: [B, T] float or None, its Horvitz–Thompson weights 1/π
            (`quadrant.reweight=ht`); None = unweighted.
    """

    sequences: Tensor
    attention_mask: Tensor
    response_mask: Tensor
    old_logp: Tensor
    entropy: Tensor
    rewards: Tensor
    correct: Tensor
    advantages: Tensor
    group_ids: Tensor
    constant_group_mask: Tensor
    quadrants: QuadrantMasks
    group_entropy_mean: Tensor
    group_entropy_std: Tensor
    rollout_entropy_sorted: Tensor
    mixed_entropy_sorted: Tensor
    ref_logp: Tensor | None = None
    num_rollout_tokens: int = 0
    adapter_residual: Tensor | None = None
    attention_entropy: Tensor | None = None
    control_mask: Tensor | None = None
    control_weight: Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.sequences.shape[0])

    @property
    def response_length(self) -> int:
        return int(self.response_mask.shape[1])

    def select(self, index: Tensor) -> TokenBatch:
        """The sub-batch of sequences `index` ([b] long); rollout-level fields are shared."""
        sliced = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ROLLOUT_LEVEL or value is None:
                continue
            if isinstance(value, QuadrantMasks):
                sliced[f.name] = QuadrantMasks(
                    **{
                        q: getattr(value, q)[index]
                        for q in ("PHR", "PLR", "NHR", "NLR", "threshold")
                    }
                )
            else:
                sliced[f.name] = value[index]
        return replace(self, **sliced)


_ROLLOUT_LEVEL = ("rollout_entropy_sorted", "mixed_entropy_sorted", "num_rollout_tokens")


@dataclass(frozen=True)
class PolicyOutput:
    """The current policy's forward pass over a (mini-)batch's response tokens.

    Attributes:
        logp: [B, T] float, log-probs of the sampled tokens (with grad).
        entropy: [B, T] float with grad, or None when the objective did not ask for it.
    """

    logp: Tensor
    entropy: Tensor | None = None


@dataclass(frozen=True)
class PolicyMetric:
    """A logged metric that reads the current policy (its log-probs or entropy), kept per token so
    that the loss layer reduces it over the rows that carry gradient (objectives/loss.py
    `compute_loss`): a token mean, or with `quantile` a quantile, of `values` over `over`.

    A metric is of this kind exactly when its value moves with the policy output alone (the
    batch held fixed); tests/unit/objectives/test_policy_metrics.py checks that of every
    registered objective. (The share a fixed-share selection takes, a quantile's or a top-k's,
    does not move: its parameter sets it, so it is a batch metric.) Rows without gradient
    (train/gradless_rows.py) add nothing to the update, and the update that skips their forward
    (train/update.py `backward_by_rows`) never measures them, so such a metric describes the tokens
    the update trains, in every path.

    Attributes:
        values: [B, T] float (or [B]: one value per row), detached.
        over: bool of the same shape: the tokens (rows) the metric averages over.
        quantile: None = the mean; q in [0, 1] = the q-quantile (ops/quadrants.py
            `masked_quantile`, 0 when empty).
    """

    values: Tensor
    over: Tensor
    quantile: float | None = None

    def over_rows(self, rows: Tensor | None) -> Tensor:
        """[] float32, detached: the metric over the tokens of `over` in `rows` ([B] bool; None =
        every row). 0 when no token of `over` is left (the empty-mean convention); NaN when
        `rows` holds no row at all: a mini-batch without a row that carries gradient has no
        trained token to describe, and the step's mean leaves it out (train/telemetry.py
        `mean_metrics`) rather than averaging in a 0 (a ratio_mean of 0 is no ratio)."""
        over = self.over.bool()
        values = self.values.detach()
        if rows is not None:
            over = over & rows.view(-1, *[1] * (over.dim() - 1))
        if self.quantile is not None:
            value = masked_quantile(values, over, self.quantile).detach().float()
        else:
            value = masked_mean(values, over).detach().float()
        if rows is None:
            return value
        # on the device, no host sync per metric in the update
        return torch.where(rows.any(), value, torch.full_like(value, float("nan")))


def token_share(mask: Tensor, of: Tensor) -> PolicyMetric:
    """The fraction of `of` tokens in `mask` as a PolicyMetric (the value `fraction` gives)."""
    return PolicyMetric((mask & of).float(), of)


def token_mean(values: Tensor, of: Tensor) -> PolicyMetric:
    """The mean of `values` over `of` as a PolicyMetric (the value `masked_mean` gives)."""
    return PolicyMetric(values.detach(), of)


def reduce_policy_metrics(
    metrics: Mapping[str, PolicyMetric], rows: Tensor | None = None
) -> dict[str, Tensor]:
    """Each PolicyMetric's value over `rows` ([B] bool; None = every row)."""
    return {name: metric.over_rows(rows) for name, metric in metrics.items()}


@dataclass(frozen=True)
class ObjectiveOutput:
    """What a token objective returns.

    Attributes:
        per_token_loss: [B, T] float, zero on tokens that carry no gradient; aggregated by the step
            with the configured loss aggregation (so quadrant isolation and any normaliser compose).
        metrics: name -> detached scalar tensor (fractions, means) of the metrics that read the
            batch only (not the policy output): logged over the whole mini-batch.
        policy_metrics: name -> PolicyMetric, the metrics that read the policy output: the loss
            layer reduces them over the rows that carry gradient. A name is in one of the two.
        denominator_mask: [B, T] bool or None. Tokens this objective wants counted in the normaliser
            (None = every response token). DAPO's dynamic sampling drops constant-reward groups
            here; forking with `denominator="selected_tokens"` renormalises over its selection.
        kl_weight: [B, T] float or None. Per-token weight on the step's KL to the reference policy
            (`objective.kl_coef`); None = 1 everywhere. Archer weights the KL of high- and
            low-entropy tokens apart.
    """

    per_token_loss: Tensor
    metrics: dict[str, Tensor]
    denominator_mask: Tensor | None = None
    kl_weight: Tensor | None = None
    policy_metrics: dict[str, PolicyMetric] = field(default_factory=dict)


def token_advantages(batch: TokenBatch) -> Tensor:
    """The sequence advantage broadcast to tokens: [B] -> [B, T] float."""
    return batch.advantages[:, None].expand_as(batch.old_logp).float()


def fraction(mask: Tensor, of: Tensor) -> Tensor:
    """Detached fraction of `of` tokens that are in `mask` (0 when `of` is empty)."""
    return ((mask & of).sum() / of.sum().clamp_min(1)).detach().float()


PAPER_DEFAULT = QuadrantSettings()  # group_mean threshold, every token kept


def make_token_batch(
    *,
    sequences: Tensor,
    attention_mask: Tensor,
    response_mask: Tensor,
    old_logp: Tensor,
    entropy: Tensor,
    rewards: Tensor,
    group_ids: Tensor,
    normalize_std: bool = True,
    advantage_eps: float = 1e-6,
    quadrant: QuadrantSettings = PAPER_DEFAULT,
    ref_logp: Tensor | None = None,
    constant_by: Tensor | None = None,
    attention_entropy: Tensor | None = None,
    adapter_residual: Tensor | None = None,
) -> TokenBatch:
    """Build the step's TokenBatch: advantages, group statistics and the quadrant split, once.

    Args:
        sequences, attention_mask: [B, L]; response_mask, old_logp, entropy: [B, T];
        rewards: [B] float; group_ids: [B] long; ref_logp: [B, T] or None.
        normalize_std, advantage_eps: GRPO advantage options (ops.advantages).
        quadrant: the run's QuadrantSettings; its threshold rule and value split the tokens.
        constant_by: [B] float or None, the graded correctness when the rewards carry a shaping
            term (the overlong penalty), else None (the rewards are the correctness). DAPO's dynamic
            sampling judges a group constant by it, and W-REINFORCE's weights follow it.
        attention_entropy: [B, T] or None. Given, the quadrant split is by it
            (`quadrant.axis=attention_entropy`) instead of the token entropy; everything else that
            reads entropy (HAPO's group statistics, the batch quantiles) keeps the token entropy.
        adapter_residual: [B, T] or None, stored for ARCA and the telemetry.
    """
    response_mask = response_mask.bool()
    rewards = rewards.float()
    advantages = group_advantages(
        rewards, group_ids, normalize_std=normalize_std, eps=advantage_eps
    )
    axis = entropy if attention_entropy is None else attention_entropy * response_mask
    masks = split_quadrants(
        axis,
        advantages,
        response_mask,
        group_ids,
        rule=quadrant.threshold,
        value=quadrant.threshold_value,
    )
    mean, std, _ = group_token_mean_std(entropy.float(), response_mask, group_ids)
    ordered, _ = torch.sort(entropy[response_mask].float())
    correct = rewards if constant_by is None else constant_by.float()
    constant = constant_reward_groups(correct, group_ids)
    mixed, _ = torch.sort(entropy[response_mask & ~constant[:, None]].float())
    return TokenBatch(
        sequences=sequences,
        attention_mask=attention_mask.bool(),
        response_mask=response_mask,
        old_logp=old_logp.float(),
        entropy=entropy.float(),
        rewards=rewards,
        correct=correct,
        advantages=advantages,
        group_ids=group_ids,
        constant_group_mask=constant,
        quadrants=masks,
        group_entropy_mean=mean,
        group_entropy_std=std,
        rollout_entropy_sorted=ordered,
        mixed_entropy_sorted=mixed,
        ref_logp=None if ref_logp is None else ref_logp.float(),
        num_rollout_tokens=int(response_mask.sum()),
        adapter_residual=None
        if adapter_residual is None
        else adapter_residual.float() * response_mask,
        attention_entropy=None
        if attention_entropy is None
        else attention_entropy.float() * response_mask,
    )
