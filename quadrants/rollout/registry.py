"""Rollout engines by name: the one place that knows `rollout.engine` values.

An engine enters a run through its `EngineKind`, registered under the name the config uses. The rest
of the code asks the kind, never the name:
- `validate(cfg, world_size)`: compose-time checks of the run's layout (ValueError naming the key);
- `gpus_per_run(rollout)`: GPUs one run's process asks the SLURM launcher for (None = no request);
- `samples_from_trainer_weights`: the engine samples from the trainer's own module (or an exact
  per-rank copy) with the trainer's numerics, so its log-probs and entropy may stand in for the
  behaviour pass (quadrants/run/settings.py, `engine_numbers_may_stand_in`);
- `replica_for_ranks`: when the policy is sharded over ranks, the engine needs a full per-rank copy
  of it, taken before sharding (the trainer makes it; `start` receives it as `replica`);
- `start(...)`: the training engine, over the placed (and sharded) policy;
- `sampler(...)`: an engine over a plain one-process model (the branching probe);
- `check_settings(cfg)`: compose-time checks of the engine's own config section (run for every
  registered engine, the chosen one or not);
- `check_lora(cfg)`: whether the engine serves `model.lora` as configured;
- `memory_share(rollout, parameters, device_bytes)`: its own share of each GPU beside the
  trainer's, for the memory plan (None: it generates with the trainer's module), and
  `share_fixes(rollout, awake)`: the settings that shrink that share, for the plan's refusal.

To add an engine: write it (the `RolloutEngine` protocol in quadrants/rollout/engine.py), subclass
`EngineKind` and `register_engine(YourKind())`. Engines import lazily here so that composing a
config loads neither transformers nor vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from quadrants.config_ranges import Choice
from quadrants.registry import Registry
from quadrants.rollout.engine import EngineShare, RolloutEngine

if TYPE_CHECKING:
    from quadrants.config import RolloutConfig, RunConfig


class EngineKind:
    """How a rollout engine is validated, placed and started; subclass and set `name`."""

    name: str = ""
    samples_from_trainer_weights: bool = False
    replica_for_ranks: bool = False

    def validate(self, cfg: RunConfig, world_size: int) -> None:
        """Raise ValueError, naming the key, when the engine cannot run `cfg` on that many ranks."""

    def gpus_per_run(self, rollout: Any) -> int | None:
        """GPUs one run's process needs for this engine (`rollout`: the rollout config section)."""
        return None

    def check_settings(self, cfg: RunConfig) -> None:
        """Raise ValueError, naming the key, when the engine's own settings are invalid (checked
        for every registered engine, whichever `rollout.engine` names)."""

    def check_lora(self, cfg: RunConfig) -> None:
        """Raise ValueError, naming the key, when the engine cannot sample from the adapted policy
        of `model.lora` as configured (called when LoRA is on and this is the run's engine)."""

    def memory_share(
        self, rollout: RolloutConfig, parameters: int, device_bytes: int
    ) -> EngineShare | None:
        """The engine's own bytes per GPU beside the trainer's, for a model of `parameters`
        elements on a GPU of `device_bytes` usable bytes; None: it generates with the trainer's
        own module, whose memory the plan counts already."""
        return None

    def share_fixes(self, rollout: RolloutConfig, awake: bool) -> list[str]:
        """The settings that shrink the engine's share, for the plan's refusal when the peak
        falls in a phase where the engine is `awake` (load, rollout, weight push) or asleep."""
        return []

    def start(
        self,
        cfg: RunConfig,
        model: nn.Module,
        tokenizer: Any,
        *,
        replica: nn.Module | None,
        world_size: int,
    ) -> RolloutEngine:
        """The training engine over `model` (placed on its device, sharded when world_size > 1).

        `replica` (only for `replica_for_ranks`): the module to sample from, `model` itself in one
        process, a full unsharded per-rank copy when sharded; None otherwise."""
        raise NotImplementedError

    def sampler(self, cfg: RunConfig, model: nn.Module, tokenizer: Any) -> RolloutEngine:
        """An engine sampling from a plain (unsharded, one-process) `model`'s current weights."""
        engine = self.start(
            cfg, model, tokenizer, replica=model if self.replica_for_ranks else None, world_size=1
        )
        engine.sync_weights(model)
        return engine


