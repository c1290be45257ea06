"""benchmarks/gpu_trainer.py's CPU smoke: the script the GPU machine runs, run here end to end.

On the CPU its tuning check takes the counterpart's side (the CPU tuning must have run, the fast
decode must have sampled), so a check that could never fail would show here as a FAIL. What only
a GPU can show (no CPU tuning called on CUDA, every objective under CUDA's bf16 autocast, the
optimizer states offloaded to the host and back across a resume) is in docs/cluster.md, from a run
of the script on an H200.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_cpu_smoke_passes_and_each_check_has_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "trainer.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_trainer.py"), "--device", "cpu"]
        + ["--smoke", "--sections", "tuning,objectives,resume", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "PASS"
    figures = json.loads(out.read_text())
    tuning = figures["tuning"]["default config"]
    # on the CPU the four settings ran once each (the policy routed, no KL reference)
    for name in ("set_cpu_matmul", "route_linears", "retain_freed_memory"):
        assert tuning["cpu_calls"][name] == 1
    assert tuning["linear_classes"] == ["quadrants.cpu.linears.RoutedLinear"]
    (applied,) = tuning["tune_for"]  # what the one entry call returned: the tuning it applied
    assert applied.startswith("CpuTuning(") and all(tuning["checks"].values())
    assert tuning["generate_calls"] == 0  # the CPU samples with the fast decode
    assert set(figures["objectives"]) == {"dapo", "arca"}
    assert figures["objectives"]["arca"]["trainable"] < figures["objectives"]["dapo"]["trainable"]
    (resumed,) = figures["resume"].values()
    # 6 steps, checkpoints every 2, stopped after 4: resumed from 4, steps 5 and 6 compared
    assert resumed["resumed_from"] == 4 and sorted(resumed["compared"]) == ["5", "6"]
