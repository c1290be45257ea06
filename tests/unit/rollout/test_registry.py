"""The rollout-engine registry: names, capabilities, compose-time checks and construction of the
built-in engines (the toy engine of tests/e2e/test_toy_engine.py shows a new one end to end)."""

from __future__ import annotations

import copy

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.models.loading import load_policy
from quadrants.rollout import registry
from quadrants.rollout.hf import HFEngine, ReplicaHFEngine
from quadrants.rollout.registry import EngineKind, get_engine, known_engines, register_engine


def test_the_built_in_engines_are_registered():
    assert known_engines() == ["hf", "vllm"]
    assert isinstance(get_engine("hf"), EngineKind) and get_engine("vllm").name == "vllm"


def test_an_unknown_name_lists_the_registered_engines():
    with pytest.raises(
        ValueError, match=r"^rollout.engine='sglang' is unknown; choose one of \['hf', 'vllm'\]$"
    ):
        get_engine("sglang")


def test_a_name_is_registered_once(monkeypatch):
    monkeypatch.setattr(registry.ENGINES, "kinds", dict(registry.ENGINES.kinds))

    class Again(EngineKind):
        name = "hf"

    class Nameless(EngineKind):
        pass

    with pytest.raises(ValueError, match="rollout engine 'hf' is already registered"):
        register_engine(Again())
    with pytest.raises(ValueError, match="Nameless has no name"):
        register_engine(Nameless())
    assert known_engines() == ["hf", "vllm"]


def test_capabilities_of_the_built_in_engines():
    hf, vllm = get_engine("hf"), get_engine("vllm")
    # HF samples from the trainer's module (or its synced replica) with the trainer's numerics and
    # needs that replica when sharded; vLLM has its own kernels and its own copy of the weights
    assert (hf.samples_from_trainer_weights, hf.replica_for_ranks) == (True, True)
    assert (vllm.samples_from_trainer_weights, vllm.replica_for_ranks) == (False, False)
    # a new kind claims nothing by default
    assert (EngineKind.samples_from_trainer_weights, EngineKind.replica_for_ranks) == (False, False)


def test_gpus_per_run_is_the_engines_answer():
    rollout = RunConfig().rollout
    rollout.vllm.tensor_parallel_size = 4
    assert get_engine("hf").gpus_per_run(rollout) is None
    assert get_engine("vllm").gpus_per_run(rollout) == 4


def test_vllm_refuses_tensor_parallel_engines_with_several_ranks():
    cfg = RunConfig()
    cfg.rollout.vllm.tensor_parallel_size = 2
    get_engine("vllm").validate(cfg, 1)  # one rank may hold a 2-GPU engine
    get_engine("hf").validate(cfg, 2)  # the HF engine ignores the vLLM section
    with pytest.raises(
        ValueError, match=r"rollout.vllm.tensor_parallel_size=2 with 2 trainer ranks is not built"
    ):
        get_engine("vllm").validate(cfg, 2)
    cfg.rollout.vllm.tensor_parallel_size = 1
    get_engine("vllm").validate(cfg, 2)


def test_no_vllm_engine_gets_a_data_parallel_group_for_any_world_size():
    """What reaches `vllm.LLM(...)` (`llm_arguments` of the settings the registry builds for a rank):
    never a `data_parallel_size` (with one above 1 every engine step all-reduces over the ranks and
    ranks with fewer generate calls deadlock the others, quadrants/rollout/vllm.py); an engine
    per rank inside the trainer's world (the external launcher) whenever there are several ranks,
    one GPU each. That vLLM itself then builds no data-parallel group (its `ParallelConfig`) is
    checked with vLLM running in the vLLM stage (tests/vllm/test_parallel_config.py)."""
    from quadrants.rollout.vllm import llm_arguments

    cfg, kind = RunConfig(), get_engine("vllm")
    for world in range(1, 17):
        for sleeps, dummy in ((True, False), (False, True)):
            arguments = llm_arguments(
                kind.settings(cfg, world), "some/model", sleeps=sleeps, dummy=dummy
            )
            assert "data_parallel_size" not in arguments, world
            assert not any("data_parallel" in key for key in arguments), world
            launcher = arguments.get("distributed_executor_backend")
            assert launcher == ("external_launcher" if world > 1 else None), world
            assert arguments["tensor_parallel_size"] == 1
            assert arguments["enable_sleep_mode"] is sleeps
            assert arguments["load_format"] == ("dummy" if dummy else "auto")


