"""Device placement (quadrants/device.py), checked on a CPU-only machine.

Real CUDA could not be run here (no GPU, CPU-only torch build), so these tests check the two things
a CPU can check:

1. Device consistency of the math. Two harnesses:
   - `meta` inputs: every op the objectives use runs on the `meta` device (shapes, no data), and
     the outputs must be on `meta`. A helper that creates a tensor without `device=` makes a CPU
     tensor, and meeting a meta tensor raises "Tensor on device meta is not on the expected device
     cpu!" (or "expected to be in the same device"), exactly as it would meet a CUDA tensor.
     Not supported on meta (data-dependent, need values): `torch.unique` (make_token_batch's group
     ids, constant_reward_groups), `.item()` (clip_cov and kl_cov count their top-k tokens with it;
     telemetry returns floats).
   - default device `meta`, CPU inputs: the mirror image covering what meta cannot run. Inside
     `with torch.device("meta")` a tensor created without `device=` lands on meta and the first op
     meeting the CPU inputs raises; code that follows its inputs' device runs on real data. This
     covers make_token_batch, clip_cov, kl_cov, telemetry and the step's rollout metrics.
2. The device choice: names validated at compose time, `cuda` failing at start on this machine with
   a message saying what to do, `auto` falling back to the CPU, and the CPU path moving nothing.
"""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch

from quadrants.config import RunConfig
from quadrants.device import model_device, resolve_device
from quadrants.distributed.collectives import init_distributed, pick_backend
from quadrants.objectives.batch import PolicyOutput, TokenBatch, make_token_batch
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import known_objectives, resolve_objective
from quadrants.ops.entropy import logprobs_and_entropy
from quadrants.ops.mismatch import is_weight_stats, logp_abs_diff, truncated_is_weights
from quadrants.ops.quadrants import Quadrant, QuadrantMasks, QuadrantSettings
from quadrants.rewards.grader import Outcome
from quadrants.rollout.engine import Rollouts, rollouts_to
from quadrants.run_plan import RunPlan
from quadrants.train.telemetry import quadrant_telemetry, rollout_metrics
from quadrants.train.update import mean_metrics

META = torch.device("meta")
CPU = torch.device("cpu")
NO_CUDA = not torch.cuda.is_available()
# objectives that need values on the meta device: top-k counts via .item() (covered by harness 2)
NEEDS_VALUES_ON_META = {"clip_cov", "kl_cov", "ktae"}

# 4 sequences in 2 groups, 3 response tokens each; the last token of sequence 3 is padding
B, T = 4, 3
MASK = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)


def batch_inputs(rule: str = "group_mean", value: float | None = None) -> dict:
    """make_token_batch's arguments, CPU tensors (built outside any harness)."""
    entropy = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.7, 0.2], [1.2, 0.4, 0.6], [0.8, 0.05, 0.0]])
    return dict(
        sequences=torch.arange(B * (T + 1)).view(B, T + 1),
        attention_mask=torch.cat([torch.ones(B, 1, dtype=torch.bool), MASK], 1),
        response_mask=MASK,
        old_logp=torch.full((B, T), -1.0) * MASK,
        entropy=entropy * MASK,
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        quadrant=QuadrantSettings(threshold=rule, threshold_value=value),  # type: ignore[arg-type]
        ref_logp=torch.full((B, T), -1.1) * MASK,
    )


def cpu_batch(rule: str = "group_mean", value: float | None = None) -> TokenBatch:
    return make_token_batch(**batch_inputs(rule, value))


def batch_to(batch: TokenBatch, device: torch.device) -> TokenBatch:
    moved = {}
    for f in fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor):
            moved[f.name] = value.to(device)
        elif isinstance(value, QuadrantMasks):
            names = ("PHR", "PLR", "NHR", "NLR", "threshold")
            moved[f.name] = QuadrantMasks(**{k: getattr(value, k).to(device) for k in names})
    return replace(batch, **moved)


def policy_on(device: torch.device, with_entropy: bool) -> PolicyOutput:
    logp = torch.full((B, T), -0.9, device=device, requires_grad=True)
    entropy = torch.full((B, T), 0.5, device=device, requires_grad=True) if with_entropy else None
    return PolicyOutput(logp, entropy)


SETTINGS = [
    LossSettings(),
    LossSettings(
        quadrant=QuadrantSettings(keep=(Quadrant.PHR, Quadrant.NLR), denominator="kept_tokens"),
        loss_agg="seq-mean-token-sum-norm",
        kl_coef=0.1,
        kl_estimator="k3",
    ),
]


