"""The run configuration: one dataclass tree, the single schema of the Hydra tree under sweeps/.

The dataclass defaults below are the one place a default value lives: `RunConfig()` is the same
run as `python -m quadrants.sweep` with no overrides (the tiny warm-started policy on the synthetic
arithmetic task, DAPO on all tokens), and the YAML groups under sweeps/ state only what differs
from them (tests/unit/sweep/test_defaults_once.py checks both). Hydra composes it from YAML and
registers these classes with its ConfigStore (quadrants/launch/hydra_setup.py), so a misspelled key
or a wrong type fails at compose time. A leaf: it imports nothing of quadrants. The checks that a
type cannot express (ranges, names owned by other packages) are in quadrants/validation.py
(`validate_config`), which runs before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoraConfig:
    # LoRA adapters on the policy through peft (quadrants/models/lora.py, docs/lora.md): only the
    # adapters train; the KL reference is the same base with the adapters switched off. Defaults:
    # verl's LoRA recipe (target_modules all-linear, alpha = 2 x rank;
    # verl docs/advance/ppo_lora.rst) with no dropout (a dropout makes the update's forward
    # differ from the behaviour pass)
    enabled: bool = False
    rank: int = 16  # r, the adapters' inner dimension
    alpha: float = 32.0  # the update is scaled by alpha / rank
    dropout: float = 0.0  # on the adapters' input, in the update's forward only
    # peft's target_modules: "all-linear" (every linear layer but the LM head) or a list of module
    # names (e.g. [q_proj, v_proj])
    target_modules: Any = "all-linear"
    # the adapter residual ||h_adapted - h_base|| per response token (ARCA's credit signal,
    # quadrants/models/token_signals.py): which entry of transformers' hidden_states it is read at
    # (0 = embeddings, -1 = the final normed state the LM head reads), and whether it is computed
    # (two extra no-grad decoder passes per step) and logged per quadrant when the objective is not
    # ARCA (which always computes it)
    residual_layer: int = -1
    residual_telemetry: bool = True


@dataclass
class ModelConfig:
    # "tiny" = the embedded warm-started policy; "tiny-random" = random init (tests); else a local
    # path or a Hugging Face model id.
    name_or_path: str = "tiny"
    # the dtype the weights are read in; the trainer's parameters then follow train.precision
    dtype: str = "float32"
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    heldout_size: int = 200
    params: dict[str, Any] = field(default_factory=dict)
    # how the final answer is read, in training and evaluation: boxed (the last \boxed{}) |
    # boxed_or_last_number (the last box, else the last number written; rewards/extract.py)
    answer_extraction: str = "boxed"
    # your own reward in place of math-verify, "package.module:function" (rewards/custom.py): called
    # with (completion, gold answer), returns True / False / None (no answer); None = math-verify
    reward: str | None = None
    # math-verify worker processes grading the answers; 0 = one per CPU this task holds, less one
    # for the trainer (SLURM_CPUS_PER_TASK, else the CPUs this process may run on)
    grader_workers: int = 0
    # the longest rendered prompt, in the policy's tokens (quadrants/tasks/prompt_length.py): longer
    # problems are dropped when the task loads (counted and logged); the memory plan sizes every row
    # at this + rollout.max_new_tokens, and vLLM's max_model_len defaults to this + the longest
    # response (rollout.max_new_tokens or eval.max_new_tokens)
    max_prompt_tokens: int = 1024


@dataclass
class PromptConfig:
    # how a problem becomes the policy's input, in training and evaluation alike (tasks/prompts.py):
    # auto (the task's own, else chat with a chat template, else plain) | raw | plain | chat |
    # qwen_math | deepscaler
    format: str = "auto"
    instruction: str | None = (
        None  # replaces the format's instruction (qwen_math: its system prompt)
    )


@dataclass
class VLLMConfig:
    # the colocated vLLM engine (rollout.engine=vllm;
    # quadrants/rollout/vllm.py)
    # the engine's weights and compute dtype, independent of the trainer's (the weight push casts)
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5  # of GPU memory, weights + KV cache
    kv_cache_gib: float | None = (
        None  # None = sized from gpu_memory_utilization (give a size on CPU)
    )
    tensor_parallel_size: int = 1
    enforce_eager: bool = False  # True = no CUDA graphs
    # how the engine sleeps while the trainer updates (GPU only): 2 discards weights and KV cache
    # (the trainer pushes the weights again before generating), 1 offloads the weights to host
    # memory, 0 never
    sleep_level: int = 2
    in_process: bool = True  # vLLM's engine core in the trainer's process (weights by reference)
    # prompt + response tokens per sequence; None = task.max_prompt_tokens + the longer of
    # rollout.max_new_tokens and eval.max_new_tokens (at most the model's positions)
    max_model_len: int | None = None


@dataclass
class IdentityCheckConfig:
    # the rollout identity guard (quadrants/rollout/identity.py): at a weight push the engine and
    # the trainer score one fixed probe batch; the run stops when their log-probs disagree, or
    # when the engine's did not move since the last check while the trainer's did
    every: int = 1  # check every N-th weight push (1 = every push); 0 = off
    probe_size: int = 4  # probe sequences
    probe_tokens: int = 32  # tokens per probe sequence (the second half scored)
    tolerance: float | None = None  # mean |log-prob gap| allowed; None = from the precision pair
    seed: int = 0  # the probe's own generator (the run's sampling stream is untouched)


@dataclass
class RolloutConfig:
    engine: str = "hf"
    group_size: int = 8  # G, rollouts per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    # the HF engine's decode: auto (fast on the CPU, generate elsewhere) | fast (fused step,
    # finished rows dropped; Llama-family models, others take loop) | loop (draws exactly
    # generate's tokens) | generate (rollout/hf.py)
    hf_decode: str = "auto"
    # train–inference mismatch: truncated importance weights min(π_old/μ_engine, cap) on the
    # per-token loss, per token or per sequence (ops/mismatch.py); none = only logged
    mismatch_correction: str = "none"  # none | token | sequence
    mismatch_cap: float = 2.0
    # DAPO dynamic sampling with refill: up to this many extra generation rounds of fresh prompts
    # until prompts_per_step groups have mixed correctness (train/refill.py); 0 = off (drop only)
    refill_rounds: int = 0
    # DAPO's soft overlong penalty over the last overlong_buffer tokens before max_new_tokens
    # (ops/overlong.py), reaching -overlong_penalty at the limit; 0 = off
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    identity_check: IdentityCheckConfig = field(default_factory=IdentityCheckConfig)


@dataclass
class ObjectiveConfig:
    # a registered objective (quadrants/objectives); its hyper-parameters' defaults are its
    # function's keyword defaults, and `params` overrides them (sweeps/objective/<name>.yaml)
    name: str = "dapo"
    loss_agg: str = "token-mean"
    params: dict[str, Any] = field(default_factory=dict)
    kl_coef: float = 0.0
    kl_estimator: str = "k3"


@dataclass
class QuadrantConfig:
    # which quadrants get gradient: "all", one of PHR/PLR/NHR/NLR, or a list of them
    keep: Any = "all"
    threshold: str = "group_mean"  # group_mean | batch_quantile | fixed
    threshold_value: float | None = None  # q for batch_quantile, tau (nats) for fixed
    denominator: str = "all_response_tokens"  # all_response_tokens | kept_tokens
    # the per-token value the split thresholds: token_entropy (the next-token distribution's) or
    # attention_entropy (the attention rows', averaged over heads and `attention_layers`;
    # quadrants/models/token_signals.py); the threshold rules are the same for both
    axis: str = "token_entropy"
    # the layers whose attention entropy is averaged: "all", "last", or a list of layer indices
    attention_layers: Any = "all"
    # keep=random (`quadrant=random`): the matched random-token control (ops/random_control.py,
    # docs/science.md). `match`: the arm whose kept-token count it draws each step (a quadrant or a
    # list, as `keep`); `match_sign`: draw per advantage sign, among the tokens of the matched arm's
    # sign; `reweight`: none | ht (Horvitz-Thompson, each drawn token's loss times 1/inclusion
    # probability). Another arm accepts `match` (so `-m quadrant=PHR,random quadrant.match=PHR`
    # composes) and ignores it
    match: Any = None
    match_sign: bool = False
    reweight: str = "none"


@dataclass
class RewardConfig:
    # the reward the run trains on (quadrants/rewards/confound.py, docs/science.md): verifier (the
    # grader's correctness) | random (a Bernoulli reward, `reward=random`) | format_only (1 for a
    # final answer the grader could read, right or wrong). The verifier grades every response
    # whichever it is: train/solve_rate stays the true solve rate, evaluation is always graded
    name: str = "verifier"
    # reward=random: the success probability; null = each round's true solve rate (the fraction of
    # its responses the verifier graded correct); a number = that fixed rate (Spurious Rewards'
    # random0.5 is 0.5)
    probability: float | None = None


@dataclass
class AdvantageConfig:
    normalize_std: bool = True
    eps: float = 1e-6


@dataclass
class CpuConfig:
    """Settings that apply only when train.device resolves to the CPU (quadrants/cpu)."""

    # float32 CPU matrix multiplies (decode, update, no-grad passes): torch (MKL) | onednn | auto
    # (oneDNN on x86 processors that are not Intel's, where MKL skips its AVX-512 kernels;
    # quadrants/cpu/matmul.py)
    matmul: str = "auto"
    # glibc keeps freed blocks up to this many MiB in the trainer process instead of returning them
    # to the OS at every step (quadrants/cpu/allocator.py); 0 = glibc's own thresholds
    retain_freed_mb: int = 1024
    # transformers hands grouped key/value heads to torch's SDPA kernel as they are
    # (quadrants/cpu/sdpa.py); false = it repeats them to the query heads first
    sdpa_grouped_heads: bool = True
    # idle OpenMP threads spin this many times before sleeping; null (default) = libgomp's own
    # 300,000, as every torch program; a number: `python -m quadrants.sweep` starts a CPU run's
    # process with GOMP_SPINCOUNT set to it unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set
    # (quadrants/cpu/openmp.py). 1000 on a machine shared with other CPU jobs
    omp_spincount: int | None = None


@dataclass
class TrainConfig:
    steps: int = 60
    prompts_per_step: int = 16
    mini_batch_size: int = 64  # sequences per optimizer step
    micro_batch_size: int = (
        0  # sequences per forward/backward, gradients accumulated; 0 = the mini-batch
    )
    # micro-batches by token budget: each mini-batch's rows, sorted by length, packed into
    # micro-batches of at most this many tokens (padding counted), gradients accumulated over them;
    # 0 = off (micro_batch_size decides)
    micro_batch_tokens: int = 0
    # the same budget for the no-grad passes (behaviour, reference, |Δ log-prob|); 0 = off
    forward_tokens: int = 0
    # fp32 (parameters, optimizer states and compute in float32) | bf16-mixed (fp32 parameters and
    # optimizer states, bf16 compute) | bf16 (pure: bf16 parameters and AdamW states) | auto
    # (bf16-mixed on CUDA, fp32 elsewhere)
    precision: str = "fp32"
    # pure bf16 with AdamW rounds every small update away; refused unless this is true
    allow_pure_bf16: bool = False
    activation_checkpointing: bool = False  # recompute each decoder layer in backward
    # AdamW's states to host memory between optimizer steps (rollouts, evaluation, behaviour pass,
    # forward and backward), back for the step (quadrants/run/offload.py); GPU runs only
    offload_optimizer: bool = False
    epochs: int = 1  # passes over each rollout batch
    # how each pass orders the rows before cutting mini-batches: shuffle (every row at random) |
    # query (the prompts at random, each prompt's G responses together; mini_batch_size must be a
    # multiple of rollout.group_size; Cheng et al., arXiv 2605.08666) | balanced (every mini-batch
    # holds positive- and negative-advantage rows in the batch's proportion, as nearly as the
    # counts allow; ops/balance.py)
    minibatch_grouping: str = "shuffle"
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    entropy_chunk_size: int = 256
    threads: int = 0  # torch intra-op threads; 0 = leave torch's default
    # what a run on the CPU tunes (quadrants/cpu); ignored on any other device
    cpu: CpuConfig = field(default_factory=CpuConfig)
    measure_dlogp: bool = True  # one extra no-grad pass per step for per-quadrant |Δ log-prob|
    # sequences in that pass (a seeded subsample, standard error logged); null = auto (1/16 of
    # the step's sequences, at least 2 and at least one per rank: ~4 % of a step); 0 = all;
    # over several ranks rounded up to a multiple of their number (each runs an equal share)
    dlogp_rows: int | None = None
    # auto: take old log-probs and entropy from the HF engine when they are exact (its own weights,
    # no mismatch correction, no bf16 trainer), skipping the no-grad pass; always: recompute them
    behaviour_pass: str = "auto"  # auto | always
    # policy forwards run the responses in at most this many length buckets, each cut after its
    # longest row's last token (quadrants/ops/length_buckets.py); 1 = one call per forward
    length_buckets: int = 4
    # padded (each micro-batch a [rows, widest prompt + response] block, padding attended over and
    # counted by the token budgets) | packed (each micro-batch's real tokens in one sequence with
    # per-row position ids, attention kept within each row; token budgets count real tokens;
    # Llama/Mistral/Qwen2/Qwen3 models only: quadrants/ops/packing.py, docs/performance.md)
    attention_layout: str = "padded"
    device: str = "auto"  # auto (cuda:<LOCAL_RANK> if CUDA is available, else cpu) | cpu | cuda


@dataclass
class EvalConfig:
    every: int = 20  # steps; 0 = only before and after training
    problems: int = 100
    samples: int = 4
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 48
    # Benchmarks, name -> samples per problem n (Avg@n, Pass@k for k = 1, 2, 4, ..., n), run by
    # quadrants.eval.runner in training and by `python -m quadrants.evaluate`. A name is one of
    # tasks.benchmarks.known_benchmarks(), tasks.ood.known_ood_benchmarks() or a task
    # (its held-out split). Empty = the task's held-out split, `problems` x `samples`
    # (the quick in-training check).
    benchmarks: dict[str, int] = field(default_factory=dict)
    limit: int | None = (
        # the first `limit` problems of each benchmark (each group of an OOD one) and of the
        # held-out check; None = all
        None
    )
    ks: list[int] = field(default_factory=list)  # Pass@k also at these k (each <= every n)
    data_dir: str | None = None  # None: the data home, $QUADRANTS_DATA or ~/.cache/quadrants/data
    source: str = "local"  # local (jsonl files under data_dir) | hub (Hugging Face `datasets`)
    # sequences (prompts x n) per generate call, benchmarks and the held-out check; None = a
    # rank's whole share in one call for an engine that schedules its own batches (vLLM), 256 for
    # an engine without one (HF) (quadrants/eval/sizing.py)
    batch_size: int | None = None
    confidence: float = 0.95  # of the normal interval around each mean (value +/- z * stderr)
    # `python -m quadrants.evaluate TARGET`: a run dir (its newest checkpoint), a checkpoint dir,
    # a local model dir, "tiny", or a hub id; None = model.name_or_path
    target: str | None = None


@dataclass
class ProbeConfig:
    # the hindsight-credit probe (quadrants/probe, `python -m quadrants.probe`; docs/probe.md)
    prompts: int = (
        8  # training prompts; rollout.group_size responses each are the probe's population
    )
    positions: int = 32  # response tokens probed, stratified by quadrant x entropy bin
    entropy_bins: int = 3  # entropy strata within each quadrant
    branches: int = 4  # at most this many top next tokens per position (m), plus one "rest" branch
    coverage: float = (
        0.9  # top tokens until their mass reaches this (1 - eps), capped by `branches`
    )
    continuations: int = 8  # K graded continuations per branch
    # 0 = the rest branch is rolled out whenever it has mass. > 0: a smaller rest is cut (unless
    # the sampled token is in it); the credit it can hide, h(mass) + mass * ln C, is reported
    min_rest_mass: float = 0.0
    batch_size: int = 512  # sequences per generate call
    resamples: int = 200  # bootstrap resamples of the continuations
    confidence: float = 0.9  # of the bootstrap and correlation intervals
    pseudocount: float = (
        0.5  # add-alpha smoothing of branch outcome frequencies (pointwise credit, bootstrap)
    )
    seed: int = 0
    every: int = (
        0  # during training: probe the live policy every N steps (probe/* metrics); 0 = never
    )


@dataclass
class CheckpointConfig:
    every: int = 10  # steps between checkpoints; 0 = never (a killed run restarts from scratch)
    keep: int = 2  # newest checkpoints kept on disk
    # resume a run whose resolved config differs from its checkpoint's (quadrants/run/identity.py:
    # refused unless true); the change is recorded on the run and in config.<step>.yaml
    allow_config_change: bool = False


@dataclass
class TrackingConfig:
    # MLflow tracking URI; None = a SQLite store `<outputs>/mlflow.db` (one machine only)
    uri: str | None = None
    # a SLURM sweep (launcher=slurm, slurm_ddp) with a SQLite store is refused at compose time (its
    # jobs land on several nodes, and one SQLite file written from several nodes over a network file
    # system is not safe); true says every job runs on this one machine (launcher=slurm_dev sets it)
    sqlite_on_slurm: bool = False
    log_samples_every: int = 10  # steps between sample-completion artifacts; 0 = never
    # CPU, memory, disk, network (and GPU) readings as `system/*` metrics on the training steps
    system_metrics: bool = False
    system_metrics_interval_s: float = 5.0  # seconds between readings; a step logs their mean
    report: bool = (
        True  # at the end of a sweep, log the analysis report (report.html) on its parent run
    )
    # trackers beside MLflow, fed the same records (tracking/sinks.py): tensorboard (event files in
    # <run_dir>/tensorboard), wandb (offline unless WANDB_MODE says otherwise); MLflow is always on
    sinks: list[str] = field(default_factory=list)


@dataclass
class DistributedConfig:
    # Used by `torchrun -m quadrants.distributed_main` / srun (distributed/collectives.py);
    # a plain single process ignores all but prompts_per_generate.
    backend: str = "auto"  # auto (nccl when CUDA is available, else gloo) | gloo | nccl
    # prompts per generate call; block b goes to rank b % world. null = prompts_per_step / world
    # (one call per rank). Fix it to make runs with different world sizes draw the same samples.
    prompts_per_generate: int | None = None
    reshard_after_forward: bool = True  # FSDP2: free gathered parameters after each forward


@dataclass
class ClusterConfig:
    # one rank's GPU memory, usable GiB: what torch.cuda.mem_get_info()[1] / 2**30 reports on the
    # cluster's cards (an "80 GB" H100 about 79.1-79.6); a run whose memory plan
    # (`python -m quadrants.plan`) exceeds it is refused before anything is queued, and vLLM's
    # share is gpu_memory_utilization x it. A planning process that sees a GPU reads that GPU's
    # figure instead (memory/check.py `device_total`). None = no check
    gpu_memory_gib: float | None = None
    # what torch's caching allocator reserves beyond the trainer's peak of live tensors (blocks
    # cached but not reusable at the peak), as a fraction of that peak: a run is refused unless
    # plan peak + this share of the trainer's part fits gpu_memory_gib. Measured on an H100 with
    # benchmarks/gpu_acceptance.py (docs/cluster.md): 0.31 with the allocator's defaults, 0.17 with
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (which vLLM's sleep mode turns off only
    # around its own pool and restores: vllm/device_allocator/cumem.py `use_memory_pool`)
    allocator_headroom: float = 0.3


@dataclass
class RunConfig:
    seed: int = 0
    study: str = "quadrants"  # one MLflow experiment per study
    sweep_id: str = "adhoc"  # one MLflow parent run per sweep
    outputs: str = "outputs"
    # where checkpoints, the tracking spool and run.json live; None = no checkpoints, no resume
    run_dir: str | None = None
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
