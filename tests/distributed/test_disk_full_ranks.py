"""A full disk that only rank 0 sees, on 2 gloo ranks: both ranks stop at that step, together.

Only rank 0 records a step's metrics and samples (the other ranks hold a NullTracker, as
launch/job.py gives them), but the checkpoint the loop then writes is collective. So when rank 0's
tracker raised ENOSPC (its MLflow spool's disk full, the checkpoint filesystem not), rank 0 went
into `stop_if_disk_full`'s save while rank 1 went on to the step-boundary exchange
(run/preemption.py): mismatched collectives, a hang until the process group's timeout (30 min by
default), then a crash, and the step's metrics never reached a checkpoint. Now the ranks agree on
the full disk after rank 0's records (run/records.py `disk_full_on_any_rank`) and both save.

The run is the one-process case of tests/unit/run/test_disk_full_stop.py (tiny random policy,
5 steps, checkpoints every 4, the disk full when step 3 is logged; also step 4, a checkpoint step,
where rank 1 went into the periodic save instead) on 2 ranks sharing the run directory, the process
group's timeout cut to 30 s so that a hang ends in seconds. Before the fix, at step 3 both ranks
waited out the 30 s timeout: rank 1 failed with gloo's "Timed out waiting 30000ms", rank 0's save
failed with it and no checkpoint of step 3 was written. At step 4 the two saves happened to match
(step 4 was checkpointed), then rank 1 waited in the step exchange for a rank 0 that had left, and
crashed (gloo: "Connection closed by peer") instead of stopping. After the fix, both ranks stop with
DiskFullError at that step (about 4 s into training) and its checkpoint holds its metrics. The
last test does the same for the part of a checkpoint rank 0 writes alone, its state.pt.

What only a GPU cluster shows: the same over NCCL (each exchange is one all_gather_object, as the
step-boundary exchange already is).
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from quadrants.run_plan import RunPlan

TIMEOUT_S = 30  # the process group's: a mismatched collective fails after this


def _rank(
    rank: int, world: int, rendezvous: str, run_dir: str, out: str, full_at: int, where: str
) -> None:
    """Rank `rank` trains `small`; on rank 0 the disk is full when step `full_at` is logged
    (`where="tracker"`) or, once, when its checkpoint's state.pt is opened (`where="state"`)."""
    import quadrants.run.checkpoint
    from quadrants.run.loop import run_training
    from quadrants.tracking.base import NullTracker, RecordingTracker
    from tests.unit.run.test_disk_full_stop import FullAtStep, small

    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = str(rank)
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    dist.init_process_group(
        "gloo", init_method=rendezvous, rank=rank, world_size=world, timeout=timeout
    )
    spool = Path(run_dir) / "tracking" / "000000.jsonl"
    tracker = NullTracker()
    if rank == 0 and where == "tracker":
        tracker = FullAtStep(full_at, spool)
    if rank == 0 and where == "state":
        tracker = RecordingTracker()
        quadrants.run.checkpoint.open = _full_once(Path(f"step_{full_at:07d}.tmp", "state.pt"))
    started = time.monotonic()
    try:
        run_training(RunPlan.parse(small(Path(run_dir))), tracker)
        outcome = {"error": None, "message": ""}
    except Exception as error:  # noqa: BLE001 - what each rank ended with is the finding
        outcome = {"error": type(error).__name__, "message": str(error)}
    outcome["seconds"] = time.monotonic() - started
    outcome["logged"] = [step for step, _ in getattr(tracker, "history", [])]
    Path(out, f"rank{rank}.json").write_text(json.dumps(outcome))
    # no destroy_process_group: after a failed collective it may wait on the other rank


def _full_once(tail: Path):
    """`open`, except that the first opening of a path ending in `tail` fails with ENOSPC (a
    module global shadowing the builtin in quadrants/run/checkpoint.py only)."""
    failed = []

    def opener(path, *args, **kwargs):
        if Path(path).parts[-2:] == tail.parts and not failed:
            failed.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return open(path, *args, **kwargs)

    return opener


