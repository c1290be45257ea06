"""`python -m analysis power`: how much a pilot sweep's comparisons can tell apart.

python -m analysis power                                  # the latest sweep in ./outputs/mlflow.db
python -m analysis power --sweep-id 3f2a... --delta 0.02  # and the seeds that 2 points need
python -m analysis power --seeds 5                        # detectable differences at 5 seeds

Reads a pilot (every arm at the same >= 2 seeds), prints per metric the variance split into an
evaluation-sampling and a training-seed part, the minimal detectable paired difference, and the
comparison table with the cells that the study cannot tell from their column's best marked. The
method and its assumptions: docs/analysis.md, "Power and variance components"; the computation:
quadrants/analysis/power_report.py and power.py. `python -m analysis power` (analysis/__main__.py)
runs this command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from quadrants.analysis import tables
from quadrants.analysis.load import Selection, SelectionError, latest_sweep
from quadrants.analysis.power_report import power_study, to_markdown
from quadrants.launch.analysis import (
    add_selection_args,
    k_columns,
    pairs,
    store_to_read,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis power",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_args(parser)
    parser.add_argument("--k", help="k of every column (e.g. 4) or per benchmark (aime24=32)")
    parser.add_argument("--benchmarks", help="comma-separated benchmarks (default: all logged)")
    parser.add_argument(
        "--delta",
        type=float,
        help="a true difference to detect, on the metric's scale (0.02 = 2 points of Avg@k): "
        "prints the seeds it needs",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        help="the study's number of seeds for the minimal detectable difference "
        "(default: the pilot's)",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level of the test")
    parser.add_argument("--power", type=float, default=0.8, help="power asked for")
    parser.add_argument("--out", type=Path, help="also write power.md and table.md here")
    return parser.parse_args(argv)


def refusal(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags themselves, before any store is opened."""
    if args.delta is not None and not args.delta > 0:
        return (
            f"--delta must be a positive difference on the metric's scale (e.g. --delta 0.02 for "
            f"2 points of Avg@k), got {args.delta}"
        )
    if args.seeds is not None and args.seeds < 2:
        return f"--seeds must be at least 2 (one seed has no spread to test), got {args.seeds}"
    if not 0.0 < args.alpha < 1.0:
        return f"--alpha must be in (0, 1) (e.g. 0.05), got {args.alpha}"
    if not args.alpha < args.power < 1.0:
        return f"--power must be in (alpha, 1) (e.g. 0.8), got {args.power}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = refusal(args)
    if problem:
        print(f"analysis power: {problem}", file=sys.stderr)
        return 2
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per file
    uri = store_to_read(args.tracking_uri, "analysis power")
    if uri is None:
        return 2
    tags = tuple(pairs(args.tag, "--tag").items())
    experiment, sweep_id = args.experiment, args.sweep_id
    try:
        if sweep_id is None and args.parent is None and not tags and experiment is None:
            experiment, sweep_id = latest_sweep(MlflowClient(uri))
            print(f"analysis power: latest sweep {sweep_id} of experiment {experiment}")
        study = power_study(
            Selection(uri, experiment, sweep_id, args.parent, tags),
            rows=tuple(args.rows.split(",")) if args.rows else None,
            k=k_columns(args.k),
            benchmarks=tuple(args.benchmarks.split(",")) if args.benchmarks else None,
            alpha=args.alpha,
            power_level=args.power,
            delta=args.delta,
            planned=args.seeds,
        )
    except SelectionError as error:
        print(
            f"analysis power: {error}. Select the pilot with --sweep-id (or --experiment, --tag)",
            file=sys.stderr,
        )
        return 2
    except ValueError as error:
        print(f"analysis power: {error}", file=sys.stderr)
        return 2
    report, table = to_markdown(study), tables.to_markdown(study.table)
    print(report)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "power.md").write_text(report)
        (args.out / "table.md").write_text(table)
        print(f"analysis power: wrote power.md and table.md in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