def test_the_hf_engine_samples_from_the_policy_or_its_replica():
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny-random", seed=0)
    cfg, hf = RunConfig(), get_engine("hf")
    own = hf.start(cfg, model, tokenizer, replica=model, world_size=1)  # one process: the policy
    assert type(own) is HFEngine and own.model is model and own.logprobs
    replica = copy.deepcopy(model)  # sharded: a per-rank copy, refreshed by a gathered copy
    ranked = hf.start(cfg, model, tokenizer, replica=replica, world_size=2)
    assert type(ranked) is ReplicaHFEngine and ranked.model is replica
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    ranked.sync_weights(model)
    assert all(
        torch.equal(a, b) for a, b in zip(replica.parameters(), model.parameters(), strict=True)
    )
    text = hf.sampler(cfg, model, tokenizer)  # the probe's engine: answers, no log-probs
    assert type(text) is HFEngine and text.model is model and not text.logprobs


class _Recorded:
    """Stands in for VLLMEngine (vLLM is not installed here): records how it was started."""

    def __init__(self, model, tokenizer, settings, model_source):
        self.model, self.settings, self.model_source = model, settings, model_source
        self.synced = []

    def sync_weights(self, model):
        self.synced.append(model)


def test_vllm_is_started_with_the_run_settings(monkeypatch):
    import quadrants.rollout.vllm as vllm_module
    from quadrants.rollout.vllm import VLLMSettings

    monkeypatch.setattr(vllm_module, "VLLMEngine", _Recorded)
    cfg = RunConfig(seed=7)
    cfg.model.dtype = "float32"  # the engine's dtype is its own (rollout.vllm.dtype), not this
    cfg.rollout.vllm.dtype = "float16"
    cfg.rollout.vllm.kv_cache_gib, cfg.rollout.vllm.sleep_level = 0.25, 2
    model, kind = torch.nn.Linear(1, 1), get_engine("vllm")
    engine = kind.start(cfg, model, None, replica=None, world_size=2)
    assert (
        engine.model is model and engine.model_source is None
    )  # the embedded tiny model: synced in
    assert engine.settings == VLLMSettings(
        dtype="float16",
        gpu_memory_utilization=0.5,
        kv_cache_gib=0.25,
        tensor_parallel_size=1,
        enforce_eager=False,
        sleep_level=2,
        in_process=True,
        # prompt + response: task.max_prompt_tokens 1024 + rollout.max_new_tokens 48 (a Linear
        # has no config, so no positions to cap it)
        max_model_len=1072,
        seed=7,
        ranks=2,  # one independent engine per trainer rank
    )
    cfg.model.name_or_path = "Qwen/Qwen2.5-Math-1.5B"
    # a hub id goes to vLLM as it is with network; with HF_HUB_OFFLINE=1 (an offline cluster, or
    # the README's test command run so) an uncached one is refused instead (models/loading.py
    # `_resolve_pretrained`), which test_loading covers: here, the online case
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    probe = kind.sampler(cfg, model, None)  # one process, the checkpoint's weights synced in
    assert probe.model_source == "Qwen/Qwen2.5-Math-1.5B" and probe.settings.ranks == 1
    assert probe.synced == [model]


def test_vllm_gets_smollm2s_directory_not_its_short_name(monkeypatch, tmp_path):
    """`model=smollm2_135m` names the model "smollm2-135m", which is neither a hub id nor a
    directory: vLLM must get the cached directory the trainer loads from (models/smollm2.py)."""
    import quadrants.rollout.vllm as vllm_module
    from quadrants.models.smollm2 import INFO_FILE, NAME

    monkeypatch.setattr(vllm_module, "VLLMEngine", _Recorded)
    monkeypatch.setenv("QUADRANTS_CACHE", str(tmp_path))
    built = tmp_path / "models" / NAME
    built.mkdir(parents=True)
    (built / INFO_FILE).write_text("{}")  # what a finished build leaves (ensure_smollm2)
    cfg = RunConfig()
    cfg.model.name_or_path = NAME
    engine = get_engine("vllm").start(cfg, torch.nn.Linear(1, 1), None, replica=None, world_size=1)
    assert engine.model_source == str(built)


def test_vllms_max_model_len_is_the_planned_prompt_plus_response():
    from quadrants.rollout.registry import model_len

    cfg = RunConfig()
    cfg.task.max_prompt_tokens, cfg.rollout.max_new_tokens = 1024, 3072
    cfg.eval.max_new_tokens = 2048
    assert model_len(cfg) == 4096  # 1024 + max(3072, 2048)
    cfg.eval.max_new_tokens = 8192  # the engine evaluates too: its longest row counts
    assert model_len(cfg) == 9216  # 1024 + 8192
    cfg.eval.max_new_tokens = 3072
    assert model_len(cfg, model_positions=131072) == 4096
    assert model_len(cfg, model_positions=128) == 128  # the tiny model: vLLM refuses more
    cfg.rollout.vllm.max_model_len = 5000  # set: taken as it is
    assert model_len(cfg, model_positions=4096) == 5000
