"""Rank 0's load holds what the plan's host line counts: the checkpoint as read (bf16, 2 bytes a
parameter) and no float32 copy. Each tensor goes to the device and is cast there
(ops/precision.py `store_parameters`); the meta device stands in for the GPU here (a tensor moved
there leaves the host, as one moved to a GPU does).

Measured in a fresh process on the tiny model's architecture widened to ~100 M parameters (so that
the copy is hundreds of MB, far above the allocator's noise): the peak resident set (VmHWM, reset
through /proc/self/clear_refs before the load) over the resident set before it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quadrants.memory.peaks import HOST_BASE_GIB, GiB, host_per_node

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
WIDE = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=8)

BUILD = """
import sys, torch
from quadrants.models.tiny import random_tiny_policy
model, tokenizer = random_tiny_policy(0, **{wide})
model.to(torch.bfloat16).save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
"""

MEASURE = """
import json, sys, torch
from quadrants.models.loading import load_policy
from quadrants.ops.precision import resolve_precision, store_parameters

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
torch.set_num_threads(1)
before = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
model, _ = load_policy(sys.argv[1], dtype="bfloat16")
parameters = sum(p.numel() for p in model.parameters())
# the checkpoint as read, resident: safetensors maps the file and a page is read when touched; a
# move to a GPU reads every one (a move to the meta device reads none, so touch them here)
for p in model.parameters():
    p.sum()
precision = resolve_precision("bf16-mixed", torch.device("cuda"))  # float32 parameters
if sys.argv[2] == "trainer":  # rank 0 as the trainer does it (run/build.py prepare_policy)
    model = store_parameters(model, precision, torch.device("meta"))
else:  # the former order: cast where the model was loaded (the host), then move
    model = model.to(dtype=precision.param_dtype).to("meta")
print(json.dumps(dict(peak=status("VmHWM:") - before, parameters=parameters)))
"""


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's peak-RSS reset")
def test_rank_0s_load_peaks_at_the_plans_host_figure(tmp_path):
    _run(BUILD.format(wide=WIDE), str(tmp_path))
    trainer = json.loads(_run(MEASURE, str(tmp_path), "trainer").splitlines()[-1])
    former = json.loads(_run(MEASURE, str(tmp_path), "former").splitlines()[-1])
    parameters = trainer["parameters"]
    # the plan's load term on the host: one copy x parameters x 2 B (bf16 as read), i.e. the host
    # line less the process base; ~99 M parameters here: ~198 MB
    planned = host_per_node(parameters, 1, pinned=0, dtype_bytes=2) - int(HOST_BASE_GIB * GiB)
    assert planned == 2 * parameters
    # the trainer's order stays within the planned copy (+10 % and 32 MB for the loader's own
    # buffers); the former one also holds the float32 copy, 2 x planned more
    print(
        f"planned {planned / 1e6:.0f} MB; peak trainer {trainer['peak'] / 1e6:.0f} MB, former "
        f"{former['peak'] / 1e6:.0f} MB ({parameters / 1e6:.1f} M parameters)"
    )
    assert trainer["peak"] <= 1.1 * planned + 32 * 2**20, (trainer, planned)
    assert former["peak"] >= 1.9 * planned, (former, planned)
