"""The eval presets of the Hydra tree compose to the paper's protocol and to a quick check."""

from __future__ import annotations

import pytest

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.tasks.benchmarks import default_data_dir, get_spec, known_benchmarks

pytestmark = pytest.mark.skipif(
    not all((default_data_dir() / get_spec(n).local_file).is_file() for n in known_benchmarks()),
    reason="needs the benchmark files of ../shared/data (the presets' files are checked at compose time)",
)


def test_paper_preset_is_the_papers_protocol():
    run = compose_run_config(["eval=paper"])
    cfg = run.eval
    assert (cfg.temperature, cfg.top_p) == (0.6, 0.95)
    assert dict(cfg.benchmarks) == {
        "aime24": 32,
        "aime25": 32,
        "amc23": 32,
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
