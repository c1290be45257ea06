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
    monkeypatch.setattr(registry, "_ENGINES", dict(registry._ENGINES))

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
    assert all(torch.equal(a, b) for a, b in zip(replica.parameters(), model.parameters()))
    text = hf.sampler(cfg, model, tokenizer)  # the probe's engine: answers, no log-probs
    assert type(text) is HFEngine and text.model is model and not text.logprobs