ENGINES: Registry[EngineKind] = Registry("rollout.engine", "rollout engine")


def register_engine(kind: EngineKind) -> EngineKind:
    """Register `kind` under `kind.name`; a second registration of the same name is an error."""
    return ENGINES.register(kind)


def known_engines() -> list[str]:
    return sorted(ENGINES.names())


def get_engine(name: str) -> EngineKind:
    """The kind registered under `name`; an unknown name lists the registered ones."""
    return ENGINES.get(name)


# --- the built-in engines -------------------------------------------------------------------------


class HFKind(EngineKind):
    """The Hugging Face engine (quadrants/rollout/hf.py), colocated with the trainer: it samples
    from the training module itself in one process, from a per-rank replica synced before each step
    when sharded (`ReplicaHFEngine`)."""

    name = "hf"
    samples_from_trainer_weights = True
    replica_for_ranks = True

    def start(self, cfg, model, tokenizer, *, replica, world_size):
        from quadrants.rollout.hf import HFEngine, ReplicaHFEngine

        if replica is model:
            return HFEngine(model, tokenizer, decode=cfg.rollout.hf_decode)
        return ReplicaHFEngine(replica, tokenizer, decode=cfg.rollout.hf_decode)

    def sampler(self, cfg, model, tokenizer):
        from quadrants.rollout.hf import HFEngine

        # answers only, as evaluation samples
        return HFEngine(model, tokenizer, logprobs=False, decode=cfg.rollout.hf_decode)


def longest_row(cfg) -> int:
    """Prompt + response tokens of the run's longest sequence, in training or evaluation."""
    return cfg.task.max_prompt_tokens + max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens)


def model_len(cfg, model_positions: int | None = None) -> int:
    """vLLM's `max_model_len` (prompt + response tokens per sequence): `rollout.vllm.max_model_len`
    when set, else the run's longest row, `task.max_prompt_tokens` + the longer of
    `rollout.max_new_tokens` and `eval.max_new_tokens` (the engine generates both; longer prompts
    never reach it: tasks/prompt_length.py), at most the model's positions (vLLM refuses a longer
    one: vllm/config/model.py `_get_and_verify_max_len`)."""
    if cfg.rollout.vllm.max_model_len is not None:
        return int(cfg.rollout.vllm.max_model_len)
    planned = longest_row(cfg)
    return planned if model_positions is None else min(planned, int(model_positions))


