"""What a probe reports: `probe/*` metrics, the per-token table `credit.csv`, every position's
branches `branches.csv`, and three figures.

Metrics (means are design-weighted, positions.py, so they estimate all probed-population tokens;
`Q` is PHR, PLR, NHR, NLR or `all`):
- `probe/Q/cmi_mean` (+ `_low`, `_high`): mean jackknifed Î, nats, with a percentile interval at
  `confidence` from a cluster bootstrap over the probe's prompts (credit.cluster_bootstrap_mean:
  positions of one prompt move together), clipped at 0 (the CMI is non-negative).
- `probe/Q/cmi_over_entropy_mean`: mean Î / H_t over positions with H_t >= 0.01 nats (how tight the
  entropy bound is); `probe/Q/cmi_over_cap_mean`: mean Î / min(H_t, Ĥ(r|s_t)) over positions where
  that cap >= 0.01.
- `probe/Q/credit_share`, `probe/Q/entropy_share`, `probe/Q/token_share`: Q's share of the total
  estimated credit Σ w Î⁺, of the total entropy Σ w H_t and of the tokens Σ w. Credit share is to
  be read against entropy share: entropy is the capacity, so a quadrant with most of the entropy
  holds most of the credit by construction unless its tokens use less of their capacity.
- `probe/Q/above_ln_outcomes_share`: share of tokens with H_t > ln C (ln 2 for a binary reward):
  there the reward, not the entropy, is the a-priori cap; `probe/Q/outcome_cap_share`: share with
  Ĥ(r|s_t) < H_t (the measured outcome entropy is the binding cap).
- `probe/Q/credit_mean`: mean pointwise credit c_t; `probe/Q/positions`: positions probed;
  `probe/Q/single_branch`: positions with one branch only (the truncated π has a single token
  there, so I = 0 exactly); `probe/Q/rest_cut` and `probe/Q/rest_bound_mean`: positions whose rest
  branch was cut (`probe.min_rest_mass` > 0 only) and the mean bound on the credit that hid.
- `probe/corr/<objective>` (+ `_low`, `_high`): design-weighted Pearson correlation, over the probed
  positions, between c_t and the objective's token weight w_t, with its Fisher-z interval (Kish's
  effective n). c_t is positive whenever o_t made the *realised* outcome likelier, so in a wrong
  response a harmful token has c_t > 0 while every objective pushes it down; hence also
  `probe/corr_signed/<objective>`, with polarity x c_t (polarity = sign of the response's
  advantage), and `probe/corr_advantage/<objective>`, with the hindsight token advantage
  E[r|s_t,o_t] − E[r|s_t] (probe.credit.hindsight_advantage). The same three within the high-entropy
  (PHR + NHR) tokens only: `probe/corr_high/...`, `probe/corr_signed_high/...`,
  `probe/corr_advantage_high/...` (a mask that zeroes low-entropy tokens wins the all-token
  correlation just by zeroing tokens whose credit is structurally small; within the high-entropy
  tokens it cannot).
- `probe/high_entropy_cmi_share`, `probe/high_entropy_entropy_share`,
  `probe/high_entropy_token_share`: the same shares for PHR + NHR together.
- `probe/rollouts`, `probe/tokens`, `probe/seconds`, `probe/rollouts_per_s`.

The inequalities the estimator satisfies by construction (Î <= Ĥ(r|s_t), Î_plugin <= H(branches))
are asserted in estimates.check_estimator_bounds, not reported: they cannot come out otherwise.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from quadrants.probe.credit import cluster_bootstrap_mean, correlation_interval, outcome_counts
from quadrants.probe.estimates import PositionCredit
from quadrants.probe.positions import QUADRANT_ORDER, Positions

MIN_CAP = 0.01  # nats; below this a ratio to the bound is 0/0 noise
HIGH_ENTROPY = ("PHR", "NHR")


def probe_key(name: str) -> str:
    return f"probe/{name}"


def _weighted_mean(values: Tensor, weights: Tensor) -> float:
    if values.numel() == 0 or float(weights.sum()) <= 0:
        return math.nan
    return float((weights * values).sum() / weights.sum())


def _share(values: Tensor, member: Tensor, weights: Tensor) -> float:
    total = float((weights * values).sum())
    return float((weights * values)[member].sum()) / total if total > 0 else math.nan


def probe_metrics(
    credit: PositionCredit,
    positions: Positions,
    prompts: Tensor,
    *,
    num_classes: int,
    confidence: float,
    resamples: int,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """The `probe/*` metrics of one probe (module docstring). `prompts` [N] long: the prompt of
    each position (the clusters of the bootstrap)."""
    ln_c = math.log(max(num_classes, 2))
    cap = torch.minimum(credit.entropy, credit.outcome_entropy)
    weight = positions.weight.double()
    positive = credit.cmi.clamp_min(0)
    metrics: dict[str, float] = {}
    groups = {name: positions.quadrant == i for i, name in enumerate(QUADRANT_ORDER)}
    groups["all"] = torch.ones_like(positions.quadrant, dtype=torch.bool)
    for name, member in groups.items():
        w = weight[member]
        mean, low, high = cluster_bootstrap_mean(
            credit.cmi[member],
            w,
            prompts[member],
            resamples=resamples,
            confidence=confidence,
            generator=generator,
            floor=0.0,
        )
        metrics[probe_key(f"{name}/cmi_mean")] = mean
        metrics[probe_key(f"{name}/cmi_mean_low")] = low
        metrics[probe_key(f"{name}/cmi_mean_high")] = high
        defined = member & (credit.entropy >= MIN_CAP)
        metrics[probe_key(f"{name}/cmi_over_entropy_mean")] = _weighted_mean(
            credit.cmi[defined] / credit.entropy[defined], weight[defined]
        )
        defined = member & (cap >= MIN_CAP)
        metrics[probe_key(f"{name}/cmi_over_cap_mean")] = _weighted_mean(
            credit.cmi[defined] / cap[defined], weight[defined]
        )
        metrics[probe_key(f"{name}/credit_share")] = _share(positive, member, weight)
        metrics[probe_key(f"{name}/entropy_share")] = _share(credit.entropy, member, weight)
        metrics[probe_key(f"{name}/token_share")] = _share(torch.ones_like(weight), member, weight)
        metrics[probe_key(f"{name}/above_ln_outcomes_share")] = _weighted_mean(
            (credit.entropy[member] > ln_c).double(), w
        )
        metrics[probe_key(f"{name}/outcome_cap_share")] = _weighted_mean(
            (credit.outcome_entropy[member] < credit.entropy[member]).double(), w
        )
        metrics[probe_key(f"{name}/credit_mean")] = _weighted_mean(credit.credit[member], w)
        metrics[probe_key(f"{name}/positions")] = float(member.sum())
        metrics[probe_key(f"{name}/single_branch")] = float((credit.branches[member] <= 1).sum())
        metrics[probe_key(f"{name}/rest_cut")] = float((credit.rest_cut[member] > 0).sum())
        metrics[probe_key(f"{name}/rest_bound_mean")] = _weighted_mean(credit.rest_bound[member], w)
    high_mask = torch.zeros_like(groups["all"])
    for name in HIGH_ENTROPY:
        high_mask |= groups[name]
    targets = {
        "corr": credit.credit,
        "corr_signed": credit.polarity * credit.credit,
        "corr_advantage": credit.advantage,
    }
    for objective, token_weight in credit.weights.items():
        for prefix, target in targets.items():
            for suffix, member in (("", groups["all"]), ("_high", high_mask)):
                r, low, high = correlation_interval(
                    target[member],
                    token_weight[member],
                    confidence=confidence,
                    weights=weight[member],
                )
                key = probe_key(f"{prefix}{suffix}/{objective}")
                metrics[key], metrics[key + "_low"], metrics[key + "_high"] = r, low, high
    metrics[probe_key("high_entropy_cmi_share")] = _share(positive, high_mask, weight)
    metrics[probe_key("high_entropy_entropy_share")] = _share(credit.entropy, high_mask, weight)
    metrics[probe_key("high_entropy_token_share")] = _share(
        torch.ones_like(weight), high_mask, weight
    )
    return metrics


def write_credit_csv(
    path: Path,
    credit: PositionCredit,
    positions: Positions,
    token_ids: Tensor,
    tokenizer: Any,
    prompts: Tensor,
) -> Path:
    """One row per probed position: where it is, its entropies, Î with its
    interval, c_t and every w_t. `position` is the row's key into branches.csv."""
    columns = {
        "position": torch.arange(len(positions)),
        "prompt": prompts,
        "sequence": positions.sequence,
        "token": positions.token,
        "token_id": token_ids,
        "quadrant": [QUADRANT_ORDER[int(q)] for q in positions.quadrant],
        "weight": positions.weight,
        "entropy": credit.entropy,
        "sampling_entropy": credit.sampling_entropy,
        "branch_entropy": credit.branch_entropy,
        "outcome_entropy": credit.outcome_entropy,
        "outcome_entropy_plugin": credit.outcome_entropy_plugin,
        "top_mass": credit.top_mass,
        "rest_mass": credit.rest_mass,
        "rest_cut": credit.rest_cut,
        "rest_bound": credit.rest_bound,
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


def write_branches_csv(
    path: Path,
    mass: Tensor,
    outcomes: Tensor,
    forced: Tensor,
    classes: Tensor,
    tokenizer: Any,
) -> Path:
    """One row per branch rolled out at every position: `position` (credit.csv's key), `branch`
    (0.. top tokens by probability, the last column is the rest), `kind` (top | rest), `token_id`
    (−1 for the rest), `token_text`, `mass` (π of the branch as the estimate used it, full
    precision), `n_r=<value>` (how many of its continuations got each reward value) and, for the
    rest, `rest_tokens` (the K token ids its continuations started from). probe.credit.jackknife_cmi
    on one position's (mass, counts) is credit.csv's `cmi` (times 1 − rest_cut): docs/probe.md."""
    num_classes = classes.numel()
    counts = outcome_counts(outcomes, num_classes).long()  # [N, M, C]
    last = mass.shape[1] - 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "position",
                "branch",
                "kind",
                "token_id",
                "token_text",
                "mass",
                *(f"n_r={_number(v)}" for v in classes.tolist()),
                "rest_tokens",
            ]
        )
        for n in range(mass.shape[0]):
            for m in range(mass.shape[1]):
                if not bool((outcomes[n, m] >= 0).any()):
                    continue
                rest = m == last
                token = -1 if rest else int(forced[n, m, 0])
                writer.writerow(
                    [
                        n,
                        m,
                        "rest" if rest else "top",
                        token,
                        "" if rest else tokenizer.decode([token]),
                        repr(float(mass[n, m])),
                        *counts[n, m].tolist(),
                        " ".join(str(t) for t in forced[n, m].tolist()) if rest else "",
                    ]
                )
    return path


