"""Grading under load: a wall-time budget makes rewards depend on machine load, a CPU-time
budget does not.

One slow but legitimate answer, ``\\boxed{\\int_0^\\infty e^{-x^2}dx}`` against
``\\frac{\\sqrt{\\pi}}{2}`` (about 2 s of CPU for math-verify), is graded by a one-worker `Grader`
with a --timeout budget, on an idle core and on a core shared with --busy spinning processes (the
worker and the spinners are pinned to the same CPU, so the worker gets about 1/(busy+1) of it). The
two clocks are interleaved in each repeat: ``clock="wall"`` (math-verify's own alarms, the behaviour
before issue 14) and ``clock="cpu"`` (the default now). With the wall clock the answer is correct
alone and times out under load; with the CPU clock it is correct either way, only slower.

    python benchmarks/grading_load.py [--timeout 5] [--busy 3] [--repeats 2] [--cpu 0]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

from quadrants.rewards.grader import Grader

COMPLETION = "\\boxed{\\int_0^\\infty e^{-x^2}dx}"
GOLD = "\\frac{\\sqrt{\\pi}}{2}"


def _spin() -> None:
    while True:
        pass


def grade_once(clock: str, timeout: float, busy: int, cpu: int) -> tuple[str, float]:
    """(outcome, wall seconds) of the slow answer with `busy` spinners on the worker's CPU."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    with Grader(num_workers=1, timeout_s=timeout, clock=clock) as grader:  # type: ignore[arg-type]
        for pid in grader.worker_pids():
            os.sched_setaffinity(pid, {cpu})
        for spinner in spinners:
            spinner.start()
            os.sched_setaffinity(spinner.pid, {cpu})
        try:
            start = time.monotonic()
            outcome = grader.grade([COMPLETION], [GOLD]).outcomes[0].value
            return outcome, time.monotonic() - start
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--busy", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpu", type=int, default=0)
    args = parser.parse_args()
    print(
        f"answer {COMPLETION} vs gold {GOLD}, budget {args.timeout} s, load 1-min avg "
        f"{os.getloadavg()[0]:.1f}"
    )
    print("| repeat | spinners | clock | outcome | wall s |")
    print("|---|---|---|---|---|")
    for repeat in range(args.repeats):
        for busy in (0, args.busy):
            for clock in ("wall", "cpu"):
                outcome, seconds = grade_once(clock, args.timeout, busy, args.cpu)
                print(f"| {repeat} | {busy} | {clock} | {outcome} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
