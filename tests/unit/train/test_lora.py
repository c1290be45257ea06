"""`model.lora` (quadrants/models/lora.py): peft's adapters in place on the tiny policy, only they
trained; the KL reference is the same module with its adapters switched off; compose-time refusals;
micro-batching accumulates the unsplit adapter gradient; every objective trains with quadrant
isolation; a run killed after step 1 and resumed equals an uninterrupted 2-step run.

CPU only. What only a GPU can show: the same under bf16-mixed autocast on CUDA (the adapters in
float32, the frozen base's linears in bf16, ops/precision.py `store_parameters`; the CPU's bf16
autocast shows the update unchanged by that storage), and the memory saved."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from quadrants.config import LoraConfig, RunConfig
from quadrants.cpu.linears import RoutedLinear, route_linears
from quadrants.models.loading import load_policy
from quadrants.models.lora import adapters_disabled, has_adapters, trainable_parameters
from quadrants.models.policy import behaviour_pass
from quadrants.objectives.registry import known_objectives
from quadrants.ops.precision import resolve_precision, store_parameters
from quadrants.run.checkpoint import load_latest
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.run_plan.composition import check_lora_ranks
from quadrants.tracking.base import RecordingTracker
from quadrants.train.forwards import reference_logprobs
from tests.unit.train.test_accumulate import PARAMS, backward, context, seeded_batch

ON = LoraConfig(enabled=True, rank=4, alpha=8.0)


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def lora_policy(seed: int = 0, lora: LoraConfig = ON, perturb: bool = True):
    """tiny-random with adapters; `perturb`: A and B drawn (seeded) so that the adapters change the
    function and both get gradient (peft starts B at 0: then A's gradient is 0)."""
    model, tokenizer = load_policy("tiny-random", seed=seed, lora=lora)
    if perturb:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in trainable_parameters(model):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return model, tokenizer


def test_adapters_start_at_the_base_and_only_they_train():
    base, _ = load_policy("tiny-random", seed=0)
    model, _ = lora_policy(perturb=False)
    x = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(x).logits, base(x).logits, rtol=0, atol=0)  # B = 0
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    # rank 4 on the 7 projections of each layer: 4 x (in + out) each. The tiny model's layers:
    # q (h -> h), k, v (h -> kv), o (h -> h), gate, up (h -> i), down (i -> h)
    cfg = base.config
    h, i = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    per_layer = 4 * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h))
    assert sum(p.numel() for p in trainable_parameters(model)) == cfg.num_hidden_layers * per_layer
    # peft wrapped the plain projections; the LM head is not targeted by all-linear, so the fused
    # head still applies. The CPU routing (quadrants.cpu.tune_for, after loading) then swaps the
    # wrapped base layers and the adapters' linears alike, and the adapted output is unchanged
    q = model.model.layers[0].self_attn.q_proj
    assert type(q.base_layer) is torch.nn.Linear and type(model.lm_head) is torch.nn.Linear
    x = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(x).logits
        assert route_linears(model) > 0
        after = model(x).logits
    assert type(q.base_layer) is RoutedLinear and type(q.lora_A["default"]) is RoutedLinear
    assert type(model.lm_head) is RoutedLinear
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-6)
    assert has_adapters(model) and not has_adapters(base)


def test_adapters_disabled_is_the_base_policy():
    base, _ = load_policy("tiny-random", seed=0)
    model, _ = lora_policy()
    x = torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))
    adapted = model(x).logits
    assert (adapted - base(x).logits).abs().max() > 1e-3  # the adapters change the function
    with adapters_disabled(model):
        torch.testing.assert_close(model(x).logits, base(x).logits, rtol=0, atol=0)
    torch.testing.assert_close(model(x).logits, adapted, rtol=0, atol=0)  # back on
    assert all(p.requires_grad for p in trainable_parameters(model))
    with pytest.raises(ValueError, match="no LoRA adapters"):
        with adapters_disabled(base):
            pass


