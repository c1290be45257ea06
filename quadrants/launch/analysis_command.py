"""`python -m analysis` and `python -m quadrants.analysis`: both aliases land here. A first
argument `power` hands the rest to the power command (quadrants/launch/analysis_power.py);
anything else is the report (quadrants/launch/analysis.py)."""

from __future__ import annotations

import sys

from quadrants.launch import analysis, analysis_power


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["power"]:
        return analysis_power.main(argv[1:])
    return analysis.main(argv)
