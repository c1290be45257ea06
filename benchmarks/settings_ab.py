"""quadrants against itself under other settings, on benchmarks/vs_trl.py's workload, interleaved.

Each variant is quadrants' `run_training` (the quadrants child of vs_trl.py: the same model, task,
rewards and step timing) with its own config overrides and environment variables, in a fresh
process per round; the variants' order rotates every round. A round's figure is the median of
steps 3..steps; printed per variant: the median over rounds, the median of its per-round ratio to
the first variant (paired: rounds run minutes apart on a noisy machine, so a ratio within a round
is steadier than a ratio of medians), and each phase's median.

    python benchmarks/settings_ab.py --variant default \\
        --variant "no-retain::train.cpu.retain_freed_mb=0" \\
        --variant "spin-300k:GOMP_SPINCOUNT=300000" [--workload tiny] [--rounds 6]

A variant is NAME[:ENV=VALUE,...[:KEY=VALUE,...]]: environment variables for its process, on top of
the environment the script was started with (read before torch loads, e.g. GOMP_SPINCOUNT; unset,
libgomp's default), then config overrides as in vs_trl.py's
`--quadrants-override`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vs_trl import WORKLOADS, prepare, run_child, steady  # benchmarks/ is the script's directory


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]
    overrides: list[str]


def parse_variant(text: str) -> Variant:
    """NAME[:ENV=VALUE,...[:KEY=VALUE,...]] -> Variant."""
    name, _, rest = text.partition(":")
    env_text, _, override_text = rest.partition(":")
    pairs = [item for item in env_text.split(",") if item]
    if any("=" not in item for item in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: environment items are ENV=VALUE")
    overrides = [item for item in override_text.split(",") if item]
    if not name or any("=" not in item for item in overrides):
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME[:ENV=VALUE,...[:KEY=VALUE,...]]")
    return Variant(name, dict(item.split("=", 1) for item in pairs), overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", type=parse_variant, action="append", required=True)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="tiny")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be >= 3 (steps 1 and 2 are warm-up)")
    variants: list[Variant] = args.variant
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"workload {args.workload}: {WORKLOADS[args.workload]}, {args.threads} threads, "
        f"{args.rounds} rounds x {args.steps} steps, {len(variants)} variants; load {load}"
    )
    steps: dict[str, list[float]] = {v.name: [] for v in variants}
    phases: dict[str, dict[str, list[float]]] = {v.name: {} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        setup_path = Path(tmp) / "setup.json"
        setup_path.write_text(json.dumps(prepare(args.workload, Path(tmp), args.steps)))
        for r in range(args.rounds):
            shift = r % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                child = argparse.Namespace(**vars(args), quadrants_override=variant.overrides)
                result = run_child(sys.executable, "quadrants", setup_path, child, variant.env)
                steps[variant.name].append(steady(result["step_s"]))
                for key in result["phases"][0]:
                    phases[variant.name].setdefault(key, []).append(
                        steady([p[key] for p in result["phases"]])
                    )
            print(
                f"round {r + 1}: "
                + ", ".join(f"{v.name} {steps[v.name][-1]:.3f}" for v in variants)
                + " s/step",
                flush=True,
            )
    base = variants[0].name
    print(f"\nmedian over rounds of the median of steps 3-{args.steps}; paired ratio to {base}:")
    for variant in variants:
        paired = [a / b for a, b in zip(steps[variant.name], steps[base])]
        print(
            f"  {variant.name:16s} {statistics.median(steps[variant.name]):.3f} s/step   "
            f"x{statistics.median(paired):.3f}"
        )
        print(
            "    "
            + ", ".join(
                f"{key.removeprefix('time/')} {statistics.median(values):.3f}"
                for key, values in phases[variant.name].items()
            )
        )
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