def test_kl_reference_is_the_base_with_the_adapters_off():
    base, _ = load_policy("tiny-random", seed=0)
    model, _ = lora_policy()
    batch = seeded_batch(model)
    ctx = context("grpo", 0, model, kl_coef=0.1)
    ctx.score = dataclasses.replace(ctx.score, reference_from_adapters=True)  # kl_coef > 0, LoRA
    args = (batch.sequences, batch.attention_mask, batch.response_length)
    ref = reference_logprobs(model, None, ctx.forwards, ctx.score, *args)
    want, _ = behaviour_pass(base, *args, temperature=1.0, chunk_size=7, batch_size=6)
    adapted, _ = behaviour_pass(model, *args, temperature=1.0, chunk_size=7, batch_size=6)
    torch.testing.assert_close(ref, want, rtol=0, atol=1e-6)
    assert (ref - adapted).abs().max() > 1e-3
    without_kl = dataclasses.replace(ctx.score, reference_from_adapters=False)  # kl_coef = 0
    assert reference_logprobs(model, None, ctx.forwards, without_kl, *args) is None


def lora_config() -> RunConfig:
    cfg = RunConfig()
    cfg.model.name_or_path = "tiny-random"
    cfg.model.lora = copy.deepcopy(ON)
    return cfg


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("model.lora.target_modules", [], r"model.lora.target_modules=\[\] is not a module"),
        ("model.lora.rank", 0, r"model.lora.rank=0 is out of range"),
        ("model.lora.dropout", 1.0, r"model.lora.dropout=1.0 is out of range"),
    ],
)
def test_compose_time_refusals(key, value, message):
    cfg = lora_config()
    section, _, leaf = key.rpartition(".")
    target = cfg
    for part in section.split("."):
        target = getattr(target, part)
    setattr(target, leaf, value)
    with pytest.raises(ValueError, match=message):
        RunPlan.parse(cfg, files=False)


def test_more_than_one_rank_is_refused():
    cfg = lora_config()
    check_lora_ranks(cfg, 1)
    with pytest.raises(ValueError, match="model.lora.enabled=true with 8 ranks.*one rank per run"):
        check_lora_ranks(cfg, 8)
    cfg.model.lora.enabled = False
    check_lora_ranks(cfg, 8)


def adapter_gradients(objective, model, batch, *, micro=0, tokens=0, keep="all", kl_coef=0.0):
    model = copy.deepcopy(model)  # Clip-Cov's draws: `backward`'s generator, the same each call
    ctx = context(objective, micro, model, keep, kl_coef)
    ctx.update = dataclasses.replace(ctx.update, micro_batch_tokens=tokens)
    loss, _ = backward(ctx, batch)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert all(dict(model.named_parameters())[n].grad is None for n in frozen)
    return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.slow
@pytest.mark.parametrize("objective", known_objectives())
def test_micro_batches_accumulate_the_unsplit_adapter_update(objective):
    """The seeded batch (6 rows, 4 prompt + 5, 3, 5, 2, 4, 5 response tokens) in one call, in
    micro-batches of 2 sequences, and packed by 16 tokens: the adapters' gradients agree to float32
    summation order. Tolerance: the same sums in another order; float32's 1.2e-7 relative rounding
    over the ~10^2 terms of a gradient entry stays below 1e-5 relative, so rtol 1e-4, atol 1e-6 (the
    repository's accumulation tests use the same on the full model), while a wrong normaliser would
    be off by a factor (2 or 3 here)."""
    model, _ = lora_policy()
    batch = seeded_batch(model)
    loss, whole = adapter_gradients(objective, model, batch)
    assert sum(g.abs().sum() for g in whole.values()) > 0
    for split in (dict(micro=2), dict(tokens=16)):
        split_loss, grads = adapter_gradients(objective, model, batch, **split)
        torch.testing.assert_close(split_loss, loss, rtol=0, atol=1e-6)
        for name, grad in whole.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=str(split))


