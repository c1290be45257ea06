"""State an objective carries from one optimizer step to the next (adaptive coefficients).

Objectives are pure functions of one batch; a few methods also steer a coefficient across steps
(Skywork-OR1's adaptive entropy control). Such an objective registers a controller: its state is a
small dict of floats that the training loop keeps in the objective's params under the reserved key
`state` (so every call of the objective, on every mini-batch and micro-batch and every rank, reads
the same values), advances once per optimizer step from the step's reduced objective metrics, and
stores in every checkpoint, so a resumed run continues with exactly the state it stopped with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

STATE_KEY = "state"
"""The reserved objective keyword that receives the controller's state (never a config key)."""


class ObjectiveController(Protocol):
    # the step metrics `update` reads: the objective logs them over every row of each mini-batch,
    # in `ObjectiveOutput.metrics` even where they read the policy (a method's input, not a
    # diagnostic over the rows that carry gradient: objectives/batch.py `PolicyMetric`)
    reads: tuple[str, ...]

    def initial(self, params: Mapping[str, Any]) -> dict[str, float]:
        """The state before the first step, from the objective's params."""
        ...

    def update(
        self, state: Mapping[str, float], metrics: Mapping[str, float], params: Mapping[str, Any]
    ) -> dict[str, float]:
        """The state for the next step, from this step's reduced objective metrics (the
        objective's own metric names, without the `train/objective/` prefix)."""
        ...


class _HasController(Protocol):
    controller: ObjectiveController | None


def with_initial_state(spec: _HasController, params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` plus the controller's initial state under STATE_KEY (unchanged without one)."""
    params = dict(params)
    if spec.controller is not None:
        params[STATE_KEY] = spec.controller.initial(params)
    return params


def advance_state(
    spec: _HasController, params: dict[str, Any], metrics: Mapping[str, float], *, prefix: str
) -> None:
    """After an optimizer step: replace params[STATE_KEY] by the controller's update from the
    step's metrics (those named `prefix` + the objective's own metric name). No-op without one."""
    if spec.controller is None:
        return
    own = {k[len(prefix) :]: float(v) for k, v in metrics.items() if k.startswith(prefix)}
    params[STATE_KEY] = spec.controller.update(params[STATE_KEY], own, params)


def restore_state(params: dict[str, Any], saved: Mapping[str, float] | None) -> None:
    """On resume: the checkpoint's state replaces the initial one (when both exist)."""
    if saved is not None and STATE_KEY in params:
        params[STATE_KEY] = {k: float(v) for k, v in saved.items()}