class VLLMKind(EngineKind):
    """The colocated vLLM engine (quadrants/rollout/vllm.py), started on the model's directory or
    hub id, or, for the embedded tiny model, on its config with the weights synced in. Under
    torch.distributed every rank starts one inside the trainer's process group (vLLM's external
    launcher, an independent engine per rank without a data-parallel group, one GPU each:
    `validate`)."""

    name = "vllm"

    def validate(self, cfg, world_size):
        tensor_parallel = cfg.rollout.vllm.tensor_parallel_size
        if world_size != 1 and tensor_parallel != 1:
            raise ValueError(
                f"rollout.vllm.tensor_parallel_size={tensor_parallel} with {world_size} trainer "
                f"ranks is not built: each rank generates its own blocks of prompts on its own "
                f"engine, so an engine is one GPU; use rollout.vllm.tensor_parallel_size=1 "
                f"(allowed with several ranks: 1)"
            )

    def gpus_per_run(self, rollout):
        return int(rollout.vllm.tensor_parallel_size)

    def check_settings(self, cfg):
        from quadrants.rollout.weights import WEIGHT_DTYPES

        engine = cfg.rollout.vllm  # its sleep_level: the choice its field declares (config.py)
        Choice(tuple(WEIGHT_DTYPES)).check("rollout.vllm.dtype", engine.dtype)
        # max_model_len bounds prompt + response: set below the planned row, the engine would
        # shorten responses (or refuse a prompt) that the run planned for
        response = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens)
        planned = longest_row(cfg)
        if engine.max_model_len is not None and engine.max_model_len < planned:
            raise ValueError(
                f"rollout.vllm.max_model_len={engine.max_model_len} is below "
                "task.max_prompt_tokens + the longest response (rollout.max_new_tokens, "
                f"eval.max_new_tokens) = {cfg.task.max_prompt_tokens} + {response} = {planned}: "
                "the engine would cut responses short. "
                f"Use rollout.vllm.max_model_len=null (the planned sum) or >= {planned}, or lower "
                "task.max_prompt_tokens"
            )

    def check_lora(self, cfg):
        # vLLM receives the adapters merged into its weights (rollout/weights.py
        # `merged_lora_weights`, docs/lora.md), in float32 only
        if cfg.rollout.vllm.dtype != "float32":
            raise ValueError(
                f"model.lora.enabled=true with rollout.engine=vllm and "
                f"rollout.vllm.dtype={cfg.rollout.vllm.dtype!r}: vLLM receives the adapters merged "
                "into its weights, and a LoRA update merged into 16-bit weights is mostly rounded "
                "away (measured: 99.8 % of it lost at adapter entries of 1e-5, 79 % at 1e-3; "
                "benchmarks/lora_merge_precision.py, docs/lora.md), so the engine would sample "
                "from the base. Set rollout.vllm.dtype=float32, or rollout.engine=hf"
            )

    def memory_share(self, rollout, parameters, device_bytes):
        from quadrants.rollout.vllm_share import vllm_share

        return vllm_share(rollout.vllm, parameters, device_bytes)

    def share_fixes(self, rollout, awake):
        engine = rollout.vllm
        if not awake:
            return ["let the engine sleep while the trainer works: rollout.vllm.sleep_level=1"]
        if engine.kv_cache_gib is None:
            return [
                "a smaller engine share: rollout.vllm.gpu_memory_utilization (now "
                f"{engine.gpu_memory_utilization:g} of the GPU) or a fixed "
                "rollout.vllm.kv_cache_gib"
            ]
        return [f"a smaller KV cache: rollout.vllm.kv_cache_gib (now {engine.kv_cache_gib:g})"]

    def settings(self, cfg, world_size, model_positions=None):
        """The engine settings of one rank of a run of `world_size` ranks (rollout/vllm.py), for a
        model of `model_positions` positions (its config's max_position_embeddings)."""
        from quadrants.rollout.vllm import VLLMSettings

        engine = cfg.rollout.vllm
        return VLLMSettings(
            dtype=engine.dtype,  # the engine's own, independent of train.precision
            gpu_memory_utilization=engine.gpu_memory_utilization,
            kv_cache_gib=engine.kv_cache_gib,
            tensor_parallel_size=engine.tensor_parallel_size,
            enforce_eager=engine.enforce_eager,
            sleep_level=engine.sleep_level,
            in_process=engine.in_process,
            max_model_len=model_len(cfg, model_positions),
            seed=cfg.seed,
            ranks=world_size,
        )

    def start(self, cfg, model, tokenizer, *, replica, world_size):
        from quadrants.models.loading import pretrained_source
        from quadrants.models.source import TINY, TINY_RANDOM
        from quadrants.rollout.vllm import VLLMEngine

        positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        settings = self.settings(cfg, world_size, positions)
        name = cfg.model.name_or_path
        # a directory or hub id vLLM can read ("smollm2-135m" is neither: its cached directory)
        source = None if name in (TINY, TINY_RANDOM) else pretrained_source(name)
        return VLLMEngine(model, tokenizer, settings, model_source=source)


register_engine(HFKind())
register_engine(VLLMKind())