def _train_on_two_ranks(tmp_path: Path, full_at: int, where: str) -> list[dict]:
    """Each rank's outcome ({error, message, seconds, logged}); fails if a rank wrote none."""
    run_dir, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    context = mp.start_processes(
        _rank,
        args=(2, f"file://{tmp_path / 'rendezvous'}", str(run_dir), str(out), full_at, where),
        nprocs=2,
        start_method="spawn",
        join=False,
    )
    deadline = time.monotonic() + 600
    while not context.join(timeout=5):
        if time.monotonic() > deadline:  # a rank stuck beyond the process group's timeout
            for process in context.processes:
                process.kill()
            break
    ranks = [
        json.loads(path.read_text()) if path.exists() else None
        for path in (out / "rank0.json", out / "rank1.json")
    ]
    assert None not in ranks, ranks
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize("full_at", [3, 4])  # rank 1 next in: the step exchange, the periodic save
def test_a_full_disk_on_rank_0_alone_stops_both_ranks_with_the_step_checkpointed(
    tmp_path: Path, full_at: int
):
    from quadrants.run.checkpoint import load_latest

    ranks = _train_on_two_ranks(tmp_path, full_at, "tracker")
    run_dir = tmp_path / "run"
    spool = run_dir / "tracking" / "000000.jsonl"
    stopped = f"(stopped at step {full_at}: step {full_at} is checkpointed with its metrics; "
    assert ranks[0]["error"] == "DiskFullError", ranks
    assert ranks[0]["message"].startswith(f"no space left on device: {spool} {stopped}"), ranks
    assert ranks[1]["error"] == "DiskFullError", ranks
    assert ranks[1]["message"].startswith(
        f"no space left on device: {spool} on rank 0 {stopped}"
    ), ranks
    assert ranks[0]["logged"] == list(range(full_at))  # step `full_at` never reached it
    checkpoint = load_latest(run_dir)
    assert checkpoint is not None and checkpoint.step == full_at
    assert list(checkpoint.state["unlogged_metrics"]) == [full_at]
    assert "train/reward_mean" in checkpoint.state["unlogged_metrics"][full_at]
    shards = sorted(p.name for p in (checkpoint.path / "model_optim").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # written by both ranks


@pytest.mark.slow
def test_a_full_disk_under_rank_0s_state_file_stops_both_ranks_with_the_step_checkpointed(
    tmp_path: Path,
):
    """The part of a checkpoint rank 0 writes alone (state.pt, after the collective DCP shards):
    ENOSPC there once, at the periodic checkpoint of step 4. Before, rank 0 raised while rank 1
    waited in the closing barrier, which rank 0's retry (stop_if_disk_full's save) then answered:
    rank 1 left the save as if it had succeeded, and the two ranks' collectives no longer matched.
    Now the ranks exchange rank 0's outcome in place of that barrier (run/checkpoint.py
    `_on_rank0`), both retry the save, and both stop with step 4 checkpointed with its metrics."""
    from quadrants.run.checkpoint import load_latest

    ranks = _train_on_two_ranks(tmp_path, 4, "state")
    root = tmp_path / "run" / "checkpoints"
    stopped = "(stopped at step 4: step 4 is checkpointed with its metrics; "
    assert ranks[0]["error"] == "DiskFullError", ranks
    assert ranks[0]["message"].startswith(f"no space left on device: {root} {stopped}"), ranks
    assert ranks[1]["error"] == "DiskFullError", ranks
    assert ranks[1]["message"].startswith(f"no space left on device: {root} on rank 0 {stopped}"), (
        ranks
    )
    assert ranks[0]["logged"] == [0, 1, 2, 3, 4]  # step 4 was logged; its checkpoint failed once
    checkpoint = load_latest(tmp_path / "run")
    assert checkpoint is not None and checkpoint.step == 4
    assert list(checkpoint.state["unlogged_metrics"]) == [4]
    shards = sorted(p.name for p in (checkpoint.path / "model_optim").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
