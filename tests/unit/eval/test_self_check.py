"""Reference self-check: Minerva's reference solutions graded against their own golds.

Before issue 14 the grader accepted 210 of the real file's 272 (77.2 %): the loader rewrote golds
such as ``4.5e33`` to ``4.5 \\times 10^{33}`` but left the solutions' own boxes alone. math-verify
alone accepts 271. The fixture rows (tests/data_fixtures.py) hold each of those rewrites; the
``full_data`` test grades the complete real file (.ci/run's full-data stage).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quadrants.eval.self_check import reference_self_check
from quadrants.rewards.grader import Grader


@pytest.mark.subprocess
def test_minerva_fixture_solutions_all_grade_correct_against_their_rewritten_golds():
    # 6 fixture rows, each a solution whose last box the loader rewrites or unwraps for the gold
    # (1.6 with a unit, 4.5e33, np.arcsin(10/13), -1./3, a box with stray $ $, 12 \text{ years }):
    # the grader normalises the solution's box the same way, so all 6 are correct.
    with Grader(num_workers=1, timeout_s=5.0) as grader:
        report = reference_self_check("minerva", grader)
    assert report.num_problems == 6
    assert report.grader_correct == 6, report.grader_rejected
    assert report.grader_rejected == ()
    assert report.grader_correct >= report.math_verify_correct


@pytest.mark.full_data
def test_minerva_reference_solutions_grade_correct_at_least_as_often_as_math_verify_alone(
    full_data_dir: Path,
):
    with Grader(num_workers=2, timeout_s=5.0) as grader:
        report = reference_self_check("minerva", grader, data_dir=full_data_dir)
    print(
        f"minerva self-check: quadrants {report.grader_correct}/{report.num_problems} "
        f"({report.grader_rate:.1%}), math-verify alone {report.math_verify_correct} ({report.math_verify_rate:.1%})"
    )
    assert report.num_problems == 272
    assert report.grader_correct >= report.math_verify_correct
    assert report.grader_rate >= 0.993, (
        report.grader_rejected
    )  # math-verify alone as measured in issue 14
