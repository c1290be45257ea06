"""How often the probe's per-position interval covers the truth, simulated on given worlds.

A world is one position: its branch masses π [M] and each branch's outcome distribution q [M, C]
(for 0/1 rewards, the success rate), so I(o_t; r | s_t) = `credit.cmi(π, q)` is known. Each
repetition draws K continuations per branch from q, as graded continuations would be, and runs
the probe's own estimators on them (`jackknife_cmi`, `bootstrap_interval` with the probe's
defaults, the interval clipped at 0 as probe/estimates.py clips it). The worlds that matter are
the real ones: `positions_from_branches` builds them from a probe's `branches.csv` (the real branch
masses, and each branch's outcome counts over its continuations), and q comes from those counts in
one of two ways (docs/probe.md, "How often the intervals cover the truth"):

- `frequencies`: q = the observed frequencies. A branch that was unanimous over its continuations
  is then certain in the world, the easy case for the estimator.
- `posterior_draws`: q drawn from the Jeffreys posterior Dirichlet(counts + 1/2), several draws
  per position: worlds as consistent with the observed counts as the frequencies are, in which a
  unanimous branch can still fail now and then, the case that defeats the interval.

A pooled coverage (the share of every world and repetition covered) hides where the interval
fails: `per_position` gives each position's own coverage (over its repetitions, and its posterior
draws), their distribution (minimum, the shares under 0.8 and 0.6), and keeps the positions whose
true credit is zero apart. At such a position the interval, clipped at 0, covers the truth
whenever its lower end is clipped, so it is covered almost for free and lifts a pooled figure.

Shape legend: **W** worlds · **M** branches · **C** outcome classes · **R** repetitions ·
**P** positions.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from quadrants.probe.credit import bootstrap_interval, cmi, jackknife_cmi, outcome_counts


@dataclass(frozen=True)
class Worlds:
    """mass [W, M] float64 (0 on a branch a position lacks); probs [W, M, C] float64 (uniform on
    a missing branch, whose mass is 0); position [W] long: the branches.csv key."""

    mass: Tensor
    probs: Tensor
    position: Tensor


@dataclass(frozen=True)
class RealPositions:
    """mass [W, M] float64 (0 on a branch a position lacks); counts [W, M, C] float64, the
    outcome counts of each branch's continuations; position [W] long: the branches.csv key."""

    mass: Tensor
    counts: Tensor
    position: Tensor

    def frequencies(self) -> Worlds:
        """q = counts / K per branch (uniform where a branch has no continuations)."""
        total = self.counts.sum(-1, keepdim=True)
        uniform = torch.full_like(self.counts, 1.0 / self.counts.shape[-1])
        probs = torch.where(total > 0, self.counts / total.clamp_min(1), uniform)
        return Worlds(self.mass, probs, self.position)

    def posterior_draws(self, draws: int, rng: np.random.Generator) -> Worlds:
        """`draws` worlds per position, q ~ Dirichlet(counts + 1/2) per branch (W·draws worlds,
        position-major; Gamma draws normalised, from `rng`)."""
        alpha = (self.counts + 0.5).repeat_interleave(draws, 0).numpy()  # [W·D, M, C]
        gamma = rng.gamma(alpha)
        probs = torch.from_numpy(gamma / gamma.sum(-1, keepdims=True))
        return Worlds(
            self.mass.repeat_interleave(draws, 0), probs, self.position.repeat_interleave(draws)
        )


def positions_from_branches(path: Path, positions: set[int] | None = None) -> RealPositions:
    """The positions of a probe's branches.csv (probe/report.py `write_branches_csv`): per position
    its branch masses and each branch's outcome counts; only `positions` when given."""
    rows: dict[int, list[tuple[float, list[int]]]] = {}
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        classes = [c for c in reader.fieldnames or [] if c.startswith("n_r=")]
        for row in reader:
            pos = int(row["position"])
            if positions is None or pos in positions:
                rows.setdefault(pos, []).append(
                    (float(row["mass"]), [int(row[c]) for c in classes])
                )
    keys = sorted(rows)
    width = max((len(rows[k]) for k in keys), default=0)
    mass = torch.zeros(len(keys), width, dtype=torch.float64)
    counts = torch.zeros(len(keys), width, len(classes), dtype=torch.float64)
    for i, key in enumerate(keys):
        for j, (m, n) in enumerate(rows[key]):
            mass[i, j] = m
            counts[i, j] = torch.tensor(n, dtype=torch.float64)
    return RealPositions(mass, counts, torch.tensor(keys, dtype=torch.long))


@dataclass(frozen=True)
class Coverage:
    """truth [W]; estimate [R, W] (the jackknifed Î); covered [R, W] bool; width [R, W]."""

    truth: Tensor
    estimate: Tensor
    covered: Tensor
    width: Tensor


