"""quadrants/run_plan/parse.py: a configuration is parsed once into a frozen plan that owns its copy,
hands on what it parsed, checks the data files once, and refuses what no run may start from."""

from __future__ import annotations

import dataclasses

import pytest

from quadrants.config import RunConfig
from quadrants.objectives.registry import SIGNALS, ObjectiveSpec, get_objective, known_objectives
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan, parse


def _cfg() -> RunConfig:
    cfg = RunConfig(seed=3)
    cfg.model.name_or_path = "tiny-random"
    cfg.quadrant.keep = "PHR"
    cfg.train.attention_layout = "packed"
    cfg.train.forward_tokens = 512
    return cfg


def test_the_plan_hands_on_what_it_parsed():
    cfg = _cfg()
    plan = RunPlan.parse(cfg, files=False)
    # the quadrant section parsed by its owner, once
    assert plan.quadrant_settings == QuadrantSettings.from_config(cfg.quadrant)
    assert plan.loss.quadrant is plan.quadrant_settings  # the loss holds the same settings
    # the objective resolved with the registry's defaults (dapo: clip_high 0.28 by default)
    assert plan.objective_spec is get_objective(cfg.objective.name)
    assert plan.objective_params["clip_high"] == pytest.approx(0.28)
    # the forwards' settings: the one reading of train.attention_layout and train.forward_tokens
    assert plan.forward.layout == "packed" and plan.forward.packed
    assert plan.forward.forward_tokens == 512
    assert plan.forward.temperature == cfg.rollout.temperature
    # the sections, read-only views of the plan's own copy
    assert plan.train.forward_tokens == 512 and plan.seed == 3
    assert plan.world_size == 1 and plan.values_checked and not plan.data_checked


def test_the_plan_owns_its_copy_and_is_frozen():
    cfg = _cfg()
    plan = RunPlan.parse(cfg, files=False)
    cfg.train.lr = 0.5  # the caller's config changes afterwards ...
    cfg.quadrant.keep = "NLR"
    assert plan.train.lr != 0.5  # ... the plan does not
    assert [q.value for q in plan.quadrant_settings.keep] == ["PHR"]
    assert plan.quadrant.keep == "PHR"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.world_size = 2  # type: ignore[misc]


def test_data_files_are_checked_once(monkeypatch):
    calls = []
    monkeypatch.setattr(parse, "check_data_files", lambda cfg: calls.append(cfg.seed))
    plan = RunPlan.parse(_cfg(), files=False)
    assert calls == []
    checked = plan.with_data_files()
    assert calls == [3] and checked.data_checked
    assert checked.with_data_files() is checked  # a second ask checks nothing
    assert calls == [3]
    RunPlan.parse(_cfg())  # files=True: checked as it is parsed
    assert calls == [3, 3]


def test_the_ranks_are_checked_when_they_change():
    cfg = _cfg()
    cfg.train.prompts_per_step, cfg.rollout.group_size, cfg.train.mini_batch_size = 4, 4, 8
    plan = RunPlan.parse(cfg, files=False)
    assert plan.for_ranks(1) is plan
    # 4 prompts deal to 2 ranks (2 each), mini-batches of 8 split into 4 rows per rank
    assert plan.for_ranks(2).world_size == 2
    # 4 prompts do not deal evenly to 3 ranks
    with pytest.raises(ValueError, match="does not deal evenly to 3 ranks"):
        plan.for_ranks(3)
    with pytest.raises(ValueError, match="does not deal evenly to 3 ranks"):
        RunPlan.parse(cfg, files=False, world_size=3)


def test_an_unchecked_plan_starts_no_run():
    cfg = _cfg()
    cfg.objective.name = "arca"  # refused without LoRA by the checks, taken by `unchecked`
    with pytest.raises(ValueError, match="model.lora.enabled=true"):
        RunPlan.parse(cfg, files=False)
    plan = RunPlan.unchecked(cfg)
    assert plan.objective_spec.needs == ("adapter_residual",)
    with pytest.raises(ValueError, match=r"needs a checked plan: parse the configuration"):
        run_training(plan)


def test_objectives_declare_the_signals_they_need():
    needing = {name: get_objective(name).needs for name in known_objectives()}
    # ARCA is the one objective whose credit is the LoRA adapter's residual
    assert {name for name, needs in needing.items() if needs} == {"arca"}
    assert needing["arca"] == ("adapter_residual",)
    assert SIGNALS["adapter_residual"] == "model.lora.enabled=true"
    with pytest.raises(ValueError, match=r"needs unknown signal\(s\) \['attention'\]"):
        ObjectiveSpec("x", get_objective("grpo").fn, needs=("attention",))
