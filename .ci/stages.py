"""The closing table of .ci/run: each stage's time against its budget and its tests, from
`outputs/ci/stages.tsv` and the stages' junit files. Exits 1 when a stage failed (its log's tail is
printed), took more than twice its budget, or when the stages' test counts do not add up to every
collected test. Its last line is the whole run's `ci: N passed, N failed, N skipped`."""

from __future__ import annotations

import os
import re
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

OVER = 2.0  # a stage over twice its budget fails CI
# The budgets in .ci/run are seconds on the machine kind they were measured on (a 2-core machine
# whose CPU has AVX-512, session 58). A 2-core AMD EPYC without AVX-512 ran the default stage's
# tests 2.6x slower (session 59: 1,268 s for 3,281 tests against about 490 s for 3,092), so on a
# CPU without avx512f each budget is scaled by SLOWER before the OVER rule is applied.
SLOWER = 2.6


def machine_factor(cpuinfo: Path = Path("/proc/cpuinfo")) -> float:
    """SLOWER on a CPU whose flags lack avx512f, else 1 (and 1 where /proc/cpuinfo is absent)."""
    try:
        flags = cpuinfo.read_text(errors="replace")
    except OSError:
        return 1.0
    return 1.0 if "avx512f" in flags else SLOWER


def counts(junit: Path) -> dict[str, int] | None:
    if not junit.exists():
        return None
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.parse(junit).getroot()
    for suite in root.iter("testsuite"):
        for key in total:
            total[key] += int(suite.get(key, 0))
    return total


def slowest(junit: Path, n: int) -> list[tuple[float, str]]:
    """The `n` longest test cases of a junit file as (seconds, file::name), longest first."""
    if not junit.exists():
        return []
    cases = [
        (
            float(case.get("time", 0) or 0),
            f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '')}",
        )
        for case in ET.parse(junit).getroot().iter("testcase")
    ]
    return sorted(cases, reverse=True)[:n]


def main(out: Path) -> int:
    rows = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines() if line]
    problems = []
    print(
        f"\n{'stage':<12} {'budget s':>8} {'took s':>7} {'exit':>4} {'tests':>6} {'passed':>6} "
        f"{'skipped':>7} {'failed':>6}"
    )
    factor = machine_factor()
    if factor != 1.0:
        print(f"budgets scaled by {factor:g} on this CPU (no AVX-512; .ci/stages.py SLOWER)")
    tested = passed_all = failed_all = skipped_all = 0
    spent = 0
    for name, budget, took, rc in rows:
        c = counts(out / f"{name}.xml")
        spent += int(took)
        if c is None:
            cells = f"{'':>6} {'':>6} {'':>7} {'':>6}"
        else:
            tested += c["tests"]
            failed = c["failures"] + c["errors"]
            passed = c["tests"] - failed - c["skipped"]
            cells = f"{c['tests']:>6} {passed:>6} {c['skipped']:>7} {failed:>6}"
            passed_all, failed_all = passed_all + passed, failed_all + failed
            skipped_all += c["skipped"]
        print(f"{name:<12} {budget:>8} {took:>7} {rc:>4} {cells}")
        if rc != "0":
            log = out / f"{name}.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
            problems.append(f"stage {name} exited {rc}; the end of {log}:\n" + "\n".join(tail))
        if int(took) > OVER * factor * int(budget):
            problems.append(
                f"stage {name} took {took} s, over {OVER:g} x its budget of {budget} s"
                f"{f' x {factor:g} for this CPU' if factor != 1.0 else ''}: find what "
                "grew (pytest --durations=20 --stage=NAME) and move it, or restate the budget "
                "in .ci/run"
            )
    print(f"{'sum':<12} {'':>8} {spent:>7} {'':>4} {tested:>6}  ({spent / 60:.1f} min of stages)")
    if os.environ.get("CI_STARTED"):
        wall = time.time() - int(os.environ["CI_STARTED"])
        print(f"wall time of the whole run: {wall:.0f} s ({wall / 60:.1f} min; the lanes overlap)")
    collected = out / "collected.txt"
    match = (
        re.search(r"(\d+) tests? collected", collected.read_text()) if collected.exists() else None
    )
    if match is None:
        problems.append("could not count the collected tests (outputs/ci/collected.txt)")
    else:
        every = int(match.group(1))
        print(
            f"collected (pytest --stage=all --collect-only): {every}; run by the stages: {tested}"
        )
        if every != tested:
            problems.append(
                f"the stages ran {tested} tests of {every} collected: "
                "a test is in no stage or in two"
            )
    for problem in problems:
        print(f"CI: {problem}", file=sys.stderr)
    # Again at the very end, where a truncated log still shows it: each stage's seconds and its
    # three slowest tests (what to cut when the run nears its hard limit).
    sys.stderr.flush()
    print("stage times: " + ", ".join(f"{name} {took} s" for name, _, took, _ in rows))
    for name, *_ in rows:
        slow = slowest(out / f"{name}.xml", 3)
        if slow:
            print(f"  slowest of {name}: " + "; ".join(f"{t:.0f} s {test}" for t, test in slow))
    print(f"ci: {passed_all} passed, {failed_all} failed, {skipped_all} skipped")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
