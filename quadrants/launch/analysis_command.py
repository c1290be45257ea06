"""`python -m analysis` and `python -m quadrants.analysis`: both aliases land here. A first
argument `power` hands the rest to the power command (quadrants/launch/analysis_power.py),
`export` to the per-run CSV (quadrants/launch/analysis_export.py); anything else is the report
(quadrants/launch/analysis.py)."""

from __future__ import annotations

import argparse
import sys

from quadrants.launch import analysis, analysis_export, analysis_power


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line parsed and its flags checked (`--tag`, `--k`, and the power command's
    `--delta`, `--seeds`, `--alpha`, `--power`), no store opened; raises SystemExit as `main`
    would exit (tests/unit/test_docs_commands.py parses every documented command with it)."""
    if argv[:1] == ["export"]:
        args = analysis_export.parse_args(argv[1:])
        args.k = None
    elif argv[:1] == ["power"]:
        args = analysis_power.parse_args(argv[1:])
        refusal = analysis_power.refusal(args)
        if refusal:
            raise SystemExit(f"analysis power: {refusal}")
    else:
        args = analysis.parse_args(argv)
        analysis.margin_of(args.margin)
    analysis.pairs(args.tag, "--tag")
    analysis.k_columns(args.k)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["power"]:
        return analysis_power.main(argv[1:])
    if argv[:1] == ["export"]:
        return analysis_export.main(argv[1:])
    return analysis.main(argv)
