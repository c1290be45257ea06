"""The headline keys of a training run: short names for MLflow's table and chart titles."""

from __future__ import annotations

from quadrants.tracking.headline import headline, headline_sources


def test_one_evaluation_gives_final_avg_pass_and_entropy():
    # the task's held-out split (no eval.benchmarks): named after the task, n = eval.samples = 4
    assert headline_sources({}, "arithmetic", 4) == {
        "final/avg_at_4": "eval/arithmetic/avg_at_4",
        "final/pass_at_4": "eval/arithmetic/pass_at_4",
        "final/entropy": "train/entropy",
    }
    # one configured benchmark: its own n (16), not eval.samples
    assert list(headline_sources({"aime24": 16}, "arithmetic", 4)) == [
        "final/avg_at_16",
        "final/pass_at_16",
        "final/entropy",
    ]


def test_several_benchmarks_keep_their_names():
    assert headline_sources({"aime24": 32, "math500": 4}, "math", 4) == {
        "final/aime24/avg_at_32": "eval/aime24/avg_at_32",
        "final/aime24/pass_at_32": "eval/aime24/pass_at_32",
        "final/math500/avg_at_4": "eval/math500/avg_at_4",
        "final/math500/pass_at_4": "eval/math500/pass_at_4",
        "final/entropy": "train/entropy",
    }


def test_headline_copies_the_last_steps_values_it_finds():
    sources = headline_sources({}, "arithmetic", 4)
    last = {
        "eval/arithmetic/avg_at_4": 0.625,
        "eval/arithmetic/pass_at_2": 0.75,  # not a headline: Pass@n is at n = 4
        "eval/arithmetic/pass_at_4": 0.875,
        "train/entropy": 1.25,
        "train/solve_rate": 0.5,
    }
    assert headline(last, sources) == {
        "final/avg_at_4": 0.625,
        "final/pass_at_4": 0.875,
        "final/entropy": 1.25,
    }
    # evaluation off (eval.problems=0): the entropy alone
    assert headline({"train/entropy": 2.0}, sources) == {"final/entropy": 2.0}


def test_the_copies_are_rounded_for_the_table_and_the_sources_are_not_touched():
    sources = headline_sources({}, "arithmetic", 4)
    last = {"eval/arithmetic/avg_at_4": 1 / 3, "train/entropy": 0.6931471805599453}
    # 1/3 = 0.33333333 -> 0.3333; ln 2 = 0.69314718 -> 0.6931 (4 places)
    assert headline(last, sources) == {"final/avg_at_4": 0.3333, "final/entropy": 0.6931}
    assert last["train/entropy"] == 0.6931471805599453
