"""Run an upstream project's own function on our tensors, without copying its code.

The comparison tests read the function's source from a checkout of the upstream repository at test
time, take the named top-level `def`s out of the file's syntax tree (decorators such as verl's
`@register_policy_loss` dropped) and execute only those, in a namespace that holds torch and the
few names the function body refers to. Nothing of upstream is vendored here, and the package itself
(with its Ray, omegaconf, ... imports) is never imported.

Where the source comes from:
- verl: `$QUADRANTS_VERL_SRC` (a checkout's root), else an installed `verl` package located with
  importlib's find_spec (found, not imported);
- ArcherCodeR, STEER, Skywork-OR1 and KTAE (forks of verl, their packages also named `verl`):
  `$QUADRANTS_ARCHER_SRC`, `$QUADRANTS_STEER_SRC`, `$QUADRANTS_SKYWORK_SRC`, `$QUADRANTS_KTAE_SRC`.
A test skips, naming the variable to set, when the source is absent. The commits compared are
recorded in docs/science.md.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
import torch


def upstream_file(env: str, relpath: str, package: str | None = None) -> Path:
    """The path of `relpath` in the checkout named by `$env` (or in the installed `package`)."""
    root = os.environ.get(env)
    if root:
        path = Path(root) / relpath
        if not path.is_file():
            pytest.fail(f"${env}={root} has no {relpath}")
        return path
    if package is not None:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            path = Path(spec.origin).parent.parent / relpath
            if path.is_file():
                return path
    pytest.skip(f"upstream source absent: set {env} to a checkout of the repository")


def load_functions(path: Path, names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute the top-level functions (or classes) `names` of `path` in `namespace`; return them
    by name."""
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.ClassDef)
    found = [n for n in tree.body if isinstance(n, kinds) and n.name in names]
    missing = sorted(set(names) - {n.name for n in found})
    if missing:
        pytest.fail(f"{path} defines no function {missing}")
    for node in found:
        node.decorator_list = []
    module = ast.Module(body=found, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return {name: namespace[name] for name in names}


def load_method(path: Path, cls: str, name: str, namespace: dict[str, Any]) -> Any:
    """Execute method `name` of top-level class `cls` of `path` as a plain function in
    `namespace` (its `self` is whatever the caller passes; the method must not use it)."""
    tree = ast.parse(path.read_text())
    owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    method = None
    if owner is not None:
        method = next(
            (n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name), None
        )
    if method is None:
        pytest.fail(f"{path} defines no method {cls}.{name}")
    method.decorator_list = []
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


class VerlActorConfig:
    """Stand-in for verl's ActorConfig: the attributes its loss reads, nothing else."""

    def __init__(self, clip_low: float, clip_high: float) -> None:
        self.clip_ratio = clip_low
        self.clip_ratio_low = clip_low
        self.clip_ratio_high = clip_high
        self.global_batch_info: dict = {}


def verl_losses(*names: str) -> dict[str, Any]:
    """verl's own policy-loss functions (and its agg_loss / masked helpers) from its source."""
    core = upstream_file("QUADRANTS_VERL_SRC", "verl/trainer/ppo/core_algos.py", "verl")
    functional = core.parent.parent.parent / "utils" / "torch_functional.py"
    helpers = load_functions(functional, ["masked_sum", "masked_mean"], {"torch": torch})
    namespace = {
        "torch": torch,
        "verl_F": SimpleNamespace(**helpers),
        "ActorConfig": VerlActorConfig,
        "DictConfig": VerlActorConfig,
        "Optional": Optional,
        "Any": Any,
    }
    return load_functions(core, ["agg_loss", *names], namespace)


def archer_functions(*names: str) -> dict[str, Any]:
    """ArcherCodeR's own functions (its fork of verl's core_algos) from its source."""
    core = upstream_file("QUADRANTS_ARCHER_SRC", "verl/trainer/ppo/core_algos.py")
    functional = core.parent.parent.parent / "utils" / "torch_functional.py"
    helpers = load_functions(functional, ["masked_sum", "masked_mean"], {"torch": torch})
    namespace = {"torch": torch, "verl_F": SimpleNamespace(**helpers)}
    return load_functions(core, list(names), namespace)


def steer_functions(*names: str) -> dict[str, Any]:
    """STEER's own functions (its fork of verl's core_algos) from its source."""
    core = upstream_file("QUADRANTS_STEER_SRC", "verl/trainer/ppo/core_algos.py")
    functional = core.parent.parent.parent / "utils" / "torch_functional.py"
    helpers = load_functions(functional, ["masked_sum", "masked_mean"], {"torch": torch})
    namespace = {"torch": torch, "verl_F": SimpleNamespace(**helpers)}
    return load_functions(core, list(names), namespace)


def skywork_functions(*names: str) -> dict[str, Any]:
    """Skywork-OR1's own functions and classes (its fork of verl's core_algos) from its source."""
    import numpy as np

    core = upstream_file("QUADRANTS_SKYWORK_SRC", "verl/trainer/ppo/core_algos.py")
    return load_functions(core, list(names), {"torch": torch, "np": np})


def skywork_entropy_metric() -> Any:
    """Skywork-OR1's `DataParallelPPOActor.get_entropy_metric` (verl/workers/actor/dp_actor.py):
    the metrics whose `actor/entropy_loss` their trainer feeds the entropy controller."""
    actor = upstream_file("QUADRANTS_SKYWORK_SRC", "verl/workers/actor/dp_actor.py")
    functional = actor.parent.parent.parent / "utils" / "torch_functional.py"
    helpers = load_functions(functional, ["masked_sum", "masked_mean"], {"torch": torch})
    namespace = {"torch": torch, "verl_F": SimpleNamespace(**helpers)}
    return load_method(actor, "DataParallelPPOActor", "get_entropy_metric", namespace)


def ktae_functions(*names: str) -> dict[str, Any]:
    """KTAE's own key-token code (verl/workers/actor/compute_key_tokens.py) from its source."""
    path = upstream_file("QUADRANTS_KTAE_SRC", "verl/workers/actor/compute_key_tokens.py")
    return load_functions(path, list(names), {"torch": torch})