def simulate_coverage(
    worlds: Worlds,
    *,
    continuations: int,
    repetitions: int,
    generator: torch.Generator,
    resamples: int = 200,
    confidence: float = 0.9,
    pseudocount: float = 0.5,
    chunk: int = 16,
) -> Coverage:
    """R repetitions of K continuations per branch of every world, estimated as the probe does.

    Branches of mass 0 (padding) get no continuations. `chunk` repetitions run at a time (the
    bootstrap holds resamples x chunk x W x M x K draws)."""
    mass, probs = worlds.mass, worlds.probs
    w, m, c = probs.shape
    present = mass > 0  # [W, M]
    truth = cmi(mass, probs)
    estimates, covered, widths = [], [], []
    for start in range(0, repetitions, chunk):
        r = min(chunk, repetitions - start)
        drawn = torch.multinomial(
            probs.reshape(w * m, c), r * continuations, replacement=True, generator=generator
        ).view(w, m, r, continuations)
        outcomes = drawn.permute(2, 0, 1, 3).reshape(r * w, m, continuations)  # [R·W, M, K]
        outcomes = torch.where(present.repeat(r, 1)[..., None], outcomes, -1)
        masses = mass.repeat(r, 1)
        estimate = jackknife_cmi(masses, outcome_counts(outcomes, c).double())
        low, high = bootstrap_interval(
            masses,
            outcomes,
            num_classes=c,
            resamples=resamples,
            confidence=confidence,
            pseudocount=pseudocount,
            generator=generator,
        )
        low, high = low.clamp_min(0), high.clamp_min(0)
        target = truth.repeat(r)
        estimates.append(estimate.view(r, w))
        covered.append(((low <= target + 1e-12) & (target <= high + 1e-12)).view(r, w))
        widths.append((high - low).view(r, w))
    return Coverage(truth, torch.cat(estimates), torch.cat(covered), torch.cat(widths))


ZERO_CREDIT = 1e-12
"""A world's true I (nats) at or below this is "no credit" (a position whose branches all end
alike has exactly 0; float rounding leaves ~1e-16)."""


@dataclass(frozen=True)
class PositionCoverage:
    """Coverage per position.

    Attributes:
        position [P] long: the branches.csv keys, sorted.
        coverage [P] float64: the share of the position's worlds x repetitions covered.
        zero [P] bool: every world of the position has true I <= `ZERO_CREDIT`.
        truth [P] float64: the mean true I over the position's worlds.
    """

    position: Tensor
    coverage: Tensor
    zero: Tensor
    truth: Tensor

    def summary(self, which: str = "credit") -> dict[str, float]:
        """Of the positions with credit (`which="credit"`), without (`"zero"`) or all (`"all"`):
        their number, the minimum, quartiles and mean of their coverage, and the shares under 0.8
        and under 0.6 (NaN figures with no position)."""
        keep = {"credit": ~self.zero, "zero": self.zero, "all": torch.ones_like(self.zero)}[which]
        values = self.coverage[keep]
        n = int(values.numel())
        if n == 0:
            nan = float("nan")
            return dict(positions=0, minimum=nan, q25=nan, median=nan, mean=nan,
                        under_0_8=nan, under_0_6=nan)  # fmt: skip
        return dict(
            positions=n,
            minimum=float(values.min()),
            q25=float(values.quantile(0.25)),
            median=float(values.quantile(0.5)),
            mean=float(values.mean()),
            under_0_8=float((values < 0.8).double().mean()),
            under_0_6=float((values < 0.6).double().mean()),
        )


def per_position(coverage: Coverage, position: Tensor) -> PositionCoverage:
    """Each position's coverage over its worlds (`position` [W], e.g. `Worlds.position`: several
    worlds per position under `posterior_draws`) and repetitions."""
    keys, index = torch.unique(position, sorted=True, return_inverse=True)
    p = keys.numel()
    per_world = coverage.covered.double().sum(0)  # [W] covered repetitions
    covered = torch.zeros(p, dtype=torch.float64).index_add_(0, index, per_world)
    worlds = torch.zeros(p, dtype=torch.float64).index_add_(0, index, torch.ones_like(per_world))
    truth = torch.zeros(p, dtype=torch.float64).index_add_(0, index, coverage.truth.double())
    positive = torch.zeros(p, dtype=torch.float64).index_add_(
        0, index, (coverage.truth > ZERO_CREDIT).double()
    )
    repetitions = coverage.covered.shape[0]
    return PositionCoverage(keys, covered / (worlds * repetitions), positive == 0, truth / worlds)


def summary_text(table: PositionCoverage) -> str:
    """The per-position distribution as lines: with credit, without, all."""
    lines = []
    for which, label in (("credit", "with credit"), ("zero", "zero true credit"), ("all", "all")):
        s = table.summary(which)
        if not s["positions"]:
            lines.append(f"{label}: no position")
            continue
        lines.append(
            f"{label}: {s['positions']} positions, coverage min {s['minimum']:.2f}, quartile "
            f"{s['q25']:.2f}, median {s['median']:.2f}, mean {s['mean']:.3f}; under 0.8: "
            f"{100 * s['under_0_8']:.0f} %, under 0.6: {100 * s['under_0_6']:.0f} %"
        )
    return "\n".join(lines)
