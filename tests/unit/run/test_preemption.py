"""Checkpoint on a signal (quadrants/run/preemption.py) with real signals sent to this process and a
real optimizer. The loop body stands in for a training step: `opt.step()` marks its update phase.
submitit's own handler is exercised on a real cluster in tests/slurm/test_quadrants_on_slurm.py; here
a plain function recording the order of events stands in for it."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from quadrants.run.preemption import checkpointed_steps


def _setup():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    saved: list[int] = []
    return model, opt, saved


def _update(model, opt) -> None:
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()


def _run(opt, saved, body, first=0, total=10, defer_s=5.0, checkpointed=()):
    # As in the training loop, the generator is not kept in a variable: when an exception leaves the
    # loop it is closed at once, and its `finally` puts the previous handlers back.
    for index in checkpointed_steps(
        range(first, total),
        optimizer=opt,
        save=lambda s, rng: saved.append(s),
        first_step=first,
        is_saved=lambda s: s in checkpointed,
        defer_s=defer_s,
    ):
        body(index)


def test_sigterm_before_the_update_saves_the_last_completed_step_at_once():
    model, opt, saved = _setup()
    done = []

    def body(index):
        if index == 3:  # steps 1..3 completed; step 4 is in its rollout phase: nothing updated yet
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # never reached: the handler raises
        _update(model, opt)
        done.append(index + 1)

    with pytest.raises(SystemExit) as exit_info:
        _run(opt, saved, body)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert done == [1, 2, 3] and saved == [3]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers removed on the way out


def test_sigterm_during_the_update_waits_for_the_step_then_saves_it():
    model, opt, saved = _setup()
    done = []

    def body(index):
        _update(model, opt)
        if index == 3:  # step 4 has updated the model: the live state is no completed step
            os.kill(os.getpid(), signal.SIGTERM)
        done.append(index + 1)

    with pytest.raises(SystemExit):
        _run(opt, saved, body)
    assert done == [1, 2, 3, 4] and saved == [4]  # step 4 completed, then saved, then exit


@pytest.mark.slow
def test_a_step_that_does_not_complete_in_time_leaves_without_a_checkpoint():
    model, opt, saved = _setup()
    started = time.monotonic()

    def body(index):
        _update(model, opt)
        if index == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # a long update: the 0.3 s deadline interrupts it

    with pytest.raises(SystemExit):
        _run(opt, saved, body, defer_s=0.3)
    assert (
        saved == []
    )  # step 1's state is gone (updated by step 2): resume from the previous checkpoint
    assert time.monotonic() - started < 5


def test_a_step_already_checkpointed_is_not_written_again():
    model, opt, saved = _setup()

    def body(index):
        if index == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        _update(model, opt)

    with pytest.raises(SystemExit):
        _run(
            opt, saved, body, checkpointed={2, 4}
        )  # the loop's periodic checkpoint of step 4 exists
    assert saved == []


def test_resumed_run_saves_nothing_before_its_first_new_step():
    model, opt, saved = _setup()

    def body(index):
        os.kill(
            os.getpid(), signal.SIGTERM
        )  # at once: step 7 (the resume point) is the last completed

    with pytest.raises(SystemExit):
        _run(opt, saved, body, first=7)
    assert saved == []


def test_preempt_signal_checkpoints_before_submitits_handler_and_ignores_its_sigterm():
    model, opt, saved = _setup()
    events: list[str] = []

    def submitit_like(signum, frame):  # what submitit's handler does: requeue (SLURM answers with
        events.append(f"handler saw saved={list(saved)}")  # SIGTERM), then SystemExit(-1)
        os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(-1)

    previous = signal.signal(signal.SIGUSR2, submitit_like)
    try:

        def body(index):
            if index == 2:
                os.kill(os.getpid(), signal.SIGUSR2)
            _update(model, opt)

        with pytest.raises(SystemExit) as exit_info:
            _run(opt, saved, body)
        assert exit_info.value.code == -1  # submitit's exit, not ours
        assert events == ["handler saw saved=[2]"]
        assert signal.getsignal(signal.SIGUSR2) is submitit_like  # restored
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_usr2_without_submitit_keeps_its_default():
    model, opt, saved = _setup()
    seen = []

    def body(index):
        seen.append(signal.getsignal(signal.SIGUSR2))

    _run(opt, saved, body, total=1)
    assert seen == [signal.SIG_DFL]


def test_no_checkpoints_configured_passes_the_steps_through():
    model, opt, saved = _setup()
    seen = []
    for _ in checkpointed_steps(
        range(3), optimizer=opt, save=None, first_step=0, is_saved=lambda s: False
    ):
        seen.append(signal.getsignal(signal.SIGTERM))
    assert seen == [signal.SIG_DFL] * 3


# --- several ranks: handlers only note the signal; ranks agree at step boundaries --------------------
# The exchange (an all_gather_object across ranks) is given as a function here, returning what the
# other rank "noted"; tests/distributed/test_preemption.py runs the real collective over 2 gloo ranks.

from quadrants.run.preemption import _CollectiveExitCheckpoint  # noqa: E402


def _collective(other_rank_noted: int, saved: list[int]) -> _CollectiveExitCheckpoint:
    return _CollectiveExitCheckpoint(
        lambda step, rng: saved.append(step), exchange=lambda mine: [mine, other_rank_noted]
    )


def test_no_signal_anywhere_lets_the_steps_go_on():
    saved: list[int] = []
    guard = _collective(0, saved)
    guard.step_completed(3, saved=False)
    assert saved == []


def test_a_signal_on_another_rank_saves_the_completed_step_and_leaves():
    saved: list[int] = []
    guard = _collective(int(signal.SIGTERM), saved)  # rank 1 got SIGTERM, this rank nothing
    with pytest.raises(SystemExit) as leaving:
        guard.step_completed(4, saved=False)
    assert saved == [4] and leaving.value.code == 128 + signal.SIGTERM


def test_a_signal_here_waits_for_the_step_boundary_and_skips_a_step_already_saved():
    saved: list[int] = []
    guard = _collective(0, saved)
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # noted only: the step in flight goes on
        time.sleep(0.05)
        assert saved == []
        with pytest.raises(SystemExit) as leaving:
            guard.step_completed(5, saved=True)  # the periodic checkpoint of step 5 exists already
    finally:
        guard.uninstall()
    assert saved == [] and leaving.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# --- several ranks, a step longer than SLURM's warning --------------------------------------------
# submitit requeues only from its USR2 handler on the job's first task (submitit/core/
# job_environment.py, SignalHandler.checkpoint_and_try_requeue: other tasks return at once). If rank 0
# waited for a step boundary that comes after the time limit, the job would end TIMEOUT, never
# requeued; so rank 0 hands the signal on after `defer_s` and tells the others at the boundary.


def _submitit_like(events: list[str], saved: list[int]):
    def handler(signum, frame):  # requeue, then SystemExit(-1), as submitit's handler on task 0
        events.append(f"requeue (saved={list(saved)})")
        raise SystemExit(-1)

    return handler


@pytest.mark.slow
def test_rank0_requeues_without_a_checkpoint_when_no_step_boundary_comes_in_time():
    saved: list[int] = []
    events: list[str] = []
    sent: list[int] = []
    guard = _CollectiveExitCheckpoint(
        lambda step, rng: saved.append(step),
        exchange=lambda mine: sent.append(mine) or [mine, 0],
        is_main=True,
        defer_s=0.3,
    )
    previous = signal.signal(signal.SIGUSR2, _submitit_like(events, saved))
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        started = time.monotonic()
        while time.monotonic() - started < 3.0 and not events:  # a 3 s step goes on
            time.sleep(0.02)
        # the requeue came from the timer (0.3 s after the signal), while the step was in flight
        assert events == ["requeue (saved=[])"]
        with pytest.raises(SystemExit) as leaving:
            guard.step_completed(5, saved=False)
    finally:
        guard.uninstall()
        signal.signal(signal.SIGUSR2, previous)
    # rank 0 told the others it had requeued (-1), nobody saved, the handler ran once
    assert sent == [-1] and saved == [] and events == ["requeue (saved=[])"]
    assert leaving.value.code == 128 + signal.SIGUSR2


def test_the_other_ranks_leave_without_saving_once_rank0_requeued():
    saved: list[int] = []
    guard = _CollectiveExitCheckpoint(
        lambda step, rng: saved.append(step),
        exchange=lambda mine: [-1, mine],  # rank 0 sent -1: it requeued
        is_main=False,
        defer_s=0.3,
    )
    with pytest.raises(SystemExit) as leaving:
        guard.step_completed(5, saved=False)
    assert saved == [] and leaving.value.code == 128 + signal.SIGUSR2


@pytest.mark.slow
def test_a_step_boundary_in_time_saves_first_and_requeues_once():
    saved: list[int] = []
    events: list[str] = []
    guard = _CollectiveExitCheckpoint(
        lambda step, rng: saved.append(step),
        exchange=lambda mine: [mine, 0],
        is_main=True,
        defer_s=0.3,
    )
    previous = signal.signal(signal.SIGUSR2, _submitit_like(events, saved))
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.05)
        with pytest.raises(SystemExit) as leaving:
            guard.step_completed(4, saved=False)  # the boundary came 0.05 s after the signal
        time.sleep(0.5)  # past the deadline: the timer was cancelled, no second requeue
    finally:
        guard.uninstall()
        signal.signal(signal.SIGUSR2, previous)
    assert saved == [4] and events == ["requeue (saved=[4])"] and leaving.value.code == -1


@pytest.mark.slow
def test_only_rank0_hands_the_signal_on():
    events: list[str] = []
    guard = _CollectiveExitCheckpoint(
        lambda step, rng: None, exchange=lambda mine: [0, mine], is_main=False, defer_s=0.1
    )
    previous = signal.signal(signal.SIGUSR2, _submitit_like(events, []))
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.4)
    finally:
        guard.uninstall()
        signal.signal(signal.SIGUSR2, previous)
    assert events == []


@pytest.mark.slow
def test_a_handler_that_refuses_to_requeue_leaves_the_boundary_to_save_and_ask_again():
    """submitit raises UncompletedJobError when the job timed out too many times: then nothing was
    requeued, so the ranks still save at the boundary and the handler's error ends the job there
    (submitit writes it as the job's result)."""
    saved: list[int] = []
    calls: list[str] = []

    def refusing(signum, frame):
        calls.append("asked")
        raise RuntimeError("Job not requeued because: timed-out too many times.")

    guard = _CollectiveExitCheckpoint(
        lambda step, rng: saved.append(step),
        exchange=lambda mine: [mine, 0],
        is_main=True,
        defer_s=0.1,
    )
    previous = signal.signal(signal.SIGUSR2, refusing)
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.4)  # the timer asked, and was refused
        assert calls == ["asked"]
        with pytest.raises(RuntimeError, match="timed-out too many times"):
            guard.step_completed(6, saved=False)
    finally:
        guard.uninstall()
        signal.signal(signal.SIGUSR2, previous)
    assert saved == [6] and calls == ["asked", "asked"]
