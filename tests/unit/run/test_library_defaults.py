"""The tensor API's own defaults are the schema's.

`ops/` and `objectives/` may not import the schema (tests/unit/test_layering.py), so
`QuadrantSettings()` and `LossSettings()` keep defaults of their own for direct use of the tensor
functions (tests, notebooks). They must equal what a run with the default configuration builds from
the schema (run/settings.py), or a result obtained through the tensor API would describe another
method than `python -m quadrants.sweep` trains. `LossSettings.norm_length` differs by design: a run
fixes it to `rollout.max_new_tokens` (objectives/loss.py `loss_settings`), the API's None takes the
batch's own length."""

from __future__ import annotations

import dataclasses

from quadrants.config import RunConfig
from quadrants.objectives.loss import LossSettings, loss_settings
from quadrants.ops.quadrants import QuadrantSettings


def test_quadrant_settings_default_is_the_schemas():
    assert QuadrantSettings.from_config(RunConfig().quadrant) == QuadrantSettings()


def test_loss_settings_default_is_the_schemas_but_the_fixed_length():
    cfg = RunConfig()
    run = loss_settings(
        cfg.objective,
        QuadrantSettings.from_config(cfg.quadrant),
        max_new_tokens=cfg.rollout.max_new_tokens,
    )
    assert run.norm_length == cfg.rollout.max_new_tokens and LossSettings().norm_length is None
    assert dataclasses.replace(run, norm_length=None) == LossSettings()
