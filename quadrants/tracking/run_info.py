"""What a run says about itself in the tracker: tags for filtering and a
curated set of flat params."""

from __future__ import annotations

from typing import Any

from quadrants.config import RunConfig
from quadrants.ops.quadrants import Quadrant, is_random, parse_match


def quadrant_tag(cfg: RunConfig) -> str:
    """The arm: "PHR", "PHR+NHR", "all"; the random control as "random:<match>" with ":sign" and
    ":ht" when `quadrant.match_sign` and `quadrant.reweight=ht` are on ("random:PHR:sign"), then
    how it is matched when that is not the default per-mini-batch count: ":row" or ":nominal"
    (`quadrant.within`), ":entropy" (`quadrant.stratify`), ":f0.5" (`quadrant.match_fraction`),
    so that every design of the control is its own arm in the tables."""
    section = cfg.quadrant
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


def run_tags(cfg: RunConfig) -> dict[str, str]:
    """The tags every run carries, for filtering in the MLflow UI and in analysis/."""
    return {
        "quadrants.study": cfg.study,
        "quadrants.sweep_id": cfg.sweep_id,
        "quadrant": quadrant_tag(cfg),
        "objective": cfg.objective.name,
        "seed": str(cfg.seed),
        "model": cfg.model.name_or_path,
        "task": cfg.task.name,
        "reward": cfg.reward.name,  # the reward trained on (verifier, or a confound)
    }


def flat_params(cfg: RunConfig) -> dict[str, Any]:
    """A curated set of flat params (the full resolved config goes in as an artifact)."""
    params: dict[str, Any] = {
        "objective": cfg.objective.name,
        "loss_agg": cfg.objective.loss_agg,
        "kl_coef": cfg.objective.kl_coef,
        "quadrant.keep": quadrant_tag(cfg),
        "quadrant.threshold": cfg.quadrant.threshold,
        "quadrant.threshold_value": cfg.quadrant.threshold_value,
        "quadrant.denominator": cfg.quadrant.denominator,
        "model": cfg.model.name_or_path,
        "task": cfg.task.name,
        "seed": cfg.seed,
        "lr": cfg.train.lr,
        "steps": cfg.train.steps,
        "prompts_per_step": cfg.train.prompts_per_step,
        "group_size": cfg.rollout.group_size,
        "mini_batch_size": cfg.train.mini_batch_size,
        "epochs": cfg.train.epochs,
        "temperature": cfg.rollout.temperature,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "reward": cfg.reward.name,
        "reward.probability": cfg.reward.probability,
    }
    params.update({f"objective.{k}": v for k, v in cfg.objective.params.items()})
    return params
