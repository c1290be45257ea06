"""The spread of probe findings over probe seeds (and training seeds): one table per metric family,
from the `metrics.json` files of several `python -m quadrants.probe` runs.

    # 5 probe seeds of one checkpoint (repeat per checkpoint / training seed)
    for s in 0 1 2 3 4; do python -m quadrants.probe RUN_DIR probe.positions=48 \\
        probe.continuations=16 probe.seed=$s; done
    python benchmarks/probe_spread.py \
        "PHR@40 seed 0=outputs/quadrants/probe/<label>/*/results/metrics.json" ...

Each argument is NAME=GLOB (a policy and the metrics files of its probes). Printed, per policy and
quadrant: the mean over probes and the range (min–max) of the mean Î, of each probe's own
prompt-bootstrap interval width, of Î/H_t, of the credit share and entropy share; the count of
single-branch and cut positions; how many probes' intervals hold the mean over all the probes;
then the design-weighted correlations with the hindsight advantage
over all tokens and within PHR + NHR; then, per quadrant, the positions whose branching rollouts
all got the same reward (from the `branches.csv` and `credit.csv` beside each `metrics.json`):
there Î is 0 because the outcome never varied, a measured zero, not one the estimator imposes.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

QUADRANTS = ("PHR", "PLR", "NHR", "NLR")
OBJECTIVES = ("grpo", "hapo", "entroadv", "forking")


def spread(values: list[float], digits: int = 3) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    mean = statistics.fmean(values)
    return f"{mean:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def constant_outcome_positions(results: Path) -> Counter:
    """Per quadrant, the probed positions at which every continuation of every branch got the same
    reward (branches.csv's `n_r=<value>` counts summed over the position's branches)."""
    with open(results / "branches.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    outcomes: dict[str, Counter] = {}
    for row in rows:
        counts = outcomes.setdefault(row["position"], Counter())
        for key, value in row.items():
            if key.startswith("n_r="):
                counts[key] += int(value)
    with open(results / "credit.csv", newline="") as handle:
        quadrant = {row["position"]: row["quadrant"] for row in csv.DictReader(handle)}
    return Counter(
        quadrant[position]
        for position, counts in outcomes.items()
        if sum(1 for n in counts.values() if n > 0) == 1
    )


def main(argv: list[str]) -> None:
    groups: dict[str, list[dict[str, float]]] = {}
    constant: dict[str, Counter] = {}
    for arg in argv:
        name, pattern = arg.split("=", 1)
        files = sorted(glob.glob(pattern))
        groups[name] = [json.loads(open(f).read()) for f in files]
        constant[name] = sum((constant_outcome_positions(Path(f).parent) for f in files), Counter())
    print(
        "| policy | probes | quadrant | mean Î (nats) | 90 % prompt-bootstrap width | Î/H_t | "
        "credit share | entropy share | single-branch / cut positions | "
        "intervals holding the mean of means |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in groups.items():
        for q in QUADRANTS:

            def col(stat: str, quadrant: str = q, runs: list = runs) -> list[float]:
                return [r.get(f"probe/{quadrant}/{stat}", math.nan) for r in runs]

            widths = [h - lo for lo, h in zip(col("cmi_mean_low"), col("cmi_mean_high"))]
            single = sum(int(v) for v in col("single_branch") if not math.isnan(v))
            cut = sum(int(v) for v in col("rest_cut") if not math.isnan(v))
            positions = sum(int(v) for v in col("positions") if not math.isnan(v))
            means = [v for v in col("cmi_mean") if not math.isnan(v)]
            centre = statistics.fmean(means) if means else math.nan
            contain = sum(
                lo <= centre <= hi for lo, hi in zip(col("cmi_mean_low"), col("cmi_mean_high"))
            )
            print(
                f"| {name} | {len(runs)} | {q} | {spread(col('cmi_mean'), 4)} | "
                f"{spread(widths, 4)} | {spread(col('cmi_over_entropy_mean'), 2)} | "
                f"{spread(col('credit_share'), 3)} | {spread(col('entropy_share'), 3)} | "
                f"{single} / {cut} of {positions} | {contain} of {len(runs)} |"
            )
    print()
    print("| policy | tokens | " + " | ".join(OBJECTIVES) + " |")
    print("|---|---|" + "---|" * len(OBJECTIVES))
    for name, runs in groups.items():
        for prefix, label in (("corr_advantage", "all"), ("corr_advantage_high", "PHR + NHR")):
            cells = [
                spread([r.get(f"probe/{prefix}/{o}", math.nan) for r in runs], 2)
                for o in OBJECTIVES
            ]
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")
    print()
    print("| policy | high-entropy credit share | high-entropy entropy share | token share |")
    print("|---|---|---|---|")
    for name, runs in groups.items():
        cells = [
            spread([r.get(f"probe/high_entropy_{k}_share", math.nan) for r in runs], 3)
            for k in ("cmi", "entropy", "token")
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("Positions whose branching rollouts all got one reward:")
    print()
    print("| policy | " + " | ".join(QUADRANTS) + " |")
    print("|---|" + "---|" * len(QUADRANTS))
    for name, runs in groups.items():
        totals = [sum(int(r.get(f"probe/{q}/positions", 0)) for r in runs) for q in QUADRANTS]
        cells = [f"{constant[name][q]} of {n}" for q, n in zip(QUADRANTS, totals)]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
