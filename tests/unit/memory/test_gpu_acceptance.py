"""benchmarks/gpu_acceptance.py runs where the GPU machine does: torch and transformers only.

The GPU machine has no Hydra, OmegaConf, MLflow or math-verify; the script must not import them,
directly or through any quadrants module it uses. Here they are blocked (`sys.modules[name] =
None` makes every `import name` raise ImportError) in a fresh interpreter that runs the script's
CPU smoke mode end to end: plan traced on fake tensors, a narrow Qwen2.5-7B-structured model
trained under FSDP2 (gloo, world 1), bf16-mixed, checkpointing, micro-batches by tokens; and
the same with LoRA adapters in one process (`--lora-rank`; peft is a dependency, and the GPU
machine has it). Those two time the synthetic equal rows (`--equal-rows`); two more time real row
lengths (DeepScaleR prompts from the session's data home of fixture files, counted at 4 characters
per token, log-normal responses), padded with the no-grad pass and packed. The full_data test runs
the same on the complete data home's DeepScaleR prompts. (Without the prompts the script stops:
tests/unit/test_deepscaler_lengths.py.)

What only a GPU can show: the measured peak against `torch.cuda.max_memory_allocated`, nccl, the
CUDA attention kernels, tokens/s and MFU (the lead runs the script there).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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


def smoke(tmp_path: Path, extra: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """The script's CPU smoke run with `extra` options, the blocked packages unimportable; its
    output and its figures (`--out`)."""
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
    # none of the blocked packages was imported by the script (they could not have been)
    assert "hydra" not in done.stderr
    return done, json.loads(out.read_text())


@pytest.mark.integration  # runs the command as a subprocess
@pytest.mark.parametrize("extra", [[], ["--lora-rank", "4"]], ids=["full", "lora"])
def test_smoke_runs_without_hydra_omegaconf_mlflow(tmp_path: Path, extra: list[str]) -> None:
    _, figures = smoke(tmp_path, ["--equal-rows", *extra])
    # the update at lr 1e-6 over fp32 parameters moved (about) every weight of the watched matrix
    assert figures["weights_changed"] >= 0.99
    # 6 rows of 96 tokens under a 200-token budget: 2 rows (192 tokens) per micro-batch, 3 of them
    assert figures["micro_batches"] == 3
    assert abs(figures["plan_over_measured"] - 1) <= 0.15
    # equal rows: 6 x 96 = 576 useful tokens, all computed, no padding in either layout
    assert figures["useful_tokens"] == figures["computed_tokens"] == 576
    assert figures["padded_padding_fraction"] == figures["packed_padding_fraction"] == 0
    if "--lora-rank" in extra:
        # rank 4 on the smoke model's 7 projections (hidden 128, 4 heads of 32, 2 key-value
        # heads, MLP 256): r x (in + out) = 4 x (256 + 192 + 192 + 256 + 384 + 384 + 384)
        # = 8,192 per layer (q, k, v, o, gate, up, down), 2 layers = 16,384
        assert figures["lora_rank"] == 4 and figures["adapters"] == 16_384


def check_real_rows(figures: dict) -> None:
    """What the figures of a real-length run must say about its rows, whatever their lengths."""
    prompts, responses = figures["prompt_lengths"], figures["response_lengths"]
    assert len(prompts) == len(responses) == figures["rows"] == 6
    # useful tokens: each row's real prompt + response tokens, nothing else
    assert figures["useful_tokens"] == sum(prompts) + sum(responses)
    # padded, every row is at least P + its response wide (P >= its prompt): padding counted;
    # packed, exactly the useful tokens
    assert figures["padded_computed_tokens"] >= figures["prompt_width"] * 6 + sum(responses)
    assert figures["packed_computed_tokens"] == figures["useful_tokens"]
    assert figures["packed_padding_fraction"] == 0
    padded = figures["padded_padding_fraction"]
    assert padded == pytest.approx(1 - figures["useful_tokens"] / figures["padded_computed_tokens"])
    assert abs(figures["plan_over_measured"] - 1) <= 0.15
    assert figures["weights_changed"] >= 0.99


# 8 prompts x G = 2, the first 6 shuffled rows, responses log-normal(median 24) cut at 64, at 4
# characters per token (the same on every machine); a 100-token budget splits them
REAL = ["--tokenizer", "chars", "--micro-batch-tokens", "100"]


@pytest.mark.integration  # runs the command as a subprocess
@pytest.mark.parametrize(
    "extra", [["--gradless-pass"], ["--packed"]], ids=["padded_no_grad_pass", "packed"]
)
def test_smoke_times_real_row_lengths(tmp_path: Path, extra: list[str]) -> None:
    done, figures = smoke(tmp_path, [*REAL, *extra])
    check_real_rows(figures)
    assert "DeepScaleR prompts" in done.stdout and "useful MFU" in done.stdout
    assert figures["packed"] == ("--packed" in extra)
    assert figures["micro_batches"] >= 2
    if "--gradless-pass" in extra:  # split: the no-grad pass runs, over every row
        assert figures["gradless_forwards"] >= 1
        assert figures["gradless_tokens"] == figures["computed_tokens"]  # the same budget
    else:
        assert figures["gradless_forwards"] == 0


@pytest.mark.full_data
@pytest.mark.parametrize("extra", [[], ["--packed"]], ids=["padded", "packed"])
def test_smoke_on_the_complete_data_homes_deepscaler_prompts(
    full_data_dir: Path, tmp_path: Path, extra: list[str]
) -> None:
    done, figures = smoke(tmp_path, ["--tokenizer", "chars", *extra])
    assert str(full_data_dir / "dsr_sub" / "dsr_sub.jsonl") in done.stdout
    check_real_rows(figures)
    # real DeepScaleR prompts differ in length: padded to the step's widest, some is padding
    assert figures["padded_padding_fraction"] > 0


@pytest.mark.slow  # imports the script and, through it, transformers' model classes: ~0.3 s
def test_useful_and_computed_tokens_and_flops_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's arithmetic, in this process (its directory on the path, as when it runs)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("gpu_acceptance")
    rows = script.Rows(prompts=[3, 1, 2], responses=[2, 3, 1], prompt_width=4, source="by hand")
    # useful: (3 + 2) + (1 + 3) + (2 + 1) = 12 real tokens
    assert rows.useful == 12
    # as the budget counts them: padded P + r = 6, 7, 5; packed p + r = 5, 4, 3
    assert rows.budget_lengths(False) == [6, 7, 5] and rows.budget_lengths(True) == [5, 4, 3]
    figures = script.layout_figures(rows, 14)
    # padded under 14: ascending 5 (row 2), 6 (row 0): 2 x 6 = 12 <= 14; with 7 (row 1) 3 x 7 = 21
    # > 14, so [[2, 0], [1]], computing 2 x 6 + 1 x 7 = 19 tokens, 19 - 12 = 7 of them padding
    assert figures["padded_micro_batches"] == 2 and figures["padded_computed_tokens"] == 19
    assert figures["padded_padding_fraction"] == pytest.approx(7 / 19)
    # packed under 14: 3 + 4 + 5 = 12 <= 14, one micro-batch of the 12 real tokens, no padding
    assert figures["packed_micro_batches"] == 1 and figures["packed_computed_tokens"] == 12
    assert figures["packed_padding_fraction"] == 0
    # FLOPs per token at width w, hidden 2, vocabulary 3, 100 parameters, 1 layer:
    # 6 x (100 - 3 x 2) + 12 x 1 x 2 x w = 564 + 24 w; rows of 5 and 4 tokens:
    # 5 x (564 + 120) + 4 x (564 + 96) = 3,420 + 2,640 = 6,060
    config = SimpleNamespace(hidden_size=2, vocab_size=3)
    assert script.step_flops(config, 1, 100, [5, 4]) == 6_060


@pytest.mark.slow  # traces the smoke model's plan on fake tensors: a few seconds
def test_plan_only_prints_the_batch_arithmetic_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--plan-only`: the rows, their padding in both layouts and the plan, no model and no
    device (CUDA is not needed even with the default --device cuda)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("gpu_acceptance")
    out = tmp_path / "plan.json"
    argv = ["--smoke", "--plan-only", "--tokenizer", "chars", "--out", str(out)]
    assert script.main(argv) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert "measured_peak_gib" not in figures and figures["plan_peak_gib"] > 0
    padded, packed = figures["padded_padding_fraction"], figures["packed_padding_fraction"]
    assert f"padded {padded:.1%} of {figures['padded_computed_tokens']:,} tokens" in printed
    assert packed == 0 and "packed 0.0%" in printed
    assert "PASS" not in printed and "useful MFU" not in printed
