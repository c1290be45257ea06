"""The DeepScaleR-shaped rows of benchmarks/deepscaler_lengths.py (padding_fraction.py and
gpu_acceptance.py draw their rows there), on the session's data home of fixture files: problem i is
"Compute $i + \\frac{1}{2}$." (tests/data_fixtures.py), counted at 4 characters per token."""

from __future__ import annotations

import argparse
import math

import pytest

from benchmarks.deepscaler_lengths import (
    add_length_arguments,
    data_file,
    draw_rows,
    missing_data,
    require_data_file,
)
from quadrants.tasks.prompts import INSTRUCTION


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_length_arguments(parser)
    return parser.parse_args(["--tokenizer", "chars", *argv])


def test_rows_by_hand() -> None:
    args = options("--prompts", "3", "--group", "2", "--median", "24", "--sigma", "0")
    drawn = draw_rows(args, data_file())
    # plain format: the problem, a newline, the instruction. "Compute $7 + \frac{1}{2}$." is 26
    # characters with a 1-digit i, 27 with 2 digits, 28 with 3 (the fixture has i < 130)
    allowed = {math.ceil((25 + digits + 1 + len(INSTRUCTION)) / 4) for digits in (1, 2, 3)}
    assert set(drawn.prompt_tokens) <= allowed and len(drawn.prompt_tokens) == 3
    # G = 2 consecutive rows per prompt
    assert drawn.prompts == [n for n in drawn.prompt_tokens for _ in range(2)]
    # sigma 0: every response exp(log 24 + 0) = 24 tokens
    assert drawn.responses == [24] * 6
    assert sorted(drawn.order) == list(range(6))


def test_the_cut_and_the_seed() -> None:
    # median 24 cut at 20: every response is cut to 20
    cut = draw_rows(options("--prompts", "2", "--sigma", "0", "--median", "24", "--max-new-tokens",
                            "20"), data_file())  # fmt: skip
    assert cut.responses == [20] * 16
    # one seed, one draw; the default sigma 0.6 spreads the lengths
    again = [draw_rows(options("--prompts", "4", "--median", "24"), data_file()) for _ in range(2)]
    assert again[0] == again[1]
    assert len(set(again[0].responses)) > 1


def test_a_data_home_without_the_problems_stops_saying_what_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QUADRANTS_DATA", str(tmp_path))
    assert not data_file().is_file()
    with pytest.raises(SystemExit) as stopped:
        require_data_file("gpu_acceptance", "Or run --equal-rows.")
    message = str(stopped.value)
    assert message.startswith("gpu_acceptance: ") and message.endswith("Or run --equal-rows.")
    assert missing_data(data_file()) in message and "QUADRANTS_DATA" in message
