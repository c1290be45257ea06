"""The real SmolLM2-135M-Instruct end to end, offline: two training steps on GSM8K with its chat
template, then `quadrants.evaluate` on two GSM8K test problems; generation stops at <|im_end|>.

Kept small (2 prompts x G 4 x 32 tokens) so the stage takes minutes on 2 cores; learning itself is
measured by benchmarks/real_model_learning.py, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoTokenizer

from quadrants.models.loading import load_policy
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.hf import HFEngine
from quadrants.tasks.prompts import render_prompt

pytestmark = pytest.mark.real_model

SMALL = [
    "train.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=32",
    "train.mini_batch_size=8",
    "eval.samples=2",
    "eval.max_new_tokens=32",
    "train.threads=2",
    "checkpoint.every=2",
]


def run(cwd: Path, module: str, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def test_generation_stops_at_the_chat_eos(smollm2_dir):
    model, tokenizer = load_policy("smollm2-135m")
    engine = HFEngine(model, tokenizer)
    assert engine.stop_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")] == [2]
    prompt = render_prompt("What is 2 + 3?", format="chat", tokenizer=tokenizer)
    rollouts = engine.generate(
        [prompt], SamplingSettings(n=4, temperature=1.0, max_new_tokens=96, seed=0)
    )
    lengths = rollouts.response_mask.sum(-1)  # [B]
    for row in range(4):
        kept = rollouts.response_ids[row, : lengths[row]]
        assert (kept[:-1] != 2).all()  # no stop token before the last kept one
        if rollouts.finished[row]:
            assert (
                kept[-1] == 2
                and (rollouts.response_ids[row, lengths[row] :] == tokenizer.pad_token_id).all()
            )
    assert "<|im_end|>" not in "".join(rollouts.texts)
    assert torch.isfinite(rollouts.behaviour_logp).all()


def test_train_two_steps_on_gsm8k_then_evaluate_two_problems(smollm2_dir, tmp_path):
    run(
        tmp_path,
        "quadrants.sweep",
        "model=smollm2_135m",
        "task=gsm8k",
        "train.steps=2",
        "eval.limit=2",
        *SMALL,
    )
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run_info,) = store.search_runs([store.get_experiment_by_name("quadrants").experiment_id])
    assert run_info.info.status == "FINISHED"
    assert run_info.data.tags["model"] == "smollm2-135m" and run_info.data.tags["task"] == "gsm8k"
    assert run_info.data.params["prompt.rendered_format"] == "chat"
    assert (
        run_info.data.tags["quadrants.decontaminated"] == "0"
    )  # GSM8K train shares no problem with its test
    assert [
        m.step for m in store.get_metric_history(run_info.info.run_id, "train/reward_mean")
    ] == [1, 2]
    assert [
        m.step for m in store.get_metric_history(run_info.info.run_id, "eval/gsm8k/avg_at_2")
    ] == [0, 2]
    run_dir = next((tmp_path / "outputs" / "quadrants").glob("*/default"))
    prompt = (run_dir / "prompt_example.txt").read_text()
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith(
        "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )

    done = run(
        tmp_path,
        "quadrants.evaluate",
        str(run_dir),
        "eval.benchmarks={gsm8k:2}",
        "eval.limit=2",
        "eval.max_new_tokens=32",
    )
    assert "gsm8k" in done.stdout
    metrics = json.loads(next(tmp_path.glob("outputs/**/results/metrics.json")).read_text())
    assert 0.0 <= metrics["eval/gsm8k/avg_at_2"] <= 1.0
    counts = (next(tmp_path.glob("outputs/**/results/gsm8k/counts.csv"))).read_text().splitlines()
    assert len(counts) == 1 + 2  # header + the 2 problems


def test_smollm2s_real_chat_template(smollm2_dir):
    """The real SmolLM2 tokenizer's template adds its default system turn; generation starts after
    '<|im_start|>assistant\\n'."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    boxed = "Please reason step by step, and put your final answer within \\boxed{}."
    assert render_prompt("What is 2+3?", format="chat", tokenizer=tokenizer) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        f"<|im_start|>user\nWhat is 2+3?\n{boxed}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
