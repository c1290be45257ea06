"""quadrants/cpu: the CPU tuning is applied by one call, only when a run's device is the CPU, and
importing quadrants sets nothing.

The non-CPU case runs the trainer's real set-up (`build_context`: model, reference, engine,
optimizer) with the device resolver forced to `meta`, a device that is not the CPU and needs no
GPU: what it shows is that the set-up asks the CPU package for nothing there. What only a GPU can
show (that a CUDA run then trains at the speed and memory of plain transformers) is not tested here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from quadrants.config import CpuConfig, RunConfig
from quadrants.cpu import allocator, linears, matmul, sdpa, tune_for
from quadrants.cpu.openmp import spin_environment, spin_in_effect
from quadrants.cpu.sdpa import FORCE_GQA, hand_grouped_heads_to_sdpa
from quadrants.ops import fused_head
from quadrants.ops.fused_head import head_logprobs_and_entropy
from quadrants.rollout.hf import HFEngine
from quadrants.run import build
from quadrants.run_plan import RunPlan

TUNING = {
    (matmul, "set_cpu_matmul"),
    (linears, "route_linears"),
    (allocator, "retain_freed_memory"),
    (sdpa, "hand_grouped_heads_to_sdpa"),
}


@pytest.mark.subprocess
def test_importing_quadrants_sets_no_environment():
    """A fresh interpreter's environment before and after importing quadrants and the modules a
    run imports (the trainer, the command line, the CPU package) is the same, key for key."""
    probe = (
        "import json, os, sys; before = dict(os.environ); import quadrants, quadrants.cpu, "
        "quadrants.run.loop, quadrants.launch.sweep; "
        "print(json.dumps([before, dict(os.environ)]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", FORCE_GQA)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == before
    assert "GOMP_SPINCOUNT" not in after and FORCE_GQA not in after


@pytest.fixture
def spies(monkeypatch):
    """Every CPU setting replaced by a recorder of its calls (no process-wide effect)."""
    calls: list[str] = []
    results = {"set_cpu_matmul": "torch", "route_linears": 0}
    for module, name in TUNING:

        def spy(*args, name=name, **kwargs):
            calls.append(name)
            return results.get(name, False)

        monkeypatch.setattr(module, name, spy)
    return calls


def _context(monkeypatch, device: str):
    cfg = RunConfig(seed=0)
    cfg.model.name_or_path = "tiny-random"
    cfg.objective.kl_coef = 0.1  # a reference model too: both would be routed on the CPU
    # the rollout identity check scores a probe batch when the engine starts: on `meta` there are
    # no numbers to score (rollout/identity_guard.py is tested on real devices in tests/unit/rollout)
    cfg.rollout.identity_check.every = 0
    monkeypatch.setattr(build, "resolve_device", lambda name, rank=0: torch.device(device))
    return build.build_context(
        RunPlan.parse(cfg), grader=None
    )  # the grader is only held, never called here


def test_a_run_on_another_device_touches_none_of_the_cpu_tuning(spies, monkeypatch):
    """build_context with train.device resolved to `meta`: none of the four CPU settings is called,
    no linear layer changes class, and the HF engine decodes with transformers' `generate`."""
    ctx = _context(monkeypatch, "meta")
    assert spies == []
    assert ctx.device.type == "meta"
    assert next(ctx.model.parameters()).device.type == "meta"
    for model in (ctx.model, ctx.ref_model):
        assert not any(type(m) is linears.RoutedLinear for m in model.modules())
    assert ctx.engine.decode_on(ctx.device) == "generate"


@pytest.fixture
def matmul_calls(monkeypatch):
    """The names of quadrants/cpu/matmul.py's functions as they are called (each still runs)."""
    calls: list[str] = []
    names = ("linear", "routes", "onednn_linear", "linear_grads")
    real = {name: getattr(matmul, name) for name in names}
    for name in real:

        def spy(*args, name=name, **kwargs):
            calls.append(name)
            return real[name](*args, **kwargs)

        monkeypatch.setattr(matmul, name, spy)
    return calls


def _head_forward_backward(device: str) -> None:
    """The fused LM head's forward and backward on 6 rows, H 8, V 11, 2 chunks of 4 rows."""
    hidden = torch.randn(6, 8, device=device, requires_grad=True)  # [N, H]
    weight = torch.randn(11, 8, device=device, requires_grad=True)  # [V, H]
    tokens = torch.zeros(6, dtype=torch.long, device=device)
    logp, entropy = head_logprobs_and_entropy(hidden, weight, tokens, chunk_size=4)
    (logp.sum() + entropy.sum()).backward()
    assert hidden.grad is not None and weight.grad is not None


