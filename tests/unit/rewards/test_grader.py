"""grade_one and Grader with real math-verify and real worker processes (no mocks).

Time bounds here are correctness bounds (nothing hangs), set generously for a loaded 2-core machine;
a worker takes ~2-4 s to start (it imports sympy), which dominates this file's run time.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from math_verify.errors import TimeoutException

from quadrants.rewards.grader import GradeBatch, Grader, Outcome, grade_one

# math-verify turns 10^(10^(10^10)) into an integer power it tries to evaluate: only its alarm
# stops it. Any answer this slow is a real, input-driven stuck grader.
SLOW_ANSWER = "\\boxed{10^{10^{10^{10}}}}"


@pytest.fixture(scope="module")
def pool() -> Iterator[Grader]:
    with Grader(num_workers=2, timeout_s=2.0) as grader:
        yield grader


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("so the answer is \\boxed{0.5}.", "\\frac{1}{2}"),
        ("\\boxed{66}", "66"),
        ("\\boxed{27}", "27.0"),  # AMC golds are floats
        ("\\boxed{\\dfrac{1}{2}}", "0.5"),
        ("\\boxed{336}", "336^\\circ"),  # the AIME25 answer written with a degree sign
        ("\\boxed{\\frac{\\sqrt3}{2}}", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{x = 5}", "5"),
        ("\\boxed{10\\%}", "10"),  # the grader's rule: a percentage equals its number, not /100
        (
            "\\boxed{\\begin{pmatrix} 1 \\\\\n 2 \\end{pmatrix}}",
            "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        ),
        ("\\boxed{12}", "$12$"),  # OlympiadBench golds come wrapped in $
    ],
)
def test_equivalent_forms_are_correct(completion: str, gold: str) -> None:
    assert grade_one(completion, gold, timeout_s=5.0) is Outcome.correct


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("\\boxed{65}", "66"),
        ("\\boxed{0.51}", "\\frac{1}{2}"),
        ("\\boxed{0.33}", "\\frac{1}{3}"),  # math-verify rounds to 6 places, not 2
        ("\\boxed{-\\infty}", "\\infty"),
        ("\\boxed{0.5}", "50\\%"),  # see the percentage case above
        ("\\boxed{66} no wait, \\boxed{67}", "66"),  # only the last box counts
    ],
)
def test_wrong_answers_are_wrong(completion: str, gold: str) -> None:
    assert grade_one(completion, gold, timeout_s=5.0) is Outcome.wrong


def test_gold_goes_first() -> None:
    # verify(gold, pred) is not symmetric: an interval answer matches an inequality gold only
    assert grade_one("\\boxed{(1, 2)}", "1 < x < 2", timeout_s=5.0) is Outcome.correct
    assert grade_one("\\boxed{1 < x < 2}", "(1, 2)", timeout_s=5.0) is Outcome.wrong


@pytest.mark.parametrize(
    "completion",
    ["The answer is 66.", "", "\\boxed{}", "\\boxed{ }", "\\boxed{66", "\\boxed{$}"],
)
def test_missing_answer(completion: str) -> None:
    assert grade_one(completion, "66", timeout_s=5.0) is Outcome.no_answer


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        (None, "1"),
        (b"\\boxed{1}", "1"),
        ("\\boxed{1}", None),
        ("\\boxed{1}", ""),
        ("\\boxed{1}", "1" * 1001),
    ],
)
def test_invalid_input_is_an_error(completion: object, gold: object) -> None:
    assert grade_one(completion, gold, timeout_s=5.0) is Outcome.error  # type: ignore[arg-type]


def test_text_is_sanitised() -> None:
    invalid_utf8 = b"\xff\xfe".decode("utf-8", "surrogateescape")  # -> lone surrogates
    assert grade_one(invalid_utf8, "1", timeout_s=5.0) is Outcome.no_answer
    assert (
        grade_one(invalid_utf8 + "\\boxed{1}\ud800\x00\x0c", "1", timeout_s=5.0) is Outcome.correct
    )


@pytest.mark.slow
def test_slow_answer_times_out_in_process() -> None:
    # math-verify's alarm has whole-second resolution: a 0.5 s budget becomes a 1 s alarm
    start = time.monotonic()
    assert grade_one(SLOW_ANSWER, "5", timeout_s=0.5) is Outcome.timeout
    assert time.monotonic() - start < 5.0


def test_main_thread_only() -> None:
    errors: list[BaseException] = []

    def run(fn: Callable[[], object]) -> None:
        try:
            fn()
        except RuntimeError as error:
            errors.append(error)

    sequential = Grader(num_workers=0)
    for fn in (lambda: grade_one("\\boxed{1}", "1", 1.0), lambda: sequential.grade(["x"], ["1"])):
        thread = threading.Thread(target=run, args=(fn,))
        thread.start()
        thread.join()
    assert len(errors) == 2


def test_grade_batch_counts() -> None:
    batch = GradeBatch.from_outcomes([Outcome.correct, Outcome.wrong, Outcome.correct])
    assert batch.rewards == [1.0, 0.0, 1.0]
    assert batch.counts() == {"correct": 2, "wrong": 1, "no_answer": 0, "timeout": 0, "error": 0}


@pytest.mark.slow
def test_pool_matches_sequential(pool: Grader) -> None:
    # 60 items: integers right and wrong, fractions, no box; 60 / (4 x 2 workers) -> chunks of 8
    completions = [f"step {i} ... \\boxed{{{i if i % 3 else i + 1}}}" for i in range(40)]
    completions += [f"\\boxed{{\\frac{{{i}}}{{{i + 1}}}}}" for i in range(10)] + ["no box"] * 10
    golds = [str(i) for i in range(40)] + [f"{i}/{i + 1}" for i in range(10)] + ["7"] * 10
    sequential = Grader(num_workers=0).grade(completions, golds)
    pooled = pool.grade(completions, golds)
    assert pooled == sequential
    assert pooled.counts() == {
        "correct": 36,
        "wrong": 14,
        "no_answer": 10,
        "timeout": 0,
        "error": 0,
    }


@pytest.mark.slow
def test_pool_survives_adversarial_batch(pool: Grader) -> None:
    completions = [
        "x" * 100_000,
        SLOW_ANSWER,
        "\\boxed{" + "{" * 5_000 + "1" + "}" * 5_000 + "}",
        "{" * 5_000 + "\\boxed{" * 5_000,
        b"\xff\xfe".decode("utf-8", "surrogateescape"),
        "\ud800\udfff\\boxed{\ud800}",
        "",
        None,
        123,
        lambda: 0,  # not even picklable
        "\\boxed{" + "9" * 900 + "}",
        "\\boxed{\\frac{\\frac{\\frac{1}{2}}{3}}{" * 50 + "}" * 200,
    ]
    restarts = pool.restarts
    start = time.monotonic()
    golds = ["1"] * len(completions) + ["2"]
    batch = pool.grade(completions + ["\\boxed{2}"], golds)  # type: ignore[arg-type]
    assert time.monotonic() - start < 20.0  # one 2 s math-verify alarm; the rest take ms
    assert batch.rewards == [0.0] * len(completions) + [1.0]
    assert batch.outcomes[1] is Outcome.timeout
    assert pool.restarts == restarts  # math-verify's own alarm sufficed: nobody was killed


@pytest.mark.subprocess
def test_stuck_worker_is_killed_and_replaced() -> None:
    # With a 0.25 s budget math-verify's alarm still waits a whole second, so the hard deadline
    # (0.25 + 0.25 s) is what stops the slow item: the worker is killed mid-item and replaced.
    # 9 items on 1 worker go in chunks of 3: [0 1 2] [3 4 5] [6 7 8]. Slow item 2 ends its chunk;
    # slow item 3 starts one, so items 4 and 5 are requeued to the replacement worker.
    before = {process.pid for process in multiprocessing.active_children()}
    with Grader(num_workers=1, timeout_s=0.25, clock="wall", deadline_margin_s=0.25) as grader:
        completions = [f"\\boxed{{{i}}}" for i in range(9)]
        completions[2] = completions[3] = SLOW_ANSWER
        start = time.monotonic()
        batch = grader.grade(completions, ["5"] * 9)
        assert time.monotonic() - start < 25.0  # two 0.5 s deadlines + two worker restarts
        assert batch.outcomes[2:4] == [Outcome.timeout, Outcome.timeout]
        assert batch.rewards == [0.0] * 5 + [1.0] + [0.0] * 3
        assert grader.restarts == 2
        assert grader.grade(["\\boxed{6}"], ["6"]).outcomes == [Outcome.correct]

        # a worker that dies while idle is replaced too, and no item is blamed
        (worker,) = [p for p in multiprocessing.active_children() if p.pid not in before]
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=5.0)
        assert grader.grade(["\\boxed{7}"], ["7"]).outcomes == [Outcome.correct]
        assert grader.restarts == 3


def test_bad_calls_raise(pool: Grader) -> None:
    with pytest.raises(ValueError, match="2 completions but 1 golds"):
        pool.grade(["a", "b"], ["1"])
    grader = Grader(num_workers=0)
    grader.close()
    with pytest.raises(RuntimeError, match="closed"):
        grader.grade(["a"], ["1"])


# ---- issue 14: both sides normalised alike, CPU-time budgets, a memory cap -------------------------


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        (
            "4.5e33",
            "4.5 \\times 10^{33}",
        ),  # Minerva's gold spelling, rewritten by the benchmark loader
        ("4.5 \\times 10^{33}", "4.5e33"),  # ... and the mirror: a raw e-notation gold
        ("4.5e33", "4.5e33"),
        ("4.5E+33", "4.5 \\times 10^{33}"),
        ("4.5e-3", "0.0045"),
        ("1.e5", "100000"),
        ("-1./3", "-1/3"),
        ("-1/3", "-1./3"),
        ("\\frac{1}{2}.", "\\frac{1}{2}"),  # a sentence period inside the box
        ("x^2+1.", "x^2+1"),
        ("(0,4].", "(0,4]"),
        ("3.", "3"),  # "3." is the number 3 with or without the strip
        ("\\frac{1}{2}", "\\frac{1}{2}."),
    ],
)
def test_spellings_are_graded_alike_on_both_sides(answer: str, gold: str) -> None:
    assert grade_one(f"so \\boxed{{{answer}}}", gold, timeout_s=5.0) is Outcome.correct


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("4.5e33", "4.5 \\times 10^{32}"),
        ("4.5e33", "4.5"),  # the exponent is not dropped
        (
            "(0,4).",
            "(0,4]",
        ),  # the strip leaves the bracket alone: open and half-open stay different
        ("[0,4].", "(0,4]"),
        ("3.5", "3"),
        ("3.", "3.5"),
        ("2e", "2"),  # e next to a number but not e-notation: Euler's number stays
    ],
)
def test_normalisation_keeps_different_answers_different(answer: str, gold: str) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is Outcome.wrong


@pytest.mark.slow
def test_cpu_budget_counts_cpu_time_not_wall_time() -> None:
    from quadrants.rewards.grader import _cpu_budget

    with _cpu_budget(0.2):
        time.sleep(0.5)  # 0.5 s of wall time but almost no CPU: no timeout
    start = time.process_time()
    with pytest.raises(TimeoutException), _cpu_budget(0.2):
        while time.process_time() - start < 5.0:  # busy: the 0.2 s CPU timer fires
            pass
    assert time.process_time() - start < 2.0


@pytest.mark.slow
def test_cpu_clock_in_process_times_out_and_leaves_no_timer() -> None:
    start = time.monotonic()
    assert grade_one(SLOW_ANSWER, "5", timeout_s=0.5, clock="cpu") is Outcome.timeout
    assert time.monotonic() - start < 10.0
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)  # disarmed
    assert grade_one("\\boxed{5}", "5", timeout_s=0.5, clock="cpu") is Outcome.correct
    with pytest.raises(ValueError, match=r"clock='gpu' is unknown"):
        grade_one("\\boxed{5}", "5", timeout_s=0.5, clock="gpu")  # type: ignore[arg-type]


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@pytest.mark.subprocess
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_memory_cap_stops_a_factorial_tower_and_the_pool_goes_on() -> None:
    # Uncapped, \boxed{9!!!!} grows a worker to ~830 MB within a 5 s budget (issue 14). With a
    # 128 MiB cap on growth it ends as error (MemoryError) or timeout, the worker's peak resident
    # memory stays under its start-up size + 128 MiB, and the next items are graded as usual.
    with Grader(num_workers=1, timeout_s=3.0, memory_mb=128.0) as grader:
        (worker,) = grader._workers
        batch = grader.grade(
            ["\\boxed{9!!!!}", "\\boxed{2}", "\\boxed{\\frac{1}{2}.}"], ["1", "2", "0.5"]
        )
        assert batch.outcomes[0] in (Outcome.error, Outcome.timeout)
        assert batch.outcomes[1:] == [Outcome.correct, Outcome.correct]
        assert grader.restarts == 0  # MemoryError inside the worker, not a crash
        assert _peak_rss_mb(worker.process.pid) < 100 + 128  # start-up ~60 MB + the 128 MiB cap
        assert grader.grade(["\\boxed{7}"], ["7"]).outcomes == [Outcome.correct]


@pytest.mark.subprocess
def test_cap_address_space_makes_big_allocations_fail() -> None:
    import subprocess
    import sys

    code = (
        "from quadrants.rewards.grader import cap_address_space\n"
        "cap_address_space(64)\n"
        "small = bytearray(16 * 2**20)\n"  # within the cap
        "try:\n"
        "    bytearray(256 * 2**20)\n"
        "except MemoryError:\n"
        "    raise SystemExit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120, check=False).returncode == 3


@pytest.mark.subprocess
def test_worker_killed_by_its_cpu_limit_counts_as_timeout() -> None:
    # The kernel's SIGXCPU (RLIMIT_CPU, for C code that never returns to the interpreter) ends the
    # worker: its item is a timeout, not an error, and a replacement grades the rest.
    with Grader(num_workers=1, timeout_s=30.0, memory_mb=None) as grader:
        (worker,) = grader._workers
        pid = worker.process.pid

        def send_sigxcpu() -> None:
            # once the worker has started and holds the slow item (its start-up takes longer than
            # 2 s on a loaded machine, and a signal then would be a failed start, not a timeout)
            while not (worker.ready and worker.pending):
                time.sleep(0.05)
            time.sleep(1.0)  # the slow item is being graded by then
            os.kill(pid, signal.SIGXCPU)

        killer = threading.Thread(target=send_sigxcpu)
        killer.start()
        batch = grader.grade([SLOW_ANSWER, "\\boxed{5}"], ["5", "5"])
        killer.join()
        assert batch.outcomes == [Outcome.timeout, Outcome.correct]
        assert grader.restarts == 1


@pytest.mark.subprocess
def test_arm_cpu_limit_ends_a_loop_in_c() -> None:
    import subprocess
    import sys

    # sum(range(...)) runs in C and never lets a Python signal handler run; RLIMIT_CPU still ends it
    code = (
        "from quadrants.rewards.grader import _arm_cpu_limit\n"
        "_arm_cpu_limit(0.5)\n"
        "sum(range(10**13))\n"
    )
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], timeout=120, check=False)
    assert result.returncode == -signal.SIGXCPU
    assert time.monotonic() - start < 60.0


# ---- small numbers, a bare %, a ~ before a unit ---------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        # math-verify rounds both to 6 places: 0.000000 == 0.000000. |0 - 1.325e-27| = 1.325e-27 is
        # all of the gold, far over 1e-4 of it. Minerva row 265; \boxed{0.0} matched 14 such rows.
        ("0.0", "1.325 \\times 10^{-27}"),
        ("0.0000004", "3.89 \\times 10^{-10}"),  # 4e-7 < 5e-7 also rounds to 0; ratio ~1000
        ("2.88 \\times 10^{-18}", "2.88 \\times 10^{-19}"),  # ten times the gold
        ("-2.88 \\times 10^{-19}", "2.88 \\times 10^{-19}"),  # |diff| = 2 x 2.88e-19: 200 %
        # both round to 0.000067; |diff| = 2e-7 = 2e-7 / 6.72e-5 = 3.0e-3 of the gold > 1e-4
        ("0.0000670", "0.0000672"),
        # 1.3252 vs 1.325: 2e-4 / 1.3252 = 1.5e-4 > 1e-4 (1.3251 below passes: 7.5e-5)
        ("1.3252 \\times 10^{-27}", "1.325 \\times 10^{-27}"),
        ("E = 0.0", "1.325 \\times 10^{-27}"),  # an assignment stands for its right-hand side
        # exact on both sides, yet math-verify's 15-digit evalf(chop=True) of the difference is 0;
        # the ratio is 2005. dsr_sub row 74's gold is 1 / 2004!, and 0.0 matched it too.
        ("\\frac{1}{2005!}", "1 / 2004!"),
        ("0.0", "1 / 2004!"),
    ],
)
def test_tiny_numbers_must_agree_to_a_relative_1e_4(answer: str, gold: str) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is Outcome.wrong
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0, clock="cpu") is Outcome.wrong


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("1.325e-27", "1.325 \\times 10^{-27}"),  # the same number: |diff| = 0
        ("1.3250 \\times 10^{-27}", "1.325 \\times 10^{-27}"),
        ("1.3251 \\times 10^{-27}", "1.325 \\times 10^{-27}"),  # 1e-4 / 1.3251 = 7.5e-5 <= 1e-4
        ("x = 1.325 \\times 10^{-27}", "1.325 \\times 10^{-27}"),
        ("0.0000672", ".0000672"),  # MATH500's gold spelling
        ("0.0", "0"),  # 0 vs 0: |diff| = 0 <= 1e-4 x 0
        ("0.8660254", "\\frac{\\sqrt{3}}{2}"),  # sqrt(3)/2 = 0.86602540378: 4.4e-9 relative
        ("0", "\\log_2 8 - 3"),  # exactly 0, which evalf cannot tell from noise: no veto
        ("0.5", "\\frac12"),
        ("27", "27.0"),
        ("10\\%", "10"),
        ("4.5e33", "4.5 \\times 10^{33}"),
        ("1{,}000", "1000"),
        ("\\$18.90", "18.90"),
        ("18.90", "\\$18.90"),
        ("30^\\circ", "30"),
    ],
)
def test_numbers_within_the_relative_tolerance_stay_correct(answer: str, gold: str) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is Outcome.correct
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0, clock="cpu") is Outcome.correct


def test_only_two_single_real_numbers_are_vetoed() -> None:
    from math_verify import parse

    from quadrants.rewards.grader import _numbers_differ

    def first(latex: str) -> object:
        return parse(f"${latex}$")[0]

    assert _numbers_differ(first("0.0"), first("1.325 \\times 10^{-27}"))
    assert _numbers_differ(first("x = 0.0"), first("10^{-400}"))  # a Python float would be 0.0
    assert not _numbers_differ(first("10^{-400}"), first("1.00001 \\times 10^{-400}"))  # 1e-5
    for gold, pred in [
        ("(10^{-9}, 1)", "(0.0, 1)"),  # tuples, sets, matrices: left to math-verify
        ("x", "0.0"),  # a variable
        ("2 + 3i", "2"),  # not real
        ("\\infty", "10^{9}"),
        ("50%", "0.5"),  # math-verify's percentage x * (1/100): it reads it by the other side
        ("0.0", "\\text{zero}"),
    ]:
        assert not _numbers_differ(first(gold), first(pred)), (gold, pred)


@pytest.mark.parametrize(
    ("answer", "gold", "outcome"),
    [
        # OlympiadBench golds "62.5%" and "17.5%": escaped, then the final \% dropped, they read
        # 62.5 and 17.5, as 10\% reads 10, so the percentage and the plain number both match and
        # 0.625 does not
        ("62.5\\%", "62.5%", Outcome.correct),
        ("62.5", "62.5%", Outcome.correct),
        ("17.5", "17.5%", Outcome.correct),
        ("62.5%", "62.5", Outcome.correct),
        ("0.625", "62.5%", Outcome.wrong),  # as 0.5 vs 50\% above
        ("63.5", "62.5%", Outcome.wrong),
        # "~" is a space: with it, the number before a unit used to parse to nothing, or to 10
        ("\\frac{41}{12}~\\mathrm{km}", "\\frac{41}{12}", Outcome.correct),
        ("4.5 \\times 10^{33}~\\mathrm{ergs}", "4.5 \\times 10^{33}", Outcome.correct),
        ("41~\\text{km}", "41", Outcome.correct),
        ("\\frac{41}{13}~\\mathrm{km}", "\\frac{41}{12}", Outcome.wrong),
        ("4.5 \\times 10^{33}~\\mathrm{ergs}", "10", Outcome.wrong),  # was read as 10: correct
        ("4.6 \\times 10^{33}~\\mathrm{ergs}", "4.5 \\times 10^{33}", Outcome.wrong),
    ],
)
def test_bare_percent_and_tilde_read_as_elsewhere(answer: str, gold: str, outcome: Outcome) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is outcome


# ---- hedged boxes: LaTeX extraction only -------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        # math-verify's default plain-expression extraction read an answer its LaTeX parser cannot
        # read as one number inside it (here the last), so each of these hedges scored
        ("20\\% - 5", "5"),  # read as 5, though 20% - 5 is neither 5 nor anything else
        ("5 (or 6)", "6"),
        ("5 \\vee 6", "6"),
        ("5 \\wedge 6", "6"),
        ("5 ?? 6", "6"),
        ("20\\%+1", "20"),  # read as 20; dropping every \% instead would make it 21
        ("20\\%, 30\\%", "30"),  # two answers: only the final \% goes, "20\%, 30" is unreadable
        ("20\\% \\text{ or } 30\\%", "30"),
        ("\\text{The answer is 5 or 6}", "5"),  # the plain extraction took the first number
        # prose is not an answer either: the LaTeX parser reads the text as one symbol
        # "theansweris5" (this one was correct before; plain math-verify on the box says wrong too)
        ("\\text{The answer is 5}", "5"),
    ],
)
def test_hedged_or_garbled_boxes_are_wrong(answer: str, gold: str) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is Outcome.wrong
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0, clock="cpu") is Outcome.wrong


def test_an_unreadable_answer_equals_only_itself() -> None:
    # both sides stay the same unparsed string: a gold spelled this way is still reachable
    assert grade_one("\\boxed{5 ?? 6}", "5 ?? 6", timeout_s=5.0) is Outcome.correct
    assert grade_one("\\boxed{5 ?? 7}", "5 ?? 6", timeout_s=5.0) is Outcome.wrong


@pytest.mark.parametrize(
    ("answer", "gold", "outcome"),
    [
        # a final \% is dropped on both sides (normalize_answer): N\% equals N, either way round
        ("10\\%", "10", Outcome.correct),
        ("10", "10\\%", Outcome.correct),
        ("10 \\%", "10", Outcome.correct),
        ("20\\%.", "20", Outcome.correct),  # the sentence period goes first
        ("62.5%", "62.5", Outcome.correct),  # bare %: escaped, then dropped
        ("99\\%", "99\\%", Outcome.correct),
        # ... and a percentage is its number, not its number / 100: 10\% -> 10 != 0.1
        ("0.1", "10\\%", Outcome.wrong),
        ("10\\%", "0.1", Outcome.wrong),
        ("0.5", "50\\%", Outcome.wrong),  # 0.5 != 50
        ("11\\%", "10\\%", Outcome.wrong),  # 11 != 10
        # a DeepScaleR gold plus one: "99\%+1" keeps its \% (not final), so it is unreadable and
        # neither 99 (the plain extraction's reading: it was correct) nor 100
        ("99\\%+1", "99\\%", Outcome.wrong),
        ("99\\%+1", "100", Outcome.wrong),
    ],
)
def test_percent_is_its_number(answer: str, gold: str, outcome: Outcome) -> None:
    assert grade_one(f"\\boxed{{{answer}}}", gold, timeout_s=5.0) is outcome


@pytest.mark.subprocess
def test_a_worker_slow_to_start_is_waited_for_and_said_once(monkeypatch, caplog) -> None:
    # A start-up deadline of 0 s: the worker (a real process, ~0.1-3 s to report ready) is past it
    # at the first check while alive, as a worker on a machine whose cores other jobs hold is past
    # the real 120 s; it is waited for (up to the limit) and grades, with one warning.
    import quadrants.rewards.grader as grader_module

    monkeypatch.setattr(grader_module, "_STARTUP_TIMEOUT_S", 0.0)
    with caplog.at_level("WARNING", logger=grader_module.__name__):
        with Grader(num_workers=1, timeout_s=30.0, memory_mb=None) as grader:
            batch = grader.grade(["\\boxed{5}", "\\boxed{4}"], ["5", "5"])
    assert batch.outcomes == [Outcome.correct, Outcome.wrong]
    assert grader.restarts == 0
    said = [r for r in caplog.records if "has not started after" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


@pytest.mark.subprocess
def test_a_worker_not_started_by_the_limit_fails_to_start(monkeypatch) -> None:
    # Both bounds 0 s: past the limit at the first check, the worker counts as not started, and
    # grading stops with the error that names it (an input is never blamed for a start-up).
    import quadrants.rewards.grader as grader_module

    monkeypatch.setattr(grader_module, "_STARTUP_TIMEOUT_S", 0.0)
    monkeypatch.setattr(grader_module, "_STARTUP_LIMIT_S", 0.0)
    with Grader(num_workers=1, timeout_s=30.0, memory_mb=None) as grader:
        with pytest.raises(RuntimeError, match="grading worker failed to start"):
            grader.grade(["\\boxed{5}"], ["5"])


@pytest.mark.subprocess
def test_a_worker_does_not_run_the_parents_main_script_again(tmp_path) -> None:
    # A forkserver/spawn child imports its parent's main module before its target (CPython
    # multiprocessing/spawn.py `prepare`); for a training script that was torch, transformers and
    # the trainer again, about 9 s per worker. The script below appends a line to `ran` each time
    # its top level runs: once in the parent, never in the worker; and the grading still works.
    import subprocess
    import sys

    ran = tmp_path / "ran"
    script = tmp_path / "main_script.py"
    script.write_text(
        "import os\n"
        f"with open({str(ran)!r}, 'a') as out:\n"
        "    out.write(f'{os.getpid()}\\n')\n"
        "from quadrants.rewards.grader import Grader\n"
        "if __name__ == '__main__':\n"
        "    with Grader(num_workers=1, timeout_s=30.0, memory_mb=None) as grader:\n"
        "        print(grader.grade(['\\\\boxed{5}'], ['5']).outcomes[0].value)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "correct", done.stdout
    assert len(ran.read_text().split()) == 1, ran.read_text()  # the parent's run only
