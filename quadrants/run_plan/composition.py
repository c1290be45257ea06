"""The run plan's checks of a composed configuration that a type cannot express: each section's
names against the package that owns them, and the rules that span two owners.

The one module that knows which package owns which name: the objective registry, the loss
aggregations, the quadrant thresholds, the tasks and prompt formats, the answer extractions, the
rollout engines, the devices, the benchmarks (eval/suite.py), the probe (probe/positions.py).
And the rules between owners: model x engine (`validate_attention_kernel`), LoRA x engine
(`validate_lora`), attention x layout (`validate_attention_layout`), objective x adapters
(`validate_signals`), the batch x the ranks (`check_layout`, `check_lora_ranks`). `check_values`
runs them all, in the order a user fixes them; `RunPlan.parse` (quadrants/run_plan/parse.py)
calls it once and hands on what it parsed. It sits above every owner, so that
quadrants/config.py stays a leaf schema. Each failure names the key and the allowed values.
"""

from __future__ import annotations

from typing import Any

import torch
from packaging.version import Version

from quadrants.config import (
    EvalConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    TaskConfig,
    TrainConfig,
)
from quadrants.config_ranges import Choice, Range, check_ranges
from quadrants.cpu.matmul import BACKENDS as CPU_MATMULS
from quadrants.device import validate_device
from quadrants.eval.suite import suite, validate_eval
from quadrants.models.loading import ATTENTIONS, FLASH
from quadrants.models.lora import target_modules as lora_target_modules
from quadrants.models.policy import LAYOUTS, check_packable
from quadrants.models.source import check_model_source, local_model_config
from quadrants.objectives.loss import loss_settings
from quadrants.objectives.registry import SIGNALS, ObjectiveSpec, resolve_objective
from quadrants.ops.aggregation import LOSS_AGGREGATIONS
from quadrants.ops.mismatch import MISMATCH_CORRECTIONS
from quadrants.ops.precision import PRECISIONS, resolve_precision
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.probe.positions import validate_probe
from quadrants.rewards.confound import CONFOUNDS
from quadrants.rewards.custom import load_callable
from quadrants.rewards.extract import EXTRACTIONS
from quadrants.rollout.decode import HF_DECODES
from quadrants.rollout.registry import get_engine, known_engines
from quadrants.tasks import known_tasks, validate_task
from quadrants.tasks.benchmarks import known_benchmarks
from quadrants.tasks.ood import known_ood_benchmarks
from quadrants.tasks.prompts import validate_prompt
from quadrants.tracking.sinks import check_sinks


def validate_rollout_engine(cfg: RunConfig) -> None:
    """The rollout section: the engine's name, the mismatch correction, the HF engine's decode and
    every registered engine's own settings (`EngineKind.check_settings`, checked whatever the
    engine; their numeric ranges are declared beside their defaults in config.py)."""
    rollout = cfg.rollout
    get_engine(rollout.engine)  # an unknown name lists the registered engines
    Choice(MISMATCH_CORRECTIONS).check("rollout.mismatch_correction", rollout.mismatch_correction)
    validate_mismatch_truncation(rollout)
    Choice(HF_DECODES).check("rollout.hf_decode", rollout.hf_decode)
    Range(
        0, rollout.max_new_tokens, why="0 = no overlong penalty; at most rollout.max_new_tokens"
    ).check("rollout.overlong_buffer", rollout.overlong_buffer)
    for name in known_engines():
        get_engine(name).check_settings(cfg)


def validate_mismatch_truncation(rollout: RolloutConfig) -> None:
    """`rollout.mismatch_correction` only where the engine's and the trainer's log-probs are of the
    same distribution. With `rollout.top_p` < 1 they are not: vLLM reports the log-probs of the
    top-p-truncated, renormalised distribution (its V2 sampler applies the truncation before the
    processed log-probs, rollout/vllm.py) while the trainer recomputes the untruncated one, so every
    importance ratio carries the nucleus mass, not the train-inference mismatch; the HF engine
    reports untruncated log-probs but samples from the truncated distribution, so its ratio misses
    the truncation altogether. The trainer has no truncated recompute (no top-k either: both
    engines sample with top-k off), so the pair is refused."""
    if rollout.mismatch_correction == "none" or rollout.top_p >= 1.0:
        return
    raise ValueError(
        f"rollout.mismatch_correction={rollout.mismatch_correction} with "
        f"rollout.top_p={rollout.top_p:g}: the engine's log-probs are of the top-p-truncated "
        "distribution (vLLM's processed log-probs) or not of the one it sampled from (the HF "
        "engine), while the trainer's recompute is untruncated, so the importance weights would "
        "correct the nucleus mass, not the train-inference mismatch. Set rollout.top_p=1.0, or "
        "rollout.mismatch_correction=none (the mismatch is still logged)"
    )


