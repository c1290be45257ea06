"""The objectives' shared surrogate block (quadrants/objectives/common.py): `ppo_token_loss` and
`clipped_terms`, called directly (the objectives' own tests cover them through the registry)."""

import torch

from quadrants.objectives.batch import PolicyOutput, reduce_policy_metrics, token_advantages
from quadrants.objectives.common import clipped_terms, ppo_token_loss

from .helpers import GRPO_RATIOS, batch, close, grpo_batch, logp_for_ratios

CLIP = {"clip_low": 0.2, "clip_high": 0.2, "clip_ratio_c": None}
SURROGATE_KEYS = ["clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean"]


def test_ppo_token_loss_by_hand():
    # helpers.GRPO_RATIOS' table: per-token losses [[-2.4, -1, -2], [2.2, 1.6, pad]], the pad 0;
    # (0,0) clipped high, (1,1) clipped low -> clip_frac 2/5, low 1/5, high 1/5;
    # ratio_mean over the 5 response tokens (1.5 + 0.5 + 1 + 1.1 + 0.7) / 5 = 0.96
    tb = grpo_batch()
    out = ppo_token_loss(
        tb, PolicyOutput(logp=logp_for_ratios(tb, GRPO_RATIOS)), token_advantages(tb), **CLIP
    )
    close(out.per_token_loss, [[-2.4, -1.0, -2.0], [2.2, 1.6, 0.0]], atol=1e-5)
    # they read the policy: policy metrics, none of the batch (no dual clip, no dynamic sampling)
    assert out.metrics == {} and list(out.policy_metrics) == SURROGATE_KEYS
    metrics = reduce_policy_metrics(out.policy_metrics)
    close(metrics["clip_frac"], 2 / 5)
    close(metrics["clip_frac_low"], 1 / 5)
    close(metrics["clip_frac_high"], 1 / 5)
    close(metrics["ratio_mean"], 0.96)
    assert out.denominator_mask is None and out.kl_weight is None


def test_ppo_token_loss_dual_clip_dynamic_sampling_and_metric_order():
    # group 0 = grpo_batch, group 1 has equal rewards [1, 1] (A = 0, constant): dynamic sampling
    # keeps 2 of 4 sequences and 5 of 9 response tokens. Dual clip c = 3 on (1,0) A = -2 r = 1.1:
    # min(2.2, 2 * 3 = 6) = 2.2, nothing capped -> dual_clip_frac 0 / 9.
    tb = batch(
        entropy=[[1.0, 0.0, 0.5], [1.0, 0.0, 9.0], [0.3, 0.6, 9.0], [0.4, 0.2, 9.0]],
        rewards=[2.0, -2.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        response_mask=[[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0]],
        old_logp=[[-1.0, -0.5, -2.0], [-0.3, -1.5, 0.0], [-1.0, -1.0, 0.0], [-2.0, -0.1, 0.0]],
    )
    logp = logp_for_ratios(tb, GRPO_RATIOS + [[1.3, 0.6, 1.0], [0.9, 1.05, 1.0]])
    extra = {"own": torch.tensor(7.0)}
    out = ppo_token_loss(
        tb,
        PolicyOutput(logp=logp),
        token_advantages(tb),
        clip_low=0.2,
        clip_high=0.2,
        clip_ratio_c=3.0,
        dynamic_sampling=True,
        metrics=extra,
    )
    # the surrogate's metrics read the policy; the objective's own, then dynamic sampling's, the
    # batch only
    assert list(out.policy_metrics) == [*SURROGATE_KEYS, "dual_clip_frac"]
    assert list(out.metrics) == ["own", "kept_group_frac", "dynamic_sampling_token_frac"]
    close(out.policy_metrics["dual_clip_frac"].over_rows(None), 0.0)
    close(out.metrics["kept_group_frac"], 0.5)
    close(out.metrics["dynamic_sampling_token_frac"], 5 / 9)
    expected_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert torch.equal(out.denominator_mask, expected_mask)
    # group 1's advantage is 0: its loss is 0 whatever its ratios
    close(out.per_token_loss[2:], torch.zeros(2, 3))


def test_clipped_terms_is_ppo_token_loss_before_masking():
    """The same numbers to the bit: `ppo_token_loss` is `clipped_terms` times the response mask."""
    tb = grpo_batch()
    policy = PolicyOutput(logp=logp_for_ratios(tb, GRPO_RATIOS))
    terms, metrics = clipped_terms(tb, policy, token_advantages(tb), **CLIP)
    out = ppo_token_loss(tb, policy, token_advantages(tb), **CLIP)
    assert torch.equal(out.per_token_loss, terms.per_token_loss * tb.response_mask)
    assert metrics.keys() == out.policy_metrics.keys()
    assert all(
        torch.equal(metrics[k].over_rows(None), out.policy_metrics[k].over_rows(None))
        for k in metrics
    )
