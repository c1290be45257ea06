"""Which logged metrics read the current policy (ObjectiveOutput.policy_metrics, the KL's kl_ref),
checked on every registered objective by perturbing the policy output alone; and their reduction
over the rows that carry gradient (objectives/loss.py `compute_loss` with `rows`), by hand.

The classification is the objective's own (it puts each metric in `metrics` or `policy_metrics`);
these tests hold it to the definition: a metric whose value moves when only the policy's log-probs
or entropies move is a policy metric, and one that never moves is not. A new objective is checked
here as soon as it is registered.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from quadrants.objectives.batch import (
    PolicyMetric,
    PolicyOutput,
    make_token_batch,
    reduce_policy_metrics,
    token_mean,
    token_share,
)
from quadrants.objectives.loss import LOSS_FIGURES, LossSettings, compute_loss, loss_terms
from quadrants.objectives.registry import known_objectives, resolve_objective

from .helpers import GRPO_RATIOS, close, grpo_batch, logp_for_ratios

# Parameters under which each metric can move (the defaults, unless a metric is dead there), and
# the settings that move a metric from one kind to the other (an entropy read from the current
# policy instead of the behaviour one; the full entropy estimate; the dual clip)
VARIANTS: dict[str, list[dict]] = {
    "archer": [
        {"clip_ratio_c": 3.0},
        {"entropy_source": "behaviour", "clip_ratio_c": 3.0},
        {"scope": "mini_batch", "clip_ratio_c": 3.0},
    ],
    "forking": [{}, {"entropy_source": "current", "scope": "mini_batch"}],
    "adaptive_entropy": [{}, {"entropy_estimate": "full"}],
    # a window that holds candidates, and more draws than candidates: the selection follows them
    "clip_cov": [{"fraction": 0.9, "cov_lb": 0.0, "cov_ub": 100.0}],
    "grpo": [{}, {"clip_ratio_c": 3.0}],
    "kl_cov": [{"fraction": 0.1}],
}
CASES = [(name, params) for name in known_objectives() for params in VARIANTS.get(name, [{}])]


def perturbable_batch():
    """16 rows in 8 groups of 2, 6 response tokens each, some padded: rewards give positive,
    negative and zero advantages (groups 1 and 5 are constant), the behaviour log-probs and
    entropies are drawn, a reference below the old log-probs for the KL."""
    gen = torch.Generator().manual_seed(3)
    rows, prompt, length = 16, 2, 6
    lengths = torch.tensor([6, 4, 6, 5, 3, 6, 6, 2, 5, 6, 4, 6, 6, 3, 6, 5])
    mask = torch.arange(length)[None] < lengths[:, None]
    old = -torch.rand(rows, length, generator=gen) * 3.0 - 0.05
    entropy = torch.rand(rows, length, generator=gen) * 2.0
    batch = make_token_batch(
        sequences=torch.randint(3, 60, (rows, prompt + length), generator=gen),
        attention_mask=torch.cat([torch.ones(rows, prompt, dtype=torch.bool), mask], dim=1),
        response_mask=mask,
        old_logp=old * mask,
        entropy=entropy * mask,
        rewards=torch.tensor([1.0, 0.0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1]),
        group_ids=torch.arange(rows) // 2,
        ref_logp=(old - 0.2) * mask,
    )
    assert bool((batch.advantages == 0).any()) and bool((batch.advantages < 0).any())
    return batch


def policies(batch, with_entropy: bool) -> list[PolicyOutput]:
    """The behaviour values themselves (π = π_old), then log-probs shifted by N(0, σ²) noise with
    σ = 0.5, 1.5 and 3 (ratios inside and far outside every clip range) and entropies scaled by
    U(0.2, 3): the batch is the same in each."""
    gen = torch.Generator().manual_seed(4)
    out = [PolicyOutput(batch.old_logp, batch.entropy if with_entropy else None)]
    for sigma in (0.5, 1.5, 3.0):
        noise = sigma * torch.randn(batch.old_logp.shape, generator=gen)
        scale = 0.2 + 2.8 * torch.rand(batch.old_logp.shape, generator=gen)
        mask = batch.response_mask
        out.append(
            PolicyOutput(
                batch.old_logp + noise * mask, batch.entropy * scale if with_entropy else None
            )
        )
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}{p or ''}" for n, p in CASES])
def test_policy_metrics_are_those_that_read_the_policy(name, params):
    """The objective's metrics and the loss's (with a KL, kl_coef 0.1: kl_ref) at four policy
    outputs on one batch: every batch metric is bit for bit the same at all four, and every policy
    metric takes at least two values among them. The loss's own figures (LOSS_FIGURES: kept_frac,
    denominator_tokens) describe the whole mini-batch's loss and are never policy metrics, and
    neither is a controller's input (adaptive entropy's entropy_estimate, which under
    entropy_estimate=full reads the policy but steers the method over every row)."""
    batch = perturbable_batch()
    spec, resolved = resolve_objective(name, params)
    settings = LossSettings(kl_coef=0.1)
    seen_batch: list[dict[str, torch.Tensor]] = []
    seen_policy: list[dict[str, torch.Tensor]] = []
    for policy in policies(batch, spec.wants_entropy(resolved)):
        draws = torch.Generator().manual_seed(0)  # Clip-Cov's draw, the same at every policy
        _, _, metrics, policy_metrics = loss_terms(
            spec, resolved, batch, policy, settings, generator=draws
        )
        assert not set(LOSS_FIGURES) & set(policy_metrics)
        seen_batch.append(metrics)
        seen_policy.append(reduce_policy_metrics(policy_metrics))
    assert "kl_ref" in seen_policy[0]
    reads = spec.controller.reads if spec.controller is not None else ()
    for key in seen_batch[0]:
        if key in LOSS_FIGURES or key in reads:  # a controller's input: over every row
            continue
        values = [m[key] for m in seen_batch]
        assert all(torch.equal(v, values[0]) for v in values), f"{key} reads the policy: {values}"
    for key in seen_policy[0]:
        values = [float(m[key]) for m in seen_policy]
        assert len(set(values)) > 1, f"{key} does not read the policy: {values}"


def test_policy_metric_over_rows_by_hand():
    """A 3 x 2 metric, the third row's second token outside `over`:
    values [[1, 3], [5, 7], [2, 100]], over [[1, 1], [1, 1], [1, 0]].
    every row: (1 + 3 + 5 + 7 + 2) / 5 = 3.6; rows {0, 2}: (1 + 3 + 2) / 3 = 2; row {1}: 6;
    no row: NaN (nothing to measure; the step's mean leaves it out). A metric whose `over` holds
    no token of the rows: 0 (the empty-mean convention). A per-row metric ([3] values 4, 6, 8, all counted): rows {0, 2}
    (4 + 8) / 2 = 6. The median (quantile 0.5) of rows {0, 2}'s tokens 1, 2, 3 is 2; of every
    token 1, 2, 3, 5, 7 is 3."""
    metric = PolicyMetric(
        torch.tensor([[1.0, 3.0], [5.0, 7.0], [2.0, 100.0]]),
        torch.tensor([[True, True], [True, True], [True, False]]),
    )
    close(metric.over_rows(None), 3.6)
    close(metric.over_rows(torch.tensor([True, False, True])), 2.0)
    close(metric.over_rows(torch.tensor([False, True, False])), 6.0)
    assert math.isnan(float(metric.over_rows(torch.zeros(3, dtype=torch.bool))))
    only_third = PolicyMetric(metric.values, torch.tensor([[False, False]] * 2 + [[True, False]]))
    close(only_third.over_rows(torch.tensor([True, True, False])), 0.0)
    per_row = PolicyMetric(torch.tensor([4.0, 6.0, 8.0]), torch.ones(3, dtype=torch.bool))
    close(per_row.over_rows(torch.tensor([True, False, True])), 6.0)
    median = PolicyMetric(metric.values, metric.over, quantile=0.5)
    close(median.over_rows(torch.tensor([True, False, True])), 2.0)
    close(median.over_rows(None), 3.0)


def test_token_share_and_mean_equal_the_batch_helpers():
    """The PolicyMetric forms of `fraction` and `masked_mean`, over every row, give their values
    to the bit: 2 of the 3 counted tokens -> 2/3; (0.5 + 1.5 + 4) / 3 = 2."""
    from quadrants.objectives.batch import fraction
    from quadrants.ops.aggregation import masked_mean

    of = torch.tensor([[True, True, False], [True, False, False]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    values = torch.tensor([[0.5, 1.5, 9.0], [4.0, 9.0, 9.0]])
    assert torch.equal(token_share(mask, of).over_rows(None), fraction(mask, of))
    assert torch.equal(token_mean(values, of).over_rows(None), masked_mean(values, of))
    close(token_share(mask, of).over_rows(None), 2 / 3)
    close(token_mean(values, of).over_rows(None), 2.0)


def test_compute_loss_reads_the_policy_over_the_rows_with_gradient_by_hand():
    """GRPO on helpers.grpo_batch at GRPO_RATIOS [[1.5, 0.5, 1.0], [1.1, 0.7, pad]], advantages
    [+2, -2], clip 0.2, with a KL (k1, coefficient 1) to a reference 0.1 below the old log-probs:
    k1 = log π − log π_ref = log r + 0.1 per token.
    - every row: clip_frac 2/5 ((0,0) high, (1,1) low), ratio_mean 4.8 / 5 = 0.96,
      kl_ref (log 1.5 + log 0.5 + log 1 + log 1.1 + log 0.7) / 5 + 0.1
    - rows = [True, False] (row 1 carries no gradient): clip_frac 1/3, clip_frac_low 0,
      clip_frac_high 1/3, ratio_mean (1.5 + 0.5 + 1) / 3 = 1, kl_ref (log 1.5 + log 0.5) / 3 + 0.1
    - rows = [False, True]: clip_frac 1/2, clip_frac_low 1/2, ratio_mean (1.1 + 0.7) / 2 = 0.9
    The loss, kept_frac (5/5) and denominator_tokens (5) are the same whatever `rows`."""
    tb = grpo_batch()
    tb = dataclasses.replace(tb, ref_logp=(tb.old_logp - 0.1) * tb.response_mask)
    spec, params = resolve_objective("grpo", {})
    settings = LossSettings(kl_coef=1.0, kl_estimator="k1")
    policy = PolicyOutput(logp_for_ratios(tb, GRPO_RATIOS))
    whole_loss, whole = compute_loss(spec, params, tb, policy, settings)
    first_loss, first = compute_loss(
        spec, params, tb, policy, settings, rows=torch.tensor([True, False])
    )
    _, second = compute_loss(spec, params, tb, policy, settings, rows=torch.tensor([False, True]))
    log = math.log
    close(whole["clip_frac"], 2 / 5)
    close(whole["ratio_mean"], 0.96)
    close(whole["kl_ref"], (log(1.5) + log(0.5) + log(1.1) + log(0.7)) / 5 + 0.1, atol=1e-6)
    close(first["clip_frac"], 1 / 3)
    close(first["clip_frac_low"], 0.0)
    close(first["clip_frac_high"], 1 / 3)
    close(first["ratio_mean"], 1.0)
    close(first["kl_ref"], (log(1.5) + log(0.5)) / 3 + 0.1, atol=1e-6)
    close(second["clip_frac"], 1 / 2)
    close(second["clip_frac_low"], 1 / 2)
    close(second["ratio_mean"], 0.9)
    assert torch.equal(first_loss, whole_loss)
    for key in LOSS_FIGURES:
        assert torch.equal(first[key], whole[key]) and torch.equal(second[key], whole[key])
    close(whole["denominator_tokens"], 5.0)
