"""How the generate calls of an evaluation (and the blocks of a training step) are dealt to ranks and
put back in order, by hand and without a process group."""

from __future__ import annotations

from quadrants.distributed.collectives import DistEnv, dealt, in_call_order, run_dealt


def ranks(world: int) -> list[DistEnv]:
    return [DistEnv(rank=r, world_size=world, sharded=True) for r in range(world)]


def test_five_calls_over_two_ranks():
    # call c to rank c % 2: rank 0 makes calls 0, 2, 4; rank 1 makes calls 1, 3
    assert [list(dealt(5, env)) for env in ranks(2)] == [[0, 2, 4], [1, 3]]
    # what all_gather_object hands every rank: rank 0's (call, result) pairs, then rank 1's
    parts = [[(c, f"result {c}") for c in dealt(5, env)] for env in ranks(2)]
    assert in_call_order(parts) == [f"result {c}" for c in range(5)]


def test_fewer_calls_than_ranks_leaves_some_ranks_idle():
    # one call over 3 ranks: rank 0 makes it, ranks 1 and 2 only take part in the gather
    assert [list(dealt(1, env)) for env in ranks(3)] == [[0], [], []]
    assert in_call_order([[(0, "only")], [], []]) == ["only"]


def test_every_call_is_made_once_for_any_world_size():
    for world in (1, 2, 3, 4, 7):
        made = sorted(c for env in ranks(world) for c in dealt(10, env))
        assert made == list(range(10)), world


def test_one_process_is_the_plain_loop():
    assert list(dealt(3, DistEnv())) == [0, 1, 2]
    made: list[int] = []
    assert run_dealt(3, lambda c: made.append(c) or c * c, DistEnv()) == [0, 1, 4]
    assert made == [0, 1, 2]  # in call order, each once
