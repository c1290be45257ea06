"""Checkpoint on the way out: SLURM's time-limit/preemption signal and SIGTERM.

On SLURM a job learns that it is about to stop from a signal:
- submitit's signal (USR2; `SUBMITIT_PREEMPT_SIGNAL` names another), sent `signal_delay_s` before
  the time limit (`--signal=USR2@...`) or by hand (`scancel --signal=USR2 <job>`). submitit's
  handler then runs `scontrol requeue` and raises SystemExit in the main thread;
- SIGTERM (`scancel`, `scontrol requeue`, preemption with PreemptMode=REQUEUE, the time limit
  itself), followed by SIGKILL `KillWait` seconds later. submitit ignores it.

`checkpointed_steps` wraps the loop's step iterator and, on either signal, writes a checkpoint of
the last completed step before letting the job go, so a requeued job loses at most the step in
flight:
- until a step's first optimizer update (rollout, grading and the old-logp pass: most of a step)
  the live model and optimizer still equal the last completed step: the signal saves at once;
- during the update phase it waits for the step to complete (at most `defer_s`), then saves that
  step; if the step does not complete in time the job goes without a new checkpoint and resumes
  from the previous one (which is what a SIGKILL gives anyway).
Then USR2 goes on to submitit's handler (requeue, exit) and SIGTERM raises SystemExit(143). A second
signal while leaving is ignored (submitit's own `scontrol requeue` sends a SIGTERM).

Outside SLURM the same applies to SIGTERM (`kill <pid>`); USR2 keeps its default unless a handler
(submitit's) is installed. Signal handlers exist only in the main thread: elsewhere (a thread pool
launcher) the steps pass through untouched.

In a multi-rank (torch.distributed) run a save is collective and the ranks see a signal at different
points of a step, so a handler cannot save on its own. There the handler only notes the signal; at
every step boundary the ranks exchange what they noted (distributed/agreement.py `exchange`), and if
any rank was signalled, all of them save the completed step together and leave. A step of the
paper's runs takes minutes, longer than SLURM's warning (`signal_delay_s`), so the wait for the
boundary is bounded as in one process: if rank 0 noted the preemption signal and no boundary came
within `defer_s`, it hands the signal to submitit's handler at once (from a timer thread, since its
main thread may be inside a collective), which requeues the job without a new checkpoint; the
requeued job resumes from the last periodic one. Without that bound a step that outlasts the warning
meant no requeue at all: the job hit its time limit and ended TIMEOUT (submitit requeues only from
its handler, which runs on the job's first task: submitit/core/job_environment.py,
`SignalHandler.checkpoint_and_try_requeue`). At the next boundary rank 0 tells the others it has
gone that way, and every rank leaves without saving. SIGTERM has no such bound (submitit ignores it;
SLURM itself requeues a preempted job), so there the step in flight must fit in `KillWait`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from quadrants.distributed.agreement import exchange
from quadrants.run.checkpoint import rng_state

log = logging.getLogger("quadrants.train")

SaveFn = Callable[[int, dict[str, Any]], None]  # (completed steps, RNG state at that step) -> None


def preempt_signal() -> signal.Signals:
    """The signal submitit treats as "time-out / preemption" (USR2 unless
    SUBMITIT_PREEMPT_SIGNAL)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals["SIG" + name.removeprefix("SIG")]