def small(run_dir: Path | None, *, steps: int = 2, objective: str = "grpo") -> RunConfig:
    cfg = RunConfig(seed=3, run_dir=None if run_dir is None else str(run_dir))
    cfg.model.name_or_path = "tiny"  # the warmed-up policy: mixed rewards, so a gradient
    cfg.model.lora = copy.deepcopy(ON)
    cfg.objective.name = objective
    cfg.train.steps, cfg.train.prompts_per_step, cfg.rollout.group_size = steps, 4, 4
    cfg.train.mini_batch_size = 8  # two optimizer steps per step
    cfg.rollout.max_new_tokens = cfg.eval.max_new_tokens = 32  # 6 or 16: every answer unfinished
    cfg.train.threads, cfg.eval.problems, cfg.tracking.log_samples_every = 1, 0, 0
    cfg.train.lr = 1e-2  # a visible change in two steps
    cfg.checkpoint.every = 1
    return cfg


def saved_state(run_dir: Path, out: Path) -> dict:
    """The newest checkpoint's model and optimizer states as one torch.save dict."""
    checkpoint = load_latest(run_dir)
    dcp_to_torch_save(checkpoint.path / "model_optim", out)
    return torch.load(out, weights_only=False)


@pytest.mark.subprocess
@pytest.mark.parametrize("objective", known_objectives())
def test_every_objective_trains_the_adapters_only_with_quadrant_isolation(objective, tmp_path):
    """One step, quadrant.keep=PHR, a KL term against the adapters-off base: finite metrics, a KL
    logged, the base weights untouched, the adapters moved (B left 0)."""
    cfg = small(tmp_path, steps=1, objective=objective)
    cfg.quadrant.keep = "PHR"
    cfg.objective.kl_coef = 0.05
    cfg.objective.params = PARAMS.get(objective, {})
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    metrics = tracker.history[-1][1]
    assert all(v == v for v in metrics.values())  # no NaN
    assert any("kl" in k for k in metrics), sorted(metrics)
    state = saved_state(tmp_path, tmp_path / "state.pt")["model"]
    assert_base_unchanged(state)
    assert any(state[n].abs().max() > 0 for n in state if ".lora_B." in n)


def assert_base_unchanged(state: dict) -> None:
    """A LoRA checkpoint's model part is the adapters alone (run/distributed_checkpoint.py: the
    frozen base is read from model.name_or_path again on resume), so the base cannot drift through
    a save and resume; that it does not move in training is test_adapters_start_at_the_base_and_
    only_they_train's."""
    assert state and all(".lora_" in name for name in state), sorted(state)[:5]


@pytest.mark.subprocess
def test_a_lora_checkpoint_holds_the_adapters_not_the_model(tmp_path: Path):
    """The checkpoint's tensors are the adapters': rank 4 on every linear of the tiny model,
    `adapters` float32 elements stored once in the model part and twice (AdamW's two moments) in
    the optimizer part, plus one float32 step counter per adapter tensor; no base weight (the tied
    LM head included). On disk it is then far smaller than the model's own float32 weights."""
    import math

    from torch.distributed.checkpoint import FileSystemReader

    cfg = small(tmp_path, steps=1)
    run_training(RunPlan.parse(cfg), RecordingTracker())
    files = load_latest(tmp_path).path / "model_optim"
    model, _ = lora_policy(perturb=False)
    trainable = trainable_parameters(model)
    adapters = sum(p.numel() for p in trainable)
    everything = sum(p.numel() for p in model.parameters())
    stored = {"model": 0, "optim": 0}
    for key, entry in FileSystemReader(str(files)).read_metadata().state_dict_metadata.items():
        if hasattr(entry, "size"):  # a tensor (not a pickled hyper-parameter)
            stored[key.split(".")[0]] += math.prod(entry.size) * entry.properties.dtype.itemsize
    assert stored["model"] == 4 * adapters
    assert stored["optim"] == 2 * 4 * adapters + 4 * len(trainable)
    on_disk = sum(f.stat().st_size for f in files.rglob("*") if f.is_file())
    assert adapters < 0.1 * everything
    assert on_disk < 4 * everything / 2  # under half of the model's float32 weights alone


