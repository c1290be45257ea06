"""Warn when the compared runs ran on different software, code, hardware or data.

Every run logs its provenance as `provenance.*` params (quadrants/tracking/provenance.py): the
versions of python, torch, transformers, vllm, math-verify and quadrants, the git commit and
whether the tree was dirty, the GPU model and count, and a sha256 of each data file it read. A
difference in any of them can move the results (a vLLM release changes sampling kernels; an edited
data file changes the problems), so a table over such runs compares more than the methods."""

from __future__ import annotations

from collections.abc import Mapping

MISSING = "(not recorded)"
SHOWN = 3  # run names listed per value


def provenance_warnings(
    provenance: Mapping[str, Mapping[str, str]], names: Mapping[str, str] | None = None
) -> list[str]:
    """One warning per `provenance.*` key whose value differs between the runs, naming each value
    with its run count and (up to SHOWN) run names. Runs that recorded no provenance at all (from
    before it was logged) are left out; a key that some recording runs lack counts as a difference.
    """
    names = names or {}
    recorded = {run: params for run, params in provenance.items() if params}
    keys = sorted({key for params in recorded.values() for key in params})
    warnings = []
    for key in keys:
        by_value: dict[str, list[str]] = {}
        for run, params in sorted(recorded.items()):
            by_value.setdefault(params.get(key, MISSING), []).append(names.get(run, run))
        if len(by_value) < 2:
            continue
        parts = []
        for value, runs in sorted(by_value.items(), key=lambda item: (-len(item[1]), item[0])):
            listed = ", ".join(sorted(runs)[:SHOWN]) + (", ..." if len(runs) > SHOWN else "")
            parts.append(f"{value} ({len(runs)} run{'s' * (len(runs) != 1)}: {listed})")
        warnings.append(
            f"WARNING: the runs differ in {key}: " + "; ".join(parts) + ". Their results may "
            "differ for that reason, not only for the method's."
        )
    return warnings
