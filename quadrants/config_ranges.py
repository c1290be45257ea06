"""The one range type, and the allowed range of every numeric key of the run configuration, in
one table, checked at compose time.

`Range` is how every numeric bound in quadrants is declared and checked: the keys of `RunConfig`
here (`RANGES`), the probe's and the evaluation's own checks of them, and every objective's
hyper-parameters (`objectives.registry.check_range` builds one). Its one error message names the
key, the value and the allowed interval: `train.lr=-1.0 is out of range; allowed: (0, inf)`.

Every leaf key of `RunConfig` (quadrants/config.py) appears exactly once: in `RANGES` with the
interval its values must lie in, or in `NO_RANGE` with the reason it has none (a name checked
against a registry, a flag, a value whose bounds depend on another key and are checked there).
tests/unit/test_config_ranges.py walks every leaf key of `RunConfig` and fails for a key in neither
table, so a new key cannot arrive unchecked. `check_ranges` runs first in `validate_config`.

A list value (`train.betas`, `eval.ks`) is checked element by element; `null=True` allows None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """An interval of allowed values: [low, high] with either end open; None = unbounded.

    `null=True` accepts None (the key's "not set" value); `why` is said after the interval when
    the bound is not obvious. (Whole numbers are the schema's types' business: Hydra refuses
    `train.steps=2.5` when it composes.)
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    null: bool = False
    why: str = ""

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (
            self.high is not None and (value > self.high or (self.high_open and value == self.high))
        )

    def text(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if self.low is None or self.low_open else "["
        right = ")" if self.high is None or self.high_open else "]"
        text = f"{left}{low}, {high}{right}" + (", or null" if self.null else "")
        return f"{text} ({self.why})" if self.why else text

    def check(self, key: str, value: Any) -> None:
        """Raise ValueError naming `key`, its value and this range unless the value lies in it
        (each element of a list or tuple value; None only where `null`)."""
        if value is None and self.null:
            return
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if any(item is None or not self.contains(item) for item in values):
            raise ValueError(f"{key}={_show(value)} is out of range; allowed: {self.text()}")


_POSITIVE = Range(0, low_open=True)
_NON_NEGATIVE = Range(0)
_AT_LEAST_ONE = Range(1)
_PROBABILITY_MASS = Range(0, 1, low_open=True)  # top_p

RANGES: dict[str, Range] = {
    "seed": _NON_NEGATIVE,
    "model.lora.rank": _AT_LEAST_ONE,
    "model.lora.alpha": _POSITIVE,
    "model.lora.dropout": Range(0, 1, high_open=True),
    "task.heldout_size": Range(
        0, why="0 = no held-out split, refused where the evaluation needs one (validate_config)"
    ),
    "rollout.group_size": Range(2, why="GRPO needs a group"),
    "rollout.temperature": _POSITIVE,
    "rollout.top_p": _PROBABILITY_MASS,
    "rollout.max_new_tokens": _AT_LEAST_ONE,
    "rollout.mismatch_cap": Range(1, why="the cap truncates importance weights from above"),
    "reward.probability": Range(0, 1, null=True, why="a Bernoulli success probability"),
    "rollout.refill_rounds": Range(0, why="0 = no refill"),
    "rollout.overlong_buffer": Range(
        0, why="0 = no overlong penalty; at most rollout.max_new_tokens"
    ),
    "rollout.overlong_penalty": _NON_NEGATIVE,
    "rollout.vllm.gpu_memory_utilization": Range(0, 1, low_open=True),
    "rollout.vllm.kv_cache_gib": Range(0, low_open=True, null=True),
    "rollout.identity_check.every": Range(0, why="0 = off; 1 = every weight push"),
    "rollout.identity_check.probe_size": _AT_LEAST_ONE,
    "rollout.identity_check.probe_tokens": Range(2, why="a prompt half and a scored half"),
    "rollout.identity_check.tolerance": Range(0, low_open=True, null=True),
    "rollout.identity_check.seed": _NON_NEGATIVE,
    "rollout.vllm.tensor_parallel_size": _AT_LEAST_ONE,
    "rollout.vllm.max_model_len": Range(1, null=True),
    "objective.kl_coef": _NON_NEGATIVE,
    "advantage.eps": Range(0, low_open=True, why="added to the group std before dividing by it"),
    "train.steps": _NON_NEGATIVE,
    "train.prompts_per_step": _AT_LEAST_ONE,
    "train.mini_batch_size": _AT_LEAST_ONE,
    "train.epochs": _AT_LEAST_ONE,
    "train.lr": _POSITIVE,
    "train.weight_decay": _NON_NEGATIVE,
    "train.betas": Range(0, 1, high_open=True, why="AdamW's (beta1, beta2)"),
    "train.warmup_steps": Range(
        0, why="0 = no warm-up; a negative one would make the learning rate negative"
    ),
    "train.max_grad_norm": _POSITIVE,
    "train.entropy_chunk_size": _AT_LEAST_ONE,
    "train.threads": Range(0, why="0 = torch's default"),
    "task.grader_workers": Range(0, why="0 = one per CPU the task holds, less one"),
    "train.cpu.retain_freed_mb": Range(
        0, 2047, why="0 = glibc's own thresholds; mallopt takes a C int of bytes"
    ),
    "train.cpu.omp_spincount": Range(0, null=True, why="null = libgomp's default"),
    "train.micro_batch_size": Range(0, why="0 = the whole mini-batch in one forward/backward"),
    "train.micro_batch_tokens": Range(0, why="0 = off (train.micro_batch_size decides)"),
    "train.forward_tokens": Range(0, why="0 = off"),
    "cluster.gpu_memory_gib": Range(0, null=True, low_open=True, why="null = no memory check"),
    "cluster.allocator_headroom": Range(0, why="a fraction of the trainer's planned peak"),
    "task.max_prompt_tokens": Range(1, why="the longest prompt: longer ones are dropped at load"),
    "train.dlogp_rows": Range(0, null=True, why="null = auto (1/16 of the rows), 0 = every row"),
    "train.length_buckets": Range(1, why="1 = every response in one call, cut to the longest"),
    "eval.every": Range(0, why="0 = only before and after training"),
    "eval.problems": Range(0, why="0 = no held-out evaluation"),
    "eval.samples": _AT_LEAST_ONE,
    "eval.temperature": Range(0, why="0 = greedy"),
    "eval.top_p": _PROBABILITY_MASS,
    "eval.max_new_tokens": _AT_LEAST_ONE,
    "eval.limit": Range(1, null=True, why="null = every problem"),
    "eval.ks": _AT_LEAST_ONE,
    "eval.batch_size": Range(1, null=True, why="null = sized from the engine's KV cache"),
    "eval.confidence": Range(0, 1, low_open=True, high_open=True),
    "probe.prompts": _AT_LEAST_ONE,
    "probe.positions": _AT_LEAST_ONE,
    "probe.entropy_bins": _AT_LEAST_ONE,
    "probe.branches": _AT_LEAST_ONE,
    "probe.coverage": Range(0, 1, low_open=True),
    "probe.continuations": Range(2, why="the jackknife leaves one out"),
    "probe.min_rest_mass": Range(0, 1, high_open=True),
    "probe.batch_size": _AT_LEAST_ONE,
    "probe.resamples": Range(10),
    "probe.confidence": Range(0, 1, low_open=True, high_open=True),
    "probe.pseudocount": Range(0, low_open=True, why="zero counts must stay finite"),
    "probe.seed": _NON_NEGATIVE,
    "probe.every": Range(0, why="0 = never"),
    "checkpoint.every": Range(0, why="0 = never"),
    "checkpoint.keep": _AT_LEAST_ONE,
    "tracking.log_samples_every": Range(0, why="0 = never"),
    "tracking.system_metrics_interval_s": _POSITIVE,
    "distributed.prompts_per_generate": Range(
        1, null=True, why="null = prompts_per_step / world size"
    ),
}

NO_RANGE: dict[str, str] = {
    "study": "a name (the MLflow experiment)",
    "sweep_id": "a name (the sweep's directory and parent run)",
    "outputs": "a directory, created when the run starts",
    "run_dir": "a directory (null = no checkpoints), created when the run starts",
    "model.name_or_path": (
        "a name or a path: a local path must exist (models.source.check_model_source)"
    ),
    "model.dtype": "a dtype name, checked when the model is loaded (models.loading)",
    "model.lora.enabled": "a flag",
    "model.lora.target_modules": "all-linear or module names, checked by models.lora",
    "model.lora.residual_layer": (
        "an index into the model's hidden states; its range depends on the model's depth, checked "
        "by models.token_signals when the residual pass reads it"
    ),
    "model.lora.residual_telemetry": "a flag",
    "task.name": "a name, checked against the registered tasks (tasks.validate_task)",
    "task.params": "the task's keyword arguments, checked by tasks.validate_task",
    "task.reward": "a 'module:function' path, imported by validate_config (rewards/custom.py)",
    "task.answer_extraction": (
        "a name, checked against rewards.extract.EXTRACTIONS (validate_config)"
    ),
    "prompt.format": "a name, checked by tasks.prompts.validate_prompt",
    "prompt.instruction": "free text (null = the format's own instruction)",
    "rollout.engine": "a name, checked against the registered engines (rollout/registry.py)",
    "rollout.mismatch_correction": "a name, checked against ops.mismatch (validate_rollout_engine)",
    "rollout.hf_decode": (
        "a choice of auto, fast, loop, generate, checked by validate_rollout_engine"
    ),
    "rollout.vllm.enforce_eager": "a flag",
    "rollout.vllm.sleep_level": "a choice of 0, 1, 2, checked by validate_rollout_engine",
    "rollout.vllm.in_process": "a flag",
    "objective.name": "a name, checked against the objective registry (validate_config)",
    "objective.loss_agg": "a name, checked against ops.aggregation (validate_config)",
    "objective.params": (
        "the objective's keyword arguments, each checked by its objective (resolve_objective)"
    ),
    "objective.kl_estimator": "a name, checked against ops.kl (loss_settings)",
    "quadrant.keep": "quadrant names, checked by ops.quadrants.parse_keep",
    "quadrant.axis": "a name, checked by validation.validate_signals",
    "quadrant.attention_layers": (
        "'all', 'last' or layer indices, checked by validation.validate_signals (and against the "
        "model's depth by models.token_signals.chosen_layers)"
    ),
    "quadrant.threshold": "a name, checked by ops.quadrants.validate_threshold",
    "quadrant.threshold_value": (
        "its range depends on quadrant.threshold (validate_threshold checks it)"
    ),
    "quadrant.denominator": (
        "a name, checked against ops.quadrants.DENOMINATORS (validate_config)"
    ),
    "quadrant.match": "quadrant names, checked by ops.quadrants.parse_match",
    "quadrant.match_sign": "a flag, checked against quadrant.match by ops.quadrants.RandomControl",
    "quadrant.reweight": (
        "a name, checked against ops.random_control.REWEIGHTS (QuadrantSettings.from_config)"
    ),
    "advantage.normalize_std": "a flag",
    "train.measure_dlogp": "a flag",
    "train.minibatch_grouping": "a choice of shuffle, query, balanced, checked by validate_config",
    "reward.name": "a name, checked against rewards.confound.CONFOUNDS by validate_config",
    "train.behaviour_pass": "a choice of auto, always, checked by validate_config",
    "train.attention_layout": "a choice of padded, packed, checked by validate_config",
    "train.cpu.matmul": "a choice of auto, torch, onednn, checked by validate_config",
    "train.cpu.sdpa_grouped_heads": "a flag",
    "train.device": "a device name, checked by quadrants/device.py validate_device",
    "eval.benchmarks": "benchmark names and sample counts, checked by eval.plan.validate_eval",
    "eval.data_dir": "a directory, checked by eval.plan.validate_eval when benchmarks are local",
    "eval.source": "a name, checked by eval.plan.validate_eval",
    "eval.target": "a path or a name, resolved by quadrants.evaluate",
    "tracking.uri": (
        "a URI; checked to be a writable MLflow store before training (hydra_setup.preflight)"
    ),
    "tracking.system_metrics": "a flag",
    "tracking.sqlite_on_slurm": "a flag (SQLite under SLURM: every job on one machine)",
    "tracking.report": "a flag (the analysis report logged on a sweep's parent run)",
    "tracking.sinks": "names, checked by tracking.sinks.check_sinks (validate_config)",
    "distributed.backend": "a name, checked by distributed.collectives.validate_distributed_config",
    "distributed.reshard_after_forward": "a flag",
    "train.precision": "a name, checked by validate_config",
    "train.allow_pure_bf16": "a flag",
    "checkpoint.allow_config_change": "a flag",
    "train.activation_checkpointing": "a flag",
    "train.offload_optimizer": "a flag; refused with train.device=cpu (validate_config)",
    "rollout.vllm.dtype": "a dtype name, checked by validate_config",
}


def lookup(cfg: Any, key: str) -> Any:
    """The value of dotted `key` ("train.lr") in a config object."""
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def check_ranges(cfg: Any) -> None:
    """Raise ValueError naming the first key of `RANGES` whose value is outside its range."""
    for key, allowed in RANGES.items():
        allowed.check(key, lookup(cfg, key))


def check_section(section: Any, prefix: str) -> None:
    """`check_ranges` for one section of the config (`cfg.probe` with prefix "probe"), for the
    commands that validate only the section they use."""
    for key, allowed in RANGES.items():
        if key.startswith(prefix + "."):
            allowed.check(key, lookup(section, key.removeprefix(prefix + ".")))


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)
