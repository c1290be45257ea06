"""The |Δ log-prob| telemetry pass (train/telemetry.py `measure_dlogp`) on 2 gloo ranks when the rows it
draws do not split evenly over the ranks.

Each rank runs its contiguous 1/W of a pass's rows and the shares are all-gathered, so a pass over n
rows with n not a multiple of W gathered only W x floor(n / W) of them: with `train.dlogp_rows=3` on
2 ranks each rank ran 1 row, the gather gave 2, and `after - old_logp[rows]` failed ([2, T] against
[3, T]) at the end of the first step, on every rank. With `train.forward_tokens` (the paper presets)
the packing refused the 3 rows instead (`pack_for_ranks`: "3 rows do not split into 2 equal
shares"). The auto count fails the same way whenever ceil(B / 16) is not a multiple of W (B = 48
sequences on 2 ranks: 3 rows; 320 on 8 ranks: 20).

The rows are now rounded up to a multiple of W (3 -> 4 on 2 ranks), and the pass equals the
one-process pass over the same 4 rows: the random tiny policy, the seeded 6-row batch of
tests/unit/train/test_accumulate.py, float32 (atol 1e-5, summation order only).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def measured(rows: int, forward_tokens: int) -> dict[str, torch.Tensor]:
    """`measure_dlogp` over `rows` sampled rows of the seeded batch, after no update (the tiny
    random policy as it is), in this process (sharded when a process group is up)."""
    from quadrants.distributed.collectives import current, shard_model
    from quadrants.distributed.placement import Sharded
    from quadrants.models.loading import load_policy
    from quadrants.train.telemetry import measure_dlogp, trainer_logp_before
    from tests.unit.train.test_accumulate import context, seeded_batch

    model, _ = load_policy("tiny-random", seed=0)
    batch = seeded_batch(model)  # 6 rows, before sharding: the same on every rank
    env = current()
    model = shard_model(model, env)
    ctx = context("grpo", 0, model)
    placement = Sharded(env) if env.sharded else ctx.forwards.placement
    passes = dataclasses.replace(ctx.forwards.passes, forward_tokens=forward_tokens)
    forwards = dataclasses.replace(ctx.forwards, placement=placement, passes=passes)
    update = dataclasses.replace(ctx.update, dlogp_rows=rows)
    before = trainer_logp_before(model, forwards, update, batch, 0, reuse=True)
    dlogp, entropy, drawn = measure_dlogp(model, forwards, batch, before)
    # past a row's last token the pass leaves what its call cut there (models/policy.py)
    return {"dlogp": dlogp, "entropy": entropy * batch.response_mask[drawn], "rows": drawn}


def _rank(rank: int, world: int, rendezvous: str, out: str, forward_tokens: int) -> None:
    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    try:
        result = measured(3, forward_tokens)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("forward_tokens", [0, 16])
def test_dlogp_rows_that_do_not_split_over_the_ranks(tmp_path: Path, forward_tokens: int):
    out = tmp_path / "two.pt"
    rendezvous = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(
        _rank, args=(2, rendezvous, str(out), forward_tokens), nprocs=2, start_method="spawn"
    )
    two = torch.load(out)
    one = measured(4, forward_tokens)  # one process over the 4 rows 2 ranks measure for 3
    assert two["rows"].tolist() == one["rows"].tolist() and len(one["rows"]) == 4
    torch.testing.assert_close(two["dlogp"], one["dlogp"], rtol=0, atol=1e-5)
    torch.testing.assert_close(two["entropy"], one["entropy"], rtol=0, atol=1e-5)
    assert float(one["entropy"].abs().sum()) > 0
