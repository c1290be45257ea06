"""benchmarks/gpu_acceptance.py runs where the GPU machine does: torch and transformers only.

The GPU machine has no Hydra, OmegaConf, MLflow or math-verify; the script must not import them,
directly or through any quadrants module it uses. Here they are blocked (`sys.modules[name] =
None` makes every `import name` raise ImportError) in a fresh interpreter that runs the script's
CPU smoke mode end to end: plan traced on fake tensors, a narrow Qwen2.5-7B-structured model
trained under FSDP2 (gloo, world 1), bf16-mixed, checkpointing, micro-batches by tokens; and
the same with LoRA adapters in one process (`--lora-rank`; peft is a dependency, and the GPU
machine has it).

What only a GPU can show: the measured peak against `torch.cuda.max_memory_allocated`, nccl, the
CUDA attention kernels, tokens/s and MFU (the lead runs the script there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BLOCKED = ("hydra", "omegaconf", "mlflow", "math_verify")

RUNNER = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` now raises ImportError
sys.path.insert(0, {root!r})
sys.path.insert(0, {root!r} + "/benchmarks")
import runpy
sys.argv = ["gpu_acceptance.py", "--device", "cpu", "--smoke", "--out", {out!r}, *{extra!r}]
runpy.run_path({script!r}, run_name="__main__")
"""


@pytest.mark.integration  # runs the command as a subprocess
@pytest.mark.parametrize(
    "extra", [[], ["--lora-rank", "4"], ["--packed"]], ids=["full", "lora", "packed"]
)
def test_smoke_runs_without_hydra_omegaconf_mlflow(tmp_path: Path, extra: list[str]) -> None:
    out = tmp_path / "figures.json"
    code = RUNNER.format(
        blocked=BLOCKED,
        root=str(ROOT),
        out=str(out),
        script=str(ROOT / "benchmarks" / "gpu_acceptance.py"),
        extra=extra,
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "PASS"
    figures = json.loads(out.read_text())
    # the update at lr 1e-6 over fp32 parameters moved (about) every weight of the watched matrix
    assert figures["weights_changed"] >= 0.99
    # 6 rows of 96 tokens under a 200-token budget: 2 rows (192 tokens) per micro-batch, 3 of them
    assert figures["micro_batches"] == 3
    assert abs(figures["plan_over_measured"] - 1) <= 0.15
    # none of the blocked packages was imported by the script (they could not have been)
    assert "hydra" not in done.stderr
    if "--lora-rank" in extra:
        # rank 4 on the smoke model's 7 projections (hidden 128, 4 heads of 32, 2 key-value
        # heads, MLP 256): r x (in + out) = 4 x (256 + 192 + 192 + 256 + 384 + 384 + 384)
        # = 8,192 per layer (q, k, v, o, gate, up, down), 2 layers = 16,384
        assert figures["lora_rank"] == 4 and figures["adapters"] == 16_384