def validate_heldout_split(eval_cfg: EvalConfig, task_cfg: TaskConfig) -> None:
    """Refuse an evaluation that needs a held-out split which ``task.heldout_size=0`` leaves empty.

    A task named in ``eval.benchmarks`` (not a benchmark of the same name: ``gsm8k`` is its test
    set) is evaluated on its first ``task.heldout_size`` held-out problems (eval/suite.py
    `build_plans`); with no benchmarks, the run's task on ``eval.problems`` of its held-out split,
    which ``task.heldout_size`` carves unless ``task.params`` names a held-out file or split. Zero
    problems would be logged as a score of 0 (eval/heldout.py) or fail in `suite_metrics`, after
    the other benchmarks were generated.
    """
    if task_cfg.heldout_size != 0:
        return
    if eval_cfg.benchmarks:
        benchmarks = {*known_benchmarks(), *known_ood_benchmarks()}
        tasks = [n for n in suite(eval_cfg, task_cfg) if n in known_tasks() and n not in benchmarks]
        if tasks:
            raise ValueError(
                "task.heldout_size=0 is out of range for this evaluation; allowed: >= 1, since "
                f"eval.benchmarks names the task {', '.join(tasks)}, evaluated on its held-out "
                "split (0 problems); set task.heldout_size to a positive size, or remove "
                f"{', '.join(tasks)} from eval.benchmarks"
            )
        return
    own_split = any(task_cfg.params.get(key) for key in ("heldout_path", "heldout_split"))
    if eval_cfg.problems > 0 and not own_split:
        raise ValueError(
            "task.heldout_size=0 is out of range for this evaluation; allowed: >= 1, since "
            f"eval.problems={eval_cfg.problems} evaluates the held-out split of {task_cfg.name} "
            "(0 problems); set task.heldout_size to a positive size, eval.problems=0 (no held-out "
            "evaluation), or another eval preset (eval=paper, eval=aime24)"
        )


def validate_trainer_memory(train: TrainConfig, rollout: RolloutConfig) -> None:
    """train.precision (pure bf16 with AdamW refused unless allowed) and the token budgets."""
    Choice(PRECISIONS).check("train.precision", train.precision)
    if train.precision == "bf16" and not train.allow_pure_bf16:
        raise ValueError(
            "train.precision=bf16 keeps the parameters and AdamW's moments in bfloat16, whose "
            "spacing is 2^-7 of a weight's binade, so an AdamW update of about the learning rate "
            f"rounds away on every weight above ~{512 * train.lr:.2g} (512 x train.lr="
            f"{train.lr:g}; at the paper's lr 1e-6 that is nearly every weight) and the policy "
            "does not learn. Use "
            "train.precision=bf16-mixed (float32 parameters and optimizer states, bf16 compute; "
            "model.dtype=bfloat16 still reads the weights in bf16), or set "
            "train.allow_pure_bf16=true to train in pure bf16 anyway"
        )
    if train.micro_batch_tokens and train.micro_batch_size:
        raise ValueError(
            f"train.micro_batch_tokens={train.micro_batch_tokens} and "
            f"train.micro_batch_size={train.micro_batch_size} both split the mini-batch; set one "
            "(train.micro_batch_size=0 to split by tokens)"
        )
    for key in ("micro_batch_tokens", "forward_tokens"):
        budget = getattr(train, key)
        if budget and budget < rollout.max_new_tokens:
            raise ValueError(
                f"train.{key}={budget} is below rollout.max_new_tokens={rollout.max_new_tokens}: a "
                "full-length response alone (before its prompt) would not fit. Use at least "
                f"{rollout.max_new_tokens} plus the longest prompt, or 0 for no token budget"
            )


