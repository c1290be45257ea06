"""quadrants/progress.py: off a terminal, a line every 10 % with the count, elapsed time and ETA (a
fake clock, so every figure is computed by hand); on a terminal, tqdm's bar and no lines."""

from __future__ import annotations

import io
import logging

from quadrants.progress import Progress, quiet_library_bars


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def quiet_logger(name: str) -> logging.Logger:
    """A logger that nothing handles: the lines go to the stream, as in `python -m
    quadrants.evaluate`, which configures no logging."""
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.propagate = False
    return logger


def test_a_line_every_ten_percent_with_count_elapsed_and_eta():
    clock, out = Clock(), io.StringIO()  # a StringIO is not a terminal
    bar = Progress(
        range(20), desc="work", unit="item", logger=quiet_logger("t.ten"), stream=out, clock=clock
    )
    for _ in bar:
        clock.now += 2.0  # 2 s per item
    lines = out.getvalue().splitlines()
    # 20 items: every 2nd item completes another 10 % -> 2, 4, ..., 18 and the end, 20: 10 lines
    assert len(lines) == 10
    # after 2 items: 4 s elapsed, 2 s each for the 18 left = 36 s
    assert lines[0] == "work: 2/20 items (10 %), 0:00:04 elapsed, ETA 0:00:36"
    # after 10: 20 s, 10 left x 2 s = 20 s
    assert lines[4] == "work: 10/20 items (50 %), 0:00:20 elapsed, ETA 0:00:20"
    assert lines[-1] == "work: 20/20 items (100 %), 0:00:40 elapsed, ETA 0:00:00"
    assert "\r" not in out.getvalue()


def test_uneven_totals_steps_of_several_and_a_postfix():
    clock, out = Clock(), io.StringIO()
    bar = Progress(
        total=12, desc="w", unit="step", logger=quiet_logger("t.uneven"), stream=out, clock=clock
    )
    for _ in range(12):
        clock.now += 1.0
        bar.set_postfix_str("loss 0.500")
        bar.update()
    # tenths = done * 10 // 12: 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, end -> a line at every done but
    # 1 (still 0) and 7 (still 5): 10 lines
    counts = [line.split(":")[1].split("/")[0].strip() for line in out.getvalue().splitlines()]
    assert counts == ["2", "3", "4", "5", "6", "8", "9", "10", "11", "12"]
    assert out.getvalue().splitlines()[0] == (
        # 2 s elapsed, 1 s per step for the 10 left; 2 * 100 // 12 = 16 %
        "w: 2/12 steps (16 %), 0:00:02 elapsed, ETA 0:00:10, loss 0.500"
    )
    out.truncate(0)
    out.seek(0)
    jumps = Progress(
        total=10, desc="j", unit="row", logger=quiet_logger("t.jump"), stream=out, clock=clock
    )
    jumps.update(5)  # from 0 % to 50 %: one line, not five
    jumps.update(5)  # the end
    jumps.update(3)  # past the end: nothing more
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == [
        "j: 5/10 rows",
        "j: 10/10 rows",
    ]


def test_a_resumed_loop_counts_from_where_it_starts():
    clock, out = Clock(), io.StringIO()
    bar = Progress(
        range(5, 10),
        total=10,
        initial=5,
        desc="train",
        unit="step",
        logger=quiet_logger("t.resume"),
        stream=out,
        clock=clock,
    )
    for _ in bar:
        clock.now += 3.0
    lines = out.getvalue().splitlines()
    # 50 % was reached before: lines at 6, 7, 8, 9, 10
    assert len(lines) == 5
    # 3 s for the one step of this process, 4 left: ETA 12 s (the resumed steps cost nothing)
    assert lines[0] == "train: 6/10 steps (60 %), 0:00:03 elapsed, ETA 0:00:12"


def test_no_lines_when_the_loop_logs_its_own_and_none_on_a_terminal():
    out = io.StringIO()
    for _ in Progress(
        range(10), desc="own", unit="step", every=None, logger=quiet_logger("t.own"), stream=out
    ):
        pass
    assert out.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = Progress(range(10), desc="bar", unit="step", logger=quiet_logger("t.tty"), stream=screen)
    assert bar.on_terminal
    for _ in bar:
        pass
    # tqdm's bar (redrawn with carriage returns), no 10 % line
    assert "\r" in screen.getvalue() and "10/10" in screen.getvalue()
    assert "elapsed, ETA" not in screen.getvalue()


def test_the_line_goes_to_the_callers_logger_when_logging_is_set_up(caplog):
    caplog.set_level(logging.INFO, logger="t.logged")  # as a sweep's job logging does
    out = io.StringIO()
    for _ in Progress(
        range(2), desc="logged", unit="call", logger=logging.getLogger("t.logged"), stream=out
    ):
        pass
    # 2 calls: 1 is 50 %, 2 the end
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "logged: 1/2 calls",
        "logged: 2/2 calls",
    ]
    assert out.getvalue() == ""


def test_off_a_terminal_the_libraries_bars_are_off():
    from transformers.utils import logging as transformers_logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()
    try:
        quiet_library_bars(Terminal())  # on a terminal: left as they are
        assert transformers_logging.is_progress_bar_enabled()
        quiet_library_bars(io.StringIO())  # a log file: off
        assert not transformers_logging.is_progress_bar_enabled()
        # huggingface_hub's too (disable_progress_bar calls its disable_progress_bars)
        from huggingface_hub.utils import are_progress_bars_disabled

        assert are_progress_bars_disabled()
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()
