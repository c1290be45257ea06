"""`python -m analysis export`: a study's per-run table from MLflow to a small CSV.

python -m analysis export --sweep-id controls5 --out docs/controls5_runs.csv
python -m analysis export --sweep-id controls5 --rows quadrant --out study.csv

One line per (run, benchmark): arm, seed, step-0 and final Avg@k / Pass@k, the final evaluation's
per-problem correct counts (when logged), final entropy, shared_frac per quadrant, the token counts
(quadrants/analysis/study_csv.py). The store is only read; nothing is written but --out.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from quadrants.analysis.load import Selection, SelectionError, latest_sweep
from quadrants.analysis.study_csv import study_frame
from quadrants.launch.analysis import add_selection_args, pairs, store_to_read


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_args(parser)
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out.exists() and args.out.is_dir():
        print(
            f"analysis export: --out {args.out} is a directory; name a .csv file", file=sys.stderr
        )
        return 2
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    uri = store_to_read(args.tracking_uri, "analysis export")
    if uri is None:
        return 2
    tags = tuple(pairs(args.tag, "--tag").items())
    experiment, sweep_id = args.experiment, args.sweep_id
    try:
        client = MlflowClient(uri)
        if sweep_id is None and args.parent is None and not tags and experiment is None:
            experiment, sweep_id = latest_sweep(client)
            print(f"analysis export: latest sweep {sweep_id} of experiment {experiment}")
        frame = study_frame(
            client,
            Selection(uri, experiment, sweep_id, args.parent, tags),
            rows=tuple(args.rows.split(",")) if args.rows else None,
        )
    except (SelectionError, ValueError) as error:
        print(f"analysis export: {error}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    arms = sorted(set(frame["arm"]))
    print(
        f"analysis export: {len(frame)} lines ({len(arms)} arms: {', '.join(arms)}) in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
