"""Reference self-check: Minerva's 272 reference solutions graded against their own golds.

Before issue 14 the grader accepted 210 of 272 (77.2 %): the loader rewrote golds such as ``4.5e33``
to ``4.5 \\times 10^{33}`` but left the solutions' own boxes alone. math-verify alone accepts 271.
Needs the benchmark data (``$QUADRANTS_DATA``); skips without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quadrants.eval.self_check import reference_self_check
from quadrants.rewards.grader import Grader

REPO = Path(__file__).resolve().parents[3]
DATA_DIR = Path(os.environ.get("QUADRANTS_DATA", REPO.parent / "shared" / "data"))


@pytest.mark.skipif(
    not (DATA_DIR / "minerva_math").is_dir(), reason=f"no Minerva data at {DATA_DIR}"
)
def test_minerva_reference_solutions_grade_correct_at_least_as_often_as_math_verify_alone():
    with Grader(num_workers=2, timeout_s=5.0) as grader:
        report = reference_self_check("minerva", grader, data_dir=DATA_DIR)
    print(
        f"minerva self-check: quadrants {report.grader_correct}/{report.num_problems} "
        f"({report.grader_rate:.1%}), math-verify alone {report.math_verify_correct} ({report.math_verify_rate:.1%})"
    )
    assert report.num_problems == 272
    assert report.grader_correct >= report.math_verify_correct
    assert report.grader_rate >= 0.993, (
        report.grader_rejected
    )  # math-verify alone as measured in issue 14
