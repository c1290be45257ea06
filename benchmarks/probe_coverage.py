"""Per-position coverage of the probe's bootstrap interval, and the bias of its estimate, on known
worlds (branch masses π and success rates p given, so I(o_t; r | s_t) is known exactly).

Each repetition draws K outcomes per branch from Bernoulli(p_v), as graded continuations would be,
and runs the probe's own estimators (quadrants.probe.credit: jackknife_cmi, bootstrap_interval with
the probe's defaults: add-1/2 smoothing, 200 resamples) on them; the interval is clipped at 0 as the
probe clips it (probe/estimates.py). Printed per world and K: the truth, the mean estimate and its
standard error over repetitions, the share of 90 % intervals that contain the truth (with its
binomial standard error) and the mean interval width.

    python benchmarks/probe_coverage.py [--repetitions 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

# name, branch masses (top tokens, then the rest), success rate per branch
WORLDS = (
    ("fork", [0.5, 0.3, 0.2], [0.9, 0.4, 0.1]),
    ("two-way", [0.6, 0.4], [0.7, 0.3]),
    ("no credit", [0.5, 0.3, 0.2], [0.6, 0.6, 0.6]),
    ("low entropy: 0.95 / 0.05", [0.95, 0.05], [0.8, 0.3]),
    ("low entropy: 0.99 / 0.01", [0.99, 0.01], [0.8, 0.2]),
    ("low entropy: 0.999 / 0.001, rare flip", [0.999, 0.001], [0.9, 0.0]),
    ("low entropy: 0.999 / 0.001, no credit", [0.999, 0.001], [0.9, 0.9]),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ks", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--confidence", type=float, default=0.9)
    args = parser.parse_args()

    import torch

    from quadrants.probe.credit import bootstrap_interval, cmi, jackknife_cmi, outcome_counts

    torch.set_num_threads(1)
    print(
        f"| world | K | true I (nats) | mean Î ± SE | coverage of {args.confidence:.0%} ± SE | "
        "mean width |"
    )
    print("|---|---|---|---|---|---|")
    for name, masses, rates in WORLDS:
        mass = torch.tensor(masses, dtype=torch.float64)
        p = torch.tensor(rates, dtype=torch.float64)
        truth = cmi(mass, torch.stack([1 - p, p], -1)).item()
        for k in args.ks:
            g = torch.Generator().manual_seed(args.seed * 7919 + k)
            n = args.repetitions
            right = torch.rand(n, mass.numel(), k, generator=g, dtype=torch.float64) < p[:, None]
            outcomes = right.long()  # class 1 = right
            masses_n = mass.expand(n, -1)
            estimate = jackknife_cmi(masses_n, outcome_counts(outcomes, 2).double())
            low, high = bootstrap_interval(
                masses_n,
                outcomes,
                num_classes=2,
                resamples=200,
                confidence=args.confidence,
                pseudocount=0.5,
                generator=g,
            )
            low, high = low.clamp_min(0), high.clamp_min(0)
            covered = ((low <= truth + 1e-12) & (truth <= high + 1e-12)).double().mean().item()
            print(
                f"| {name} | {k} | {truth:.4f} | {estimate.mean().item():.4f} ± "
                f"{estimate.std().item() / math.sqrt(n):.4f} | {covered:.3f} ± "
                f"{math.sqrt(covered * (1 - covered) / n):.3f} | "
                f"{(high - low).mean().item():.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