# The oldest torch a mixed-precision run on CUDA trains with: the fused LM head's backward
# (ops/fused_head.py `add_product`) sums its bf16 weight-gradient GEMM into a float32 buffer with
# `torch.addmm(out, a, b, out_dtype=torch.float32, out=out)`, the aten overload `addmm.dtype_out`
# added by pytorch/pytorch#150812 ("[CUDA][cuBLAS] Aten GEMM overload for FP32 output from
# FP16/BF16 inputs", mm/bmm/addmm/baddbmm; a pull request adding a feature, not a bug fix),
# merged April 2025 and first released in torch 2.8 (the 2.8.0 release-notes worksheet,
# sraikund16/torch-release-notes 2.8.0/done/result_python_frontend.md, lists it, and the 2.8 docs
# first document `out_dtype`, #151704). An older torch rejects the keyword with a TypeError at
# the first backward, after the weights are loaded and the first rollout is generated. It is
# registered for CUDA only, and the head reaches it only under autocast with a 16-bit dtype
# (`gemm_dtype`), so the floor applies to train.precision=bf16-mixed (or auto, which is
# bf16-mixed on CUDA) on CUDA; fp32 and pure bf16 run no autocast and take the float32 GEMM
# (`addmm_`). Not on the CPU: there `add_product` multiplies the bf16-rounded
# inputs in float32 (`addmm_`, an overload every torch has), so a CPU run, FSDP2 over gloo
# included, needs nothing 2.8 brought. pyproject.toml asks torch>=2.8 already; this is the guard
# for an environment installed otherwise (a cluster's own torch build).
TORCH_FLOOR = "2.8"


def validate_torch_floor(train: TrainConfig) -> None:
    """Refuse a torch older than TORCH_FLOOR when this run trains on CUDA in mixed precision
    (train.device=cuda, or auto on a machine that sees a GPU; the job checks again where it runs).
    The release numbers are compared (packaging's `Version.release`), so a local build tag
    (2.7.1+cu126) or a pre-release (2.8.0rc1) counts as its release: 2.7.1 is refused, 2.8.0rc1
    and 2.13.0+cpu pass."""
    cuda = train.device == "cuda" or (train.device == "auto" and torch.cuda.is_available())
    if not cuda or not resolve_precision(train.precision, torch.device("cuda")).mixed:
        return
    installed = Version(torch.__version__)
    if installed.release >= Version(TORCH_FLOOR).release:
        return
    raise ValueError(
        f"torch {torch.__version__} is installed, but train.device={train.device} with "
        f"train.precision={train.precision} needs torch >= {TORCH_FLOOR}: the fused LM head's "
        "backward calls torch.addmm(..., out_dtype=torch.float32) on CUDA (bf16 inputs, float32 "
        f"output), first released in torch {TORCH_FLOOR} (pytorch/pytorch#150812). Fix: "
        f"pip install 'torch>={TORCH_FLOOR}' (a build for this node's CUDA driver), or train on "
        "the CPU (train.device=cpu)"
    )


def validate_attention_layout(train: TrainConfig, name_or_path: str) -> None:
    """`train.attention_layout`: a known layout; `packed` only for a model whose attention keeps
    packed rows apart (models/policy.py `packing_refusal`), checked here where the architecture is
    known without loading (the embedded tiny models, a local directory's config.json) and again
    on the loaded model (run/build.py `prepare_policy`) for a hub id."""
    Choice(LAYOUTS).check("train.attention_layout", train.attention_layout)
    if train.attention_layout != "packed":
        return
    config = local_model_config(name_or_path)
    if config is not None:
        check_packable(config)


