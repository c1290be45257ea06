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

The adversarial batch mixes a 100 KB string, an answer math-verify cannot evaluate in time
(10^{10^{10^{10}}}), thousands of nested braces, invalid UTF-8 and junk types; its wall time is
bounded by the per-item timeout (default 5 s), not by the input.

    python benchmarks/grading_throughput.py [--items 400] [--repeats 3] [--timeout 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import time

from quadrants.rewards.grader import Grader

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


def main() -> None:
    """Print throughput per workload and the adversarial batch's wall time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=5.0)
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