# --- harness 1: every input on meta --------------------------------------------------------------


@pytest.mark.parametrize("settings", SETTINGS, ids=["plain", "quadrant_kl"])
@pytest.mark.parametrize("name", sorted(set(known_objectives()) - NEEDS_VALUES_ON_META))
def test_objective_on_meta_inputs_stays_on_meta(name, settings):
    spec, params = resolve_objective(name, {})
    batch = batch_to(cpu_batch(), META)
    is_weights = torch.ones(B, T, device=META)
    loss, metrics = compute_loss(
        spec,
        params,
        batch,
        policy_on(META, spec.wants_entropy(params)),
        settings,
        is_weights=is_weights,
    )
    loss.backward()
    assert loss.device == META
    assert {k: v.device for k, v in metrics.items()} == {k: META for k in metrics}


@pytest.mark.parametrize("name", sorted(NEEDS_VALUES_ON_META))
def test_objectives_that_need_values_say_so_on_meta(name):
    """clip_cov and kl_cov count their selection with .item(), ktae its groups and token ids: the
    one meta limitation, not a device mismatch (harness 2 runs them fully)."""
    spec, params = resolve_objective(
        name, {"fraction": 0.2} if name in ("clip_cov", "kl_cov") else {}
    )
    # .item() (clip_cov, kl_cov); torch.unique has no meta kernel (ktae)
    draws = torch.Generator()  # Clip-Cov's: it fails at its count first
    with pytest.raises(
        (RuntimeError, NotImplementedError), match=r"cannot be called on meta tensors|Meta tensors"
    ):
        compute_loss(
            spec, params, batch_to(cpu_batch(), META), policy_on(META, False), LossSettings(),
            generator=draws,
        )  # fmt: skip


def test_ops_on_meta_inputs_stay_on_meta():
    logits = torch.zeros(B, T, 11, device=META)
    targets = torch.zeros(B, T, dtype=torch.long, device=META)
    logp, entropy = logprobs_and_entropy(logits, targets, 0.7, 2, with_entropy=True)
    old = torch.zeros(B, T, device=META)
    mask = MASK.to(META)
    weights = truncated_is_weights(old, old, mask, level="sequence", cap=2.0)
    outputs = [
        logp,
        entropy,
        *logp_abs_diff(old, old, mask),
        weights,
        *is_weight_stats(weights, mask, cap=2.0),
        truncated_is_weights(old, old, mask, level="token", cap=2.0),
    ]
    assert [o.device for o in outputs] == [META] * len(outputs)


def test_rollouts_move_to_meta_and_stay_put_on_cpu():
    rollouts = small_rollouts()
    moved = rollouts_to(rollouts, META)
    tensors = [
        f.name for f in fields(Rollouts) if isinstance(getattr(rollouts, f.name), torch.Tensor)
    ]
    assert len(tensors) == 7
    assert all(getattr(moved, n).device == META for n in tensors) and moved.texts == rollouts.texts
    same = rollouts_to(rollouts, CPU)  # the CPU path copies nothing: the very same tensors
    assert all(getattr(same, n) is getattr(rollouts, n) for n in tensors)


# --- harness 2: default device meta, CPU inputs ---------------------------------------------------


def test_harness_catches_a_tensor_made_without_device():
    """The control: inside the harness a device-less torch.zeros lands on meta and meeting a CPU
    tensor raises (the bug this file looks for); the device-aware form runs."""
    values = torch.ones(3)
    with torch.device("meta"):
        with pytest.raises(RuntimeError, match="device"):
            torch.zeros(3) + values
        assert (torch.zeros(3, device=values.device) + values).device == CPU


def small_rollouts() -> Rollouts:
    return Rollouts(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.bool),
        response_ids=torch.ones(B, T, dtype=torch.long),
        response_mask=MASK,
        behaviour_logp=torch.full((B, T), -1.05) * MASK,
        texts=["a", "b", "c", "d"],
        group_ids=torch.tensor([0, 0, 1, 1]),
        finished=torch.tensor([True, True, False, True]),
    )


