"""A rollout engine is a unit of extension: this file alone defines one, registers it, composes a run
with `rollout.engine=toy_sampler` through the real Hydra tree and trains two steps on the tiny world.
No other file names the engine: compose-time validation, the layout check, the behaviour-pass rule
and engine construction all ask quadrants/rollout/registry.py.

The toy engine is ancestral sampling from the trainer's own module, one full forward per token (no
KV cache), at the sampling temperature; its behaviour log-probs are log_softmax(logits / T) of the
sampled token. It records no entropy and does not claim the trainer's numerics
(`samples_from_trainer_weights=False`), so the step recomputes old log-probs with the behaviour pass,
and the logged engine-vs-trainer difference measures the toy's log-probs against that recompute.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.models.loading import load_policy
from quadrants.rewards.grader import Grader
from quadrants.rollout import registry
from quadrants.rollout.engine import Rollouts, SamplingSettings, encode_prompts
from quadrants.rollout.registry import EngineKind, register_engine
from quadrants.run.build import build_context
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.train.step import train_step
from tests.vllm.layout import assert_rollouts_layout


class ToySampler:
    """RolloutEngine: sample from `model` token by token, re-running the whole prefix each step."""

    def __init__(self, model: nn.Module, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.tokenizer.padding_side = "left"
        self.calls = 0

    @torch.no_grad()
    def generate(self, prompts, sampling: SamplingSettings) -> Rollouts:
        self.calls += 1
        generator = torch.Generator().manual_seed(sampling.seed or 0)
        enc = encode_prompts(self.tokenizer, prompts)
        prompt_ids = enc["input_ids"].repeat_interleave(sampling.n, dim=0)  # [B, P]
        prompt_mask = enc["attention_mask"].repeat_interleave(sampling.n, dim=0).bool()
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        ids, mask = prompt_ids, prompt_mask
        done = torch.zeros(ids.shape[0], dtype=torch.bool)
        tokens, logps, alive = [], [], []
        was_training = self.model.training
        self.model.eval()
        for _ in range(sampling.max_new_tokens):
            positions = (mask.long().cumsum(-1) - 1).clamp_min(0)  # left padding does not count
            logits = self.model(input_ids=ids, attention_mask=mask.long(), position_ids=positions)
            logp = torch.log_softmax(logits.logits[:, -1].float() / sampling.temperature, dim=-1)
            token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)  # [B]
            live = ~done
            token = torch.where(live, token, pad)
            tokens.append(token)
            logps.append(torch.where(live, logp.gather(-1, token[:, None]).squeeze(-1), 0.0))
            alive.append(live)
            done = done | (live & (token == eos))
            ids, mask = torch.cat([ids, token[:, None]], 1), torch.cat([mask, live[:, None]], 1)
            if done.all():
                break
        self.model.train(was_training)
        response_ids = torch.stack(tokens, 1)  # [B, T]
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=torch.stack(alive, 1),  # generated tokens up to and including EOS
            behaviour_logp=torch.stack(logps, 1),
            texts=self.tokenizer.batch_decode(response_ids, skip_special_tokens=True),
            group_ids=torch.arange(len(prompts)).repeat_interleave(sampling.n),
            finished=done,
        )

    def generate_from_ids(self, prompts, sampling: SamplingSettings) -> Rollouts:
        return self.generate(prompts, sampling)

    def sync_weights(self, model: nn.Module) -> None:
        assert model is self.model  # one process: it samples from the trainer's module itself

    def release_memory(self) -> None:
        pass

    def close(self) -> None:
        pass


class ToyKind(EngineKind):
    name = "toy_sampler"

    def validate(self, cfg, world_size):
        if world_size != 1:
            raise ValueError(f"rollout.engine=toy_sampler runs in one process, not {world_size}")

    def start(self, cfg, model, tokenizer, *, replica, world_size):
        return ToySampler(model, tokenizer)


@pytest.fixture
def toy_engine(monkeypatch):
    # unregistered afterwards
    monkeypatch.setattr(registry.ENGINES, "kinds", dict(registry.ENGINES.kinds))
    register_engine(ToyKind())


def test_a_toy_engine_defined_here_trains_two_steps(toy_engine, base_policy):
    cfg = compose_run_config(
        [
            "rollout.engine=toy_sampler",
            "objective=grpo",
            "seed=1",
            "train.prompts_per_step=8",
            "rollout.group_size=4",
            "train.mini_batch_size=16",
            "train.threads=1",
            "eval.problems=0",
        ]
    )
    assert cfg.rollout.engine == "toy_sampler"
    torch.manual_seed(cfg.seed)
    with Grader(num_workers=1) as grader:
        ctx = build_context(RunPlan.parse(cfg), grader)
        assert isinstance(ctx.engine, ToySampler) and ctx.engine.model is ctx.model
        before = [p.detach().clone() for p in ctx.model.parameters()]
        metrics = [train_step(ctx, step).metrics for step in range(2)]
        change = sum(
            (p.detach() - b).abs().sum().item()
            for p, b in zip(ctx.model.parameters(), before, strict=True)
        )
    assert ctx.engine.calls == 2  # every step's rollouts came from the toy engine
    for m in metrics:
        assert math.isfinite(m[keys.objective("loss")])
        # the toy's log-probs are the trainer's own recompute up to float32 summation order
        assert m[keys.train("engine_logp_abs_diff_max")] < 2e-5
        assert m[keys.train("response_length")] > 0
    assert any(0 < m[keys.train("solve_rate")] < 1 for m in metrics)
    assert change > 0, "parameters did not change"


def test_the_toy_engine_keeps_the_rollouts_layout(base_policy):
    # the contract every engine passes (HF and vLLM in tests/vllm): prompts of different lengths,
    # some responses cut at max_new_tokens, some ending with EOS
    torch.set_num_threads(1)
    model, tokenizer = load_policy("tiny", seed=0)
    engine = ToySampler(model, tokenizer)
    sampling = SamplingSettings(n=3, temperature=1.0, max_new_tokens=12, seed=4)
    rollouts = engine.generate(["1+2=", "17+25-3=", "9*4="], sampling)
    assert_rollouts_layout(
        rollouts,
        num_prompts=3,
        n=3,
        pad_id=tokenizer.pad_token_id,
        eos_id=tokenizer.eos_token_id,
    )
    assert rollouts.finished.any()


def test_the_toy_engine_refuses_several_ranks_at_compose_time(toy_engine):
    from quadrants.run_plan.composition import check_layout

    cfg = compose_run_config(["rollout.engine=toy_sampler"])
    with pytest.raises(ValueError, match="rollout.engine=toy_sampler runs in one process, not 2"):
        check_layout(cfg, 2)


def test_an_unregistered_engine_fails_at_compose_time_naming_the_registered_ones():
    with pytest.raises(
        ValueError, match=r"rollout.engine='toy_sampler' is unknown; choose one of \['hf', 'vllm'\]"
    ):
        compose_run_config(["rollout.engine=toy_sampler"])
