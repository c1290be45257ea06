"""`RunPlan`: a composed configuration parsed once, every value checked, the parts its owners parse
handed on parsed.

`RunPlan.parse(cfg, world_size=...)` is the one place a `RunConfig` becomes something a run may
start from. It runs every check of the values (quadrants/run_plan/composition.py `check_values`:
each section's names against the package that owns them, and the rules that span two owners), the
batch's layout over `world_size` ranks, and, unless told not to, the local data files
(quadrants/run_plan/data_files.py). What it parses on the way is kept, so that nothing downstream
parses it again: the objective resolved with its full parameters, the run's `QuadrantSettings`,
its `LossSettings`, and the forwards' `PassSettings` (the only reading of the forward's keys,
`train.attention_layout` among them).

The preflight parses each job of a command (`files=False` first, then `with_data_files()` once the
machine's own checks passed), the job parses its own composed configuration once and hands the plan
to the loop (launch/job.py, run/loop.py `run_training`), and the commands that load a run parse
theirs (evaluate, probe, counterfactual). A plan is frozen and owns a copy of the configuration:
changing the caller's `RunConfig` afterwards changes nothing the plan says. The shape is
torchtitan's and TRL's (a config validated at construction, the validated object handed to the
trainer: pytorch/torchtitan torchtitan/config/manager.py `ConfigManager.parse_args`,
huggingface/trl trl/trainer/grpo_config.py `GRPOConfig.__post_init__`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from quadrants.config import (
    AdvantageConfig,
    CheckpointConfig,
    ClusterConfig,
    DistributedConfig,
    EvalConfig,
    ModelConfig,
    ObjectiveConfig,
    ProbeConfig,
    PromptConfig,
    QuadrantConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
)
from quadrants.objectives.loss import LossSettings, loss_settings
from quadrants.objectives.registry import ObjectiveSpec, resolve_objective
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.run_plan.composition import check_layout, check_lora_ranks, check_values
from quadrants.run_plan.data_files import check_data_files
from quadrants.train.context import PassSettings


def pass_settings(rollout: RolloutConfig, train: TrainConfig) -> PassSettings:
    """The forwards' `PassSettings` from the rollout and train sections: the one reading of the
    forward's keys (the layout's name was checked against models/policy.py LAYOUTS first)."""
    return PassSettings(
        temperature=rollout.temperature,
        chunk_size=train.entropy_chunk_size,
        batch_size=train.mini_batch_size,
        length_buckets=train.length_buckets,
        forward_tokens=train.forward_tokens,
        layout=train.attention_layout,
    )


@dataclass(frozen=True)
class RunPlan:
    """A configuration parsed and checked once (`RunPlan.parse`).

    Attributes:
        cfg: the configuration, every value checked (the plan's own copy: read it, do not change
            it; the sections are also attributes of the plan: `plan.train`, `plan.eval`, ...).
        world_size: the ranks the batch's layout was checked for (1: one process).
        objective_spec: the registered objective `objective.name` names.
        objective_params: its full hyper-parameters (the registry's defaults under
            `objective.params`), checked against its signature and ranges.
        quadrant_settings: the run's one `QuadrantSettings` (the quadrant section, parsed).
        loss: the loss's `LossSettings` (aggregation, KL, the quadrant settings, Dr. GRPO's
            constant length).
        forward: every policy forward's `PassSettings` (temperature, vocabulary chunk, rows and
            tokens per pass, the attention layout).
        data_checked: whether the local data files were checked (`with_data_files`).
        values_checked: False for a plan made by `unchecked` (a test of one part of the step),
            which no run starts from.
    """

    cfg: RunConfig
    world_size: int
    objective_spec: ObjectiveSpec
    objective_params: dict[str, Any] = field(repr=False)
    quadrant_settings: QuadrantSettings
    loss: LossSettings
    forward: PassSettings
    data_checked: bool = False
    values_checked: bool = True

    @classmethod
    def parse(
        cls,
        cfg: RunConfig,
        *,
        world_size: int = 1,
        files: bool = True,
        task_used: bool = True,
    ) -> RunPlan:
        """Check `cfg` and parse it, or raise ValueError naming the key and the fix.

        ``world_size``: the ranks the run trains on; its batch must deal evenly to them and LoRA
        trains in one process (`check_layout`, `check_lora_ranks`).
        ``files=False`` leaves the local data files unchecked (a printed configuration, or the
        preflight's first pass: `with_data_files` checks them later).
        ``task_used=False`` (`python -m quadrants.evaluate`): the task is checked against the model
        only when the evaluation suite names it (composition.py `check_values`).
        """
        cfg = copy.deepcopy(cfg)
        spec, params = check_values(cfg, task_used=task_used)
        if world_size > 1:
            check_layout(cfg, world_size)
            check_lora_ranks(cfg, world_size)
        plan = cls._parts(cfg, spec, params, world_size=world_size, values_checked=True)
        return plan.with_data_files() if files else plan

    @classmethod
    def unchecked(cls, cfg: RunConfig) -> RunPlan:
        """The parts of `cfg` parsed without the checks between sections: for a test or a
        benchmark of one part of the step (`build_step` over a configuration no run would take,
        e.g. every key set to a distinct value, or ARCA's r = 0 case without adapters). The
        objective's name and parameters are still resolved, as the parts need them. No run starts
        from such a plan: `run_training` refuses it."""
        cfg = copy.deepcopy(cfg)
        spec, params = resolve_objective(cfg.objective.name, dict(cfg.objective.params))
        return cls._parts(cfg, spec, params, world_size=1, values_checked=False)

    @classmethod
    def _parts(
        cls,
        cfg: RunConfig,
        spec: ObjectiveSpec,
        params: dict[str, Any],
        *,
        world_size: int,
        values_checked: bool,
    ) -> RunPlan:
        """The plan of `cfg` with what its owners parse: the quadrant and loss settings, the
        forwards' settings."""
        quadrant = QuadrantSettings.from_config(cfg.quadrant)
        return cls(
            cfg=cfg,
            world_size=world_size,
            objective_spec=spec,
            objective_params=params,
            quadrant_settings=quadrant,
            loss=loss_settings(cfg.objective, quadrant, max_new_tokens=cfg.rollout.max_new_tokens),
            forward=pass_settings(cfg.rollout, cfg.train),
            values_checked=values_checked,
        )

    def with_data_files(self) -> RunPlan:
        """This plan with its local data files checked (quadrants/run_plan/data_files.py): run on
        the machine that reads them. Checked once: a plan that has them returns itself."""
        if self.data_checked:
            return self
        check_data_files(self.cfg)
        return replace(self, data_checked=True)

    def for_ranks(self, world_size: int) -> RunPlan:
        """This plan for `world_size` ranks (the ranks a trainer finds when it starts): the
        batch's layout and LoRA's one process checked for them. The same plan when it already is."""
        if world_size == self.world_size:
            return self
        check_layout(self.cfg, world_size)
        check_lora_ranks(self.cfg, world_size)
        return replace(self, world_size=world_size)

    # --- the sections, checked: what a part of the run reads (the plan's or its own part) ------

    @property
    def seed(self) -> int:
        return self.cfg.seed

    @property
    def run_dir(self) -> str | None:
        return self.cfg.run_dir

    @property
    def study(self) -> str:
        return self.cfg.study

    @property
    def sweep_id(self) -> str:
        return self.cfg.sweep_id

    @property
    def outputs(self) -> str:
        return self.cfg.outputs

    @property
    def model(self) -> ModelConfig:
        return self.cfg.model

    @property
    def task(self) -> TaskConfig:
        return self.cfg.task

    @property
    def prompt(self) -> PromptConfig:
        return self.cfg.prompt

    @property
    def rollout(self) -> RolloutConfig:
        return self.cfg.rollout

    @property
    def objective(self) -> ObjectiveConfig:
        return self.cfg.objective

    @property
    def quadrant(self) -> QuadrantConfig:
        return self.cfg.quadrant

    @property
    def reward(self) -> RewardConfig:
        return self.cfg.reward

    @property
    def advantage(self) -> AdvantageConfig:
        return self.cfg.advantage

    @property
    def train(self) -> TrainConfig:
        return self.cfg.train

    @property
    def eval(self) -> EvalConfig:
        return self.cfg.eval

    @property
    def probe(self) -> ProbeConfig:
        return self.cfg.probe

    @property
    def checkpoint(self) -> CheckpointConfig:
        return self.cfg.checkpoint

    @property
    def tracking(self) -> TrackingConfig:
        return self.cfg.tracking

    @property
    def distributed(self) -> DistributedConfig:
        return self.cfg.distributed

    @property
    def cluster(self) -> ClusterConfig:
        return self.cfg.cluster