class _ExitCheckpoint:
    """Signal handlers plus the bookkeeping that says whether the live state is a completed step."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, save: SaveFn, first_step: int, defer_s: float
    ) -> None:
        self._save = save
        self._defer_s = defer_s
        self.completed = first_step  # steps completed (and logged) so far
        self._saved = first_step  # newest step known to have a checkpoint
        self._rng = rng_state()
        self._updates = 0  # optimizer.step() calls begun, counted by a pre-hook
        self._updates_at_boundary = 0
        self._pending: tuple[int, float] | None = (
            None  # (signal, deadline) deferred to the step's end
        )
        self._timer: threading.Timer | None = None
        self._leaving = False
        self._previous: dict[int, Any] = {}
        self._hook = optimizer.register_step_pre_hook(self._count_update)

    def _count_update(self, *_: Any) -> None:
        self._updates += 1

    def install(self) -> None:
        for sig in (preempt_signal(), signal.SIGTERM):
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN or (sig != signal.SIGTERM and not callable(previous)):
                continue  # ignored on purpose, or USR2 without submitit: leave it alone
            self._previous[sig] = previous
            signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)
        self._hook.remove()

    def step_completed(self, step: int, saved: bool) -> None:
        """Called between steps: `step` is complete and logged (and checkpointed if `saved`)."""
        self.completed = step
        if saved:
            self._saved = step
        self._updates_at_boundary = self._updates
        self._rng = rng_state()
        if self._pending is not None:
            sig, _ = self._pending
            log.warning("step %d completed after %s: leaving now", step, signal.Signals(sig).name)
            self._leave(sig, save=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._leaving:
            log.info("%s while leaving: ignored", name)
            return
        if self._pending is not None:
            if (
                time.monotonic() >= self._pending[1] - 0.05
            ):  # the timer: the step did not complete in time
                log.warning(
                    "step %d did not complete within %.1fs: leaving without a new checkpoint",
                    self.completed + 1,
                    self._defer_s,
                )
                self._leave(self._pending[0], save=False)
            return
        if self._updates == self._updates_at_boundary:
            log.warning(
                "%s: checkpointing step %d (step %d was in flight) and leaving",
                name,
                self.completed,
                self.completed + 1,
            )
            self._leave(signum, save=True)
            return
        log.warning(
            "%s during the update of step %d: leaving when it completes (at most %.1fs)",
            name,
            self.completed + 1,
            self._defer_s,
        )
        self._pending = (signum, time.monotonic() + self._defer_s)
        # the same signal again, for real (it interrupts a blocking call), when the time is up
        self._timer = threading.Timer(
            self._defer_s, signal.pthread_kill, args=(threading.main_thread().ident, signum)
        )
        self._timer.daemon = True
        self._timer.start()

    def _leave(self, signum: int, *, save: bool) -> None:
        self._leaving = True
        if self._timer is not None:
            self._timer.cancel()
        if save and self.completed > self._saved:
            started = time.perf_counter()
            self._save(self.completed, self._rng)
            self._saved = self.completed
            log.warning(
                "checkpoint of step %d written in %.1fs",
                self.completed,
                time.perf_counter() - started,
            )
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, None)  # submitit: scontrol requeue, then SystemExit (or its error)
        if signum == signal.SIGTERM:
            raise SystemExit(128 + signal.SIGTERM)


_REQUEUED = -1  # what rank 0 contributes to the exchange once it gave up waiting and requeued


class _CollectiveExitCheckpoint:
    """The multi-rank guard: handlers note the signal; ranks agree at step
    boundaries and save together. Rank 0 stops waiting for a boundary after `defer_s`."""

    def __init__(
        self,
        save: SaveFn,
        exchange: Callable[[int], list[int]],
        *,
        is_main: bool = True,
        defer_s: float = 30.0,
    ) -> None:
        self._save = save
        self._exchange = exchange
        self._is_main = is_main
        self._defer_s = defer_s
        self._noted = 0  # the signal this rank received (0: none)
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._requeued = False  # rank 0 handed the signal on without a new checkpoint
        self._saving = False  # the ranks agreed to save: the timer stands down

    def install(self) -> None:
        for sig in (preempt_signal(), signal.SIGTERM):
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN or (sig != signal.SIGTERM and not callable(previous)):
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if not self._noted:
            self._noted = signum
            log.warning(
                "%s: the ranks checkpoint together when the step in flight completes, then leave",
                signal.Signals(signum).name,
            )
            # submitit requeues from its USR2 handler on the first task only; a step longer than
            # SLURM's warning must not keep it from running
            if (
                self._is_main
                and signum == preempt_signal()
                and callable(self._previous.get(signum))
            ):
                self._timer = threading.Timer(self._defer_s, self._give_up, args=(signum,))
                self._timer.daemon = True
                self._timer.start()

    def _give_up(self, signum: int) -> None:
        """Rank 0, in the timer thread: no step boundary within `defer_s` of the signal."""
        with self._lock:
            if self._saving:
                return
            self._requeued = True
        log.warning(
            "no step boundary within %.1fs of %s: leaving without a new checkpoint (the requeued "
            "job resumes from the last periodic one)",
            self._defer_s,
            signal.Signals(signum).name,
        )
        try:
            self._previous[signum](signum, None)  # submitit: scontrol requeue, then sys.exit
        except SystemExit:
            pass  # ends this thread only; the main thread leaves at the next boundary or is killed
        except Exception:  # noqa: BLE001 - e.g. submitit's "timed-out too many times"
            log.exception("the %s handler failed", signal.Signals(signum).name)
            with self._lock:  # not requeued: the boundary, if it comes, saves and asks again
                self._requeued = False

    def step_completed(self, step: int, saved: bool) -> None:
        """A collective: every rank calls it after every step."""
        with self._lock:
            mine = _REQUEUED if self._requeued else self._noted
        values = self._exchange(mine)
        if values[0] == _REQUEUED:  # rank 0 requeued already: SLURM is ending the job
            log.warning("step %d: rank 0 requeued the job without a new checkpoint: leaving", step)
            sig = self._noted if self._noted > 0 else int(preempt_signal())
            self._noted = -1
            raise SystemExit(128 + sig)
        signalled = [sig for sig in values if sig > 0]
        if not signalled:
            return
        with self._lock:
            self._saving = True
            requeued = self._requeued  # the timer fired after the exchange: save all the same
        if self._timer is not None:
            self._timer.cancel()
        if not saved:
            started = time.perf_counter()
            self._save(step, rng_state())  # collective: every rank writes its shards
            log.warning(
                "checkpoint of step %d written by every rank in %.1fs",
                step,
                time.perf_counter() - started,
            )
        log.warning("step %d is checkpointed: leaving", step)
        sig = self._noted if self._noted > 0 else signalled[0]
        self._noted = -1  # leaving: later signals are ignored
        previous = self._previous.get(sig)
        if callable(previous) and not requeued:
            previous(sig, None)  # submitit: scontrol requeue, then SystemExit
        raise SystemExit(128 + sig)


def _several_ranks() -> bool:
    """A multi-rank run (saving is collective, see _CollectiveExitCheckpoint)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def checkpointed_steps(
    steps: Iterable[int],
    *,
    optimizer: torch.optim.Optimizer,
    save: SaveFn | None,
    first_step: int,
    is_saved: Callable[[int], bool],
    defer_s: float = 30.0,
) -> Iterator[int]:
    """Yield `steps` (step indices: index i produces step i + 1) with
    checkpoint-on-signal around them.

    Args:
        steps: the loop's step indices, e.g. `range(first_step, total)` (or a progress bar over it).
        optimizer: its `step()` calls mark the update phase (the live state is then mid-step).
        save: writes the checkpoint of a completed step with the given RNG state; None = no
            checkpoints (the steps pass through untouched).
        first_step: steps already completed (the checkpoint the run resumed from, or 0).
        is_saved: whether a completed step already has a checkpoint (the loop's periodic ones).
        defer_s: longest wait for a step in its update phase to complete; with several ranks, the
            longest rank 0 waits after the preemption signal for the next step boundary.
    """
    if save is None or threading.current_thread() is not threading.main_thread():
        yield from steps
        return
    guard: _ExitCheckpoint | _CollectiveExitCheckpoint
    if _several_ranks():
        import torch.distributed as dist

        guard = _CollectiveExitCheckpoint(
            save, exchange, is_main=dist.get_rank() == 0, defer_s=defer_s
        )
    else:
        guard = _ExitCheckpoint(optimizer, save, first_step, defer_s)
    guard.install()
    try:
        for index in steps:
            yield index
            guard.step_completed(index + 1, saved=is_saved(index + 1))
    finally:
        guard.uninstall()