def validate_attention_kernel(cfg: RunConfig) -> None:
    """`model.attention`: one of models/loading.py ATTENTIONS or null; the flash kernels compute in
    fp16/bf16 on CUDA only (flash-attn's own rule), so not with train.device=cpu or
    train.precision=fp32."""
    attention = cfg.model.attention
    if attention is None:
        return
    Choice(ATTENTIONS, hint="or null for transformers' default").check("model.attention", attention)
    if attention not in FLASH:
        return
    if cfg.train.device == "cpu":
        raise ValueError(
            f"model.attention={attention} runs on CUDA only, but train.device=cpu. Fix: "
            "model.attention=sdpa (or null) on the CPU"
        )
    if cfg.train.precision == "fp32":
        raise ValueError(
            f"model.attention={attention}: flash-attn computes in fp16/bf16 only, but "
            "train.precision=fp32. Fix: train.precision=bf16-mixed (or auto on CUDA), or "
            "model.attention=sdpa"
        )
    engine = cfg.rollout.engine
    if (
        engine in known_engines()
        and get_engine(engine).replica_for_ranks
        and cfg.train.precision != "bf16"
        and not cfg.model.lora.enabled
    ):
        # the HF engine generates from the policy's own float32 parameters without autocast
        # (rollout/hf.py `stored_mixed_autocast`: only a mixed-dtype store turns it on), and
        # transformers hands flash-attn float32 queries then (integrations/flash_attention.py
        # `get_target_dtype`: the linear weights' dtype), which flash-attn refuses
        raise ValueError(
            f"model.attention={attention} with rollout.engine={engine}: that engine samples from "
            f"the policy's float32 parameters under train.precision={cfg.train.precision}, and "
            "flash-attn computes in fp16/bf16 only. Fix: rollout.engine=vllm, or "
            "model.attention=sdpa (or null)"
        )