@pytest.mark.parametrize(
    "rule,value", [("group_mean", None), ("batch_quantile", 0.5), ("fixed", 0.4)]
)
def test_batch_and_telemetry_make_no_device_less_tensors(rule, value):
    dlogp = torch.full((B, T), 0.25) * MASK
    reference = quadrant_telemetry(cpu_batch(rule, value), dlogp)
    inputs, rollouts = batch_inputs(rule, value), small_rollouts()
    outcomes = [Outcome.correct, Outcome.wrong, Outcome.correct, Outcome.correct]
    with torch.device("meta"):
        batch = make_token_batch(**inputs)
        assert batch.advantages.device == CPU and batch.quadrants.PHR.device == CPU
        telemetry = quadrant_telemetry(batch, dlogp)
        metrics = rollout_metrics(rollouts, batch.rewards, outcomes, batch)
    assert telemetry == reference  # same floats as outside the harness
    # group 0 = one of two correct, group 1 = both correct: prompt_solve_rate 2/2, all-correct 1/2
    assert (
        metrics["train/prompt_solve_rate"] == 1.0
        and metrics["train/groups_all_correct_frac"] == 0.5
    )


@pytest.mark.parametrize("settings", SETTINGS, ids=["plain", "quadrant_kl"])
@pytest.mark.parametrize("name", known_objectives())
def test_every_objective_makes_no_device_less_tensors(name, settings):
    spec, params = resolve_objective(
        name, {"fraction": 0.2} if name in ("clip_cov", "kl_cov") else {}
    )
    batch, policy, is_weights = (
        cpu_batch(),
        policy_on(CPU, spec.wants_entropy(params)),
        torch.ones(B, T),
    )
    draws = torch.Generator()  # Clip-Cov's, on the batch's device (made before the meta default)
    with torch.device("meta"):
        loss, metrics = compute_loss(
            spec, params, batch, policy, settings, is_weights=is_weights, generator=draws
        )
        loss.backward()
        reduced = mean_metrics([metrics, metrics])
    assert loss.device == CPU and policy.logp.grad is not None and policy.logp.grad.device == CPU
    assert all(isinstance(v, float) for v in reduced.values())


# --- the device choice ------------------------------------------------------------------------------


def test_resolve_device_rules():
    assert resolve_device("auto", 3, cuda_available=True, visible=4) == torch.device("cuda", 3)
    assert resolve_device("auto", 3, cuda_available=False) == CPU
    assert resolve_device("cpu", 1, cuda_available=True) == CPU
    assert resolve_device("cuda", 1, cuda_available=True, visible=2) == torch.device("cuda", 1)
    assert resolve_device("cuda", 1, cuda_available=True, visible=1) == torch.device("cuda", 0)
    assert pick_backend("auto", cuda=True) == "nccl" and pick_backend("auto", cuda=False) == "gloo"
    with pytest.raises(ValueError, match="distributed.backend=nccl moves CUDA tensors only"):
        pick_backend("nccl", cuda=False)


def test_unknown_device_fails_at_compose_time():
    cfg = RunConfig()
    cfg.train.device = "gpu"
    with pytest.raises(
        ValueError, match=r"train.device='gpu' is unknown; choose one of \['auto', 'cpu', 'cuda'\]"
    ):
        RunPlan.parse(cfg)
    cfg.train.device = "cpu"
    cfg.distributed.backend = "nccl"
    with pytest.raises(
        ValueError, match="distributed.backend=nccl moves CUDA tensors only, but train.device=cpu"
    ):
        RunPlan.parse(cfg)


@pytest.mark.skipif(not NO_CUDA, reason="checks the failure on a machine without CUDA")
def test_cuda_without_cuda_fails_at_start():
    """On this machine: a plain run and a torchrun rank both stop before loading anything or
    starting a process group."""
    assert resolve_device("auto") == CPU
    message = r"train.device=cuda but no usable CUDA device.*>= 580.65.06.*set train.device=cpu"
    with pytest.raises(RuntimeError, match=message):
        resolve_device("cuda")
    cfg = RunConfig()
    cfg.train.device = "cuda"
    RunPlan.parse(cfg)  # a name check only: a login node submitting GPU jobs has no GPU itself
    from quadrants.run.build import build_context

    with pytest.raises(RuntimeError, match=message):
        build_context(RunPlan.parse(cfg), grader=None)  # type: ignore[arg-type]  # fails before the grader is used
    torchrun = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }
    with pytest.raises(RuntimeError, match=message):
        init_distributed("auto", environ=torchrun, device="cuda")
    assert not torch.distributed.is_initialized()


def test_model_device_reads_the_first_parameter():
    assert model_device(torch.nn.Linear(2, 2, device=META)) == META
    assert model_device(torch.nn.ReLU()) == CPU
