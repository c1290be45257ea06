"""The rollout identity guard between two bf16 paths of one model: the harness of
tests/unit/rollout/test_identity_guard_bf16.py (the tiny model, default tier), written to run the
same on SmolLM2-135M's real weights (`bf16_pair("smollm2-135m", ...)`).

The stand-in for FSDP2 against vLLM on the CPU: the trainer holds float32 parameters and computes
under bf16 autocast (train.precision=bf16-mixed) with one attention kernel; the engine is a bf16
replica (every parameter and the residual stream in bf16, as a bf16 vLLM engine) with another
kernel, synced by `ReplicaHFEngine.sync_weights` (the weights cast to bf16 per tensor). Several
guards, one per probe seed, watch the same engine: each samples its own probe at start and checks
every push. The trainer then takes `steps` AdamW steps at `lr` on a policy-gradient loss over a
fixed batch of the engine's own samples (advantages +1/-1 by sequence), pushing after each; at the
end one more step whose push is dropped on purpose (the engine keeps its weights), and every guard
must stop at that push's check with `RolloutIdentityError`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from quadrants.config import IdentityCheckConfig
from quadrants.models.loading import load_policy
from quadrants.models.policy import response_logprobs
from quadrants.ops.precision import resolve_precision
from quadrants.rollout.engine import SamplingSettings
from quadrants.rollout.hf import ReplicaHFEngine
from quadrants.rollout.identity_guard import IdentityCheckedEngine, RolloutIdentityError
from quadrants.rollout.weights import copy_weights

CPU = torch.device("cpu")


@dataclass
class GuardRun:
    """What the guards measured: per probe seed, the start-up gap and the tolerance it calibrated,
    and each push's figures; the errors the dropped push raised (one per guard)."""

    startup_gaps: list[float] = field(default_factory=list)
    tolerances: list[float] = field(default_factory=list)
    figures: list[list[dict[str, float]]] = field(default_factory=list)  # [seed][push]
    dropped_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def series(self, key: str) -> list[list[float]]:
        return [[push[key] for push in pushes] for pushes in self.figures]


def bf16_pair(
    name: str, *, trainer_attention: str, engine_attention: str
) -> tuple[torch.nn.Module, ReplicaHFEngine]:
    """(the trainer's float32 policy with `trainer_attention`, a bf16 replica engine with
    `engine_attention` holding the same weights)."""
    model, tokenizer = load_policy(name, attention=trainer_attention)
    replica, _ = load_policy(name, dtype="bfloat16", attention=engine_attention)
    copy_weights(replica, model)  # the same weights (a random model's too), cast to bf16
    assert model.config._attn_implementation == trainer_attention
    assert replica.config._attn_implementation == engine_attention
    return model, ReplicaHFEngine(replica, tokenizer)


def run_guards(
    model: torch.nn.Module,
    engine: ReplicaHFEngine,
    probe_prompts: list[str],
    train_prompts: list[str],
    *,
    seeds: tuple[int, ...] = (0, 1, 2),
    steps: int = 20,
    lr: float = 1e-6,
    top_p: float = 1.0,
    settings: dict | None = None,
    verbose: bool = False,
) -> GuardRun:
    """The guards over `steps` healthy pushes, then one dropped push (module docstring)."""
    started = time.perf_counter()
    precision = resolve_precision("bf16-mixed", CPU)
    guards = [
        IdentityCheckedEngine(
            engine,
            IdentityCheckConfig(seed=seed, **(settings or {})),
            precision,
            chunk_size=64,
            top_p=top_p,
        )
        for seed in seeds
    ]
    run = GuardRun(figures=[[] for _ in seeds])
    for guard in guards:
        guard.start(model, probe_prompts)
        run.startup_gaps.append(guard.startup_gap)
        run.tolerances.append(guard.tolerance)
    batch = engine.generate(train_prompts, SamplingSettings(n=2, max_new_tokens=16, seed=101))
    sequences = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    signs = random.Random(7).choices([1.0, -1.0], k=sequences.shape[0])
    advantages = torch.tensor(signs).unsqueeze(1)  # [B, 1]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    push = engine.sync_weights
    for step in range(steps + 1):
        with precision.autocast(CPU):
            logp, _ = response_logprobs(
                model,
                sequences,
                mask,
                batch.response_ids.shape[1],
                temperature=1.0,
                chunk_size=64,
                with_entropy=False,
            )
        response = batch.response_mask.float()
        loss = -(advantages * logp * response).sum() / response.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dropped = step == steps
        if dropped:
            engine.sync_weights = lambda model: None  # the push that never reaches the engine
        for index, guard in enumerate(guards):
            try:
                if index == 0:
                    guard.sync_weights(model)  # the push and its check, as the step makes them
                else:
                    guard.pushes += 1
                    guard.check(model)  # the same push, seen by another probe
            except RolloutIdentityError as error:
                if not dropped:
                    raise
                run.dropped_errors.append(str(error))
                continue
            run.figures[index].append(guard.figures)
        if verbose:  # a long run (real weights on a CPU) says where it is
            print(f"step {step + 1}/{steps + 1}: {time.perf_counter() - started:.0f} s", flush=True)
    engine.sync_weights = push
    run.seconds = time.perf_counter() - started
    return run