def validate_minibatch_grouping(train: TrainConfig, rollout: RolloutConfig) -> None:
    """`train.minibatch_grouping=query` needs mini-batches of whole groups (the name is checked
    against the choice its field declares)."""
    grouping = train.minibatch_grouping
    rows = train.prompts_per_step * rollout.group_size
    if grouping == "query" and min(train.mini_batch_size, rows) % rollout.group_size:
        fit = rollout.group_size * max(1, train.mini_batch_size // rollout.group_size)
        raise ValueError(
            f"train.minibatch_grouping=query keeps each prompt's {rollout.group_size} responses "
            f"in one mini-batch, but train.mini_batch_size={train.mini_batch_size} is not a "
            f"multiple of rollout.group_size={rollout.group_size}; set train.mini_batch_size to a "
            f"multiple of it (e.g. {fit}), "
            "or train.minibatch_grouping=shuffle"
        )


def validate_micro_batch(train: TrainConfig) -> None:
    """`train.micro_batch_size` splits a mini-batch (`train.mini_batch_size` sequences) into
    forward/backward passes; a larger one splits nothing, which usually means the two keys were
    swapped."""
    if train.micro_batch_size > train.mini_batch_size:
        raise ValueError(
            f"train.micro_batch_size={train.micro_batch_size} is larger than the mini-batch "
            f"(train.mini_batch_size={train.mini_batch_size} sequences per optimizer step), which "
            "it splits into forward/backward passes. Fix: "
            f"train.micro_batch_size={train.mini_batch_size} or less (0 = the whole mini-batch at "
            "once), or raise train.mini_batch_size"
        )


def validate_reward(reward: RewardConfig) -> None:
    """`reward.name`: a known training reward; `reward.probability` only with reward=random."""
    Choice(CONFOUNDS, hint="e.g. reward=random").check("reward.name", reward.name)
    if reward.probability is not None and reward.name != "random":
        raise ValueError(
            f"reward.probability={reward.probability} is the success rate of reward=random, but "
            f"reward.name={reward.name}: drop reward.probability, or set reward=random"
        )


def validate_lora(cfg: RunConfig) -> None:
    """`model.lora` against the rest of the run: its target modules here, the number of ranks in
    `check_lora_ranks`, the engine's own conditions in its registry entry
    (`EngineKind.check_lora`)."""
    lora = cfg.model.lora
    if not lora.enabled:
        return
    lora_target_modules(lora.target_modules)
    get_engine(cfg.rollout.engine).check_lora(cfg)


def validate_signals(cfg: RunConfig, spec: ObjectiveSpec) -> None:
    """`quadrant.attention_layers`, and the per-token signals the objective declares it needs
    (`ObjectiveSpec.needs`: ARCA's adapter residual needs LoRA), each refusal naming the key and
    the fix (`quadrant.axis` is checked against the choice its field declares)."""
    layers = cfg.quadrant.attention_layers
    if layers not in ("all", "last") and not (
        isinstance(layers, (list, tuple))
        and layers
        and all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
        and len(set(layers)) == len(layers)
    ):
        raise ValueError(
            f"quadrant.attention_layers={layers!r} is not a layer selection; use 'all', 'last', or "
            "a list of distinct layer indices (negative counts from the last layer)"
        )
    if "adapter_residual" in spec.needs and not cfg.model.lora.enabled:
        assert SIGNALS["adapter_residual"] == "model.lora.enabled=true"  # the fix named below
        raise ValueError(
            f"objective.name={cfg.objective.name} assigns credit from the LoRA adapter's residual "
            "||h_adapted - h_base||, which needs adapters: set model.lora.enabled=true "
            "(docs/lora.md), or choose another objective"
        )


def check_lora_ranks(cfg: RunConfig, world_size: int) -> None:
    """LoRA trains in one process for now: FSDP2 over the adapted model (frozen base and trainable
    adapters in the same module) is not built. Run at compose time for a multi-rank launcher
    (launcher=slurm_ddp) and again when the trainer starts."""
    if cfg.model.lora.enabled and world_size > 1:
        raise ValueError(
            f"model.lora.enabled=true with {world_size} ranks: LoRA trains in a single process "
            "for now (FSDP2 over the adapted model is not built); use one rank per run "
            "(launcher=local or launcher=slurm), or model.lora.enabled=false"
        )


def check_values(cfg: RunConfig, *, task_used: bool = True) -> tuple[ObjectiveSpec, dict[str, Any]]:
    """Every check of a configuration's values, the data files' aside (quadrants/run_plan/
    data_files.py); returns the objective resolved with its full parameters.

    ``task_used=False`` (`python -m quadrants.evaluate`): the task's prompts reach the model only
    when the evaluation suite names the task (its held-out split), so only then is the task checked
    against the model (the embedded `arithmetic` world against a pretrained model, `eval=paper`).
    """
    check_ranges(cfg)
    check_model_source("model.name_or_path", cfg.model.name_or_path)
    validate_lora(cfg)
    try:
        spec, params = resolve_objective(cfg.objective.name, dict(cfg.objective.params))
    except ValueError as err:
        raise ValueError(f"objective ({cfg.objective.name}): {err}") from None
    validate_signals(cfg, spec)
    Choice(LOSS_AGGREGATIONS).check("objective.loss_agg", cfg.objective.loss_agg)
    # quadrant.denominator, quadrant.threshold(_value), quadrant.keep, in that order
    loss_settings(
        cfg.objective,
        QuadrantSettings.from_config(cfg.quadrant),
        max_new_tokens=cfg.rollout.max_new_tokens,
    )
    task_used = task_used or cfg.task.name in suite(cfg.eval, cfg.task)
    validate_task(
        cfg.task.name,
        cfg.task.heldout_size,
        dict(cfg.task.params),
        model=cfg.model.name_or_path if task_used else None,
        files=False,
    )
    if cfg.task.reward is not None:  # imports the user's module: a bad path fails here
        load_callable(cfg.task.reward, "task.reward")
    validate_prompt(cfg.prompt.format)
    Choice(EXTRACTIONS).check("task.answer_extraction", cfg.task.answer_extraction)
    validate_rollout_engine(cfg)
    validate_attention_layout(cfg.train, cfg.model.name_or_path)
    validate_attention_kernel(cfg)
    Choice(CPU_MATMULS).check("train.cpu.matmul", cfg.train.cpu.matmul)
    validate_device(cfg.train.device)
    validate_torch_floor(cfg.train)
    if cfg.train.offload_optimizer and cfg.train.device == "cpu":
        raise ValueError(
            "train.offload_optimizer=true moves AdamW's states from the GPU to host memory between "
            "optimizer steps, but train.device=cpu keeps them in host memory already: there is "
            "nothing to free. Use train.offload_optimizer=false on a CPU, or train.device=cuda"
        )
    validate_eval(cfg.eval, cfg.task, files=False)
    validate_heldout_split(cfg.eval, cfg.task)
    validate_probe(cfg.probe)
    check_sinks(list(cfg.tracking.sinks))  # tracking.sinks: names, and their packages installed
    validate_trainer_memory(cfg.train, cfg.rollout)
    validate_minibatch_grouping(cfg.train, cfg.rollout)
    validate_micro_batch(cfg.train)
    validate_reward(cfg.reward)
    validate_distributed_config(cfg)
    return spec, params


def generation_block(cfg: RunConfig, world_size: int) -> int:
    """Prompts per generate call: the configured block, or prompts_per_step / world_size."""
    block = cfg.distributed.prompts_per_generate
    return int(block) if block else cfg.train.prompts_per_step // max(world_size, 1)


def check_layout(cfg: RunConfig, world_size: int) -> None:
    """Fail before anything is built when the batch does not divide over the ranks evenly, or when
    the rollout engine cannot run one per rank.

    Every rank must run the same number of forward passes (FSDP gathers parameters in each one), so
    prompts, sequences, every mini-batch and every micro-batch must split into equal shares. Run by
    `RunPlan.parse` for its world size: at compose time for a multi-rank launcher
    (launcher=slurm_ddp) and where the trainer starts, for the ranks it finds."""
    prompts = cfg.train.prompts_per_step
    block = cfg.distributed.prompts_per_generate
    if block is not None and (block <= 0 or prompts % block):
        raise ValueError(
            f"distributed.prompts_per_generate={block} must be > 0 and divide "
            f"train.prompts_per_step={prompts}"
        )
    rows = prompts * cfg.rollout.group_size
    mini = min(cfg.train.mini_batch_size, rows)
    if rows % mini:  # uneven mini-batches would weigh the last one's tokens more: not supported
        divisors = [d for d in range(rows - 1, 0, -1) if rows % d == 0][:3]
        raise ValueError(
            f"train.mini_batch_size={cfg.train.mini_batch_size} does not divide the {rows} "
            "sequences of a step (train.prompts_per_step x rollout.group_size), so the last "
            f"mini-batch would hold {rows % mini}; use a divisor of {rows} (e.g. "
            f"{', '.join(map(str, divisors))}) or >= {rows} for one update per epoch"
        )
    get_engine(cfg.rollout.engine).validate(cfg, world_size)  # the engine's own layout checks
    if world_size == 1:
        return
    if prompts % world_size:
        raise ValueError(
            f"train.prompts_per_step={prompts} does not deal evenly to {world_size} ranks; "
            f"use a multiple of {world_size}"
        )
    blocks = prompts // generation_block(cfg, world_size)
    if blocks % world_size:
        raise ValueError(
            f"train.prompts_per_step={prompts} in blocks of {generation_block(cfg, world_size)} "
            f"(distributed.prompts_per_generate) does not deal evenly to {world_size} ranks; "
            f"use a multiple of {world_size} blocks"
        )
    if mini % world_size:
        raise ValueError(
            f"train.mini_batch_size={cfg.train.mini_batch_size} with {rows} sequences per step "
            f"leaves a mini-batch that does not split into {world_size} equal shares; use a "
            f"mini-batch size that is a multiple of {world_size} and divides {rows}"
        )
    micro = cfg.train.micro_batch_size
    if 0 < micro < mini and micro % world_size:
        fits = list(range(world_size, mini, world_size))[:3]
        raise ValueError(
            f"train.micro_batch_size={micro} does not split into {world_size} equal shares: a "
            f"micro-batch counts the sequences of all ranks, each rank taking 1/{world_size}; use "
            f"a multiple of {world_size} below the mini-batch of {mini}"
            + (f" (e.g. {', '.join(map(str, fits))})" if fits else "")
            + " or 0 for none"
        )


def validate_distributed_config(cfg: RunConfig) -> None:
    """Static checks of the `distributed` group (world-size checks are in `check_layout`)."""
    # imported here: a one-process step built from a plan (run/settings.py) never opens
    # distributed code (tests/unit/train/test_placement.py)
    from quadrants.distributed.collectives import BACKENDS

    d = cfg.distributed
    if d.backend not in BACKENDS:
        raise ValueError(
            f"distributed.backend={d.backend!r} is unknown; choose one of {list(BACKENDS)}"
        )
    if d.backend == "nccl" and cfg.train.device == "cpu":
        raise ValueError(
            "distributed.backend=nccl moves CUDA tensors only, but train.device=cpu; "
            "use distributed.backend=gloo or auto, or train.device=auto or cuda"
        )
    if d.prompts_per_generate is not None and d.prompts_per_generate <= 0:
        raise ValueError(
            f"distributed.prompts_per_generate={d.prompts_per_generate} is out of range; "
            f"allowed: null or > 0"
        )
    check_layout(cfg, 1)