@pytest.mark.parametrize(
    "device",
    [
        "meta",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
            ],
        ),
    ],
)
def test_off_the_cpu_the_fused_head_calls_nothing_of_the_cpu_package(device, matmul_calls):
    """The fused LM head computes every policy forward's log-probs, on every device. Off the CPU
    its multiplies call nothing in quadrants/cpu/matmul.py. Found on an H200 (2026-11-26): before
    this, 2 tiny training steps on CUDA called `matmul.linear` 144 times (each falling through to
    F.linear). On `meta` the head's multiply helper is called directly, forward and backward (the
    head itself reads the autocast state of its device, which `meta` has none of); on CUDA (the
    H200 run; skipped without a GPU) the whole head."""
    if device == "meta":
        hidden = torch.randn(6, 8, device="meta", requires_grad=True)
        weight = torch.randn(11, 8, device="meta", requires_grad=True)
        out = fused_head._linear(hidden, weight)  # [6, 11]
        out.sum().backward()
        assert out.shape == (6, 11) and hidden.grad is not None
        assert fused_head._linear(out, weight.t()).shape == (6, 8)  # backward's g_z W
    else:
        _head_forward_backward(device)
    assert matmul_calls == []


def test_on_the_cpu_the_fused_head_multiplies_through_the_cpu_package(matmul_calls):
    """The counterpart (so the test above can fail): 2 chunks x (forward + backward's recompute)
    + 2 chunks' g_z W = 6 calls of `matmul.linear`, each asking `routes`."""
    _head_forward_backward("cpu")
    assert matmul_calls.count("linear") == 6


def test_a_run_on_the_cpu_applies_each_setting_once(spies, monkeypatch):
    """The counterpart on the CPU (so the test above can fail): each setting is called once, and
    the engine takes the fast decode."""
    ctx = _context(monkeypatch, "cpu")
    assert sorted(spies) == sorted(
        ["set_cpu_matmul", "route_linears", "route_linears", "retain_freed_memory"]
        + ["hand_grouped_heads_to_sdpa"]
    )  # route_linears: the policy and the reference
    assert ctx.engine.decode_on(ctx.device) == "fast"


def test_tune_for_routes_the_models_and_reports(monkeypatch):
    """On the CPU with the real settings: the random tiny policy's 4 layers x 7 projections + the LM
    head = 29 linear layers routed; the backend is the one asked for; the SDPA switch is set (here in a
    patched environment) unless the user set it; spinning is reported from the environment."""
    monkeypatch.setattr(matmul, "_chosen", "torch")
    monkeypatch.delenv(FORCE_GQA, raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    model, _ = build.load_policy("tiny-random", seed=0)
    tuning = tune_for(torch.device("cpu"), CpuConfig(matmul="torch", retain_freed_mb=0), [model])
    assert tuning is not None
    assert tuning.matmul == "torch" and matmul.cpu_matmul() == "torch"
    assert len(model.model.layers) == 4 and tuning.routed_linears == 29
    assert tuning.retains_freed is False  # retain_freed_mb=0 leaves glibc's thresholds
    assert tuning.grouped_heads is True and os.environ[FORCE_GQA] == "1"
    assert tuning.openmp == "GOMP_SPINCOUNT=1000"
    assert tune_for(torch.device("meta"), CpuConfig(), [nn.Linear(2, 2)]) is None


def test_the_sdpa_switch_leaves_an_explicit_setting_alone():
    environ = {FORCE_GQA: "0"}
    assert hand_grouped_heads_to_sdpa(environ) is False and environ == {FORCE_GQA: "0"}
    environ = {}
    assert hand_grouped_heads_to_sdpa(environ) is True and environ == {FORCE_GQA: "1"}


@pytest.mark.parametrize(
    ("spincount", "environ", "expected"),
    [
        (1000, {}, {"GOMP_SPINCOUNT": "1000"}),
        (0, {}, {"GOMP_SPINCOUNT": "0"}),  # 0 spins: sleep at once, as OMP_WAIT_POLICY=PASSIVE
        (None, {}, {}),  # libgomp's own default
        (1000, {"GOMP_SPINCOUNT": "300000"}, {}),  # the user's setting wins
        (1000, {"OMP_WAIT_POLICY": "PASSIVE"}, {}),
    ],
)
def test_spin_environment(spincount, environ, expected):
    assert spin_environment(spincount, environ) == expected


def test_spin_in_effect_names_the_setting():
    assert spin_in_effect({}) == "libgomp's default (300,000 spins)"
    assert spin_in_effect({"OMP_WAIT_POLICY": "PASSIVE"}) == "OMP_WAIT_POLICY=PASSIVE"


def test_the_hf_engine_decodes_fast_on_the_cpu_only():
    model, tokenizer = build.load_policy("tiny-random", seed=0)
    engine = HFEngine(model, tokenizer)
    assert engine.decode == "auto"
    assert engine.decode_on(torch.device("cpu")) == "fast"
    assert engine.decode_on(torch.device("meta")) == "generate"
    assert HFEngine(model, tokenizer, decode="loop").decode_on(torch.device("meta")) == "loop"
