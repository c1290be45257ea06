"""The headline numbers of a training run, under short keys that fit MLflow's chart titles and
runs-table headers: `final/avg_at_<n>`, `final/pass_at_<n>` and `final/entropy`.

Logged once, with the last step (run/loop.py), beside the full keys they copy
(`eval/<benchmark>/avg_at_<n>`, `train/entropy`): MLflow cuts a chart title or column header after
about a dozen characters (`eval/arithm…`), so the long keys cannot be told apart at a glance. With
several benchmarks each keeps its name: `final/<benchmark>/avg_at_<n>`. `n` is the samples per
problem of the evaluation (`eval.benchmarks`' values, or `eval.samples` for the task's held-out
split), the largest k of its Pass@k curve.

The copies are rounded to `DECIMALS` places (an entropy of 0.69314718 shows as 0.6931 in the runs
table, which prints what is stored); the full values stay under the long keys, which is what the
analysis reads.

Which keys a configuration gives is known before the run (`headline_sources`), so the runs-page
view a sweep sets up (tracking/view.py) can name its columns before any run has logged them.
"""

from __future__ import annotations

from collections.abc import Mapping

from quadrants.tracking import keys

PREFIX = "final/"
ENTROPY = PREFIX + "entropy"
DECIMALS = 4  # of the headline copies (a display value: 4 places resolve 1 of 1,319 GSM8K problems)


def headline_sources(benchmarks: Mapping[str, int], task: str, samples: int) -> dict[str, str]:
    """{headline key: the logged key it copies}, Avg@n and Pass@n per benchmark then the entropy.

    `benchmarks`: `eval.benchmarks` (name -> n); empty means the task's held-out split, named
    `task`, at n = `samples`."""
    named = dict(benchmarks) or {task: samples}
    sources = {}
    for name, n in named.items():
        prefix = PREFIX if len(named) == 1 else f"{PREFIX}{name}/"
        for metric in (keys.avg_at(n), keys.pass_at(n)):
            sources[prefix + metric] = keys.evaluation(name, metric)
    sources[ENTROPY] = keys.train("entropy")
    return sources


def headline(metrics: Mapping[str, float], sources: Mapping[str, str]) -> dict[str, float]:
    """The headline keys whose source is in `metrics` (the last step's), with its value rounded to
    `DECIMALS` places."""
    return {
        short: round(float(metrics[long]), DECIMALS)
        for short, long in sources.items()
        if long in metrics
    }
