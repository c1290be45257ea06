"""What a probe reports: `probe/*` metrics, the per-token table `credit.csv`, and three figures.

Metrics (means are design-weighted, plan.py, so they estimate all probed-population tokens; `Q` is
PHR, PLR, NHR, NLR or `all`; intervals are normal intervals of the weighted mean at `confidence`):
- `probe/Q/cmi_mean` (+ `_low`, `_high`): mean jackknifed Î, nats.
- `probe/Q/cmi_over_entropy_mean`: mean Î / H_t over positions with H_t >= 0.01 nats (how much of
  the entropy bound is used); `probe/Q/cmi_over_cap_mean`: mean Î / min(H_t, Ĥ(r|s_t)) (of the
  tighter bound) over positions where that cap >= 0.01.
- `probe/Q/above_ln_outcomes_share`: share of tokens with H_t > ln C (ln 2 for a binary reward):
  there the reward, not the entropy, is the a-priori cap; `probe/Q/outcome_cap_share`: share with
  Ĥ(r|s_t) < H_t (the measured outcome entropy is the binding cap).
- `probe/Q/credit_mean`: mean pointwise credit c_t; `probe/Q/positions`: positions probed.
- `probe/corr/<objective>` (+ `_low`, `_high`): Pearson correlation, over the probed positions,
  between c_t and the objective's token weight w_t, with its Fisher-z interval. c_t is positive
  whenever o_t made the *realised* outcome likelier, so in a wrong response a harmful token has
  c_t > 0 while every objective pushes it down; hence also `probe/corr_signed/<objective>`, with
  polarity x c_t (polarity = sign of the response's advantage), and
  `probe/corr_advantage/<objective>`, with the hindsight token advantage E[r|s_t,o_t] − E[r|s_t]
  (ops.credit.hindsight_advantage).
- `probe/high_entropy_cmi_share`: share of the total estimated Î held by PHR + NHR tokens, next to
  `probe/high_entropy_token_share`, their share of the tokens.
- `probe/bound_violations`: positions whose interval lies entirely above
  min(H_t, Ĥ(r|s_t)) (0 expected).
- `probe/rollouts`, `probe/tokens`, `probe/seconds`, `probe/rollouts_per_s`.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from quadrants.ops.credit import correlation_interval
from quadrants.probe.estimates import PositionCredit
from quadrants.probe.plan import QUADRANT_ORDER, Positions

MIN_CAP = 0.01  # nats; below this a ratio to the bound is 0/0 noise


def probe_key(name: str) -> str:
    return f"probe/{name}"


def _weighted_mean(values: Tensor, weights: Tensor, z: float) -> tuple[float, float, float]:
    if values.numel() == 0:
        return (math.nan, math.nan, math.nan)
    w = weights / weights.sum()
    mean = float((w * values).sum())
    if values.numel() < 2:
        return (mean, math.nan, math.nan)
    effective = float(weights.sum() ** 2 / (weights**2).sum())
    spread = float((w * (values - mean) ** 2).sum()) * effective / max(effective - 1, 1e-9)
    half = z * math.sqrt(spread / effective)
    return (mean, mean - half, mean + half)


def probe_metrics(
    credit: PositionCredit, positions: Positions, *, num_classes: int, confidence: float
) -> dict[str, float]:
    """The `probe/*` metrics of one probe (module docstring)."""
    z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + confidence / 2)))
    ln_c = math.log(max(num_classes, 2))
    cap = torch.minimum(credit.entropy, credit.outcome_entropy)
    metrics: dict[str, float] = {}
    groups = {name: positions.quadrant == i for i, name in enumerate(QUADRANT_ORDER)}
    groups["all"] = torch.ones_like(positions.quadrant, dtype=torch.bool)
    for name, member in groups.items():
        weight = positions.weight[member]
        mean, low, high = _weighted_mean(credit.cmi[member], weight, z)
        metrics[probe_key(f"{name}/cmi_mean")] = mean
        metrics[probe_key(f"{name}/cmi_mean_low")] = low
        metrics[probe_key(f"{name}/cmi_mean_high")] = high
        defined = member & (credit.entropy >= MIN_CAP)
        metrics[probe_key(f"{name}/cmi_over_entropy_mean")] = _weighted_mean(
            credit.cmi[defined] / credit.entropy[defined], positions.weight[defined], z
        )[0]
        defined = member & (cap >= MIN_CAP)
        metrics[probe_key(f"{name}/cmi_over_cap_mean")] = _weighted_mean(
            credit.cmi[defined] / cap[defined], positions.weight[defined], z
        )[0]
        metrics[probe_key(f"{name}/above_ln_outcomes_share")] = _weighted_mean(
            (credit.entropy[member] > ln_c).double(), weight, z
        )[0]
        metrics[probe_key(f"{name}/outcome_cap_share")] = _weighted_mean(
            (credit.outcome_entropy[member] < credit.entropy[member]).double(), weight, z
        )[0]
        metrics[probe_key(f"{name}/credit_mean")] = _weighted_mean(
            credit.credit[member], weight, z
        )[0]
        metrics[probe_key(f"{name}/positions")] = float(member.sum())
    targets = {
        "corr": credit.credit,
        "corr_signed": credit.polarity * credit.credit,
        "corr_advantage": credit.advantage,
    }
    for objective, weight in credit.weights.items():
        for prefix, target in targets.items():
            r, low, high = correlation_interval(target, weight, confidence=confidence)
            metrics[probe_key(f"{prefix}/{objective}")] = r
            metrics[probe_key(f"{prefix}/{objective}_low")] = low
            metrics[probe_key(f"{prefix}/{objective}_high")] = high
    high_mask = (positions.quadrant == QUADRANT_ORDER.index("PHR")) | (
        positions.quadrant == QUADRANT_ORDER.index("NHR")
    )
    total = float((positions.weight * credit.cmi.clamp_min(0)).sum())
    metrics[probe_key("high_entropy_cmi_share")] = (
        float((positions.weight * credit.cmi.clamp_min(0))[high_mask].sum()) / total
        if total > 0
        else math.nan
    )
    metrics[probe_key("high_entropy_token_share")] = float(
        positions.weight[high_mask].sum() / positions.weight.sum()
    )
    metrics[probe_key("bound_violations")] = float((credit.cmi_low > cap + 1e-9).sum())
    return metrics


def write_credit_csv(
    path: Path, credit: PositionCredit, positions: Positions, token_ids: Tensor, tokenizer: Any
) -> Path:
    """One row per probed position: where it is, its entropies, Î with its
    interval, c_t and every w_t."""
    columns = {
        "sequence": positions.sequence,
        "token": positions.token,
        "token_id": token_ids,
        "quadrant": [QUADRANT_ORDER[int(q)] for q in positions.quadrant],
        "weight": positions.weight,
        "entropy": credit.entropy,
        "branch_entropy": credit.branch_entropy,
        "outcome_entropy": credit.outcome_entropy,
        "outcome_entropy_plugin": credit.outcome_entropy_plugin,
        "top_mass": credit.top_mass,
        "rest_mass": credit.rest_mass,
        "branches": credit.branches,
        "cmi": credit.cmi,
        "cmi_plugin": credit.cmi_plugin,
        "cmi_low": credit.cmi_low,
        "cmi_high": credit.cmi_high,
        "reward": credit.reward,
        "polarity": credit.polarity,
        "credit": credit.credit,
        "hindsight_advantage": credit.advantage,
        **{f"w_{name}": w for name, w in credit.weights.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["token_text", *columns])
        for i in range(len(positions)):
            text = tokenizer.decode([int(token_ids[i])])
            row = [columns[c][i] for c in columns]
            writer.writerow([text, *(v if isinstance(v, str) else _number(v) for v in row)])
    return path


def _number(value: Any) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else f"{value:.6g}"


def write_figures(
    directory: Path, credit: PositionCredit, positions: Positions, *, num_classes: int
) -> list[Path]:
    """I vs H_t with the bound lines, credit by quadrant, c_t vs each objective's token weight."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    colours = {"PHR": "tab:blue", "PLR": "tab:cyan", "NHR": "tab:red", "NLR": "tab:orange"}
    names = [QUADRANT_ORDER[int(q)] for q in positions.quadrant]
    ln_c = math.log(max(num_classes, 2))
    paths = []

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    top = max(float(credit.entropy.max()), ln_c) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=1, label="y = H_t")
    ax.axhline(ln_c, color="gray", ls=":", lw=1, label=f"y = ln {max(num_classes, 2)}")
    for q in QUADRANT_ORDER:
        member = torch.tensor([n == q for n in names])
        if member.any():
            x, y = credit.entropy[member], credit.cmi[member]
            err = torch.stack([y - credit.cmi_low[member], credit.cmi_high[member] - y]).clamp_min(
                0
            )
            ax.errorbar(
                x, y, yerr=err, fmt="o", ms=4, color=colours[q], alpha=0.8, label=q, elinewidth=0.8
            )
    ax.set_xlabel("token entropy H_t (nats)")
    ax.set_ylabel("hindsight credit Î(o_t; r | s_t) (nats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(directory / "cmi_vs_entropy.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    present = [q for q in QUADRANT_ORDER if q in names]
    for ax, values, label in (
        (axes[0], credit.cmi, "Î (nats)"),
        (axes[1], credit.credit, "pointwise credit c_t (nats)"),
    ):
        data = [values[torch.tensor([n == q for n in names])].numpy() for q in present]
        ax.boxplot(data, tick_labels=present)
        for i, d in enumerate(data):
            ax.scatter([i + 1] * len(d), d, s=8, alpha=0.5, color=colours[present[i]])
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_ylabel(label)
    fig.suptitle("credit by quadrant")
    fig.tight_layout()
    paths.append(directory / "credit_by_quadrant.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(
        1, len(credit.weights), figsize=(3.3 * len(credit.weights), 3.3), squeeze=False
    )
    for ax, (name, weight) in zip(axes[0], credit.weights.items()):
        r, _, _ = correlation_interval(credit.credit, weight, confidence=0.9)
        signed, _, _ = correlation_interval(credit.polarity * credit.credit, weight, confidence=0.9)
        ax.scatter(weight, credit.credit, s=10, c=[colours[n] for n in names], alpha=0.7)
        ax.axhline(0, color="gray", lw=0.8)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_title(f"{name}: r = {r:.2f}, with polarity x c_t {signed:.2f}", fontsize=8)
        ax.set_xlabel("token weight w_t")
    axes[0][0].set_ylabel("pointwise credit c_t")
    fig.tight_layout()
    paths.append(directory / "credit_vs_token_weight.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def format_summary(metrics: dict[str, float]) -> str:
    """A small table: one line per quadrant, then the correlations."""
    lines = [
        f"{'quadrant':<9}{'n':>4}{'mean I':>9}{'interval':>19}{'I/H_t':>8}"
        f"{'I/cap':>8}{'H>lnC':>7}{'c_t':>8}"
    ]
    for q in (*QUADRANT_ORDER, "all"):

        def m(stat: str, quadrant: str = q) -> float:
            return metrics.get(probe_key(f"{quadrant}/{stat}"), math.nan)

        lines.append(
            f"{q:<9}{int(m('positions')):>4}{m('cmi_mean'):>9.4f}   [{m('cmi_mean_low'):>6.4f}, "
            f"{m('cmi_mean_high'):>6.4f}]{m('cmi_over_entropy_mean'):>8.3f}"
            f"{m('cmi_over_cap_mean'):>8.3f}{m('above_ln_outcomes_share'):>7.2f}"
            f"{m('credit_mean'):>8.3f}"
        )
    for prefix, label in (
        ("corr", "c_t"),
        ("corr_signed", "polarity*c_t"),
        ("corr_advantage", "E[r|o_t]-E[r]"),
    ):
        corr = [
            f"{name} {metrics[k]:.2f} [{metrics[k + '_low']:.2f}, {metrics[k + '_high']:.2f}]"
            for k in sorted(metrics)
            if k.startswith(f"probe/{prefix}/") and not k.endswith(("_low", "_high"))
            for name in [k.rsplit("/", 1)[1]]
        ]
        lines.append(f"corr({label}, w_t): " + "; ".join(corr))
    return "\n".join(lines)
