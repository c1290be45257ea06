"""Entry point: `python -m quadrants.export RUN_DIR [--step N] OUT_DIR` — a training checkpoint as a
Hugging Face model folder.

    # the newest checkpoint of a run
    python -m quadrants.export outputs/quadrants/s1a2b3c4/quadrant=PHR,seed=0 exported/phr
    # the checkpoint of step 60 (one of the last `checkpoint.keep` the run kept)
    python -m quadrants.export outputs/quadrants/s1a2b3c4/quadrant=PHR,seed=0 --step 60 exported/phr
    # a checkpoint directory itself
    python -m quadrants.export outputs/.../quadrant=PHR,seed=0/checkpoints/step_0000060 exported/phr

The folder holds what `save_pretrained` writes (`config.json`, `generation_config.json`, the weights
as safetensors) and the tokenizer's files, so `AutoModelForCausalLM.from_pretrained(OUT_DIR)`,
`vllm serve OUT_DIR`, lighteval and lm-eval read it as any model on the Hub; `quadrants_export.json`
says which run and step it came from. The base model and its dtype come from the run's
`config.yaml` (eval/target.py, as `python -m quadrants.evaluate` reads a checkpoint). A LoRA run's
adapters are merged into the base weights with peft's `merge_and_unload` (peft/tuners/
tuners_utils.py `BaseTuner._unload_and_optionally_merge`: each `lora.Linear` merges its update into
its `base_layer`, which then replaces it): the folder is a plain model of the base's architecture.

Before it returns, the command reloads the folder with `AutoModelForCausalLM.from_pretrained` and
compares its token log-probs on a fixed batch (the same token ids) with those of the checkpoint as
training held it, printing the largest difference; past `--tolerance` it fails (exit 1). It also
says when `AutoTokenizer.from_pretrained` on the folder encodes the batch otherwise than the run's
tokenizer (the embedded character-level models: see the warning in `main`). `--no-check` skips the
check (it holds a second copy of the model in memory).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from quadrants.eval.target import EvalTarget, load_checkpoint_weights, resolve_target, run_lora
from quadrants.launch.local_checks import check_writable_dir

EXPORT_FILE = "quadrants_export.json"
# the check's batch: short texts any tokenizer encodes (the embedded models' characters are
# printable ASCII), of different lengths so that padding is exercised
CHECK_TEXTS = (
    "12+34*5=182",
    "What is 7 times 6? The answer is \\boxed{42}.",
    "(3+4)*2=",
)
# float32 weights saved and read back are the same numbers; the merge of a LoRA update into the base
# weight (W + B A * scale) changes the order of the sums, a difference of float32 rounding
DEFAULT_TOLERANCE = 1e-4


def checkpoint_target(run: str, step: int | None) -> EvalTarget:
    """The checkpoint to export: `run`'s newest, or the one of `step`; raises naming what exists."""
    target = resolve_target(run)
    if target.kind != "checkpoint":
        raise ValueError(
            f"{run} is not a training run or checkpoint directory (it is a {target.kind} model); "
            "export reads a run directory (outputs/<study>/<sweep_id>/<job>) or one of its "
            "checkpoints/step_N"
        )
    if step is None or step == target.step:
        return target
    assert target.checkpoint is not None
    checkpoints = target.checkpoint.parent.parent
    wanted = checkpoints / f"step_{step:07d}"
    if not (wanted / "state.pt").is_file():
        kept = sorted(
            int(p.name.removeprefix("step_"))
            for p in checkpoints.glob("step_*")
            if (p / "state.pt").is_file()
        )
        raise FileNotFoundError(
            f"--step {step}: {checkpoints} holds no complete checkpoint of that step; it holds "
            f"steps {kept} (a run keeps its last checkpoint.keep checkpoints)"
        )
    return resolve_target(str(wanted))


def exported_model(target: EvalTarget) -> tuple[Any, Any]:
    """(model, tokenizer) of the checkpoint, LoRA adapters merged: a plain Hugging Face model."""
    from quadrants.models.loading import load_policy
    from quadrants.models.lora import wrap_lora

    run = target.run_config or {}
    lora = run_lora(target)
    # the base as the run built it: a seeded base ("tiny-random") takes the run's seed
    model, tokenizer = load_policy(
        target.model, dtype=target.dtype or "float32", seed=int(run.get("seed", 0))
    )
    wrapped = wrap_lora(model, lora) if lora is not None else None
    load_checkpoint_weights(target, model)  # the adapters' values under LoRA, the base as loaded
    if wrapped is not None:
        model = wrapped.merge_and_unload(safe_merge=True)  # raises on NaN in a merged weight
    model.eval()
    return model, tokenizer


