"""CISPO: loss_t = −sg(clip(r_t, 1 − ε_low, 1 + ε_high)) · Â · logπ_t; every token keeps a gradient
−r̂ Â; and verl's `cispo` on the same tensors."""

import pytest
import torch

from quadrants.objectives.batch import token_advantages
from quadrants.objectives.registry import resolve_objective

from .helpers import GRPO_RATIOS, close, grad_of, grpo_batch, logp_for_ratios, random_batch, run
from .upstream import VerlActorConfig, verl_losses

# grpo_batch: A = [+2, -2]; old_logp [[-1, -0.5, -2], [-0.3, -1.5, pad]]; ratios
# [[1.5, 0.5, 1.0], [1.1, 0.7, pad]] -> logp = old + log r:
#   [[-0.5945349, -1.1931472, -2.0], [-0.2046898, -1.8566749, pad]]
# defaults (no lower bound, ε_high 0.2): r̂ = [[1.2, 0.5, 1.0], [1.1, 0.7]]
#   per-token -r̂ A logp: 1.4268837, 1.1931472, 4.0, -0.4503176, -2.5993449
#   token-mean over 5: 3.5703684 / 5 = 0.7140737
#   gradient -r̂ A / 5: [[-0.48, -0.2, -0.4], [0.44, 0.28]]
# GRPO gives (0, 0) (clipped high) and (1, 1) (clipped low) no gradient; CISPO keeps both.


def test_cispo_by_hand():
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, metrics = run("cispo", tb, logp)
    close(loss, 3.5703684 / 5)
    close(grad_of(loss, logp), [[-0.48, -0.2, -0.4], [0.44, 0.28, 0.0]])
    close(metrics["clip_frac"], 1 / 5)
    close(metrics["is_weight_mean"], (1.2 + 0.5 + 1.0 + 1.1 + 0.7) / 5)


def test_cispo_with_a_lower_bound_by_hand():
    # clip_low 0.2: r̂ (0, 1) 0.5 -> 0.8 and (1, 1) 0.7 -> 0.8
    # per-token: 1.4268837, 1.9090355, 4.0, -0.4503176, -2.9706799 -> 3.9149217 / 5 = 0.7829843
    # gradient -r̂ A / 5: [[-0.48, -0.32, -0.4], [0.44, 0.32]]
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    loss, metrics = run("cispo", tb, logp, clip_low=0.2)
    close(loss, 3.9149217 / 5)
    close(grad_of(loss, logp), [[-0.48, -0.32, -0.4], [0.44, 0.32, 0.0]])
    close(metrics["clip_frac"], 3 / 5)


def test_validation_names_the_key():
    with pytest.raises(ValueError, match=r"^clip_high=-0.1 is out of range"):
        resolve_objective("cispo", {"clip_high": -0.1})
    with pytest.raises(ValueError, match=r"^clip_low=-1.0 is out of range"):
        resolve_objective("cispo", {"clip_low": -1.0})


@pytest.mark.parametrize("clip", [(None, 0.2), (0.2, 0.28)])
def test_matches_verls_cispo_on_the_same_tensors(clip):
    # verl/trainer/ppo/core_algos.py compute_policy_loss_cispo; verl has no "no lower bound", its
    # example passes clip_ratio_low=10 (1 - 10 < 0 < every ratio), which is our null
    cispo = verl_losses("compute_policy_loss_cispo")["compute_policy_loss_cispo"]
    worst = 0.0
    for seed in range(4):
        tb, logp, _ = random_batch(seed, length=9)
        logp_v = logp.detach().clone().requires_grad_(True)
        ours, metrics = run("cispo", tb, logp, clip_low=clip[0], clip_high=clip[1])
        theirs, verl_metrics = cispo(
            tb.old_logp,
            logp_v,
            token_advantages(tb),
            tb.response_mask.float(),
            config=VerlActorConfig(10.0 if clip[0] is None else clip[0], clip[1]),
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_v)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-7)
        assert g_ours.abs().sum() > 0
        close(metrics["clip_frac"], verl_metrics["actor/pg_clipfrac"], atol=1e-6)
        worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
    print(f"cispo vs verl, clip {clip}: largest difference {worst:.3g}")