@pytest.mark.subprocess
def test_resume_after_step_1_equals_an_uninterrupted_run(tmp_path: Path):
    """A run killed after step 1 (its checkpoint written, steps=1 standing in for the kill) and
    resumed for step 2 ends with the same adapters, base and AdamW states as a 2-step run, and logs
    the same step-2 metrics. The base weights are the tiny policy's, unchanged."""
    tracker = RecordingTracker()
    run_training(RunPlan.parse(small(tmp_path / "whole")), tracker)
    run_training(RunPlan.parse(small(tmp_path / "cut", steps=1)), RecordingTracker())
    resumed_tracker = RecordingTracker()
    result = run_training(RunPlan.parse(small(tmp_path / "cut")), resumed_tracker)
    assert result.resumed_from == 1
    whole = saved_state(tmp_path / "whole", tmp_path / "whole.pt")
    cut = saved_state(tmp_path / "cut", tmp_path / "cut.pt")
    assert whole["model"].keys() == cut["model"].keys()
    for name, value in whole["model"].items():
        torch.testing.assert_close(cut["model"][name], value, rtol=0, atol=0, msg=name)
    adam = whole["optim"]["state"]
    assert adam and all(".lora_" in name for name in adam)  # only adapters are stepped
    for name, state in adam.items():
        for key, value in state.items():
            torch.testing.assert_close(cut["optim"]["state"][name][key], value, rtol=0, atol=0)
    assert_base_unchanged(whole["model"])
    assert_base_unchanged(cut["model"])
    moved = [n for n in whole["model"] if ".lora_B." in n and whole["model"][n].abs().max() > 0]
    assert moved  # B left 0: the adapters trained
    whole_2, resumed_2 = dict(tracker.history)[2], dict(resumed_tracker.history)[2]
    untimed = [k for k in whole_2 if not k.startswith(("time/", "perf/", "system/"))]
    assert "train/reward_mean" in untimed and "train/grad_norm" in untimed
    assert {k: resumed_2[k] for k in untimed} == {k: whole_2[k] for k in untimed}


@pytest.mark.slow
def test_hydra_composes_model_lora_and_refuses_before_anything_is_queued():
    """The keys compose from the command line (Hydra's structured config), and the refusals run
    in preflight: rollout=vllm for every run, launcher=slurm_ddp (8 ranks) for the multi-rank one."""
    from quadrants.launch.hydra_setup import compose_run_config, preflight

    cfg = compose_run_config(
        [
            "model.lora.enabled=true",
            "model.lora.rank=8",
            "model.lora.target_modules=[q_proj,v_proj]",
        ],
        files=False,
    )
    assert cfg.model.lora.enabled and cfg.model.lora.rank == 8
    assert list(cfg.model.lora.target_modules) == ["q_proj", "v_proj"]
    assert cfg.model.lora.alpha == 32.0 and cfg.model.lora.dropout == 0.0  # the defaults
    # vLLM takes a LoRA policy as merged weights (rollout/weights.py `merged_lora_weights`), in
    # float32: merged into bf16 the update is rounded away
    # (submitted to a cluster: launched here, a machine without vLLM refuses rollout=vllm first)
    cluster = ["-m", "launcher=slurm", "tracking.sqlite_on_slurm=true"]
    with pytest.raises(
        ValueError, match=r"rollout.vllm.dtype='bfloat16'.*rollout.vllm.dtype=float32"
    ):
        preflight([*cluster, "model.lora.enabled=true", "rollout=vllm"])
    lora_vllm = ["model.lora.enabled=true", "rollout=vllm", "rollout.vllm.dtype=float32"]
    assert preflight([*cluster, *lora_vllm]) == 1
    with pytest.raises(ValueError, match="with 8 ranks"):
        preflight(
            ["-m", "model.lora.enabled=true", "launcher=slurm_ddp", "tracking.sqlite_on_slurm=true"]
        )


