"""The run configuration: one dataclass tree, the single schema of the Hydra tree under sweeps/.

The dataclass defaults below are the one place a default value lives: `RunConfig()` is the same
run as `python -m quadrants.sweep` with no overrides (the tiny warm-started policy on the synthetic
arithmetic task, DAPO on all tokens), and the YAML groups under sweeps/ state only what differs
from them (tests/unit/sweep/test_defaults_once.py checks both). Hydra composes it from YAML and
registers these classes with its ConfigStore (quadrants/launch/hydra_setup.py), so a misspelled key
or a wrong type fails at compose time. Each leaf key is declared with `checked` beside its default:
its allowed range, or why it has none (quadrants/config_ranges.py, the one module it imports);
`RunPlan.parse` (quadrants/run_plan) checks those ranges and the names owned by other
packages before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quadrants.config_ranges import (
    AT_LEAST_ONE,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY_MASS,
    Choice,
    Range,
    checked,
)


@dataclass
class LoraConfig:
    # LoRA adapters on the policy through peft (quadrants/models/lora.py, docs/lora.md): only the
    # adapters train; the KL reference is the same base with the adapters switched off. Defaults:
    # verl's LoRA recipe (target_modules all-linear, alpha = 2 x rank;
    # verl docs/advance/ppo_lora.rst) with no dropout (a dropout makes the update's forward
    # differ from the behaviour pass)
    enabled: bool = checked(False, why="a flag")
    rank: int = checked(16, AT_LEAST_ONE)  # r, the adapters' inner dimension
    alpha: float = checked(32.0, POSITIVE)  # the update is scaled by alpha / rank
    # on the adapters' input, in the update's forward only
    dropout: float = checked(0.0, Range(0, 1, high_open=True))
    # peft's target_modules: "all-linear" (every linear layer but the LM head) or a list of module
    # names (e.g. [q_proj, v_proj])
    target_modules: Any = checked(
        "all-linear", why="all-linear or module names, checked by models.lora"
    )
    # the adapter residual ||h_adapted - h_base|| per response token (ARCA's credit signal,
    # quadrants/models/token_signals.py): which entry of transformers' hidden_states it is read at
    # (0 = embeddings, -1 = the final normed state the LM head reads), and whether it is computed
    # (two extra no-grad decoder passes per step) and logged per quadrant when the objective is not
    # ARCA (which always computes it)
    residual_layer: int = checked(
        -1,
        why="an index into the model's hidden states; its range depends on the model's depth, "
        "checked by models.token_signals when the residual pass reads it",
    )
    residual_telemetry: bool = checked(True, why="a flag")


@dataclass
class ModelConfig:
    # "tiny" = the embedded warm-started policy; "tiny-random" = random init (tests); else a local
    # path or a Hugging Face model id.
    name_or_path: str = checked(
        "tiny", why="a name or a path: a local path must exist (models.source.check_model_source)"
    )
    # the dtype the weights are read in; the trainer's parameters then follow train.precision
    dtype: str = checked(
        "float32", why="a dtype name, checked when the model is loaded (models.loading)"
    )
    # the attention kernel the trainer's model runs (transformers' `attn_implementation`): eager |
    # sdpa | flash_attention_2 | flash_attention_3 (the flash-attn package, bf16 compute) |
    # flex_attention; null = transformers' default (sdpa), but flash_attention_2 for
    # train.attention_layout=packed on CUDA where flash-attn is installed (models/loading.py
    # `packed_attention`): a flash kernel runs packed rows varlen, without the N x N mask
    attention: str | None = checked(
        None, why="a kernel name or null, checked by the run plan (models/loading.py ATTENTIONS)"
    )
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class TaskConfig:
    name: str = checked(
        "arithmetic", why="a name, checked against the registered tasks (tasks.validate_task)"
    )
    heldout_size: int = checked(
        200,
        Range(
            0, why="0 = no held-out split, refused where the evaluation needs one (the run plan)"
        ),
    )
    params: dict[str, Any] = checked(
        why="the task's keyword arguments, checked by tasks.validate_task", factory=dict
    )
    # how the final answer is read, in training and evaluation: boxed (the last \boxed{}) |
    # boxed_or_last_number (the last box, else the last number written; rewards/extract.py)
    answer_extraction: str = checked(
        "boxed", why="a name, checked against rewards.extract.EXTRACTIONS (the run plan)"
    )
    # your own reward in place of math-verify, "package.module:function" (rewards/custom.py): called
    # with (completion, gold answer), returns True / False / None (no answer); None = math-verify
    reward: str | None = checked(
        None, why="a 'module:function' path, imported by the run plan (rewards/custom.py)"
    )
    # a reward that cannot be computed stops the run (quadrants/run/grading.py): a step whose
    # completions are all graded `error` (an exception of task.reward, a gold math-verify cannot
    # read; a grader *timeout* is not an error) stops it at once, and so does a mean error share
    # above max_error_frac over the last error_steps steps; null = only the all-error step stops
    max_error_frac: float | None = checked(0.5, Range(0, 1, null=True))
    error_steps: int = checked(5, Range(1, why="steps the error share is averaged over"))
    # math-verify worker processes grading the answers; 0 = one per CPU this task holds, less one
    # for the trainer (SLURM_CPUS_PER_TASK, else the CPUs this process may run on)
    grader_workers: int = checked(0, Range(0, why="0 = one per CPU the task holds, less one"))
    # the longest rendered prompt, in the policy's tokens (quadrants/tasks/prompt_length.py): longer
    # problems are dropped when the task loads (counted and logged); the memory plan sizes every row
    # at this + rollout.max_new_tokens, and vLLM's max_model_len defaults to this + the longest
    # response (rollout.max_new_tokens or eval.max_new_tokens)
    max_prompt_tokens: int = checked(
        1024, Range(1, why="the longest prompt: longer ones are dropped at load")
    )


@dataclass
class PromptConfig:
    # how a problem becomes the policy's input, in training and evaluation alike (tasks/prompts.py):
    # auto (the task's own, else chat with a chat template, else plain) | raw | plain | chat |
    # qwen_math | deepscaler
    format: str = checked("auto", why="a name, checked by tasks.prompts.validate_prompt")
    # replaces the format's instruction (qwen_math: its system prompt)
    instruction: str | None = checked(None, why="free text (null = the format's own instruction)")


@dataclass
class VLLMConfig:
    # the colocated vLLM engine (rollout.engine=vllm;
    # quadrants/rollout/vllm.py)
    # the engine's weights and compute dtype, independent of the trainer's (the weight push casts)
    dtype: str = checked("bfloat16", why="a dtype name, checked by the run plan")
    # of GPU memory, weights + KV cache
    gpu_memory_utilization: float = checked(0.5, Range(0, 1, low_open=True))
    # None = sized from gpu_memory_utilization (give a size on CPU)
    kv_cache_gib: float | None = checked(None, Range(0, low_open=True, null=True))
    tensor_parallel_size: int = checked(1, AT_LEAST_ONE)
    enforce_eager: bool = checked(False, why="a flag")  # True = no CUDA graphs
    # how the engine sleeps while the trainer updates (GPU only): 2 discards weights and KV cache
    # (the trainer pushes the weights again before generating), 1 offloads the weights to host
    # memory, 0 never
    sleep_level: int = checked(2, Choice((0, 1, 2)))
    # vLLM's engine core in the trainer's process (weights by reference)
    in_process: bool = checked(True, why="a flag")
    # prompt + response tokens per sequence; None = task.max_prompt_tokens + the longer of
    # rollout.max_new_tokens and eval.max_new_tokens (at most the model's positions)
    max_model_len: int | None = checked(None, Range(1, null=True))


@dataclass
class IdentityCheckConfig:
    # the rollout identity guard (quadrants/rollout/identity_guard.py): the engine samples a probe
    # when it starts; at a weight push the engine and the trainer score it; the run stops when the
    # engine's log-probs did not move while the trainer's did (a stale push), or when they disagree
    # by more than the tolerance the start-up check calibrated
    # check every N-th weight push (1 = every push); 0 = off
    every: int = checked(1, Range(0, why="0 = off; 1 = every weight push"))
    # probe sequences (sampled to the task's first held-out prompts)
    probe_size: int = checked(4, AT_LEAST_ONE)
    # response tokens the engine samples per probe sequence (the scored tokens)
    probe_tokens: int = checked(32, AT_LEAST_ONE)
    # mean |log-prob gap| allowed after start; None = calibrated by the start-up check:
    # max(tolerance_multiple x start-up gap, tolerance_floor)
    tolerance: float | None = checked(None, Range(0, low_open=True, null=True))
    tolerance_multiple: float = checked(
        4.0, Range(1, why="the tolerance is at least the start-up gap itself")
    )
    tolerance_floor: float = checked(1e-3, POSITIVE)
    # the largest start-up gap (same weights on both sides) accepted; None = from the precision
    # pair (1e-3 with float32 on both sides, else 0.15)
    startup_limit: float | None = checked(None, Range(0, low_open=True, null=True))
    # a push is stale when the engine's mean |change| of log-prob since the last check is at most
    # this while the trainer's is over 10 x this (near numerical determinism, not the tolerance)
    stale_threshold: float = checked(1e-5, POSITIVE)
    # the probe's own seed (the run's sampling stream is untouched)
    seed: int = checked(0, NON_NEGATIVE)


@dataclass
class RolloutConfig:
    engine: str = checked(
        "hf", why="a name, checked against the registered engines (rollout/registry.py)"
    )
    group_size: int = checked(8, Range(2, why="GRPO needs a group"))  # G, rollouts per prompt
    temperature: float = checked(1.0, POSITIVE)
    top_p: float = checked(1.0, PROBABILITY_MASS)
    max_new_tokens: int = checked(48, AT_LEAST_ONE)
    # the HF engine's decode: auto (fast on the CPU, generate elsewhere) | fast (fused step,
    # finished rows dropped; Llama-family models, others take loop) | loop (draws exactly
    # generate's tokens) | generate (rollout/hf.py)
    hf_decode: str = checked(
        "auto", why="a choice of auto, fast, loop, generate, checked by validate_rollout_engine"
    )
    # train–inference mismatch: truncated importance weights min(π_old/μ_engine, cap) on the
    # per-token loss, per token or per sequence (ops/mismatch.py); none = only logged
    # none | token | sequence
    mismatch_correction: str = checked(
        "none", why="a name, checked against ops.mismatch (validate_rollout_engine)"
    )
    mismatch_cap: float = checked(
        2.0, Range(1, why="the cap truncates importance weights from above")
    )
    # DAPO dynamic sampling with refill: up to this many extra generation rounds of fresh prompts
    # until prompts_per_step groups have mixed correctness (train/refill.py); 0 = off (drop only)
    refill_rounds: int = checked(0, Range(0, why="0 = no refill"))
    # DAPO's soft overlong penalty over the last overlong_buffer tokens before max_new_tokens
    # (ops/overlong.py), reaching -overlong_penalty at the limit; 0 = off
    overlong_buffer: int = checked(
        0, Range(0, why="0 = no overlong penalty; at most rollout.max_new_tokens")
    )
    overlong_penalty: float = checked(1.0, NON_NEGATIVE)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    identity_check: IdentityCheckConfig = field(default_factory=IdentityCheckConfig)


@dataclass
class ObjectiveConfig:
    # a registered objective (quadrants/objectives); its hyper-parameters' defaults are its
    # function's keyword defaults, and `params` overrides them (sweeps/objective/<name>.yaml)
    name: str = checked("dapo", why="a name, checked against the objective registry (the run plan)")
    loss_agg: str = checked(
        "token-mean", why="a name, checked against ops.aggregation (the run plan)"
    )
    params: dict[str, Any] = checked(
        why="the objective's keyword arguments, each checked by its objective (resolve_objective)",
        factory=dict,
    )
    kl_coef: float = checked(0.0, NON_NEGATIVE)
    kl_estimator: str = checked(
        "k3", why="a name, checked against ops.kl (objectives.loss.loss_settings)"
    )


@dataclass
class QuadrantConfig:
    # which quadrants get gradient: "all", one of PHR/PLR/NHR/NLR, or a list of them
    keep: Any = checked("all", why="quadrant names, checked by ops.quadrants.parse_keep")
    # group_mean | batch_quantile | fixed
    threshold: str = checked(
        "group_mean", why="a name, checked by ops.quadrants.validate_threshold"
    )
    # q for batch_quantile, tau (nats) for fixed
    threshold_value: float | None = checked(
        None, why="its range depends on quadrant.threshold (validate_threshold checks it)"
    )
    # all_response_tokens | kept_tokens
    denominator: str = checked(
        "all_response_tokens",
        why="a name, checked against ops.quadrants.DENOMINATORS (the run plan)",
    )
    # the per-token value the split thresholds: token_entropy (the next-token distribution's) or
    # attention_entropy (the attention rows', averaged over heads and `attention_layers`;
    # quadrants/models/token_signals.py); the threshold rules are the same for both
    axis: str = checked("token_entropy", Choice(("token_entropy", "attention_entropy")))
    # the layers whose attention entropy is averaged: "all", "last", or a list of layer indices
    attention_layers: Any = checked(
        "all",
        why="'all', 'last' or layer indices, checked by validation.validate_signals (and against "
        "the model's depth by models.token_signals.chosen_layers)",
    )
    # keep=random (`quadrant=random`): the matched random-token control (ops/random_control.py,
    # docs/science.md). `match`: the arm whose kept-token count it draws each step (a quadrant or a
    # list, as `keep`); `match_sign`: draw per advantage sign, among the tokens of the matched arm's
    # sign; `reweight`: none | ht (Horvitz-Thompson, each drawn token's loss times 1/inclusion
    # probability). Another arm accepts `match` (so `-m quadrant=PHR,random quadrant.match=PHR`
    # composes) and ignores it
    match: Any = checked(None, why="quadrant names, checked by ops.quadrants.parse_match")
    match_sign: bool = checked(
        False, why="a flag, checked against quadrant.match by ops.quadrants.RandomControl"
    )
    reweight: str = checked(
        "none",
        why="a name, checked against ops.random_control.REWEIGHTS (QuadrantSettings.from_config)",
    )
    # where the control's count is matched (ops/random_control.py WITHINS): minibatch (the arm's
    # gradient-carrying tokens, in the loss's denominator with a non-zero advantage, per mini-batch
    # of the update) | row (per row) | nominal (the arm's nominal count over the step, the first
    # design); `stratify`: none | entropy (the arm's count in each decile of the step's entropy);
    # `match_fraction`: a budget in (0, 1], that share of each stratum's gradient-carrying tokens,
    # in place of the arm's count (null = the arm's)
    within: str = checked(
        "minibatch", why="a name, checked against ops.random_control.WITHINS (from_config)"
    )
    stratify: str = checked(
        "none", why="a name, checked against ops.random_control.STRATIFIES (from_config)"
    )
    match_fraction: float | None = checked(
        None,
        Range(
            0, 1, low_open=True, null=True,
            why="the share of gradient-carrying tokens the control draws (null = the arm's count)",
        ),
    )  # fmt: skip
    # every N steps (null = off), log the cosine between the arm's gradient and the full
    # objective's on the same batch, and the ratio of their norms (train/gradient_cosine.py)
    gradient_cosine_every: int | None = checked(
        None, Range(1, null=True, why="steps between two measurements (null = off)")
    )


@dataclass
class RewardConfig:
    # the reward the run trains on (quadrants/rewards/confound.py, docs/science.md): verifier (the
    # grader's correctness) | random (Bernoulli(reward.probability), the paper's random0.5) |
    # random_solve_rate (Bernoulli at each round's true solve rate) | format_only (1 for a final
    # answer the grader could read, right or wrong) | box_only_format (the paper's: 1 for any
    # non-empty last box). The verifier grades every response whichever it is: train/solve_rate
    # stays the true solve rate, evaluation is always graded
    name: str = checked(
        "verifier", why="a name, checked against rewards.confound.CONFOUNDS by the run plan"
    )
    # reward=random: the success probability, whatever the policy does (sweeps/reward/random.yaml
    # sets Spurious Rewards' 0.5; null = 0.5 too). Only reward=random reads it:
    # reward=random_solve_rate draws at each round's true solve rate
    probability: float | None = checked(
        None, Range(0, 1, null=True, why="a Bernoulli success probability")
    )


@dataclass
class AdvantageConfig:
    normalize_std: bool = checked(True, why="a flag")
    eps: float = checked(
        1e-6, Range(0, low_open=True, why="added to the group std before dividing by it")
    )


@dataclass
class CpuConfig:
    """Settings that apply only when train.device resolves to the CPU (quadrants/cpu)."""

    # float32 CPU matrix multiplies (decode, update, no-grad passes): torch (MKL) | onednn | auto
    # (oneDNN on x86 processors that are not Intel's, where MKL skips its AVX-512 kernels;
    # quadrants/cpu/matmul.py)
    matmul: str = checked("auto", why="a choice of auto, torch, onednn, checked by the run plan")
    # glibc keeps freed blocks up to this many MiB in the trainer process instead of returning them
    # to the OS at every step (quadrants/cpu/allocator.py); 0 = glibc's own thresholds
    retain_freed_mb: int = checked(
        1024, Range(0, 2047, why="0 = glibc's own thresholds; mallopt takes a C int of bytes")
    )
    # transformers hands grouped key/value heads to torch's SDPA kernel as they are
    # (quadrants/cpu/sdpa.py); false = it repeats them to the query heads first
    sdpa_grouped_heads: bool = checked(True, why="a flag")
    # idle OpenMP threads spin this many times before sleeping; null (default) = libgomp's own
    # 300,000, as every torch program; a number: `python -m quadrants.sweep` starts a CPU run's
    # process with GOMP_SPINCOUNT set to it unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set
    # (quadrants/cpu/openmp.py). 1000 on a machine shared with other CPU jobs
    omp_spincount: int | None = checked(None, Range(0, null=True, why="null = libgomp's default"))


@dataclass
class TrainConfig:
    steps: int = checked(60, NON_NEGATIVE)
    prompts_per_step: int = checked(16, AT_LEAST_ONE)
    mini_batch_size: int = checked(64, AT_LEAST_ONE)  # sequences per optimizer step
    # sequences per forward/backward, gradients accumulated; 0 = the mini-batch
    micro_batch_size: int = checked(
        0, Range(0, why="0 = the whole mini-batch in one forward/backward")
    )
    # micro-batches by token budget: each mini-batch's rows, sorted by length, packed into
    # micro-batches of at most this many tokens (padding counted, or real tokens only under
    # attention_layout=packed), gradients accumulated over them;
    # 0 = off (micro_batch_size decides)
    micro_batch_tokens: int = checked(0, Range(0, why="0 = off (train.micro_batch_size decides)"))
    # the same budget for the no-grad passes (behaviour, reference, |Δ log-prob|); 0 = off
    forward_tokens: int = checked(0, Range(0, why="0 = off"))
    # fp32 (parameters, optimizer states and compute in float32) | bf16-mixed (fp32 parameters and
    # optimizer states, bf16 compute) | bf16 (pure: bf16 parameters and AdamW states) | auto
    # (bf16-mixed on CUDA, fp32 elsewhere)
    precision: str = checked("fp32", why="a name, checked by the run plan")
    # pure bf16 with AdamW rounds every small update away; refused unless this is true
    allow_pure_bf16: bool = checked(False, why="a flag")
    # recompute each decoder layer in backward
    activation_checkpointing: bool = checked(False, why="a flag")
    # AdamW's states to host memory between optimizer steps (rollouts, evaluation, behaviour pass,
    # forward and backward), back for the step (quadrants/run/offload.py); GPU runs only
    offload_optimizer: bool = checked(
        False, why="a flag; refused with train.device=cpu (the run plan)"
    )
    epochs: int = checked(1, AT_LEAST_ONE)  # passes over each rollout batch
    # how each pass orders the rows before cutting mini-batches: shuffle (every row at random) |
    # query (the prompts at random, each prompt's G responses together; mini_batch_size must be a
    # multiple of rollout.group_size; Cheng et al., arXiv 2605.08666) | balanced (every mini-batch
    # holds positive- and negative-advantage rows in the batch's proportion, as nearly as the
    # counts allow; ops/balance.py)
    minibatch_grouping: str = checked("shuffle", Choice(("shuffle", "query", "balanced")))
    lr: float = checked(1e-4, POSITIVE)
    weight_decay: float = checked(0.0, NON_NEGATIVE)
    betas: tuple[float, float] = checked(
        (0.9, 0.999), Range(0, 1, high_open=True, why="AdamW's (beta1, beta2)")
    )
    warmup_steps: int = checked(
        0, Range(0, why="0 = no warm-up; a negative one would make the learning rate negative")
    )
    max_grad_norm: float = checked(1.0, POSITIVE)
    entropy_chunk_size: int = checked(256, AT_LEAST_ONE)
    # torch intra-op threads; 0 = leave torch's default
    threads: int = checked(0, Range(0, why="0 = torch's default"))
    # what a run on the CPU tunes (quadrants/cpu); ignored on any other device
    cpu: CpuConfig = field(default_factory=CpuConfig)
    # one extra no-grad pass per step for per-quadrant |Δ log-prob|
    measure_dlogp: bool = checked(True, why="a flag")
    # sequences in that pass (a seeded subsample, standard error logged); null = auto (1/16 of
    # the step's sequences, at least 2 and at least one per rank: ~4 % of a step); 0 = all;
    # over several ranks rounded up to a multiple of their number (each runs an equal share)
    dlogp_rows: int | None = checked(
        None, Range(0, null=True, why="null = auto (1/16 of the rows), 0 = every row")
    )
    # auto: take old log-probs and entropy from the HF engine when they are exact (its own weights,
    # no mismatch correction, no bf16 trainer), skipping the no-grad pass; always: recompute them
    behaviour_pass: str = checked("auto", Choice(("auto", "always")))
    # policy forwards run the responses in at most this many length buckets, each cut after its
    # longest row's last token (quadrants/ops/length_buckets.py); 1 = one call per forward
    length_buckets: int = checked(
        4, Range(1, why="1 = every response in one call, cut to the longest")
    )
    # padded (each micro-batch a [rows, widest prompt + response] block, padding attended over and
    # counted by the token budgets) | packed (each micro-batch's real tokens in one sequence with
    # per-row position ids, attention kept within each row; token budgets count real tokens;
    # Llama/Mistral/Qwen2/Qwen3 models only: quadrants/ops/packing.py, docs/performance.md)
    attention_layout: str = checked(
        "padded", why="a layout name, checked by the run plan (models/policy.py LAYOUTS)"
    )
    # auto (cuda:<LOCAL_RANK> if CUDA is available, else cpu) | cpu | cuda
    device: str = checked(
        "auto", why="a device name, checked by quadrants/device.py validate_device"
    )


@dataclass
class EvalConfig:
    # steps; 0 = only before and after training
    every: int = checked(20, Range(0, why="0 = only before and after training"))
    problems: int = checked(100, Range(0, why="0 = no held-out evaluation"))
    samples: int = checked(4, AT_LEAST_ONE)
    temperature: float = checked(0.6, Range(0, why="0 = greedy"))
    top_p: float = checked(0.95, PROBABILITY_MASS)
    max_new_tokens: int = checked(48, AT_LEAST_ONE)
    # Benchmarks, name -> samples per problem n (Avg@n, Pass@k for k = 1, 2, 4, ..., n), run by
    # quadrants.eval.runner in training and by `python -m quadrants.evaluate`. A name is one of
    # tasks.benchmarks.known_benchmarks(), tasks.ood.known_ood_benchmarks() or a task
    # (its held-out split). Empty = the task's held-out split, `problems` x `samples`
    # (the quick in-training check).
    benchmarks: dict[str, int] = checked(
        why="benchmark names and sample counts, checked by eval.suite.validate_eval", factory=dict
    )
    # the first `limit` problems of each benchmark (each group of an OOD one) and of the
    # held-out check; None = all
    limit: int | None = checked(None, Range(1, null=True, why="null = every problem"))
    # Pass@k also at these k (each <= every n)
    ks: list[int] = checked(allowed=AT_LEAST_ONE, factory=list)
    # None: the data home, $QUADRANTS_DATA or ~/.cache/quadrants/data
    data_dir: str | None = checked(
        None, why="a directory, checked by eval.suite.validate_eval when benchmarks are local"
    )
    # local (jsonl files under data_dir) | hub (Hugging Face `datasets`)
    source: str = checked("local", Choice(("local", "hub")))
    # sequences (prompts x n) per generate call, benchmarks and the held-out check; None = a
    # rank's whole share in one call for an engine that schedules its own batches (vLLM), 256 for
    # an engine without one (HF) (quadrants/eval/sizing.py)
    batch_size: int | None = checked(
        None, Range(1, null=True, why="null = sized from the engine's KV cache")
    )
    # of the normal interval around each mean (value +/- z * stderr)
    confidence: float = checked(0.95, Range(0, 1, low_open=True, high_open=True))
    # `python -m quadrants.evaluate TARGET`: a run dir (its newest checkpoint), a checkpoint dir,
    # a local model dir, "tiny", or a hub id; None = model.name_or_path
    target: str | None = checked(None, why="a path or a name, resolved by quadrants.evaluate")


@dataclass
class ProbeConfig:
    # the hindsight-credit probe (quadrants/probe, `python -m quadrants.probe`; docs/probe.md)
    # training prompts; rollout.group_size responses each are the probe's population
    prompts: int = checked(8, AT_LEAST_ONE)
    # response tokens probed, stratified by quadrant x entropy bin
    positions: int = checked(32, AT_LEAST_ONE)
    entropy_bins: int = checked(3, AT_LEAST_ONE)  # entropy strata within each quadrant
    # at most this many top next tokens per position (m), plus one "rest" branch
    branches: int = checked(4, AT_LEAST_ONE)
    # top tokens until their mass reaches this (1 - eps), capped by `branches`
    coverage: float = checked(0.9, Range(0, 1, low_open=True))
    # K graded continuations per branch
    continuations: int = checked(8, Range(2, why="the jackknife leaves one out"))
    # 0 = the rest branch is rolled out whenever it has mass. > 0: a smaller rest is cut (unless
    # the sampled token is in it); the credit it can hide, h(mass) + mass * ln C, is reported
    min_rest_mass: float = checked(0.0, Range(0, 1, high_open=True))
    batch_size: int = checked(512, AT_LEAST_ONE)  # sequences per generate call
    resamples: int = checked(200, Range(10))  # bootstrap resamples of the continuations
    # of the bootstrap and correlation intervals
    confidence: float = checked(0.9, Range(0, 1, low_open=True, high_open=True))
    # add-alpha smoothing of branch outcome frequencies (pointwise credit, bootstrap)
    pseudocount: float = checked(0.5, Range(0, low_open=True, why="zero counts must stay finite"))
    seed: int = checked(0, NON_NEGATIVE)
    # during training: probe the live policy every N steps (probe/* metrics); 0 = never
    every: int = checked(0, Range(0, why="0 = never"))


@dataclass
class CheckpointConfig:
    # steps between checkpoints; 0 = never (a killed run restarts from scratch)
    every: int = checked(10, Range(0, why="0 = never"))
    keep: int = checked(2, AT_LEAST_ONE)  # newest checkpoints kept on disk
    # resume a run whose resolved config differs from its checkpoint's
    # (quadrants/run/resume_identity.py: refused unless true); the change is recorded on the run
    # and in config.<step>.yaml
    allow_config_change: bool = checked(False, why="a flag")


@dataclass
class TrackingConfig:
    # MLflow tracking URI; None = a SQLite store `<outputs>/mlflow.db` (one machine only)
    uri: str | None = checked(
        None,
        why="a URI; checked to be a writable MLflow store before training (hydra_setup.preflight)",
    )
    # a SLURM sweep (launcher=slurm, slurm_ddp) with a SQLite store is refused at compose time (its
    # jobs land on several nodes, and one SQLite file written from several nodes over a network file
    # system is not safe); true says every job runs on this one machine (launcher=slurm_dev sets it)
    sqlite_on_slurm: bool = checked(
        False, why="a flag (SQLite under SLURM: every job on one machine)"
    )
    # steps between sample-completion artifacts; 0 = never
    log_samples_every: int = checked(10, Range(0, why="0 = never"))
    # CPU, memory, disk, network (and GPU) readings as `system/*` metrics on the training steps
    system_metrics: bool = checked(False, why="a flag")
    # seconds between readings; a step logs their mean
    system_metrics_interval_s: float = checked(5.0, POSITIVE)
    # at the end of a sweep, log the analysis report (report.html) on its parent run
    report: bool = checked(True, why="a flag (the analysis report logged on a sweep's parent run)")
    # trackers beside MLflow, fed the same records (tracking/sinks.py): tensorboard (event files in
    # <run_dir>/tensorboard), wandb (offline unless WANDB_MODE says otherwise); MLflow is always on
    sinks: list[str] = checked(
        why="names, checked by tracking.sinks.check_sinks (the run plan)", factory=list
    )


@dataclass
class DistributedConfig:
    # Used by `torchrun -m quadrants.distributed_main` / srun (distributed/collectives.py);
    # a plain single process ignores all but prompts_per_generate.
    # auto (nccl when CUDA is available, else gloo) | gloo | nccl
    backend: str = checked(
        "auto", why="a name, checked by distributed.collectives.validate_distributed_config"
    )
    # prompts per generate call; block b goes to rank b % world. null = prompts_per_step / world
    # (one call per rank). Fix it to make runs with different world sizes draw the same samples.
    prompts_per_generate: int | None = checked(
        None, Range(1, null=True, why="null = prompts_per_step / world size")
    )
    # FSDP2: free gathered parameters after each forward
    reshard_after_forward: bool = checked(True, why="a flag")


@dataclass
class ClusterConfig:
    # one rank's GPU memory, usable GiB: what torch.cuda.mem_get_info()[1] / 2**30 reports on the
    # cluster's cards (an "80 GB" H100 about 79.1-79.6); a run whose memory plan
    # (`python -m quadrants.plan`) exceeds it is refused before anything is queued, and vLLM's
    # share is gpu_memory_utilization x it. A planning process that sees a GPU reads that GPU's
    # figure instead (memory/check.py `device_total`). None = no check
    gpu_memory_gib: float | None = checked(
        None, Range(0, null=True, low_open=True, why="null = no memory check")
    )
    # what torch's caching allocator reserves beyond the trainer's peak of live tensors (blocks
    # cached but not reusable at the peak), as a fraction of that peak: a run is refused unless
    # plan peak + this share of the trainer's part fits gpu_memory_gib. Measured on an H100 with
    # benchmarks/gpu_acceptance.py (docs/cluster.md): 0.31 with the allocator's defaults, 0.17 with
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (which vLLM's sleep mode turns off only
    # around its own pool and restores: vllm/device_allocator/cumem.py `use_memory_pool`)
    allocator_headroom: float = checked(
        0.3, Range(0, why="a fraction of the trainer's planned peak")
    )


@dataclass
class RunConfig:
    seed: int = checked(0, NON_NEGATIVE)
    # one MLflow experiment per study
    study: str = checked("quadrants", why="a name (the MLflow experiment)")
    # one MLflow parent run per sweep
    sweep_id: str = checked("adhoc", why="a name (the sweep's directory and parent run)")
    outputs: str = checked("outputs", why="a directory, created when the run starts")
    # where checkpoints, the tracking spool and run.json live; None = no checkpoints, no resume
    run_dir: str | None = checked(
        None, why="a directory (null = no checkpoints), created when the run starts"
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    quadrant: QuadrantConfig = field(default_factory=QuadrantConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
