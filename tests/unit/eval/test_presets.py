"""The eval presets of the Hydra tree compose to the paper's protocol and to a quick check.

Their benchmark files are checked at compose time: the session's data home holds the fixture files
(tests/conftest.py), and a data home without them is refused, naming the command that fetches them.
"""

from __future__ import annotations

import pytest

from quadrants.launch.hydra_setup import compose_run_config


def test_paper_preset_is_the_papers_protocol():
    run = compose_run_config(["eval=paper"])
    cfg = run.eval
    assert (cfg.temperature, cfg.top_p) == (0.6, 0.95)
    assert dict(cfg.benchmarks) == {
        "aime24": 32,
        "aime25": 32,
        "amc": 32,
        "math500": 4,
        "minerva": 4,
        "olympiadbench": 4,
    }
    assert cfg.max_new_tokens == 3072 and cfg.limit is None and run.prompt.format == "auto"


def test_quick_preset_is_small_and_default_stays_the_toy_heldout_check():
    quick = compose_run_config(["eval=quick"]).eval
    assert (
        dict(quick.benchmarks) == {"arithmetic": 4, "gsm8k": 4, "math500": 4} and quick.limit == 5
    )
    default = compose_run_config([]).eval
    assert dict(default.benchmarks) == {} and (default.problems, default.samples) == (100, 4)


def test_a_preset_value_can_be_changed_and_a_bad_one_is_refused():
    assert (
        compose_run_config(["eval=paper", "eval.benchmarks.aime24=64"]).eval.benchmarks["aime24"]
        == 64
    )
    with pytest.raises(
        ValueError, match=r"eval.ks=\[64\]: pass@k needs k <= n, but aime24 draws n=32"
    ):
        compose_run_config(["eval=paper", "eval.ks=[64]"])


def test_a_preset_without_its_files_is_refused_naming_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("QUADRANTS_DATA", str(tmp_path))  # an empty data home
    with pytest.raises(FileNotFoundError) as refused:
        compose_run_config(["eval=paper"])
    message = str(refused.value)
    assert f"no data file at {tmp_path / 'aime24' / 'test.jsonl'}" in message
    assert "python -m quadrants.data download aime24" in message
    # printing needs no data: the same preset composes with the file check left out
    assert compose_run_config(["eval=paper"], files=False).eval.benchmarks["aime24"] == 32
