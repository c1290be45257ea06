"""Grading throughput: in-process (num_workers=0) vs a 2-process pool, and an adversarial batch.

Completions are synthetic: a few sentences of reasoning ending in ``\\boxed{N}``, N the integer gold
for half of them and a nearby wrong integer otherwise. Two workloads of --items completions each:
- "distinct golds": every completion has its own gold, so each gold is parsed once (the worst case
  for the per-worker gold cache);
- "8 per gold": G = 8 rollouts share a gold, as in an RL batch.

Pool timings exclude worker start-up (printed separately): a trainer starts its Grader once. Each
workload runs --repeats times, sequential and pool alternately, each time on golds no process has
cached; the best rate of each is kept, since other processes may share the cores. The lowest CPU
time per answer (parent plus workers, from /proc) shows the work itself whatever the load: on a
busy machine compare it, not the rates.

Real benchmark answers: for every benchmark in the data home (``$QUADRANTS_DATA``, else
~/.cache/quadrants/data), the first --problems problems each give two completions, its own gold
boxed in a sentence (graded correct) and the gold of a problem with a different value (graded
wrong), the answers the grader sees at evaluation time (LaTeX fractions, intervals, units,
tuples ...). Sequential grading times every answer alone, so the slowest single answer is printed
too.

The adversarial batch mixes a 100 KB string, an answer math-verify cannot evaluate in time
(10^{10^{10^{10}}}), thousands of nested braces, invalid UTF-8 and junk types; its wall time is
bounded by the per-item timeout (default 5 s), not by the input.

    python benchmarks/grading_throughput.py [--items 400] [--repeats 3] [--timeout 5]
        [--problems 100] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import time
from pathlib import Path

from agreement import completion_for, different_value_partners

from quadrants.rewards.grader import Grader
from quadrants.tasks.benchmarks import default_data_dir, get_spec, known_benchmarks, load_benchmark

SEED = 0
ROLLOUTS_PER_GOLD = 8

ADVERSARIAL = [
    "x" * 100_000,
    "\\boxed{10^{10^{10^{10}}}}",
    "\\boxed{" + "{" * 5_000 + "1" + "}" * 5_000 + "}",
    "{" * 5_000 + "\\boxed{" * 5_000,
    b"\xff\xfe".decode("utf-8", "surrogateescape"),
    "\ud800\\boxed{\udfff}",
    "",
    None,
    "\\boxed{" + "9" * 900 + "}",
    "\\boxed{2}",
]


def synthetic_batch(
    items: int, rollouts_per_gold: int, first_gold: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    """``items`` completions ending in ``\\boxed{N}``, half right; golds from ``first_gold`` up."""
    completions, golds = [], []
    for index in range(items):
        gold = first_gold + index // rollouts_per_gold
        answer = gold if rng.random() < 0.5 else gold + rng.randrange(1, 9)
        completions.append(
            f"Let x be the unknown. Then 3x + 2 = {3 * gold + 2}, so 3x = {3 * gold} and "
            f"x = {gold}. Checking: 3 * {gold} + 2 = {3 * gold + 2}. "
            f"The answer is \\boxed{{{answer}}}."
        )
        golds.append(str(gold))
    return completions, golds


def cpu_seconds() -> float:
    """CPU time of this process plus its multiprocessing children (Linux /proc)."""
    total = time.process_time()
    for child in multiprocessing.active_children():
        with open(f"/proc/{child.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def measure(grader: Grader, completions: list[str], golds: list[str]) -> tuple[float, float]:
    """Answers per second (wall) and CPU milliseconds per answer of one `Grader.grade` call."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    grader.grade(completions, golds)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    return len(completions) / wall, 1e3 * cpu / len(completions)


def real_answers(name: str, data_dir: str, problems: int) -> tuple[list[str], list[str]]:
    """Two completions per problem: its own gold (correct) and a different-valued gold (wrong)."""
    golds = [p.answer for p in load_benchmark(name, data_dir=data_dir).problems]
    golds = golds[:problems] if problems else golds
    partners = different_value_partners(golds, SEED)
    completions, targets = [], []
    for index, gold in enumerate(golds):
        completions.append(completion_for(gold))
        targets.append(gold)
        if partners[index] is not None:
            completions.append(completion_for(golds[partners[index]]))
            targets.append(gold)
    return completions, targets