def check_batch(tokenizer: Any, texts: tuple[str, ...] = CHECK_TEXTS) -> tuple[Any, Any]:
    """(input ids, attention mask) of `texts`, left-padded by `tokenizer`."""
    batch = tokenizer(list(texts), return_tensors="pt", padding=True)
    return batch["input_ids"], batch["attention_mask"]


def token_logprobs(model: Any, ids: Any, mask: Any) -> Any:
    """[tokens] the log-probability `model` gives each next token of the rows of `ids` (padding
    left out: a token counts when it and the one before it are real)."""
    import torch

    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    chosen = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    return chosen[(mask[:, 1:] * mask[:, :-1]).bool()]


def export(target: EvalTarget, out_dir: Path) -> tuple[Any, Any]:
    """Write the model folder; returns the (model, tokenizer) written."""
    model, tokenizer = exported_model(target)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)  # config.json, generation_config.json, model.safetensors
    tokenizer.save_pretrained(out_dir)
    run = target.run_config or {}
    record = {
        "run_dir": str(target.checkpoint.parent.parent.parent) if target.checkpoint else None,
        "step": target.step,
        "base_model": target.model,
        "dtype": target.dtype,
        "lora_merged": run_lora(target) is not None,
        "source_run_id": target.source_run_id,
        "objective": (run.get("objective") or {}).get("name"),
        "quadrant": (run.get("quadrant") or {}).get("keep"),
        "seed": run.get("seed"),
    }
    (out_dir / EXPORT_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return model, tokenizer


def reload_difference(model: Any, tokenizer: Any, out_dir: Path) -> tuple[float, int, bool]:
    """(largest |log-prob difference|, tokens compared, whether the folder's tokenizer encodes the
    batch as the run's does) between `model` and the folder as `AutoModelForCausalLM` /
    `AutoTokenizer.from_pretrained` read it. The log-probs are compared on the same token ids (the
    run's tokenizer's)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reloaded = AutoModelForCausalLM.from_pretrained(out_dir, dtype="auto", local_files_only=True)
    reloaded.eval()
    ids, mask = check_batch(tokenizer)
    expected, got = token_logprobs(model, ids, mask), token_logprobs(reloaded, ids, mask)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
    same_ids = all(
        reloaded_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
        for text in CHECK_TEXTS
    )
    return float((got - expected).abs().max()), int(expected.numel()), same_ids


def parser() -> argparse.ArgumentParser:
    """The command line (`main`); `checkpoint_target` checks the run and step it names."""
    parser = argparse.ArgumentParser(
        prog="python -m quadrants.export",
        description="Write a training checkpoint as a Hugging Face model folder (LoRA merged).",
    )
    parser.add_argument("run", metavar="RUN_DIR", help="a training run or checkpoint directory")
    parser.add_argument("out", metavar="OUT_DIR", help="the model folder to write (new or empty)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step (newest)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"largest log-prob difference the reload check accepts (default {DEFAULT_TOLERANCE})",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the reload check")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    out_dir = Path(args.out).expanduser().resolve()
    try:
        if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(
                f"{out_dir} exists and is not an empty directory; name a new folder"
            )
        # a target that cannot be written (read-only, or under a file) is refused before the
        # checkpoint loads, not after (launch/local_checks.py `check_writable_dir`)
        check_writable_dir(f"the export folder {out_dir}", out_dir)
        target = checkpoint_target(args.run, args.step)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        sys.exit(f"quadrants.export: {error}")
    model, tokenizer = export(target, out_dir)
    merged = " (LoRA adapters merged)" if run_lora(target) is not None else ""
    print(f"exported {target.label} ({target.model}){merged} to {out_dir}")
    if args.no_check:
        return
    difference, tokens, same_ids = reload_difference(model, tokenizer, out_dir)
    verdict = "within" if difference <= args.tolerance else "OVER"
    print(
        f"reload check: AutoModelForCausalLM.from_pretrained({out_dir.name}) gives the "
        f"checkpoint's log-probs on {tokens} tokens: largest difference {difference:.3g} "
        f"({verdict} the tolerance {args.tolerance:g})"
    )
    if not same_ids:
        print(
            "warning: AutoTokenizer.from_pretrained on the folder encodes the check texts "
            "differently from the run's tokenizer. transformers picks the tokenizer class from "
            "config.json's model_type for some types (transformers/models/auto/"
            "tokenization_auto.py MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, qwen2 among them), "
            "which replaces the pre-tokenizer of tokenizer.json; the embedded character-level "
            "model's spaces and newlines are then dropped. Load its tokenizer with "
            "PreTrainedTokenizerFast.from_pretrained(folder), as quadrants does "
            "(models/loading.py)",
            file=sys.stderr,
        )
    if difference > args.tolerance:
        sys.exit(1)
