"""Sharded runs read the weights on rank 0 only (quadrants/distributed/collectives.py,
`fill_from_rank0`): 2 gloo ranks under torchrun (tests/distributed/fill_worker.py).

What it shows, on CPU: rank 1 builds the policy and the KL reference on the meta device and never
calls a weight reader (they raise there); after `build_context` every rank's shards of the policy and
the reference, every buffer (the rotary `inv_freq`, in no state dict) and the HF engine's replica
equal the file's values exactly; and one training step gives bit-identical metrics and parameters
to the layout where every rank reads the weights itself. What only a GPU shows: the same over NCCL,
and the host memory saved (one copy per job instead of one per rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("fill_worker.py")


@pytest.mark.slow
def test_rank0_reads_the_weights_and_fills_the_others(tmp_path, base_policy):
    out = tmp_path / "fill.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        + [str(WORKER), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["world_size"] == 2
    for rank in report["ranks"]:
        assert rank["hits"] == [], rank  # rank 1 called no weight reader
        assert rank["entries"] > 50  # 51 state-dict entries of the tiny model + 2 rotary buffers
        for key in ("policy_is_file", "reference_is_file", "replica_is_file"):
            assert rank[key] is True, (rank["rank"], key)
        assert rank["meta_equals_loaded_before"] is True
        assert rank["metrics"] > 20 and rank["metrics_equal"] == {}, rank["metrics_equal"]
        assert rank["meta_equals_loaded_after"] is True
        assert rank["step_moved"] > 1e-5  # the step changed the parameters (lr 3e-4)
