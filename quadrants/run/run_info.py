"""What a run says about itself in the tracker: tags for filtering (given to the tracker when it is
made: tracking/setup.py `make_tracker`) and a curated set of flat params, from its plan."""

from __future__ import annotations

from typing import Any

from quadrants.config import QuadrantConfig
from quadrants.ops.quadrants import Quadrant, is_random, parse_match
from quadrants.run_plan import RunPlan


def quadrant_tag(section: QuadrantConfig) -> str:
    """The arm: "PHR", "PHR+NHR", "all"; the random control as "random:<match>" with ":sign" and
    ":ht" when `quadrant.match_sign` and `quadrant.reweight=ht` are on ("random:PHR:sign"), then
    how it is matched when that is not the default per-mini-batch count: ":row" or ":nominal"
    (`quadrant.within`), ":entropy" (`quadrant.stratify`), ":f0.5" (`quadrant.match_fraction`),
    so that every design of the control is its own arm in the tables."""
    if is_random(section.keep):
        parts = ["random"]
        if section.match is not None:
            parts.append("+".join(q.value for q in parse_match(section.match)))
        parts += ["sign"] if section.match_sign else []
        parts += ["ht"] if section.reweight == "ht" else []
        parts += [section.within] if section.within != "minibatch" else []
        parts += [section.stratify] if section.stratify != "none" else []
        if section.match_fraction is not None:
            parts.append(f"f{section.match_fraction:g}")
        return ":".join(parts)
    keep = section.keep
    names = [keep] if isinstance(keep, str) else list(keep)
    return "+".join(Quadrant.parse(n).value if str(n).lower() != "all" else "all" for n in names)


def run_tags(plan: RunPlan) -> dict[str, str]:
    """The tags every run carries, for filtering in the MLflow UI and in analysis/."""
    return {
        "quadrants.study": plan.study,
        "quadrants.sweep_id": plan.sweep_id,
        "quadrant": quadrant_tag(plan.quadrant),
        "objective": plan.objective.name,
        "seed": str(plan.seed),
        "model": plan.model.name_or_path,
        "task": plan.task.name,
        "reward": plan.reward.name,  # the reward trained on (verifier, or a confound)
    }


def flat_params(plan: RunPlan) -> dict[str, Any]:
    """A curated set of flat params (the full resolved config goes in as an artifact)."""
    params: dict[str, Any] = {
        "objective": plan.objective.name,
        "loss_agg": plan.objective.loss_agg,
        "kl_coef": plan.objective.kl_coef,
        "quadrant.keep": quadrant_tag(plan.quadrant),
        "quadrant.threshold": plan.quadrant.threshold,
        "quadrant.threshold_value": plan.quadrant.threshold_value,
        "quadrant.denominator": plan.quadrant.denominator,
        "model": plan.model.name_or_path,
        "task": plan.task.name,
        "seed": plan.seed,
        "lr": plan.train.lr,
        "steps": plan.train.steps,
        "prompts_per_step": plan.train.prompts_per_step,
        "group_size": plan.rollout.group_size,
        "mini_batch_size": plan.train.mini_batch_size,
        "epochs": plan.train.epochs,
        "temperature": plan.rollout.temperature,
        "max_new_tokens": plan.rollout.max_new_tokens,
        "reward": plan.reward.name,
        "reward.probability": plan.reward.probability,
    }
    params.update({f"objective.{k}": v for k, v in plan.objective.params.items()})
    return params
