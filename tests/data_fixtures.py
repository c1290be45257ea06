"""Small benchmark and training files in the real formats, written by the tests into a data home.

Every test session runs against these (tests/conftest.py writes them into a temporary directory
and points ``$QUADRANTS_DATA`` at it), so the loaders, the eval presets, the Minerva self-check and
the end-to-end evaluation run on a bare machine. The problems are our own short stand-ins; the
field layout and every quirk of the real files (see `quadrants.tasks.benchmarks`) are kept:
zero-padded and degree-marked AIME answers, float AMC answers, Minerva's answer-less rows whose
gold is the last box (written as code: ``4.5e33``, ``np.arcsin``, ``-1./3``, stray ``$``),
OlympiadBench's ``$``-wrapped answer lists and the three corrected golds, GSM8K's ``####`` golds
with thousands commas, and tab characters inside fields. Tests over the complete real files are
marked ``full_data`` (run by .ci/run's full-data stage).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["FIXTURE_ROWS", "write_fixture_data"]

_AIME24 = [
    {
        "id": 60,
        "problem": "Find the remainder when $2^{10}$ is divided by $1000$.",
        "solution": "$2^{10} = 1024$, so the remainder is $\\boxed{024}$.",
        "answer": "024",
        "url": "https://example.org/aime24/1",
        "question": "Find the remainder when $2^{10}$ is divided by $1000$.",
    },
    {
        "id": 61,
        "problem": "What is $5 \\cdot 5$?",
        "solution": "Multiply:\t$5 \\cdot 5 = 25$.",  # a tab inside a field, as in row 12
        "answer": "025",
        "url": "https://example.org/aime24/2",
        "question": "What is $5 \\cdot 5$?",
    },
    {
        "id": 62,
        "problem": "Compute $100 + 204$.",
        "solution": "$304$.",
        "answer": "304",
        "url": "https://example.org/aime24/3",
        "question": "Compute $100 + 204$.",
    },
]
_AIME25 = [
    {"problem": "Find the sum of all integer bases $b>9$ with $b<12$.", "answer": "21"},
    {"problem": "Find the angle $\\theta$ in degrees.", "answer": "336^\\circ"},
    {"problem": "Find $n$ such that $n^2 = 49$ and $n > 0$.", "answer": "007"},
]
_AMC23 = [
    {
        "id": 0,
        "problem": "Two cyclists $45$ miles apart ride towards each other. Find $x$.",
        "answer": 27.0,
        "url": "https://example.org/amc23/0",
        "question": "Two cyclists $45$ miles apart ride towards each other. Find $x$.",
    },
    {
        "id": 1,
        "problem": "Find the sum of the roots of $x^2 + x - 6$.",
        "answer": -1.0,
        "url": "https://example.org/amc23/1",
        "question": "Find the sum of the roots of $x^2 + x - 6$.",
    },
    {
        "id": 2,
        "problem": "Half of $5$?",
        "answer": 2.5,
        "url": "https://example.org/amc23/2",
        "question": "Half of $5$?",
    },
]
_AMC = [  # AI-MO/aimo-validation-amc's layout: id, problem, answer (a float), url
    {
        "id": 0,
        "problem": "A square has side $3$. What is its area?",
        "answer": 9.0,
        "url": "https://example.org/amc/0",
    },
    {
        "id": 1,
        "problem": "What is $2 - 5$?",
        "answer": -3.0,
        "url": "https://example.org/amc/1",
    },
    {
        "id": 2,
        "problem": "What is $7 / 2$?",
        "answer": 3.5,
        "url": "https://example.org/amc/2",
    },
]
_MATH500 = [
    {
        "problem": "Convert $(0,3)$ to polar coordinates.",
        "solution": "$r = 3$ and $\\theta = \\frac{\\pi}{2}$.",
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "subject": "Precalculus",
        "level": 2,
        "unique_id": "test/precalculus/807.json",
    },
    {
        "problem": "Simplify $\\frac{6}{8}$.",
        "solution": "Divide by $2$:\t$\\frac{3}{4}$.",
        "answer": "\\frac{3}{4}",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Solve $x + 2 = 5$.",
        "solution": "$x = 3$.",
        "answer": "3",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/2.json",
    },
    {
        "problem": "What is $\\sqrt{8}$?",
        "solution": "$2\\sqrt{2}$.",
        "answer": "2\\sqrt{2}",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/3.json",
    },
]
_MINERVA = [
    {
        "problem": "Find the image diameter (in $\\mathrm{cm}$).",
        "solution": "First $\\boxed{2}$ is wrong; the image is\n\\[\n d=\\boxed{1.6} \\mathrm{~cm}\n\\]",
        "type": "Introduction to Astronomy (8.282J Spring 2006)",
        "idx": 0,
    },
    {
        "problem": "Find the luminosity in ergs.",
        "solution": "So $L=\\boxed{4.5e33} \\mathrm{ergs}$.",
        "type": "Introduction to Astronomy (8.282J Spring 2006)",
        "idx": 1,
    },
    {
        "problem": "Find the angle.",
        "solution": "The angle is $\\boxed{np.arcsin(10/13)}$.",
        "type": "Physics",
        "idx": 5,
    },
    {
        "problem": "Find the exponent.",
        "solution": "The exponent is $\\boxed{-1./3}$.",
        "type": "Physics",
        "idx": 38,
    },
    {
        "problem": "Solve the oscillator.",
        "solution": "\\[\n\\boxed{x_{0} \\cos (\\omega t)+$ $\\dot{x}_{0} \\sin (\\omega t) / \\omega}\n\\]",
        "type": "Differential Equations (18.03 Spring 2010)",
        "idx": 72,
    },
    {
        "problem": "How old is the star?",
        "solution": "It is $\\boxed{12} \\text{ years }$ old.",
        "type": "Physics",
        "idx": 90,
    },
]
_OLYMPIAD_KEYS = {
    "subfield": "Algebra",
    "context": None,
    "solution": ["A worked solution."],
    "error": None,
}
_OLYMPIADBENCH = [
    {
        "id": 1606,
        "question": "Find the least number of moves.",
        "final_answer": ["$2$"],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Numerical",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 1664,
        "question": "Find both values.",
        "final_answer": ["$69$,$84$"],
        "is_multiple_answer": True,
        "unit": None,
        "answer_type": "Numerical",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 1970,
        "question": "Find all real $x$.",
        "final_answer": ["$(-\\infty, 0) \\cup\\{1\\}$."],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Interval",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 2045,
        "question": "Find all $t$.",
        "final_answer": ["$t(0,4]$"],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Interval",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 1782,
        "question": "Find the maximum $m$.",
        "final_answer": ["$m_{\\max }=n^{2}-n-1$"],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Expression",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 1965,
        "question": "Find all functions $f$.",
        "final_answer": ["$f(x)=a x+b$, where $b$ is an arbitrary integer, and $a$ is 0"],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Expression",
        **_OLYMPIAD_KEYS,
    },
    {
        "id": 2419,
        "question": "Find the area.",
        "final_answer": ["$166$"],
        "is_multiple_answer": False,
        "unit": "$cm^2$",
        "answer_type": "Numerical",
        **_OLYMPIAD_KEYS,
    },
]
_GSM8K_TEST = [
    {
        "question": "Ducks lay 16 eggs; 3 are eaten and 4 baked. Each sells for $2. Revenue?",
        "answer": "16 - 3 - 4 = <<16-3-4=9>>9 eggs\n9 * 2 = <<9*2=18>>18\n#### 18",
    },
    {
        "question": "A robe takes 2 bolts of blue fiber and half that of white. Bolts in total?",
        "answer": "2 / 2 = <<2/2=1>>1\n2 + 1 = <<2+1=3>>3\n#### 3",
    },
    {
        "question": "A house costs $1,700 and gains $425. What is it worth?",
        "answer": "1,700 + 425 =\t<<1700+425=2125>>2,125\n#### 2,125",  # comma, tab
    },
]


def _gsm8k_train(count: int) -> list[dict]:
    """`count` GSM8K-format rows (worked answer, calculator annotations, ``#### n``) of our own."""
    rows = []
    for i in range(count):
        a, b = 3 + i % 17, 1000 + 7 * i
        total = a * b
        rows.append(
            {
                "question": f"A shop sells {a} boxes of {b} nails each. How many nails in all?",
                "answer": f"{a} * {b} = <<{a}*{b}={total}>>{total}\n#### {total:,}",
            }
        )
    return rows


def _dsr_sub(count: int) -> list[dict]:
    """`count` rows of dsr_sub.jsonl's layout (problem without the suffix, answer, index)."""
    return [
        {"problem": f"Compute ${i} + \\frac{{1}}{{2}}$.", "answer": f"{2 * i + 1}/2", "index": i}
        for i in range(count)
    ]


# A task's held-out split comes off its training file: the gsm8k preset holds out 200 problems and
# deepscaler 100 (sweeps/task/), so each fixture has enough rows beyond those to train on.
FIXTURE_ROWS: dict[str, list[dict]] = {
    "aime24/test.jsonl": _AIME24,
    "aime25/test.jsonl": _AIME25,
    "amc/test.jsonl": _AMC,
    "amc23/test.jsonl": _AMC23,
    "math500/test.jsonl": _MATH500,
    "minerva_math/test.jsonl": _MINERVA,
    "olympiadbench/test.jsonl": _OLYMPIADBENCH,
    "gsm8k/test.jsonl": _GSM8K_TEST,
    "gsm8k/train.jsonl": _gsm8k_train(240),
    "dsr_sub/dsr_sub.jsonl": _dsr_sub(130),
}
"""Relative path under the data home -> its rows."""


def write_fixture_data(root: Path) -> Path:
    """Write every fixture file under `root` (JSON lines, UTF-8, as the real files); returns it."""
    for relative, rows in FIXTURE_ROWS.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return root
