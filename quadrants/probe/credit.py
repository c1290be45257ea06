"""Hindsight credit of one token: the conditional mutual information I(o_t; r | s_t), estimated from
branching rollouts, and the pointwise (signed) credit of the sampled token.

For a state s_t = (q, o_<t) and outcome r, with branches v of the next token,

    I(o_t; r | s_t) = H(r | s_t) − Σ_v π(v|s_t) H(r | s_t, o_t = v)     (nats)
                    = h(Σ_v π_v p_v) − Σ_v π_v h(p_v)     (binary r, h = binary entropy)

The general form is used throughout: p_v is a distribution over C outcome classes (C = 2 for
correct/incorrect). It is bounded by H(o_t | s_t) <= H_t (entropy is the capacity) and by
H(r | s_t) <= ln C (ln 2 for a binary reward).

Branches (`top_branches`): the smallest set of most likely tokens whose mass reaches `coverage`
(at most `max_branches` of them), plus one "rest" branch that stands for all the other tokens, with
their total mass. Merging the rest into one branch measures I(b(o_t); r | s_t) for the coarsened
token b(o_t), which is below I(o_t; r | s_t) by π_rest ·
I(o_t; r | s_t, o_t ∈ rest) <= π_rest · ln C.

Estimators, from `counts` [..., M, C] (outcome classes of the K_v continuations of each branch):
- `plugin_cmi`: p̂_v = counts_v / K_v put into the formula. Biased upward for small K (a sampled
  p̂_v spreads the branches apart even when all p_v are equal).
- `jackknife_cmi`: the stratified delete-one jackknife over continuations (Quenouille–Tukey, one
  stratum per branch). The plug-in's bias is Σ_v b_v / K_v + O(K^-2) (a smooth function of
  independent branch means); leaving one continuation of branch v out changes that term to
  b_v / (K_v − 1), so (K_v − 1)(θ̄_(v) − θ̂) estimates b_v / K_v and
      θ̂_J = θ̂ − Σ_v (K_v − 1)(θ̄_(v) − θ̂),
  with θ̄_(v) the mean of the K_v leave-one-out estimates of branch v. Those take only C distinct
  values (which class was left out), so θ̄_(v) = Σ_c (n_vc / K_v) θ̂(counts − e_vc): exact, no loop
  over continuations. It removes the O(1/K) bias and can go slightly negative.
- `bootstrap_interval`: redraw the K_v continuations of every branch from its (smoothed) outcome
  frequencies and recompute the jackknifed estimate; the spread of the resamples around the
  bootstrap world's true value is put around θ̂_J (a bias-shifted percentile interval).

Pointwise credit of the sampled token under its realised reward r_i (`pointwise_credit`):

    c_t = log p̂(r_i | s_t, o_t) − log p̂(r_i | s_t),     p̂(r | s_t) = Σ_v π_v p̂(r | s_t, v)

with add-α smoothed branch distributions p̂(c | v) = (n_vc + α) / (K_v + C α) (α = 1/2: the
Krichevsky–Trofimov estimator), so a class never seen in a branch keeps a finite log. Its
expectation over v ~ π and r ~ p̂(·|v) is the (smoothed) plug-in CMI.

Shape legend: **N** probed positions · **M** branches (top tokens, then the rest) · **C** outcome
classes · **K** continuations per branch · **V** vocabulary · **R** bootstrap resamples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


def entropy(probs: Tensor) -> Tensor:
    """−Σ p log p over the last dim, in nats, with 0 log 0 = 0. [..., C] -> [...]."""
    logs = torch.where(
        probs > 0, probs.clamp_min(torch.finfo(probs.dtype).tiny).log(), torch.zeros_like(probs)
    )
    return -(probs * logs).sum(-1)


def _normalised(mass: Tensor) -> Tensor:
    return mass / mass.sum(-1, keepdim=True).clamp_min(torch.finfo(mass.dtype).tiny)


def cmi(mass: Tensor, outcome_probs: Tensor) -> Tensor:
    """I(branch; r) = H(Σ_v π_v p_v) − Σ_v π_v H(p_v), π = `mass` renormalised to sum to 1.

    Args:
        mass: [..., M] float, branch probabilities (a branch of mass 0 contributes nothing).
        outcome_probs: [..., M, C] float, p(r = c | branch v), each row summing to 1.

    Returns:
        [...] float, nats.
    """
    weights = _normalised(mass)
    mixture = (weights[..., None] * outcome_probs).sum(-2)  # [..., C]
    return entropy(mixture) - (weights * entropy(outcome_probs)).sum(-1)


def _frequencies(counts: Tensor) -> Tensor:
    """counts / K_v per branch; a branch without continuations gets all zeros. [..., M, C]."""
    return counts / counts.sum(-1, keepdim=True).clamp_min(1)


def plugin_cmi(mass: Tensor, counts: Tensor) -> Tensor:
    """Plug-in estimate: `cmi` at p̂_v = counts_v / K_v. mass [..., M], counts
    [..., M, C] -> [...]."""
    return cmi(mass, _frequencies(counts))


def plugin_outcome_entropy(mass: Tensor, counts: Tensor) -> Tensor:
    """Plug-in H(r | s_t) = H(Σ_v π_v p̂_v). mass [..., M], counts [..., M, C] -> [...]."""
    return entropy((_normalised(mass)[..., None] * _frequencies(counts)).sum(-2))


def stratified_jackknife(
    statistic: Callable[[Tensor, Tensor], Tensor], mass: Tensor, counts: Tensor
) -> Tensor:
    """Delete-one jackknife of `statistic(mass, counts)` with one stratum per
    branch (module docstring).

    Branches with fewer than 2 continuations get no correction (a leave-one-out needs 2).

    Args:
        statistic: plug-in estimator, (mass [..., M], counts [..., M, C]) -> [...].
        mass: [..., M] float.
        counts: [..., M, C] float, outcome counts per branch.

    Returns:
        [...] float, the bias-corrected estimate.
    """
    branches, classes = counts.shape[-2:]
    full = statistic(mass, counts)  # [...]
    drop = torch.eye(branches * classes, dtype=counts.dtype, device=counts.device).view(
        -1, branches, classes
    )
    reduced = (counts[..., None, :, :] - drop).clamp_min(
        0
    )  # [..., M*C, M, C]; a class absent from v: weight 0 below
    left_out = statistic(mass[..., None, :], reduced).unflatten(
        -1, (branches, classes)
    )  # [..., M, C]
    sizes = counts.sum(-1)  # [..., M]
    loo_mean = (counts * left_out).sum(-1) / sizes.clamp_min(
        1
    )  # [..., M], mean over the K_v leave-one-outs
    correction = torch.where(
        sizes >= 2, (sizes - 1) * (loo_mean - full[..., None]), torch.zeros_like(sizes)
    )
    return full - correction.sum(-1)


def jackknife_cmi(mass: Tensor, counts: Tensor) -> Tensor:
    """Bias-corrected CMI: the stratified jackknife of `plugin_cmi`. [..., M],
    [..., M, C] -> [...]."""
    return stratified_jackknife(plugin_cmi, mass, counts)


def jackknife_outcome_entropy(mass: Tensor, counts: Tensor) -> Tensor:
    """Bias-corrected H(r | s_t): the stratified jackknife of `plugin_outcome_entropy`."""
    return stratified_jackknife(plugin_outcome_entropy, mass, counts)


def outcome_counts(outcomes: Tensor, num_classes: int) -> Tensor:
    """Class counts per branch from class indices. [..., M, K] long -> [..., M, C] float.

    Entries < 0 mark missing continuations and are not counted."""
    valid = outcomes >= 0
    hot = torch.nn.functional.one_hot(outcomes.clamp_min(0), num_classes) * valid[..., None]
    return hot.sum(-2).float()


def bootstrap_interval(
    mass: Tensor,
    outcomes: Tensor,
    *,
    num_classes: int,
    resamples: int,
    confidence: float,
    pseudocount: float,
    generator: torch.Generator | None = None,
    statistic: Callable[[Tensor, Tensor], Tensor] = jackknife_cmi,
    functional: Callable[[Tensor, Tensor], Tensor] = cmi,
) -> tuple[Tensor, Tensor]:
    """Bootstrap interval over continuations, resampled within each branch
    (bias-shifted percentile).

    Each resample draws K_v continuations of every branch from its outcome frequencies p̃_v and
    recomputes `statistic` (θ̂*). With `pseudocount` 0 that is resampling the continuations with
    replacement (p̃_v = n_v / K_v); with α > 0 the frequencies are add-α smoothed first (a smoothed
    bootstrap: a branch that saw only successes still varies, where the plain bootstrap would call
    it certain and the interval too narrow at small K). In the bootstrap world the true value is
    `functional` at p̃ (θ̃), so θ̂* − θ̃ stands for the estimator's error; with q_lo, q_hi the
    (1 ∓ confidence)/2 quantiles of θ̂* the interval is [θ̂ + (q_lo − θ̃), θ̂ + (q_hi − θ̃)], θ̂ the
    statistic on the data: the percentile interval shifted by the bootstrap's bias estimate θ̂ − θ̃.
    (The reflected "basic" interval [θ̂ − (q_hi − θ̃), θ̂ − (q_lo − θ̃)] covered less at small K in
    a synthetic check with π = [0.5, 0.3, 0.2], p = [0.9, 0.4, 0.1], 300 repetitions: 0.71 against
    0.86 at K = 8, nominal 0.9. Below K ~ 16 both under-cover.)

    Args:
        mass: [N, M] float.
        outcomes: [N, M, K] long class indices; a branch's row is all valid or all
            < 0 (no continuations).
        num_classes: C.
        resamples: R.
        confidence: e.g. 0.9.
        pseudocount: α of the smoothing (0 = the plain bootstrap).
        generator: for reproducible resamples.
        statistic: the estimator, (mass, counts) -> [N] (default the jackknifed CMI).
        functional: the quantity, (mass, outcome probs) -> [N] (default `cmi`).

    Returns:
        (low [N], high [N]).
    """
    n, m, k = outcomes.shape
    counts = outcome_counts(outcomes, num_classes)  # [N, M, C]
    present = (outcomes >= 0).any(-1)  # [N, M]
    probs = (
        smoothed_outcome_probs(counts, pseudocount=pseudocount)
        if pseudocount > 0
        else _frequencies(counts)
    )
    probs = torch.where(present[..., None], probs, torch.full_like(probs, 1.0 / num_classes))
    drawn = torch.multinomial(
        probs.reshape(n * m, num_classes), resamples * k, replacement=True, generator=generator
    )
    drawn = drawn.view(n, m, resamples, k).permute(2, 0, 1, 3)  # [R, N, M, K]
    drawn = torch.where(present[..., None], drawn, torch.full_like(drawn, -1))
    stats = statistic(mass.expand(resamples, n, m), outcome_counts(drawn, num_classes))  # [R, N]
    point, truth = (
        statistic(mass, counts),
        functional(mass, torch.where(present[..., None], probs, 0.0)),
    )  # [N]
    tail = (1.0 - confidence) / 2
    q = torch.quantile(
        stats.double(),
        torch.tensor([tail, 1.0 - tail], dtype=torch.float64, device=stats.device),
        dim=0,
    )
    q = q.to(point.dtype)  # [2, N]
    return (point + (q[0] - truth), point + (q[1] - truth))


def smoothed_outcome_probs(counts: Tensor, *, pseudocount: float) -> Tensor:
    """Add-α estimate p̂(c | v) = (n_vc + α) / (K_v + C α). [..., M, C] -> [..., M, C]."""
    classes = counts.shape[-1]
    return (counts + pseudocount) / (counts.sum(-1, keepdim=True) + classes * pseudocount)


def pointwise_credit(
    mass: Tensor, counts: Tensor, branch: Tensor, outcome: Tensor, *, pseudocount: float
) -> Tensor:
    """Signed hindsight credit c_t = log p̂(r_i | s_t, o_t) − log p̂(r_i | s_t) of the sampled token.

    Args:
        mass: [N, M] float, branch masses.
        counts: [N, M, C] float, outcome counts per branch.
        branch: [N] long, the branch holding the sampled token o_t (the rest
            branch if not a top token).
        outcome: [N] long, the class of the response's realised reward r_i.
        pseudocount: α of the add-α smoothing (> 0 keeps zero counts finite; 0.5 =
            Krichevsky–Trofimov).

    Returns:
        [N] float, nats: > 0 when choosing o_t made the realised outcome more likely.
    """
    probs = smoothed_outcome_probs(counts, pseudocount=pseudocount)  # [N, M, C]
    mixture = (_normalised(mass)[..., None] * probs).sum(-2)  # [N, C]
    rows = torch.arange(counts.shape[0], device=counts.device)
    return probs[rows, branch, outcome].log() - mixture[rows, outcome].log()


def hindsight_advantage(
    mass: Tensor, counts: Tensor, branch: Tensor, values: Tensor, *, pseudocount: float
) -> Tensor:
    """E[r | s_t, o_t] − E[r | s_t] under the add-α smoothed branch distributions: the token's own
    advantage Q(s_t, o_t) − V(s_t), the quantity a per-token policy gradient
    would ideally weight by.

    Unlike c_t it does not depend on the realised r_i: a token that lowers the success probability
    gets a negative value in correct and wrong responses alike (c_t is positive whenever the token
    makes the *realised* outcome likelier, so it is positive for a harmful
    token of a wrong response).

    Args:
        mass: [N, M]; counts: [N, M, C]; branch: [N] long (as in `pointwise_credit`).
        values: [C] float, the reward of each outcome class.

    Returns:
        [N] float, in reward units.
    """
    probs = smoothed_outcome_probs(counts, pseudocount=pseudocount)  # [N, M, C]
    mixture = (_normalised(mass)[..., None] * probs).sum(-2)  # [N, C]
    rows = torch.arange(counts.shape[0], device=counts.device)
    return ((probs[rows, branch] - mixture) * values.to(probs.dtype)).sum(-1)


@dataclass(frozen=True)
class Branches:
    """The branches of each probed position.

    Attributes:
        token_ids: [N, M - 1] long, the top tokens by probability (−1 where unused).
        mass: [N, M] float, their probabilities, then the rest branch's total mass (last column).
    """

    token_ids: Tensor
    mass: Tensor

    @property
    def top_mass(self) -> Tensor:
        """[N] float, the mass the top branches cover."""
        return self.mass[:, :-1].sum(-1)


def top_branches(probs: Tensor, *, coverage: float, max_branches: int) -> Branches:
    """The fewest most likely tokens whose mass reaches `coverage`
    (at most `max_branches`), and the rest.

    Args:
        probs: [N, V] float, π(·|s_t): the distribution the continuations are sampled from (at the
            rollout temperature, after the engine's top-p truncation).
        coverage: 1 − ε in (0, 1].
        max_branches: the most top branches per position (>= 1).

    Returns:
        Branches with M = max_branches + 1 columns of mass (unused top columns 0). The rest's mass
        is the sum of π over the tokens that are not top branches (not 1 − their mass, which
        would leave float rounding as a phantom rest where every token with mass is a top branch).
    """
    top = min(max_branches, probs.shape[-1])
    values, ids = probs.topk(top, dim=-1)  # [N, top], descending
    before = values.cumsum(-1) - values  # mass of the better tokens
    keep = (before < coverage) & (values > 0)
    keep[:, 0] = True
    mass = values * keep
    chosen = torch.zeros_like(probs, dtype=torch.bool)
    chosen.scatter_(-1, ids, keep)  # topk's ids are distinct: no write lands on another's token
    ids = torch.where(keep, ids, torch.full_like(ids, -1))
    rest = probs.masked_fill(chosen, 0.0).sum(-1)  # [N]
    pad = max_branches - top
    if pad:
        ids = torch.cat([ids, ids.new_full((ids.shape[0], pad), -1)], -1)
        mass = torch.cat([mass, mass.new_zeros(mass.shape[0], pad)], -1)
    return Branches(token_ids=ids, mass=torch.cat([mass, rest[:, None]], -1))


def rest_cut_bound(rest_mass: Tensor, num_classes: int) -> Tensor:
    """Upper bound on the credit lost when a rest branch of mass π_rest is not rolled out.

    With Z = 1[o_t ∈ rest], the chain rule gives
        I(o_t; r) = I(Z; r) + (1 − π_rest) I(o_t; r | Z = 0) + π_rest I(o_t; r | Z = 1),
    with I(Z; r) <= H(Z) = h(π_rest) and I(o_t; r | Z = 1) <= ln C. The
    top branches alone, renormalised, measure I(o_t; r | Z = 0), so
        (1 − π_rest) I(o_t; r | Z = 0) <= I(o_t; r) <= (1 − π_rest) I(o_t; r | Z = 0) + h(π_rest)
        + π_rest ln C.
    (π_rest ln C alone, without h(π_rest), understates it: at π_rest = 0.001 and C = 2, h is
    0.0079 nats against π_rest ln 2 = 0.0007.) [N] -> [N] nats.
    """
    pair = torch.stack([rest_mass, 1.0 - rest_mass], -1)
    return entropy(pair) + rest_mass * math.log(max(num_classes, 2))


def sample_rest_tokens(
    probs: Tensor, branches: Branches, count: int, *, generator: torch.Generator | None = None
) -> Tensor:
    """`count` tokens per position from π restricted to the non-top tokens (renormalised).

    Args:
        probs: [N, V] float.
        branches: from `top_branches` on the same probs.
        count: K.

    Returns:
        [N, K] long; −1 on positions whose rest has no mass.
    """
    used = branches.token_ids
    top = torch.zeros_like(probs, dtype=torch.bool)
    top.scatter_(
        -1, used.clamp_min(0), used >= 0
    )  # [N, V]; an unused column (−1) writes False on token 0...
    top |= (used == 0).any(-1, keepdim=True) & (
        torch.arange(probs.shape[-1], device=probs.device) == 0
    )  # ...so restore it
    rest = probs.masked_fill(top, 0.0)
    total = rest.sum(-1, keepdim=True)  # [N, 1]
    has_rest = total.squeeze(-1) > 0
    safe = torch.where(has_rest[:, None], rest, torch.ones_like(rest))
    drawn = torch.multinomial(safe, count, replacement=True, generator=generator)  # [N, K]
    return torch.where(has_rest[:, None], drawn, torch.full_like(drawn, -1))


def sampled_branch(token: Tensor, branches: Branches) -> Tensor:
    """[N] long: the branch column holding `token` ([N] long), the rest column if
    it is not a top token."""
    hit = branches.token_ids == token[:, None]  # [N, M - 1]
    rest = torch.full_like(token, branches.mass.shape[-1] - 1)
    return torch.where(hit.any(-1), hit.long().argmax(-1), rest)


def correlation_interval(
    x: Tensor, y: Tensor, *, confidence: float, weights: Tensor | None = None
) -> tuple[float, float, float]:
    """Pearson correlation of two [N] samples with its Fisher-z interval (normal approximation).

    With `weights` ([N], >= 0; the probe's design weights) it is the weighted correlation
    Σ w (x − x̄_w)(y − ȳ_w) / sqrt(Σ w (x − x̄_w)² · Σ w (y − ȳ_w)²), x̄_w the weighted mean, which
    estimates the correlation over the population the weighted sample stands for; the interval then
    uses Kish's effective sample size n_eff = (Σ w)² / Σ w² in place of N.

    Returns:
        (r, low, high); all NaN when the (effective) N < 4 or either sample is constant.
    """
    x, y = x.double(), y.double()
    w = torch.ones_like(x) if weights is None else weights.double()
    if x.numel() == 0 or float(w.sum()) <= 0:
        return (math.nan, math.nan, math.nan)
    n = float(w.sum() ** 2 / (w**2).sum())
    xc, yc = x - (w * x).sum() / w.sum(), y - (w * y).sum() / w.sum()
    sxx, syy = float((w * xc * xc).sum()), float((w * yc * yc).sum())
    if n < 4 or sxx <= 0 or syy <= 0:
        return (math.nan, math.nan, math.nan)
    r = float((w * xc * yc).sum()) / math.sqrt(sxx * syy)
    r = max(-1.0, min(1.0, r))
    z = math.atanh(max(-0.999999, min(0.999999, r)))
    half = float(
        torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + confidence / 2))
    ) / math.sqrt(n - 3)
    return (r, math.tanh(z - half), math.tanh(z + half))


def cluster_bootstrap_mean(
    values: Tensor,
    weights: Tensor,
    clusters: Tensor,
    *,
    resamples: int,
    confidence: float,
    generator: torch.Generator | None = None,
    floor: float | None = None,
) -> tuple[float, float, float]:
    """Weighted mean of `values` with a percentile interval from a bootstrap over clusters.

    Probed positions are not independent: several come from one prompt (and its G responses), so a
    prompt that happens to be easy or hard moves all of them. Each resample draws the U clusters
    present with replacement (U draws) and recomputes Σ n_u(i) w_i v_i / Σ n_u(i) w_i, n_u the times
    the position's cluster was drawn; each position keeps its design weight w_i (the stratified draw
    of positions, quadrants.probe.positions). Resamples that draw no position with weight are
    dropped.

    Args:
        values, weights: [N] float; clusters: [N] long (the prompt of each position).
        resamples: R; confidence: e.g. 0.9.
        floor: clip the interval (not the mean) at this value (0 for a non-negative quantity).

    Returns:
        (mean, low, high); low = high = NaN with fewer than 2 clusters, all NaN without values.
    """
    values, weights = values.double(), weights.double()
    if values.numel() == 0 or float(weights.sum()) <= 0:
        return (math.nan, math.nan, math.nan)
    mean = float((weights * values).sum() / weights.sum())
    ids, member = torch.unique(clusters, return_inverse=True)  # member: [N] in 0..U-1
    u = ids.numel()
    if u < 2:
        return (mean, math.nan, math.nan)
    draws = torch.randint(0, u, (resamples, u), generator=generator)  # [R, U]
    times = torch.zeros(resamples, u, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(resamples, u, dtype=torch.float64)
    )  # [R, U]
    w = times[:, member] * weights  # [R, N]
    total = w.sum(-1)
    stats = (w * values).sum(-1)[total > 0] / total[total > 0]
    if stats.numel() < 2:
        return (mean, math.nan, math.nan)
    tail = (1.0 - confidence) / 2
    low, high = torch.quantile(stats, torch.tensor([tail, 1.0 - tail], dtype=torch.float64))
    low, high = float(low), float(high)
    if floor is not None:
        low, high = max(low, floor), max(high, floor)
    return (mean, low, high)
