"""`python -m quadrants.analysis` (alias: `python -m analysis`): tables and figures of a sweep (or
any set of runs) from an MLflow store.

python -m analysis                                   # the latest sweep in ./outputs/mlflow.db
python -m analysis --sweep-id 3f2a... --rows quadrant --compare PHR NHR
python -m analysis --tracking-uri http://host:5000 --experiment baselines --tag task=arithmetic
python -m analysis --sweep-id 3f2a... --compare PHR all --margin 0.03  # within ±3 points?
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from quadrants.analysis.hypothesis import check_margin
from quadrants.analysis.load import Selection, SelectionError, latest_sweep
from quadrants.analysis.paired import DEFAULT_MARGIN
from quadrants.analysis.report import ReportOptions, build_report


def _default_uri() -> str | None:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    path = Path("outputs") / "mlflow.db"
    return f"sqlite:///{path.resolve()}" if path.exists() else None


def store_to_read(given: str | None, command: str) -> str | None:
    """The store a read-only analysis command reads: `given` (--tracking-uri), else
    $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db; None after printing why to stderr (`command`
    names the command: "analysis", "analysis export", ...) when there is none or it does not
    exist (`missing_store`: a read-only query never creates a store)."""
    uri = given or _default_uri()
    if uri is None:
        print(
            f"{command}: no MLflow store given and ./outputs/mlflow.db does not exist; pass "
            "--tracking-uri (the sweep printed it)",
            file=sys.stderr,
        )
        return None
    problem = missing_store(uri)
    if problem:
        print(f"{command}: {problem}", file=sys.stderr)
        return None
    return uri


def missing_store(uri: str) -> str | None:
    """Why a read-only command must not open `uri`, or None. MLflow creates a SQLite file (or a
    file store's folder) on first use, so a query against a path that does not exist would leave
    an empty store behind: refused before any client is made. Servers (http://...) and other
    schemes are left to the client."""
    from urllib.parse import urlparse

    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :])
        what = "SQLite store"
    elif uri.startswith("file:"):
        path = Path(urlparse(uri).path)
        what = "file store"
    elif "://" not in uri:
        path = Path(uri)
        what = "file store"
    else:
        return None
    if path.exists():
        return None
    return (
        f"no MLflow {what} at {path}: this command only reads runs and does not create a store; "
        "pass the --tracking-uri the sweep printed (e.g. sqlite:///$PWD/outputs/mlflow.db)"
    )


def margin_of(value: float) -> float:
    """--margin checked (> 0), or SystemExit naming the flag and the fix."""
    try:
        return check_margin(value)
    except ValueError as error:
        raise SystemExit(f"analysis: {error}") from None


def pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise SystemExit(f"analysis: {what} expects key=value, got {value!r}")
        out[key] = val
    return out


def k_columns(value: str | None) -> int | dict[str, int] | None:
    if value is None:
        return None
    try:
        if "=" not in value:
            return int(value)
        return {b: int(k) for b, k in pairs(value.split(","), "--k").items()}
    except ValueError:
        raise SystemExit(
            f"analysis: --k expects an integer or benchmark=k[,benchmark=k], got {value!r}"
        ) from None


def add_selection_args(parser: argparse.ArgumentParser) -> None:
    """The store and run selection shared by `analysis power` and `analysis export`: --tracking-uri,
    --experiment, --sweep-id, --parent, --tag (repeatable) and --rows."""
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db)",
    )
    parser.add_argument("--experiment", help="experiment (study) name; default: every experiment")
    parser.add_argument("--sweep-id", help="the quadrants.sweep_id tag; default: the latest sweep")
    parser.add_argument("--parent", help="only the children of this run id")
    parser.add_argument(
        "--tag", action="append", default=[], metavar="KEY=VALUE", help="extra tag filter"
    )
    parser.add_argument("--rows", help="comma-separated tags whose values are the arms")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db)",
    )
    parser.add_argument("--experiment", help="experiment (study) name; default: every experiment")
    parser.add_argument("--sweep-id", help="the quadrants.sweep_id tag; default: the latest sweep")
    parser.add_argument(
        "--parent", help="only the children of this run id (and log the analysis there)"
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra tag filter (repeatable)",
    )
    parser.add_argument(
        "--rows",
        help="comma-separated tags labelling the rows (default: the tags that vary; "
        "'swept' = the run name without its seed)",
    )
    parser.add_argument(
        "--k",
        help="k of every column (e.g. 4) or per benchmark (aime24=32,math500=4); "
        "default: each benchmark's largest k common to all runs",
    )
    parser.add_argument(
        "--benchmarks", help="comma-separated columns (default: every benchmark logged)"
    )
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="paired comparison A - B of two rows"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="--compare: the equivalence margin of the TOST, on the metric's scale "
        f"(default {DEFAULT_MARGIN} = ±5 points of Avg@k); must be > 0",
    )
    parser.add_argument(
        "--base-row",
        action="store_true",
        help="add a row for the starting policy (every run's step-0 evaluation)",
    )
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="coverage of the intervals over seeds"
    )
    parser.add_argument(
        "--out", type=Path, help="output directory (default: outputs/analysis/<sweep id>)"
    )
    parser.add_argument(
        "--per-seed",
        action="store_true",
        help="figures: draw each seed as a thin line under its method's mean and band",
    )
    parser.add_argument(
        "--no-figures", action="store_true", help="tables only (no figures, no sample page)"
    )
    parser.add_argument(
        "--no-log", action="store_true", help="do not log the outputs on the parent run"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    margin = margin_of(args.margin)
    os.environ.setdefault(
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"
    )  # one bar per file otherwise
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    uri = store_to_read(args.tracking_uri, "analysis")
    if uri is None:
        return 2
    tags = tuple(pairs(args.tag, "--tag").items())
    experiment, sweep_id = args.experiment, args.sweep_id
    try:
        if sweep_id is None and args.parent is None and not tags and experiment is None:
            experiment, sweep_id = latest_sweep(MlflowClient(uri))
            print(
                f"analysis: latest sweep {sweep_id} of experiment {experiment} "
                "(choose with --sweep-id)"
            )
        selection = Selection(uri, experiment, sweep_id, args.parent, tags)
        options = ReportOptions(
            rows=tuple(args.rows.split(",")) if args.rows else None,
            k=k_columns(args.k),
            benchmarks=tuple(args.benchmarks.split(",")) if args.benchmarks else None,
            compare=tuple(args.compare) if args.compare else None,
            margin=margin,
            confidence=args.confidence,
            log_to_parent=not args.no_log,
            base_row=args.base_row,
            figures=not args.no_figures,
            per_seed=args.per_seed,
        )
        out = args.out or Path("outputs") / "analysis" / (sweep_id or experiment or "runs")
        report = build_report(selection, out, options)
    except (SelectionError, ValueError) as error:
        print(f"analysis: {error}", file=sys.stderr)
        return 2
    print((out / "table.md").read_text())
    if report.comparison is not None:
        print((out / "paired.md").read_text())
    for message in report.messages:
        print(f"analysis: {message}")
    print(f"analysis: {len(report.files)} files in {out}")
    if report.logged:
        print(f"analysis: logged under artifacts/analysis of run {report.parent_run_id} ({uri})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