def test_activation_checkpointing_gives_the_same_adapter_gradients():
    """train.activation_checkpointing (transformers' non-reentrant checkpointing, turned on by
    `shard_model`): the embeddings are frozen under LoRA, so a reentrant checkpoint would see no
    input that requires grad and drop the adapters' gradients; the non-reentrant one keeps them."""
    from quadrants.distributed.collectives import DistEnv, shard_model

    model, _ = lora_policy()
    batch = seeded_batch(model)
    _, plain = adapter_gradients("grpo", model, batch)
    checkpointed = shard_model(copy.deepcopy(model), DistEnv(), activation_checkpointing=True)
    _, grads = adapter_gradients("grpo", checkpointed, batch)
    assert sum(g.abs().sum() for g in plain.values()) > 0
    for name, grad in plain.items():  # the same arithmetic, recomputed
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.subprocess
def test_evaluation_loads_a_lora_checkpoint(tmp_path: Path):
    """`quadrants.evaluate RUN_DIR` on a LoRA run: the adapters are rebuilt from the run's
    config.yaml (models/lora.py through eval/target.py) and the checkpoint's values loaded."""
    import dataclasses

    import yaml

    from quadrants.eval.target import load_target_policy, resolve_target

    cfg = small(tmp_path / "run", steps=1)
    run_training(RunPlan.parse(cfg), RecordingTracker())
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg)))
    saved = saved_state(tmp_path / "run", tmp_path / "state.pt")["model"]
    target = resolve_target(str(tmp_path / "run"))
    model, _ = load_target_policy(target, dtype="float32")
    assert has_adapters(model)
    state = model.state_dict()
    assert set(saved) < set(state)  # the adapters; the base is read from the run's model source
    base, _ = load_policy("tiny", lora=ON)
    for name, value in base.state_dict().items():
        if ".lora_" not in name:
            torch.testing.assert_close(state[name], value, rtol=0, atol=0, msg=name)
    for name, value in saved.items():
        torch.testing.assert_close(state[name], value, rtol=0, atol=0, msg=name)
    assert any(saved[n].abs().max() > 0 for n in saved if ".lora_B." in n)


@pytest.mark.slow
def test_bf16_mixed_stores_the_base_in_bf16_with_the_same_update():
    """Under bf16-mixed the frozen base linears are stored in bf16, the adapters, norms and the
    (tied) embedding in float32 (ops/precision.py `store_parameters`, as run/build.py
    `prepare_policy` stores the policy). tiny-random: 4 layers x 7 projections (+ q, k, v biases:
    10 tensors) = 40 bf16 tensors; the embedding (tied to the LM head: it sets the residual
    stream's dtype) and 2 x 4 + 1 norms stay float32. The loss and the adapters' gradients are
    bit-identical to the update over the float32-stored base: autocast casts F.linear's weight and
    bias to bf16 (aten/src/ATen/autocast_mode.h), which are the values stored, and every other
    operand keeps its dtype. A float32 base stored in bf16 by mistake elsewhere (the embedding, a
    norm) would change the float32 residual stream and fail the equality."""
    model, _ = lora_policy()
    batch = seeded_batch(model)
    mixed = resolve_precision("bf16-mixed", torch.device("cpu"))
    stored = store_parameters(copy.deepcopy(model), mixed)
    frozen = {n: p.dtype for n, p in stored.named_parameters() if not p.requires_grad}
    assert sorted(set(frozen.values()), key=str) == [torch.bfloat16, torch.float32]
    assert sum(d == torch.bfloat16 for d in frozen.values()) == 4 * 10
    assert {n for n, d in frozen.items() if d == torch.float32} == {
        "model.embed_tokens.weight",
        "model.norm.weight",
        *(
            f"model.layers.{i}.{k}_layernorm.weight"
            for i in range(4)
            for k in ("input", "post_attention")
        ),
    }
    assert all(p.dtype == torch.float32 for p in trainable_parameters(stored))
    for name, p in stored.named_parameters():  # the stored values: bf16(W), as autocast casts
        expected = dict(model.named_parameters())[name]
        assert torch.equal(p, expected.to(p.dtype)), name

    def update(policy):
        policy = copy.deepcopy(policy)
        torch.manual_seed(0)
        ctx = context("grpo", 0, policy)
        ctx.forwards = dataclasses.replace(ctx.forwards, precision=mixed)
        loss, _ = backward(ctx, batch)
        return loss, {n: p.grad for n, p in policy.named_parameters() if p.requires_grad}

    loss_fp32_base, grads_fp32_base = update(model)
    loss_bf16_base, grads_bf16_base = update(stored)
    assert torch.equal(loss_bf16_base, loss_fp32_base)
    assert sum(g.abs().sum() for g in grads_fp32_base.values()) > 0
    for name, grad in grads_fp32_base.items():
        assert grads_bf16_base[name].dtype == torch.float32
        assert torch.equal(grads_bf16_base[name], grad), name


