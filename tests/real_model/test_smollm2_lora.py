"""SmolLM2-135M-Instruct with LoRA (`model.lora`), offline: one step of one-digit sums, the run stopped with its
checkpoint (train.steps=1 stands in for the kill), the same command resumed to step 2, then
`quadrants.evaluate` of the run directory, whose checkpoint holds the adapters (loaded into the
same LoRA layers from the run's config.yaml). A KL term (objective.kl_coef) takes its reference
from the same model with the adapters off. Kept to the size of test_smollm2.py's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.real_model.test_smollm2 import run

pytestmark = pytest.mark.real_model

LORA = [
    # SmolLM2 on one-digit sums (reasoning_gym): some answers right at 32 tokens, so the step has a
    # gradient (on GSM8K at 32 tokens every reward is 0 and the adapters would not move)
    "experiment=smollm2_arithmetic",
    "model.lora.enabled=true",
    "model.lora.rank=8",
    "model.lora.alpha=16",
    "objective.kl_coef=0.01",
    "rollout.group_size=4",
    "train.mini_batch_size=8",
    "eval.problems=2",
    "eval.samples=2",
    "train.threads=2",
    "checkpoint.every=1",
    "sweep_id=lora",  # one run directory for both commands (by default the id hashes them)
]


def test_lora_trains_two_steps_resumes_and_evaluates(smollm2_dir, tmp_path):
    run(tmp_path, "quadrants.sweep", *LORA, "train.steps=1")
    run_dir = tmp_path / "outputs" / "smollm2_arithmetic" / "lora" / "default"
    assert (run_dir / "checkpoints" / "step_0000001").is_dir()
    run(tmp_path, "quadrants.sweep", *LORA, "train.steps=2")  # resumes from step 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_0000001",
        "step_0000002",
    ]
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run_info,) = store.search_runs(
        [store.get_experiment_by_name("smollm2_arithmetic").experiment_id]
    )
    assert run_info.info.status == "FINISHED"
    history = store.get_metric_history(run_info.info.run_id, "train/reward_mean")
    assert sorted(m.step for m in history) == [1, 2]  # one run, step 2 after the resume
    # the KL to the adapters-off base: exactly 0 at step 1 (B = 0: the adapted policy is the
    # base), positive once the adapters have moved (7.8e-7 measured at lr 1e-5)
    kl = {
        m.step: m.value
        for m in store.get_metric_history(run_info.info.run_id, "train/objective/kl_ref")
    }
    assert kl[1] == 0.0
    # kl_ref is a mean over the kept groups' tokens of the rows that carry gradient: a step 2
    # whose groups are all dropped (dynamic sampling: all wrong, as with the hashed seeds at
    # b224a95) has no such row, so it has nothing to describe and is not logged at that step
    # (train/telemetry.py `mean_metrics`); then the adapters' move shows as step 1's non-zero
    # update instead
    kept = {
        m.step: m.value
        for m in store.get_metric_history(run_info.info.run_id, "train/objective/kept_group_frac")
    }
    grad = {
        m.step: m.value for m in store.get_metric_history(run_info.info.run_id, "train/grad_norm")
    }
    if kept.get(2, 1.0) > 0.0:
        assert kl[2] > 0.0
    else:
        assert 2 not in kl and grad[1] > 0.0

    # the checkpoint: the adapters only (the base is read from its source on resume), trained,
    # AdamW over the adapters only
    dcp_to_torch_save(run_dir / "checkpoints" / "step_0000002" / "model_optim", tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=False)
    assert all(".lora_" in n for n in state["model"])  # no base weight, tied LM head included
    lora_b = [n for n in state["model"] if ".lora_B." in n]
    assert len(lora_b) == 30 * 7  # 30 layers x q, k, v, o, gate, up, down
    assert any(state["model"][n].abs().max() > 0 for n in lora_b)  # B starts at 0
    assert all(".lora_" in n for n in state["optim"]["state"])

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
    assert Path(run_dir / "config.yaml").read_text().count("enabled: true") >= 1
