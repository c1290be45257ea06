"""How the generate calls of an evaluation (and the blocks of a training step) are dealt to ranks and
put back in order, by hand and without a process group."""

from __future__ import annotations

from collections import Counter

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


def test_every_call_is_made_exactly_once_for_any_number_of_calls_and_ranks():
    """The dealing of training blocks, the in-training held-out check and benchmark evaluation
    (`dealt` / `run_dealt`). Each rank's engine is independent (no vLLM data-parallel group,
    tests/unit/rollout/test_registry.py), so ranks may make different numbers of calls: what must
    hold is that the calls together are each call once, including fewer calls than ranks (the ranks
    past the last call make none and only join the gather), and come back in call order."""
    for world in range(1, 10):
        for calls in range(0, 26):
            per_rank = [list(dealt(calls, env)) for env in ranks(world)]
            made = Counter(c for part in per_rank for c in part)
            assert made == Counter(range(calls)), (world, calls)  # each call once, none extra
            # rank r makes calls r, r + W, ...: ceil((calls - r) / W) of them, none when calls <= r
            assert [len(p) for p in per_rank] == [
                max(0, -(-(calls - r) // world)) for r in range(world)
            ]
            parts = [[(c, c * 10) for c in part] for part in per_rank]
            assert in_call_order(parts) == [c * 10 for c in range(calls)]
    # 3 calls on 5 ranks by hand: ranks 0, 1, 2 make calls 0, 1, 2; ranks 3 and 4 make none
    assert [list(dealt(3, env)) for env in ranks(5)] == [[0], [1], [2], [], []]


def test_one_process_is_the_plain_loop():
    assert list(dealt(3, DistEnv())) == [0, 1, 2]
    made: list[int] = []
    assert run_dealt(3, lambda c: made.append(c) or c * c, DistEnv()) == [0, 1, 4]
    assert made == [0, 1, 2]  # in call order, each once
