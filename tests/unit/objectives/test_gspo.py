"""GSPO: one length-normalised ratio s_i per response, clipped as a whole; per-token GSPO-token form
(value s_i, gradient s_i ∇logπ_t), aggregated seq-mean-token-mean; and verl's `gspo` on the same
tensors."""

import math

import pytest
import torch

from quadrants.objectives.batch import token_advantages
from quadrants.objectives.registry import resolve_objective

from .helpers import batch, close, grad_of, random_batch, run
from .upstream import VerlActorConfig, verl_losses

# One group: rewards [2, -2] -> A = [+2, -2]; seq 0 has 3 tokens, seq 1 has 2 (+1 padding).
# log ratios: seq 0 [0.3, -0.1, 0.1] -> mean 0.1 -> s0 = e^0.1 = 1.1051709
#             seq 1 [-0.2, 0.0, pad 5] -> mean -0.1 -> s1 = e^-0.1 = 0.9048374 (the pad never counts)
# Token (0, 0) alone has r = e^0.3 = 1.35, which a token-level clip at 1.2 would clip; GSPO does not.
LOG_RATIOS = [[0.3, -0.1, 0.1], [-0.2, 0.0, 5.0]]
S0, S1 = math.exp(0.1), math.exp(-0.1)


def _batch():
    tb = batch(
        entropy=[[1.0, 0.2, 0.4], [0.9, 0.1, 0.0]],
        rewards=[2.0, -2.0],
        group_ids=[0, 0],
        response_mask=[[1, 1, 1], [1, 1, 0]],
        old_logp=[[-1.0, -2.0, -0.5], [-0.7, -1.2, -3.0]],
    )
    logp = (tb.old_logp + torch.tensor(LOG_RATIOS)).detach().requires_grad_(True)
    return tb, logp


def test_sequence_ratio_inside_the_clip_range_by_hand():
    # clip 0.2/0.2: s0 = 1.105 and s1 = 0.905 lie inside [0.8, 1.2] -> unclipped
    # per-token: seq 0 -A s0 = -2.2103418 on 3 tokens; seq 1 -A s1 = +1.8096748 on 2 tokens
    # seq-mean-token-mean: (-2.2103418 + 1.8096748) / 2 = -0.2003335
    # gradient: seq 0 -A s0 / 3 / 2 = -0.3683903; seq 1 -A s1 / 2 / 2 = +0.4524187
    tb, logp = _batch()
    loss, metrics = run(
        "gspo", tb, logp, loss_agg="seq-mean-token-mean", clip_low=0.2, clip_high=0.2
    )
    close(loss, (-2 * S0 + 2 * S1) / 2)
    close(grad_of(loss, logp), [[-2 * S0 / 6] * 3, [2 * S1 / 4] * 2 + [0.0]])
    close(metrics["clip_frac"], 0.0)
    close(metrics["seq_ratio_mean"], (3 * S0 + 2 * S1) / 5)


def test_paper_clip_range_clips_both_responses_by_hand():
    # defaults 3e-4 / 4e-4: s0 = 1.105 > 1.0004 with A > 0 -> -2 * 1.0004 = -2.0008 (clipped)
    # s1 = 0.905 < 0.9997 with A < 0 -> max(1.8097, 2 * 0.9997 = 1.9994) = 1.9994 (clipped)
    # loss (-2.0008 + 1.9994) / 2 = -0.0007; no gradient anywhere; every token clipped
    tb, logp = _batch()
    loss, metrics = run("gspo", tb, logp, loss_agg="seq-mean-token-mean")
    close(loss, -0.0007)
    close(grad_of(loss, logp), torch.zeros(2, 3))
    close(metrics["clip_frac"], 1.0)


def test_validation_names_the_key():
    with pytest.raises(ValueError, match=r"^max_log_ratio=0.0 is out of range"):
        resolve_objective("gspo", {"max_log_ratio": 0.0})
    with pytest.raises(ValueError, match=r"^clip_low=1.0 is out of range"):
        resolve_objective("gspo", {"clip_low": 1.0})


@pytest.mark.parametrize("clip", [(3e-4, 4e-4), (0.2, 0.2), (0.02, 0.05)])
def test_matches_verls_gspo_on_the_same_tensors(clip):
    # verl/trainer/ppo/core_algos.py compute_policy_loss_gspo (commit in docs/science.md): loss and
    # gradient on seeded ragged batches (measured: bit-identical, largest difference 0)
    gspo = verl_losses("compute_policy_loss_gspo")["compute_policy_loss_gspo"]
    worst = 0.0
    for seed in range(4):
        tb, logp, _ = random_batch(seed, length=9)
        logp_v = logp.detach().clone().requires_grad_(True)
        ours, metrics = run(
            "gspo",
            tb,
            logp,
            loss_agg="seq-mean-token-mean",
            clip_low=clip[0],
            clip_high=clip[1],
        )
        theirs, verl_metrics = gspo(
            tb.old_logp,
            logp_v,
            token_advantages(tb),
            tb.response_mask.float(),
            config=VerlActorConfig(*clip),
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_v)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-7)
        close(metrics["clip_frac"], verl_metrics["actor/pg_clipfrac"], atol=1e-6)
        if clip[0] >= 0.02:  # wide enough that some responses are unclipped and carry gradient
            assert g_ours.abs().sum() > 0
        worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
    print(f"gspo vs verl, clip {clip}: largest difference {worst:.3g}")
