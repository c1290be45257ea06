"""Progress of a long loop, readable where it lands.

On a terminal, tqdm's bar. Off one (a SLURM log, a pipe, a file), the bar's carriage-return
redraws would pile up as hundreds of updates on one line, so instead one line at every 10 % of the
work (and at its end) with the count, the elapsed time and an ETA:

    eval gsm8k: 3/10 batches (30 %), 0:00:05 elapsed, ETA 0:00:12

The line goes to the caller's logger when logging is set up for it (a sweep's jobs: the line then
names the run, as every line of a job does), else straight to stderr (a command that configures no
logging, e.g. `python -m quadrants.evaluate`). Every progress display of the package (training,
the tiny base policy's warm-up, evaluation, the probe, the data home's writes) is one of these.

Off a terminal, the bars of the libraries quadrants calls are turned off too (`quiet_library_bars`:
transformers' "Loading weights" bar, the Hugging Face Hub's download bars).

A leaf module: tqdm, the standard library and (lazily) transformers' logging switch.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import IO, Generic, TypeVar

from tqdm.auto import tqdm

__all__ = ["Progress", "quiet_library_bars"]

T = TypeVar("T")


class Progress(Generic[T]):
    """tqdm's bar on a terminal, else a line every `every` % of `total` (None: no lines; for a loop
    that logs a line of its own at each step).

    Use it as tqdm: iterate over it (when given `iterable`), or call `update(n)`; `close()` at the
    end (also as a context manager). `update` may be called from several threads.
    """

    def __init__(
        self,
        iterable: Iterable[T] | None = None,
        *,
        total: int | None = None,
        desc: str,
        unit: str,
        logger: logging.Logger,
        initial: int = 0,
        every: int | None = 10,
        leave: bool = True,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._iterable = iterable
        if total is None:
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.done, self.desc, self.unit = total, initial, desc, unit
        self._stream = sys.stderr if stream is None else stream
        self.on_terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self._logger, self._every, self._clock = logger, every, clock
        self._started, self._first = clock(), initial
        self._postfix = ""
        self._lock = threading.Lock()
        # the last multiple of `every` % reported (the starting point counts as reported)
        self._mark = self._tenth(initial)
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            leave=leave,
            file=self._stream,
            mininterval=1.0,
            dynamic_ncols=True,
            disable=not self.on_terminal,
        )

    def _tenth(self, done: int) -> int:
        """How many whole `every` % steps `done` completes, the end counting as one more than any
        (always 0 when lines are off)."""
        if not self._every or not self.total:
            return 0
        if done >= self.total:
            return 100 // self._every + 1
        return done * 100 // (self.total * self._every)

    def __iter__(self) -> Iterator[T]:
        assert self._iterable is not None, "Progress over no iterable: call update()"
        for item in self._iterable:
            yield item
            self.update()
        self.close()  # as tqdm's iteration ends

    def __enter__(self) -> Progress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_postfix_str(self, text: str) -> None:
        """Shown after the bar, and at the end of the next line."""
        self._postfix = text
        self._bar.set_postfix_str(text, refresh=False)

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            self._bar.update(n)
            if self.on_terminal:
                return
            mark = self._tenth(self.done)
            if mark > self._mark:
                self._mark = mark
                self._emit(self.line())

    def line(self) -> str:
        """``desc: done/total units (pct %), elapsed, ETA [, postfix]``."""
        elapsed = self._clock() - self._started
        done_here = self.done - self._first
        left = self.total - self.done
        eta = elapsed / done_here * left if done_here > 0 else 0.0
        plural = "es" if self.unit.endswith(("s", "x", "ch", "sh")) else "s"
        unit = self.unit if self.total == 1 else self.unit + plural
        text = (
            f"{self.desc}: {self.done}/{self.total} {unit} ({100 * self.done // self.total} %), "
            f"{timedelta(seconds=round(elapsed))} elapsed, ETA {timedelta(seconds=round(eta))}"
        )
        return f"{text}, {self._postfix}" if self._postfix else text

    def _emit(self, line: str) -> None:
        if self._logger.isEnabledFor(logging.INFO) and self._logger.hasHandlers():
            self._logger.info(line)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        self._bar.close()


def quiet_library_bars(stream: IO[str] | None = None) -> None:
    """Off a terminal, turn off transformers' and the Hugging Face Hub's own progress bars, whose
    carriage-return redraws would pile up in a log: transformers/utils/logging.py
    `disable_progress_bar` makes its `tqdm` factory hand out `EmptyTqdm` (the bar of
    core_model_loading.py's "Loading weights") and calls huggingface_hub's
    `disable_progress_bars`. On a terminal they stay as they are."""
    stream = sys.stderr if stream is None else stream
    if not bool(getattr(stream, "isatty", lambda: False)()):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
