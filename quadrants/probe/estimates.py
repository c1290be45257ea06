"""Per-position estimates (ops.credit on the graded branches) and each objective's token weight.

An objective's token weight is what its loss does to the log-prob of that token: the effective
advantage w_t = −∂ loss_t / ∂ log π(o_t) at the behaviour policy (ratio 1, where every clipped
surrogate is in its unclipped region). It is read off the registered objective function itself by
autograd, so GRPO's broadcast Â, HAPO's Â^CA, EntroAdv's Â + bonus and Forking's masked Â are the
objectives' own code, not re-implementations (ratio-1 ties in max(unclipped, clipped) split the
gradient in halves that add up to the same w_t).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from quadrants.objectives.batch import PolicyOutput, TokenBatch
from quadrants.objectives.registry import resolve_objective
from quadrants.probe.branching import BranchOutcomes, SampledBatch
from quadrants.probe.credit import (
    bootstrap_interval,
    entropy,
    hindsight_advantage,
    jackknife_cmi,
    jackknife_outcome_entropy,
    outcome_counts,
    plugin_cmi,
    plugin_outcome_entropy,
    pointwise_credit,
    rest_cut_bound,
    sampled_branch,
)
from quadrants.probe.positions import Positions

OBJECTIVES = ("grpo", "hapo", "entroadv", "forking")


def objective_token_weights(
    batch: TokenBatch, names: tuple[str, ...] = OBJECTIVES
) -> dict[str, Tensor]:
    """w_t = −∂ loss_t / ∂ log π(o_t) at ratio 1 of each objective at its default
    parameters. name -> [B, T]."""
    weights = {}
    for name in names:
        spec, params = resolve_objective(name, {})
        logp = batch.old_logp.detach().clone().requires_grad_(True)
        current = batch.entropy if spec.wants_entropy(params) else None
        with torch.enable_grad():
            out = spec.fn(batch, PolicyOutput(logp=logp, entropy=current), **params)
            (grad,) = torch.autograd.grad(out.per_token_loss.sum(), logp, allow_unused=True)
        grad = torch.zeros_like(logp) if grad is None else grad
        weights[name] = (-grad * batch.response_mask).detach()
    return weights


@dataclass(frozen=True)
class PositionCredit:
    """Everything measured at the N probed positions (each [N]; float64 unless said).

    cmi: jackknifed Î (nats); cmi_plugin: plug-in Î; cmi_low / cmi_high: bootstrap interval of cmi,
    clipped at 0 (the CMI is non-negative; the point estimate is left unclipped, so means stay
    unbiased); outcome_entropy: jackknifed Ĥ(r | s_t); outcome_entropy_plugin; entropy: H_t (the
    trainer's: full vocabulary, before top-p); sampling_entropy: H of the truncated π the branches
    are drawn from; branch_entropy: H of the branch masses (the coarsened token's entropy);
    top_mass: mass of the top branches; rest_mass: mass of the rest branch rolled out (0 if not);
    rest_cut: π_rest of a rest branch that was cut (`probe.min_rest_mass`; 0 by default and
    wherever the rest was rolled out); rest_bound: the credit that cut can have hidden,
    h(π_rest) + π_rest ln C (probe.credit.rest_cut_bound; 0 where nothing was cut); branches:
    branches rolled out (long); credit: pointwise c_t; reward: r_i of the response;
    polarity: sign of the response's GRPO advantage (+1, −1, 0 in a constant group); advantage: the
    hindsight token advantage E[r|s_t,o_t] − E[r|s_t]; weights: objective name
    -> its token weight w_t.
    """

    cmi: Tensor
    cmi_plugin: Tensor
    cmi_low: Tensor
    cmi_high: Tensor
    outcome_entropy: Tensor
    outcome_entropy_plugin: Tensor
    entropy: Tensor
    sampling_entropy: Tensor
    branch_entropy: Tensor
    top_mass: Tensor
    rest_mass: Tensor
    rest_cut: Tensor
    rest_bound: Tensor
    branches: Tensor
    credit: Tensor
    reward: Tensor
    polarity: Tensor
    advantage: Tensor
    weights: dict[str, Tensor]


def estimate_credit(
    graded: BranchOutcomes,
    positions: Positions,
    sampled: SampledBatch,
    *,
    resamples: int,
    confidence: float,
    pseudocount: float,
    generator: torch.Generator,
) -> PositionCredit:
    """The estimators of ops.credit at every probed position, and the objectives' weights there."""
    classes = graded.classes.numel()
    mass = graded.branches.mass.double()  # [N, M]
    counts = outcome_counts(graded.outcomes, classes).double()  # [N, M, C]
    rows, cols = positions.sequence, positions.token
    tokens = sampled.rollouts.response_ids[rows, cols]
    reward = sampled.rewards[rows].double()
    low, high = bootstrap_interval(
        mass,
        graded.outcomes,
        num_classes=classes,
        resamples=resamples,
        confidence=confidence,
        pseudocount=pseudocount,
        generator=generator,
    )
    branch = sampled_branch(tokens, graded.branches)
    credit = pointwise_credit(
        mass,
        counts,
        branch,
        torch.searchsorted(graded.classes, sampled.rewards[rows]),
        pseudocount=pseudocount,
    )
    advantage = hindsight_advantage(
        mass, counts, branch, graded.classes.double(), pseudocount=pseudocount
    )
    weights = {
        name: w[rows, cols].double() for name, w in objective_token_weights(sampled.batch).items()
    }
    cmi_j, cmi_p = jackknife_cmi(mass, counts), plugin_cmi(mass, counts)
    h_j, h_p = jackknife_outcome_entropy(mass, counts), plugin_outcome_entropy(mass, counts)
    branch_entropy = entropy(mass / mass.sum(-1, keepdim=True))
    check_estimator_bounds(cmi_j, cmi_p, h_j, h_p, branch_entropy, low, high)
    # a cut rest (probe.min_rest_mass > 0): the top branches measure I(o_t; r | o_t not in rest);
    # (1 − π_rest) times that is a lower bound of I(o_t; r | s_t), rest_bound the most it can miss
    cut = graded.cut_rest_mass.double()
    keep = 1.0 - cut
    return PositionCredit(
        cmi=cmi_j * keep,
        cmi_plugin=cmi_p * keep,
        cmi_low=(low * keep).clamp_min(0),
        cmi_high=(high * keep).clamp_min(0),
        outcome_entropy=h_j,
        outcome_entropy_plugin=h_p,
        entropy=sampled.batch.entropy[rows, cols].double(),
        sampling_entropy=graded.sampling_entropy.double(),
        branch_entropy=branch_entropy,
        top_mass=mass[:, :-1].sum(-1),
        rest_mass=mass[:, -1],
        rest_cut=cut,
        rest_bound=torch.where(cut > 0, rest_cut_bound(cut, classes), torch.zeros_like(cut)),
        branches=(graded.outcomes[:, :, 0] >= 0).sum(-1),
        credit=credit,
        reward=reward,
        polarity=torch.sign(sampled.batch.advantages[rows]).double(),
        advantage=advantage,
        weights=weights,
    )


def check_estimator_bounds(
    cmi_j: Tensor,
    cmi_p: Tensor,
    h_j: Tensor,
    h_p: Tensor,
    branch_entropy: Tensor,
    low: Tensor,
    high: Tensor,
    *,
    tolerance: float = 1e-9,
) -> None:
    """Raise if an estimate breaks an inequality it satisfies by construction: a failure is an
    estimator bug, never a finding.

    The plug-in is the mutual information of a proper joint distribution (branch masses x outcome
    frequencies), so Î_plugin <= min(H(branch masses), Ĥ_plugin(r | s_t)); the jackknife is linear
    in its statistic, so Î_J = Ĥ_J(r | s_t) − (the jackknife of Σ_v π_v h(p̂_v), >= 0) <= Ĥ_J(r|s_t);
    an interval's ends are ordered. Whether I(o_t; r | s_t) <= H_t holds is a theorem, not something
    the data can show; what the data show is how tight it is (report.py: Î/H_t, Î/cap)."""
    checks = (
        ("plug-in Î <= H(branch masses)", cmi_p <= branch_entropy + tolerance),
        ("plug-in Î <= plug-in Ĥ(r|s_t)", cmi_p <= h_p + tolerance),
        ("jackknifed Î <= jackknifed Ĥ(r|s_t)", cmi_j <= h_j + tolerance),
        ("interval low <= high", low <= high + tolerance),
    )
    for name, ok in checks:
        if not bool(ok.all()):
            bad = torch.nonzero(~ok).squeeze(-1).tolist()
            raise RuntimeError(f"probe estimator bug: {name} fails at positions {bad}")