def read_branches(path: Path, position: int) -> tuple[Tensor, Tensor]:
    """(mass [M], counts [M, C]) float64 of one position of a branches.csv, as the estimate saw
    them: `jackknife_cmi(mass, counts)` re-derives its Î."""
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        count_columns = [c for c in reader.fieldnames or [] if c.startswith("n_r=")]
        rows = [r for r in reader if int(r["position"]) == position]
    if not rows:
        raise KeyError(f"position {position} is not in {path}")
    mass = torch.tensor([float(r["mass"]) for r in rows], dtype=torch.float64)
    counts = torch.tensor([[float(r[c]) for c in count_columns] for r in rows], dtype=torch.float64)
    return mass, counts


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
        r, _, _ = correlation_interval(
            credit.credit, weight, confidence=0.9, weights=positions.weight
        )
        signed, _, _ = correlation_interval(
            credit.polarity * credit.credit, weight, confidence=0.9, weights=positions.weight
        )
        ax.scatter(weight, credit.credit, s=10, c=[colours[n] for n in names], alpha=0.7)
        ax.axhline(0, color="gray", lw=0.8)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_title(f"{name}: r_w = {r:.2f}, with polarity x c_t {signed:.2f}", fontsize=8)
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
        f"{'quadrant':<9}{'n':>4}{'mean I':>9}{'interval (prompts)':>21}{'I/H_t':>8}"
        f"{'I/cap':>8}{'credit':>8}{'entropy':>8}{'H>lnC':>7}{'c_t':>8}"
    ]
    for q in (*QUADRANT_ORDER, "all"):

        def m(stat: str, quadrant: str = q) -> float:
            return metrics.get(probe_key(f"{quadrant}/{stat}"), math.nan)

        lines.append(
            f"{q:<9}{int(m('positions')):>4}{m('cmi_mean'):>9.4f}     [{m('cmi_mean_low'):>6.4f}, "
            f"{m('cmi_mean_high'):>6.4f}]{m('cmi_over_entropy_mean'):>8.3f}"
            f"{m('cmi_over_cap_mean'):>8.3f}{m('credit_share'):>8.3f}{m('entropy_share'):>8.3f}"
            f"{m('above_ln_outcomes_share'):>7.2f}{m('credit_mean'):>8.3f}"
        )
    lines.append("(credit, entropy: the quadrant's share of the total Î and of the total H_t)")
    for prefix, label in (
        ("corr", "c_t"),
        ("corr_signed", "polarity*c_t"),
        ("corr_advantage", "E[r|o_t]-E[r]"),
        ("corr_advantage_high", "E[r|o_t]-E[r], PHR+NHR only"),
    ):
        corr = [
            f"{name} {metrics[k]:.2f} [{metrics[k + '_low']:.2f}, {metrics[k + '_high']:.2f}]"
            for k in sorted(metrics)
            if k.startswith(f"probe/{prefix}/") and not k.endswith(("_low", "_high"))
            for name in [k.rsplit("/", 1)[1]]
        ]
        lines.append(f"corr_w({label}, w_t): " + "; ".join(corr))
    return "\n".join(lines)