def measure_real(sequential: Grader, pool: Grader, data_dir: str, problems: int) -> None:
    """Answers/s per benchmark, sequential (one call per answer, timed) vs the pool (one batch)."""
    print(
        f"real benchmark answers from {data_dir} (first {problems or 'all'} problems "
        "each; 2 answers per problem)"
    )
    print(
        f"{'benchmark':<15}{'answers':>8}{'seq/s':>8}{'pool/s':>8}{'pool/seq':>10}"
        f"{'slowest ms':>12}   outcomes (pool)"
    )
    total_answers, total_seq, total_pool = 0, 0.0, 0.0
    for name in known_benchmarks():
        if not (Path(data_dir) / get_spec(name).local_file).is_file():
            print(f"{name:<15} (no data file; skipped)")
            continue
        completions, golds = real_answers(name, data_dir, problems)
        times = []
        for completion, gold in zip(completions, golds):
            start = time.perf_counter()
            sequential.grade([completion], [gold])
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        graded = pool.grade(completions, golds)
        pool_s = time.perf_counter() - start
        seq_s = sum(times)
        counts = {k: v for k, v in graded.counts().items() if v}
        print(
            f"{name:<15}{len(completions):>8}{len(completions) / seq_s:>8.0f}"
            f"{len(completions) / pool_s:>8.0f}{seq_s / pool_s:>10.2f}"
            f"{1e3 * max(times):>12.1f}   {counts}"
        )
        total_answers, total_seq, total_pool = (
            total_answers + len(completions),
            total_seq + seq_s,
            total_pool + pool_s,
        )
    if total_answers:
        print(
            f"{'all':<15}{total_answers:>8}{total_answers / total_seq:>8.0f}"
            f"{total_answers / total_pool:>8.0f}{total_seq / total_pool:>10.2f}"
        )


def main() -> None:
    """Print throughput per workload and the adversarial batch's wall time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--problems", type=int, default=100, help="per benchmark; 0 = all")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    args = parser.parse_args()
    rng = random.Random(SEED)
    next_gold = 1_000  # every batch gets new golds, so the per-process gold caches never help

    start = time.perf_counter()
    with Grader(num_workers=0, timeout_s=args.timeout) as sequential:
        sequential.grade(["\\boxed{1}"], ["1"])  # compile math-verify's regexes
        with Grader(num_workers=2, timeout_s=args.timeout) as pool:
            pool.grade(["\\boxed{1}"], ["1"])
            print(f"pool start-up (2 workers): {time.perf_counter() - start:.2f} s")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
            header = f"{'workload':<16}{'seq/s':>7}{'pool/s':>8}{'pool/seq':>10}"
            print(header + "   CPU ms/answer seq, pool")
            for name, per_gold in [("distinct golds", 1), ("8 per gold", ROLLOUTS_PER_GOLD)]:
                seq_runs, pool_runs = [], []
                for _ in range(args.repeats):  # alternate, on golds no cache has seen yet
                    first_gold = next_gold
                    next_gold += args.items
                    batch = synthetic_batch(args.items, per_gold, first_gold, rng)
                    seq_runs.append(measure(sequential, *batch))
                    pool_runs.append(measure(pool, *batch))  # workers have their own caches
                seq_rate, seq_cpu = max(r for r, _ in seq_runs), min(c for _, c in seq_runs)
                pool_rate, pool_cpu = max(r for r, _ in pool_runs), min(c for _, c in pool_runs)
                print(
                    f"{name:<16}{seq_rate:>7.0f}{pool_rate:>8.0f}{pool_rate / seq_rate:>10.2f}"
                    f"   {seq_cpu:.2f}, {pool_cpu:.2f}"
                )

            measure_real(sequential, pool, args.data_dir, args.problems)

            golds = ["1"] * (len(ADVERSARIAL) - 1) + ["2"]
            start = time.perf_counter()
            graded = pool.grade(ADVERSARIAL, golds)  # type: ignore[arg-type]  # None is junk
            wall = time.perf_counter() - start
            print(
                f"adversarial batch of {len(ADVERSARIAL)} (timeout {args.timeout:g} s): "
                f"{wall:.2f} s, outcomes {graded.counts()}, worker restarts {pool.restarts}"
            )


if __name__ == "__main__":
    main()