def test_fp32_and_pure_bf16_store_the_lora_policy_whole():
    """fp32: every parameter float32; pure bf16: every parameter bf16 (adapters included), as
    before: only a mixed precision splits the storage."""
    model, _ = lora_policy(perturb=False)
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        stored = store_parameters(
            copy.deepcopy(model), resolve_precision(name, torch.device("cpu"))
        )
        assert {p.dtype for p in stored.parameters()} == {dtype}, name


def test_the_hf_engine_samples_from_a_policy_stored_in_two_dtypes():
    """The HF engine samples from the trainer's module (one process): with the base in bf16 among
    float32 adapters, F.linear refuses float32 activations against bf16 weights, so the engine
    decodes under bf16 autocast (ops/precision.py `stored_mixed_autocast`); the tokens and
    log-probs equal those of the float32-stored policy decoded under the same autocast."""
    from quadrants.rollout.engine import SamplingSettings
    from quadrants.rollout.hf import HFEngine

    model, tokenizer = lora_policy()
    stored = store_parameters(
        copy.deepcopy(model), resolve_precision("bf16-mixed", torch.device("cpu"))
    )
    sampling = SamplingSettings(n=2, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=5)
    got = HFEngine(stored, tokenizer, decode="loop").generate(["1+1=", "2+2="], sampling)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = HFEngine(model, tokenizer, decode="loop").generate(["1+1=", "2+2="], sampling)
    assert torch.equal(got.response_ids, want.response_ids)
    assert torch.equal(got.behaviour_logp, want.behaviour_logp)
    assert torch.isfinite(got.behaviour_logp).all()


@pytest.mark.subprocess
def test_a_bf16_mixed_lora_run_places_the_base_in_bf16_and_trains(tmp_path: Path):
    """run/build.py `prepare_policy` under bf16-mixed stores the LoRA policy as
    `store_parameters` does (base linears bf16, adapters float32), and one step of the tiny run
    trains end to end on it: the HF engine samples from the module in two dtypes, the KL
    reference is the bf16 base with the adapters off, the checkpoint holds the float32 adapters
    alone and they moved. The CPU's bf16 autocast stands in for CUDA's."""
    from quadrants.distributed.collectives import DistEnv
    from quadrants.run.build import prepare_policy

    cfg = small(tmp_path, steps=1)
    cfg.train.precision = "bf16-mixed"
    cfg.objective.kl_coef = 0.05
    model, tokenizer = load_policy("tiny-random", lora=cfg.model.lora)
    placed, _, engine = prepare_policy(
        RunPlan.parse(cfg), model, tokenizer, None, DistEnv(), torch.device("cpu")
    )
    engine.close()
    frozen = {p.dtype for p in placed.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16, torch.float32}  # linears bf16; embedding, norms float32
    assert {p.dtype for p in trainable_parameters(placed)} == {torch.float32}
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    metrics = tracker.history[-1][1]
    assert all(v == v for v in metrics.values())  # no NaN
    state = saved_state(tmp_path, tmp_path / "state.pt")["model"]
    assert_base_unchanged(state)
    assert all(t.dtype == torch.float32 for t in state.values())
    assert any(state[n].abs().max() > 0 for n in state if ".lora_B." in n)
