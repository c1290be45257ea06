"""distributed/agreement.py by hand: in one process (no exchange), and as rank r of a group whose
other ranks' values are scripted (the exchange replaced by the list every rank would receive; the
real 2-rank gloo runs are tests/distributed/test_disk_full_ranks.py and test_preemption.py)."""

from __future__ import annotations

import pytest

from quadrants.distributed import agreement
from quadrants.distributed.collectives import DistEnv

ONE = DistEnv()


def as_rank(monkeypatch, rank: int, everyone: list) -> DistEnv:
    """This process as `rank` of len(everyone) ranks that exchange `everyone` (this rank's own
    value is checked against its slot)."""

    def gather(value, env):
        assert value == everyone[env.rank]
        return list(everyone)

    monkeypatch.setattr(agreement, "gather_objects", gather)
    return DistEnv(rank=rank, world_size=len(everyone), sharded=True)


def test_one_process_agrees_with_itself():
    assert agreement.exchange(3, ONE) == [3]
    assert agreement.first_flag(None, ONE) is None
    assert agreement.first_flag("full", ONE) == (0, "full")
    assert agreement.min_over_ranks(7, ONE) == 7
    assert agreement.min_over_ranks(None, ONE) is None
    agreement.raise_on_every_rank(None, ONE, repr, lambda r, d: RuntimeError(d))  # nothing raised
    ran: list[int] = []
    agreement.on_rank0(lambda: ran.append(1), ONE, repr, lambda r, d: RuntimeError(d))
    assert ran == [1]


def test_the_lowest_flagged_rank_reaches_every_rank(monkeypatch):
    # ranks 0..3 flag [None, "b", None, "d"]: rank 2 learns (1, "b"), the lowest flagged rank
    env = as_rank(monkeypatch, 2, [None, "b", None, "d"])
    assert agreement.first_flag(None, env) == (1, "b")


def test_one_ranks_failure_is_raised_on_every_rank(monkeypatch):
    def rebuild(rank: int, said: str) -> Exception:
        return OSError(f"{said} on rank {rank}")

    # rank 0 did not fail, rank 1 described its failure as "/tmp/x": rank 0 raises the rebuilt one
    env = as_rank(monkeypatch, 0, [None, "/tmp/x"])
    with pytest.raises(OSError, match="/tmp/x on rank 1"):
        agreement.raise_on_every_rank(None, env, str, rebuild)
    # rank 1 itself raises its own error, not the rebuilt one
    env = as_rank(monkeypatch, 1, [None, "/tmp/x"])
    own = ValueError("/tmp/x")
    with pytest.raises(ValueError) as raised:
        agreement.raise_on_every_rank(own, env, str, rebuild)
    assert raised.value is own


def test_rank0s_work_runs_there_only_and_its_outcome_reaches_the_others(monkeypatch):
    calls: list[int] = []

    def fail() -> None:
        calls.append(1)
        raise OSError("disk")

    # rank 1: does not run the work, learns rank 0's described failure
    env = as_rank(monkeypatch, 1, ["OSError('disk')", None])
    with pytest.raises(RuntimeError, match=r"rank 0: OSError\('disk'\)"):
        agreement.on_rank0(fail, env, repr, lambda r, d: RuntimeError(f"rank {r}: {d}"))
    assert calls == []
    # rank 0: runs it and raises its own error after the exchange
    env = as_rank(monkeypatch, 0, ["OSError('disk')", None])
    with pytest.raises(OSError, match="disk"):
        agreement.on_rank0(fail, env, repr, lambda r, d: RuntimeError(d))
    assert calls == [1]


def test_the_minimum_over_ranks_is_none_when_any_rank_has_none(monkeypatch):
    # KV caches of 900, 400 and 650 tokens: every rank sizes its calls by 400
    assert agreement.min_over_ranks(650, as_rank(monkeypatch, 2, [900, 400, 650])) == 400
    assert agreement.min_over_ranks(900, as_rank(monkeypatch, 0, [900, None, 650])) is None
