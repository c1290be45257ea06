"""Verifiable reward: is the last boxed answer of a completion equal to the gold answer?

`grade_one` sanitises the text, takes the last ``\\boxed{}`` (`extract.last_boxed`) and compares it
with the gold answer using math-verify, gold first (`verify(gold, pred)` is not symmetric). Both
sides are wrapped as inline maths, ``$...$``, before `math_verify.parse`: bare text is matched by
math-verify's plain-number regexes (``\\frac{\\sqrt{3}}{2}`` parses to nothing, a tuple to its first
number), and inside ``\\boxed{...}`` ``12.`` != ``12``. With ``$...$`` gold ``66`` matches
``\\boxed{66}``, ``\\frac{1}{2}`` matches ``0.5``, ``27.0`` (AMC golds are floats) matches ``27``
and ``336^\\circ`` matches ``336``.

Both sides are parsed with math-verify's LaTeX extraction only (`_EXTRACTION_CONFIG`), not its
default LaTeX-then-plain-expression pair. Where the LaTeX parser cannot read an answer, the plain
extraction falls back to some number inside it, so hedged or garbled boxes scored: ``5 (or 6)``,
``5 \\vee 6`` and ``5 ?? 6`` all read as ``6``, ``20\\% - 5`` as ``5``, ``20\\%+1`` as ``20`` and
``\\text{The answer is 5 or 6}`` as ``5`` (a free reward for hedging in RL). With LaTeX only such an
answer stays an unparsed string, equal only to the same string. The gold gets the same parser,
so that an answer is graded the same whichever side spells it which way, and a gold the LaTeX
parser cannot read is not silently cut down to one of its numbers; every benchmark gold reads
as before (MATH-500, Minerva, OlympiadBench, AIME, AMC, GSM8K, DSR boxed recall unchanged).

Both the gold and the boxed answer go through `normalize.normalize_answer` first (e-notation,
``-1./3``, a trailing period, a bare ``%``, a final ``\\%``, ``~``, ...), so an answer is graded
the same whichever side spells it which way. Dropping a final ``\\%`` there keeps the rule that
``10\\%`` equals ``10`` (the plain extraction used to supply it), while ``20\\%+1`` stays
unreadable instead of becoming ``20``.

math-verify compares a float with a number after rounding both to 6 decimal places
(``float_rounding=6``), and other numbers through a 15-digit ``evalf(chop=True)`` of their
difference, so tiny values all look alike: ``\\boxed{0.0}`` matched 14 of Minerva's 272 golds
(``1.325 \\times 10^{-27}``, ...), and ``-2.88 \\times 10^{-19}`` or ``2.88 \\times 10^{-18}``
matched ``2.88 \\times 10^{-19}``. So where math-verify finds two single real numbers equal,
`_verify` also asks that they agree to a relative tolerance of 1e-4 (as Qwen2.5-Math's evaluation
and verl's ``math_equal`` do, with ``math.isclose(rel_tol=1e-4)``). It only ever vetoes a match:
what math-verify calls different stays different.

math-verify bounds its own work with ``signal.alarm``, which works only in a process's main thread,
in whole seconds of *wall* time, and raises a `TimeoutException` that is a BaseException. A
wall-time budget makes rewards depend on machine load (a slow comparison passes alone and times out
in a busy batch), so `Grader` runs `grade_one` in worker processes (their main thread) with
``clock="cpu"``: math-verify's alarms are off and one ``ITIMER_PROF`` timer raises
`TimeoutException` after ``timeout_s`` seconds of the worker's own CPU time, whatever else runs on
the machine. Two limits back it from outside the interpreter:
- ``RLIMIT_CPU``, re-armed per item, lets the kernel end a worker stuck in C code that never returns
  to the interpreter (SIGXCPU, counted as `Outcome.timeout`);
- ``RLIMIT_AS`` caps each worker's address space at its size after start-up plus ``memory_mb``, so
  an answer like ``9!!!!`` fails with MemoryError (`Outcome.error`) instead of
  eating the node's memory.
A worker that dies or misses the parent's (generous, wall-time) deadline is replaced, its item gets
an outcome, and the rest of the batch is graded by the others.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import math
import multiprocessing
import multiprocessing.forkserver
import os
import re
import resource
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Literal

import math_verify
import sympy
from math_verify.errors import TimeoutException
from math_verify.utils import timeout as _math_verify_timeout

from quadrants.rewards.extract import (
    EXTRACTIONS,
    MAX_ANSWER_CHARS,
    MAX_COMPLETION_CHARS,
    boxed_or_last_number,
    last_boxed,
)
from quadrants.rewards.normalize import normalize_answer
from quadrants.rewards.outcome import Outcome

__all__ = ["MAX_COMPLETION_CHARS", "GradeBatch", "Grader", "Outcome", "grade_one"]

Clock = Literal["wall", "cpu"]

_UNSAFE_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
"""C0 controls but tab/newline/CR, DEL, lone surrogates (from ``surrogateescape``; not UTF-8)."""

log = logging.getLogger(__name__)
_GOLD_CACHE: dict[str, list] = {}  # a worker sees each gold G times per batch; parsing dominates
_GOLD_CACHE_SIZE = 4096
# A worker reports ready once math-verify is imported and warm (about 1.3 s of CPU). One that has
# not by _STARTUP_TIMEOUT_S but is alive is slow, not broken (two gloo ranks and another test
# lane on 2 cores took over 120 s), so it is waited for, said once, until _STARTUP_LIMIT_S; one that
# died, or is still not ready then, stops the grading with "failed to start".
_STARTUP_TIMEOUT_S = 120.0
_STARTUP_LIMIT_S = 900.0
_MAX_CHUNK = 64
_CPU_LIMIT_SLACK_S = (
    2  # RLIMIT_CPU sits this far past the item's CPU budget: only C code ignoring SIGPROF meets it
)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_REL_TOL = 1e-4  # two real numbers math-verify calls equal must also agree this closely (see top)
_EVALF_DIGITS = 30  # significant digits of that check: far finer than _REL_TOL, any exponent
# LaTeX only: math-verify's default plain-expression extraction reads a hedge as one of its numbers
_EXTRACTION_CONFIG = (math_verify.LatexExtractionConfig(),)

_Item = tuple[int, str, str]  # (index in the batch, completion, gold)


@dataclass(frozen=True)
class GradeBatch:
    """Grades of a batch, in input order.

    Attributes:
        rewards: 1.0 for a correct completion, else 0.0.
        outcomes: what happened to each completion.
    """

    rewards: list[float]
    outcomes: list[Outcome]

    @classmethod
    def from_outcomes(cls, outcomes: list[Outcome]) -> GradeBatch:
        """Rewards follow from outcomes: 1.0 exactly for `Outcome.correct`."""
        return cls([float(o is Outcome.correct) for o in outcomes], outcomes)

    def counts(self) -> dict[str, int]:
        """Number of completions per outcome, every outcome present (zeros included)."""
        return {o.value: self.outcomes.count(o) for o in Outcome}


def grade_one(completion: str, gold: str, timeout_s: float, *, clock: Clock = "wall") -> Outcome:
    """Grade one completion against one gold answer; never raises for bad input.

    Must run in the main thread of its process (the timers are signals). The budget ``timeout_s``
    covers parsing and verification together. With ``clock="wall"`` each math-verify step gets the
    remaining wall time rounded up to whole seconds (the alarm's resolution), so one item stops
    within about ``timeout_s + 1`` seconds unless C code ignores the alarm (see `Grader`). With
    ``clock="cpu"`` one ``ITIMER_PROF`` timer stops the item after ``timeout_s`` seconds of this
    process's CPU time (all its threads: use it in a single-threaded worker), so the outcome does
    not depend on how busy the machine is.

    Args:
        completion: model output; its last ``\\boxed{}`` is the answer. Non-str gives `error`.
        gold: reference answer as LaTeX without ``\\boxed`` (``"66"``, ``"\\frac{1}{2}"``);
            surrounding ``$`` are harmless. Empty, non-str or longer than 1000 chars gives `error`.
        timeout_s: time budget in seconds for this item.
        clock: "wall" (math-verify's own alarms) or "cpu" (this process's CPU time).

    Returns:
        The outcome; the reward is 1.0 iff it is `Outcome.correct`.

    Raises:
        RuntimeError: when called outside the main thread (math-verify would fail every item).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("grade_one must run in a main thread: math-verify uses signal.alarm")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock={clock!r} is unknown; choose one of ['wall', 'cpu']")
    # wall: a monotonic deadline math-verify's alarms count down to; cpu: no deadline, one CPU timer
    deadline = time.monotonic() + timeout_s if clock == "wall" else None
    if not isinstance(completion, str) or not isinstance(gold, str):
        return Outcome.error
    gold_latex = normalize_answer(_UNSAFE_CHARS.sub("", gold))
    if not gold_latex or len(gold_latex) > MAX_ANSWER_CHARS:
        return Outcome.error
    answer = last_boxed(_UNSAFE_CHARS.sub("", completion[-MAX_COMPLETION_CHARS:]))
    answer = normalize_answer(answer) if answer else answer
    if not answer:
        return Outcome.no_answer
    try:
        with _cpu_budget(timeout_s if clock == "cpu" else None):
            gold_parsed = _parse_gold(gold_latex, deadline)
            if not gold_parsed:
                return Outcome.error
            pred_parsed = _parse(answer, deadline)
            if not pred_parsed:
                return Outcome.no_answer
            return _verify(gold_parsed, pred_parsed, deadline)
    except TimeoutException:
        return Outcome.timeout
    except Exception:  # noqa: BLE001 - sympy/antlr raise anything on odd input (even MemoryError)
        return Outcome.error


def _raise_timeout(signum: int, frame: object) -> None:
    raise TimeoutException("CPU-time budget spent")


@contextmanager
def _cpu_budget(seconds: float | None) -> Iterator[None]:
    """Raise `TimeoutException` in this thread once the process has used ``seconds`` of CPU time.

    None: no timer. The timer is one-shot and disarmed on exit, and the previous handler restored.
    """
    if seconds is None:
        yield
        return
    previous = signal.signal(signal.SIGPROF, _raise_timeout)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _alarm_seconds(deadline: float | None) -> int | None:
    """Whole seconds left before ``deadline`` for math-verify's alarm; raise once it is passed.

    None (the CPU-time clock) turns math-verify's own alarms off.
    """
    if deadline is None:
        return None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutException("grading budget spent")
    return max(1, math.ceil(remaining))


def _parse(latex: str, deadline: float | None) -> list:
    """math-verify parse of ``$latex$`` (inline maths cannot span lines, hence the spaces), LaTeX
    extraction only: an answer the LaTeX parser cannot read is a string, never one of its numbers.
    """
    latex = latex.replace("\n", " ").replace("\r", " ")
    return math_verify.parse(
        f"${latex}$",
        extraction_config=_EXTRACTION_CONFIG,
        parsing_timeout=_alarm_seconds(deadline),
        raise_on_error=True,
    )


def _parse_gold(latex: str, deadline: float | None) -> list:
    """`_parse` with a per-process cache: each prompt's gold comes G times per batch."""
    parsed = _GOLD_CACHE.get(latex)
    if parsed is None:
        parsed = _parse(latex, deadline)
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[latex] = parsed
    return parsed


def _verify(gold_parsed: list, pred_parsed: list, deadline: float | None) -> Outcome:
    """Any (gold, pred) pair equal -> correct, as `math_verify.verify` on lists does, unless the
    pair is two real numbers further apart than `_REL_TOL` (`_numbers_differ`).

    We loop over pairs ourselves so that a timeout stops the item (instead of being logged and
    counted as False) and an exception in one pair still lets the others match.
    """
    failed = False
    for gold_item, pred_item in itertools.product(gold_parsed, pred_parsed):
        try:
            seconds = _alarm_seconds(deadline)
            equal = math_verify.verify(
                gold_item, pred_item, timeout_seconds=seconds, raise_on_error=True
            )
            if equal:
                differ = _math_verify_timeout(_alarm_seconds(deadline))(_numbers_differ)
                if not differ(gold_item, pred_item):
                    return Outcome.correct
        except Exception:  # noqa: BLE001 - as math-verify does: a failing pair is not a match
            failed = True
    return Outcome.error if failed else Outcome.wrong


def _numbers_differ(gold_item: object, pred_item: object) -> bool:
    """True iff both items are single real numbers whose relative difference exceeds `_REL_TOL`.

    The veto on math-verify's 6-decimal rounding: gold ``1.325 \\times 10^{-27}`` against ``0.0``
    (or ``-1.325 \\times 10^{-27}``, or ``1.325 \\times 10^{-28}``) differs; against ``1.325e-27``
    or ``1.3250 \\times 10^{-27}`` it does not. Anything else (a tuple, a set, an expression with a
    variable, a complex number, infinity, a value that cannot be told apart from zero) returns
    False and math-verify's verdict stands: a veto, never a new match.
    """
    gold_value, pred_value = _real_value(gold_item), _real_value(pred_item)
    if gold_value is None or pred_value is None:
        return False
    # math.isclose(gold, pred, rel_tol=_REL_TOL) in sympy Floats: no float underflow at 1e-400
    return abs(gold_value - pred_value) > _REL_TOL * max(abs(gold_value), abs(pred_value))


def _real_value(item: object) -> sympy.Float | None:
    """The value of ``item`` to `_EVALF_DIGITS` digits when it is one finite real number, else None.

    An assignment ``x = 5`` stands for its right-hand side, as math-verify reads it against a
    bare number. A percentage math-verify keeps as ``x * (1/100)`` is left to math-verify (its
    reading of it depends on the other side). ``strict=True`` makes a value sympy cannot tell
    from zero (``\\log_2 8 - 3``) raise instead of coming back as noise like ``-0.e-166``.
    """
    if isinstance(item, sympy.Eq) and isinstance(item.lhs, sympy.Symbol):
        item = item.rhs
    if not isinstance(item, sympy.Expr) or not item.is_number or item.has(sympy.UnevaluatedExpr):
        return None
    try:
        value = item.evalf(_EVALF_DIGITS, strict=True)
    except Exception:  # noqa: BLE001 - PrecisionExhausted, or anything sympy raises on odd input
        return None
    if not isinstance(value, sympy.Number) or not value.is_finite:  # complex: an Add with I
        return None
    return sympy.Float(value, _EVALF_DIGITS)


# --- process pool -------------------------------------------------------------------------------


def _worker_main(conn: Connection, timeout_s: float, clock: Clock, memory_mb: float | None) -> None:
    """Worker loop: receive chunks of ``(index, completion, gold)``, send ``(index, outcome)``.

    One message per item lets the parent time each item; one request per chunk keeps IPC small.
    """
    _shut_down_with_parent()
    if clock == "cpu":
        # our CPU timer replaces math-verify's alarms; its one-off "timeout is
        # disabled" warning is moot
        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    grade_one(
        "\\boxed{1}", "1", timeout_s, clock=clock
    )  # warm up imports and math-verify's regex caches
    if memory_mb is not None:
        cap_address_space(memory_mb)
    try:
        conn.send(None)  # ready: the parent starts item deadlines only now
        while True:
            chunk = conn.recv()
            if chunk is None:
                return
            for index, completion, gold in chunk:
                if clock == "cpu":
                    _arm_cpu_limit(timeout_s)
                conn.send((index, grade_one(completion, gold, timeout_s, clock=clock).value))
    except (EOFError, OSError):  # the parent is gone (closed, reset or broken pipe): leave quietly
        return


def _shut_down_with_parent() -> None:
    """Signals are the trainer's: Ctrl-C and SIGTERM (SLURM sends it to every process of a job step)
    are ignored here, so the trainer can checkpoint with its workers intact and close them itself.
    And a worker never outlives its parent process: on Linux the kernel sends it SIGKILL when the
    parent (the forkserver, which exits with the trainer) dies, even while it is busy in C code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A forkserver child holds the forkserver's "alive" pipe, which keeps the forkserver running
    # while any child lives; a worker starts no processes, so it lets go, and the forkserver exits
    # with the trainer (taking the workers with it, below).
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        try:
            os.close(alive_fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: EOF on the pipe still ends an idle worker
            pass


def address_space_bytes() -> int | None:
    """This process's current virtual address-space size (Linux /proc), or None where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def cap_address_space(memory_mb: float) -> None:
    """Cap this process's address space (RLIMIT_AS) at its current size plus ``memory_mb`` MiB.

    Relative to the current size because a process with sympy (and whatever its start method
    inherited) already maps hundreds of MiB it never touches; what we bound is the growth.
    Past the cap an allocation fails: Python raises MemoryError, C code may
    abort (a crashed worker).
    """
    current = address_space_bytes()
    if current is None:
        return
    limit = current + int(memory_mb * 2**20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _arm_cpu_limit(timeout_s: float) -> None:
    """Soft RLIMIT_CPU a little past this item's CPU budget: the kernel's SIGXCPU ends the worker
    if C code never returns to the interpreter, where the SIGPROF timer would raise."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + timeout_s) + _CPU_LIMIT_SLACK_S
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or soft <= hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


@dataclass
class _Worker:
    """Parent-side handle of one worker process and the items it is grading."""

    process: BaseProcess
    conn: Connection
    deadline: float  # monotonic time by which it must next report (start-up, then per item)
    started: float = 0.0  # monotonic time of its start
    ready: bool = False
    slow_start_said: bool = False
    pending: deque[_Item] = field(default_factory=deque)  # sent, not yet graded, in order

    def kill(self) -> None:
        """Stop the process now and release its pipe."""
        self.process.kill()
        self.process.join(timeout=5.0)
        self.conn.close()


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While a worker starts, the parent's `__main__` names no file or module, so the worker does
    not run it again. A forkserver or spawn child imports the parent's main module before its
    target (CPython Lib/multiprocessing/spawn.py `get_preparation_data` -> `prepare` ->
    `_fixup_main_from_path`/`_from_name`); Python 3.11's forkserver never preloads it (its
    `ensure_running` passes `main_path`, which `get_preparation_data` names
    `init_main_from_path`), so every worker of a training script re-imported torch, transformers
    and the trainer: about 9 s per worker, measured with py-spy on tests/distributed/worker.py. The
    target lives in this module, so the worker needs nothing of `__main__`."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    names = ("__spec__", "__file__")
    hidden = {name: main.__dict__[name] for name in names if name in main.__dict__}
    try:
        main.__spec__ = None
        main.__dict__.pop("__file__", None)
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(hidden)


def _ensure_standard_start_method() -> None:
    """Make this process's default start method a standard one.

    A forkserver/spawn child re-applies its parent's *default* start method while bootstrapping.
    Inside a joblib/loky worker (Hydra's joblib launcher) that default is "loky", which a plain
    child cannot resolve, so every grading worker would die at start. Resetting the default (not
    loky's own explicit contexts) fixes the child and leaves loky alone.
    """
    method = multiprocessing.get_start_method(allow_none=True)
    if method is not None and method not in ("fork", "spawn", "forkserver"):
        multiprocessing.set_start_method("spawn", force=True)


def held_cpus(environ: Mapping[str, str] | None = None) -> int:
    """The CPUs this task holds: SLURM_CPUS_PER_TASK inside a Slurm job step (what the job asked
    for; the affinity mask can be wider when Slurm does not bind tasks), else the CPUs this process
    may run on (`os.sched_getaffinity`; `os.cpu_count` where that does not exist)."""
    environ = os.environ if environ is None else environ
    slurm = environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def grader_workers(requested: int = 0, environ: Mapping[str, str] | None = None) -> int:
    """Grading worker processes: `requested` (task.grader_workers) when above 0, else one per CPU
    the task holds less one for the trainer's own process, at least 1. A step's 2,048 answers then
    grade on 7 workers of an 8-CPU task, not on one."""
    if requested > 0:
        return requested
    return max(1, held_cpus(environ) - 1)


class Grader:
    """Grades batches of completions in worker processes, with a hard per-item deadline.

    Workers start with the grader and take 1-3 s to import sympy (so does a replacement).
    ``Grader(num_workers=0)`` grades in the calling process instead, which must then be its main
    thread; there the budget is math-verify's wall-time alarm, and no hard deadline, CPU limit or
    memory cap applies. Not thread-safe: one `grade` call at a time.

    Args:
        num_workers: worker processes; 0 grades in the calling process.
        timeout_s: per-item budget (see `grade_one`), seconds of the worker's CPU time with
            ``clock="cpu"``, of wall time with ``clock="wall"``.
        clock: "cpu" (default: outcomes independent of machine load) or "wall" (math-verify's own
            alarms, the behaviour before CPU-time budgets).
        memory_mb: how far (MiB) a worker's address space may grow past its size after start-up
            (RLIMIT_AS); None = no cap. ``\\boxed{9!!!!}`` reaches ~800 MB in 5 s without it.
        extraction: how the final answer is read (`extract.EXTRACTIONS`): the last box, or the
            last box and else the last number (`extract.boxed_or_last_number`).
        deadline_margin_s: with ``clock="wall"``, a worker that has not reported an item
            ``timeout_s`` plus this long after its previous report is killed. The default covers
            the alarm's rounding up to whole seconds plus a second of slack.
        wall_limit_s: with ``clock="cpu"``, the parent's wall-time backstop per item (default
            ``10 * (timeout_s + deadline_margin_s)``, at least 60 s): CPU-bound work is stopped by
            the worker's own timers, so this only catches a worker that is blocked, not computing.
    """

    def __init__(
        self,
        num_workers: int = 2,
        timeout_s: float = 5.0,
        *,
        clock: Clock = "cpu",
        memory_mb: float | None = 512.0,
        deadline_margin_s: float = 2.0,
        wall_limit_s: float | None = None,
        extraction: str = "boxed",
    ) -> None:
        if num_workers < 0 or timeout_s <= 0 or deadline_margin_s < 0:
            raise ValueError(f"bad Grader({num_workers=}, {timeout_s=}, {deadline_margin_s=})")
        if clock not in ("wall", "cpu"):
            raise ValueError(f"Grader clock={clock!r} is unknown; choose one of ['wall', 'cpu']")
        if (memory_mb is not None and memory_mb <= 0) or (
            wall_limit_s is not None and wall_limit_s <= 0
        ):
            raise ValueError(f"bad Grader({memory_mb=}, {wall_limit_s=}): both must be > 0 or None")
        if extraction not in EXTRACTIONS:
            raise ValueError(
                f"unknown answer extraction {extraction!r}; choose one of {list(EXTRACTIONS)}"
            )
        self.extraction = extraction
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.clock: Clock = clock
        self.memory_mb = memory_mb
        if clock == "wall":
            self.item_deadline_s = timeout_s + deadline_margin_s
        else:
            default_wall = max(60.0, 10.0 * (timeout_s + deadline_margin_s))
            self.item_deadline_s = default_wall if wall_limit_s is None else wall_limit_s
        self.restarts = 0  # workers killed after missing a deadline or crashing, over the lifetime
        # Not fork: the parent holds torch (and other) threads, and a forked lock stays locked.
        _ensure_standard_start_method()
        self._context = (
            multiprocessing.get_context("forkserver")
            if "forkserver" in multiprocessing.get_all_start_methods()
            else multiprocessing.get_context("spawn")
        )
        if self._context.get_start_method() == "forkserver":
            # The forkserver (one per process, started with its first child) imports this module
            # and math-verify once; every worker forked from it then starts with them imported
            # (about 1.3 s of CPU each otherwise). Without effect once the forkserver runs
            # (CPython Lib/multiprocessing/forkserver.py `set_forkserver_preload`).
            self._context.set_forkserver_preload([__name__])
        self._workers: list[_Worker] = [self._start_worker() for _ in range(num_workers)]
        self._closed = False

    def __enter__(self) -> Grader:  # noqa: PYI034 - typing.Self needs Python 3.11
        """Use as ``with Grader(...) as grader:``; the workers stop on exit."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop the workers."""
        self.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for pinning or inspecting them;
        empty with 0 workers)."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    def close(self) -> None:
        """Stop the workers; idempotent."""
        self._closed = True
        for worker in self._workers:
            try:
                worker.conn.send(None)
                worker.process.join(timeout=1.0)
            except (OSError, ValueError):
                pass
            worker.kill()
        self._workers = []

    def grade(self, completions: Sequence[str], golds: Sequence[str]) -> GradeBatch:
        """Grade ``completions[i]`` against ``golds[i]`` for every i.

        Any item (junk types, invalid text, huge or pathological answers) yields an outcome, and
        none holds a worker longer than ``timeout_s + deadline_margin_s``. Raises only for misuse
        (lengths differ, closed grader, wrong thread) or if a fresh worker cannot start.
        """
        if self._closed:
            raise RuntimeError("Grader is closed")
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} golds")
        # Non-str items are errors (as in `grade_one`) and never reach pickle; long completions are
        # cut before they reach a pipe.
        outcomes = [Outcome.error] * len(completions)
        if self.extraction == "boxed_or_last_number":
            completions = [
                boxed_or_last_number(c[-MAX_COMPLETION_CHARS:]) if isinstance(c, str) else c
                for c in completions
            ]
        items = [
            (index, completion[-MAX_COMPLETION_CHARS:], gold)
            for index, (completion, gold) in enumerate(zip(completions, golds))
            if isinstance(completion, str) and isinstance(gold, str)
        ]
        if self.num_workers == 0:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("Grader(num_workers=0) must be used from the main thread")
            for index, completion, gold in items:
                outcomes[index] = grade_one(
                    completion, gold, self.timeout_s
                )  # wall clock: see the class
            return GradeBatch.from_outcomes(outcomes)
        try:
            self._grade_in_pool(items, outcomes)
            return GradeBatch.from_outcomes(outcomes)
        except BaseException:
            # Interrupted (Ctrl-C, a bug): workers may still hold our items; start clean next time.
            for worker in self._workers:
                worker.kill()
            self._workers = []
            raise

    def _start_worker(self) -> _Worker:
        """Launch one worker; it reports ready (None) once math-verify is imported and warm."""
        parent_conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main,
            args=(child_conn, self.timeout_s, self.clock, self.memory_mb),
            daemon=True,
        )
        with _main_module_hidden():
            process.start()
        child_conn.close()
        started = time.monotonic()
        return _Worker(process, parent_conn, started + _STARTUP_TIMEOUT_S, started=started)

    @staticmethod
    def _still_starting(worker: _Worker, now: float) -> bool:
        """Whether `worker`, past its deadline, is alive and still starting within
        _STARTUP_LIMIT_S (then its deadline moves there, said once), not failed."""
        if worker.ready or not worker.process.is_alive():
            return False
        if now - worker.started >= _STARTUP_LIMIT_S:
            return False
        if not worker.slow_start_said:
            worker.slow_start_said = True
            log.warning(
                "a grading worker has not started after %.0f s (importing math-verify; is the "
                "machine's CPU shared with other jobs?); waiting for it up to %.0f s",
                now - worker.started,
                _STARTUP_LIMIT_S,
            )
        worker.deadline = worker.started + _STARTUP_LIMIT_S
        return True

    def _grade_in_pool(self, items: list[_Item], outcomes: list[Outcome]) -> None:
        """Grade ``items`` into ``outcomes[index]``, handing chunks to workers as they free up.

        A worker that misses a deadline is killed and replaced: its current item times out and
        the rest of its chunk goes back to the queue.
        """
        while len(self._workers) < self.num_workers:
            self._workers.append(self._start_worker())
        size = max(1, min(_MAX_CHUNK, math.ceil(len(items) / (4 * self.num_workers))))
        chunks = deque(items[i : i + size] for i in range(0, len(items), size))

        def replace(worker: _Worker, blame: Outcome) -> None:
            """Kill ``worker``: its current item gets ``blame``; requeue the rest."""
            if not worker.ready:  # not the input's fault; `grade` then kills the other workers
                raise RuntimeError(f"grading worker failed to start: {worker.process.exitcode=}")
            worker.kill()
            self.restarts += 1
            if worker.pending:
                outcomes[worker.pending.popleft()[0]] = blame
            if worker.pending:
                chunks.appendleft(list(worker.pending))
            self._workers[self._workers.index(worker)] = self._start_worker()

        while chunks or any(worker.pending for worker in self._workers):
            for worker in list(self._workers):
                if worker.ready and not worker.pending and chunks:
                    if not worker.process.is_alive():  # died while idle: no item to blame
                        replace(worker, Outcome.error)
                        continue
                    chunk = chunks.popleft()
                    worker.pending.extend(chunk)
                    worker.deadline = time.monotonic() + self.item_deadline_s
                    try:
                        worker.conn.send(chunk)
                    except OSError:  # died just now: the read below sees EOF
                        pass
            timeout = min(worker.deadline for worker in self._workers) - time.monotonic()
            conns = [worker.conn for worker in self._workers]
            for conn in wait(conns, None if timeout == math.inf else max(0.0, timeout)):
                worker = next(w for w in self._workers if w.conn is conn)
                try:
                    message = worker.conn.recv()
                except (
                    EOFError,
                    OSError,
                ):  # crashed (segfault, OOM kill, CPU limit) on its current item
                    worker.process.join(timeout=5.0)  # for its exit code
                    over_cpu = worker.process.exitcode == -signal.SIGXCPU  # RLIMIT_CPU: out of time
                    replace(worker, Outcome.timeout if over_cpu else Outcome.error)
                    continue
                if message is None:  # start-up done
                    worker.ready = True
                else:
                    index, value = message
                    outcomes[index] = Outcome(value)
                    worker.pending.popleft()  # a worker grades its chunk in order
                worker.deadline = time.monotonic() + self.item_deadline_s
                if not worker.pending:
                    worker.deadline = math.inf
            now = time.monotonic()
            for worker in list(self._workers):
                if worker.deadline <= now and not self._still_starting(worker, now):
                    replace(worker, Outcome.timeout)
