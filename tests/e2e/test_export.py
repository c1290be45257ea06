"""`python -m quadrants.export RUN_DIR [--step N] OUT_DIR` (quadrants/launch/export.py): a training
checkpoint becomes a Hugging Face model folder that `AutoModelForCausalLM.from_pretrained` loads and
that gives the checkpoint's log-probs, as `python -m quadrants.evaluate` loads the checkpoint
(eval/target.py `load_target_policy`). A LoRA run's folder holds the merged weights.

Tolerances: a full fine-tune is exported as its own float32 numbers, so the log-probs agree to the
bit (atol 0). A LoRA export holds W + scale * B @ A computed once (peft's merge), where the adapted
forward computes W x + scale * B (A x): the same sums in another order, float32 rounding apart; on
the tiny model the differences are ~1e-6, checked at atol 1e-4 (the command's default). Both sides
read the same token ids (the run's tokenizer's)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from quadrants.eval.target import load_target_policy, resolve_target
from quadrants.launch.export import CHECK_TEXTS, check_batch, main, token_logprobs
from quadrants.models.loading import load_policy
from quadrants.run_plan import RunPlan
from tests import commands
from tests.commands import TINY


def reloaded(out: Path):
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    return model.eval(), AutoTokenizer.from_pretrained(out, local_files_only=True)


def as_evaluate_loads(run: Path):
    model, tokenizer = load_target_policy(resolve_target(str(run)), dtype="float32")
    return model, tokenizer


@pytest.mark.integration
@pytest.mark.slow
def test_a_swept_run_exports_to_a_folder_with_the_checkpoints_logprobs(tmp_path, base_policy):
    """The warmed-up tiny policy (mixed rewards at 32 new tokens, lr 1e-2): each step moves the
    weights, so the two checkpoints and the base give three different sets of log-probs."""
    shape = ("model=", "rollout.max_new_tokens=", "train.prompts_per_step=", "rollout.group_size=")
    learning = [o for o in TINY if not o.startswith(shape)] + [
        "model=tiny",
        "rollout.max_new_tokens=32",
        "train.prompts_per_step=4",
        "rollout.group_size=4",
        "train.lr=1e-2",
    ]
    done = commands.run(
        "quadrants.sweep",
        "sweep_id=X",
        "train.steps=2",
        "checkpoint.every=1",
        *learning,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "outputs" / "quadrants" / "X" / "default"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_0000001",
        "step_0000002",
    ]

    out = tmp_path / "exported"
    exported = commands.run("quadrants.export", str(run_dir), str(out), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "largest difference 0 (within" in exported.stdout, exported.stdout
    assert {"config.json", "generation_config.json", "model.safetensors"} <= {
        p.name for p in out.iterdir()
    }
    record = json.loads((out / "quadrants_export.json").read_text())
    assert record["step"] == 2 and record["base_model"] == "tiny"
    assert record["objective"] == "dapo" and record["lora_merged"] is False

    model, tokenizer = reloaded(out)
    checkpoint, run_tokenizer = as_evaluate_loads(run_dir)
    ids, mask = check_batch(run_tokenizer)
    got, expected = token_logprobs(model, ids, mask), token_logprobs(checkpoint, ids, mask)
    # the run's tokenizer encodes every character, blanks included: 3 texts of 11, 44 and 8
    # characters give 10 + 43 + 7 = 60 log-probs
    assert got.numel() == 60
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    # the same prompt generates the same tokens (greedy) from the folder and from the checkpoint
    batch = run_tokenizer(["12+3="], return_tensors="pt")
    generate = dict(max_new_tokens=6, do_sample=False)
    assert torch.equal(
        model.generate(**batch, **generate), checkpoint.generate(**batch, **generate)
    )
    # quadrants reads the folder's tokenizer as it was saved (models/loading.py); transformers'
    # AutoTokenizer substitutes Qwen2Tokenizer for a qwen2 folder and drops the second text's 8
    # blanks, which the command says
    texts = list(CHECK_TEXTS)
    _, ours = load_policy(str(out))
    assert ours(texts)["input_ids"] == run_tokenizer(texts)["input_ids"]
    assert [len(ids) for ids in tokenizer(texts)["input_ids"]] == [11, 44 - 8, 8]
    assert "encodes the check texts differently" in exported.stderr
    # training moved the weights: the base policy gives other log-probs
    base, _ = reloaded(Path(base_policy))
    assert (token_logprobs(base, ids, mask) - got).abs().max() > 1e-3

    # --step picks an earlier checkpoint; its weights differ from the newest one's
    first = tmp_path / "step1"
    picked = commands.run(
        "quadrants.export", str(run_dir), "--step", "1", str(first), "--no-check", cwd=tmp_path
    )
    assert picked.returncode == 0, picked.stderr[-3000:]
    assert json.loads((first / "quadrants_export.json").read_text())["step"] == 1
    step1, _ = reloaded(first)
    assert not torch.equal(token_logprobs(step1, ids, mask), got)

    # a step the run did not keep, and a folder that is not empty: refused, naming the fix
    missing = commands.run(
        "quadrants.export", str(run_dir), "--step", "7", str(tmp_path / "x"), cwd=tmp_path
    )
    assert missing.returncode != 0 and "holds steps [1, 2]" in missing.stderr
    taken = commands.run("quadrants.export", str(run_dir), str(out), cwd=tmp_path)
    assert taken.returncode != 0 and "is not an empty directory" in taken.stderr


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_lora_run_exports_merged_weights_with_the_adapted_logprobs(tmp_path, base_policy):
    """One LoRA step on the warmed-up tiny policy (tests/unit/train/test_lora.py `small`: lr 1e-2,
    so the adapters' B matrices move off zero); the folder holds plain Qwen2 weights, no adapter."""
    from quadrants.models.lora import has_adapters
    from quadrants.run.loop import run_training
    from quadrants.tracking.base import RecordingTracker
    from tests.unit.train.test_lora import small

    run_dir = tmp_path / "run"
    cfg = small(run_dir, steps=1)
    run_training(RunPlan.parse(cfg), RecordingTracker())
    (run_dir / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg)))

    out = tmp_path / "exported"
    main([str(run_dir), str(out)])
    assert json.loads((out / "quadrants_export.json").read_text())["lora_merged"] is True
    model, _ = reloaded(out)
    assert not has_adapters(model)
    assert not any("lora" in name for name in model.state_dict())

    adapted, run_tokenizer = as_evaluate_loads(run_dir)
    assert has_adapters(adapted)
    ids, mask = check_batch(run_tokenizer)
    expected = token_logprobs(adapted, ids, mask)
    got = token_logprobs(model, ids, mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    # the merge is not a no-op: the base alone gives other log-probs
    base, _ = reloaded(Path(base_policy))
    assert (token_logprobs(base, ids, mask) - expected).abs().max() > 1e-3
