"""What makes a resumed run the same run: the resolved config, less the keys that may change.

Every checkpoint records the run's identity (its resolved config as flat `key: value` pairs, less
`MAY_CHANGE_ON_RESUME`) and the identity's hash in `<checkpoint>/config.json`. A run that finds a
checkpoint compares its own identity with the recorded one before it trains or writes anything
(`check_resume`): a difference (an override changed, a preset YAML edited between two invocations)
is refused, naming each differing key `old → new`, unless `checkpoint.allow_config_change=true`;
an allowed change is returned so that the run records it (the tracker's `config_change/<step>/...`
params, `config.<step>.yaml` beside the first `config.yaml`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quadrants.config import RunConfig
from quadrants.run.checkpoint import IDENTITY_FILE, latest_path

if TYPE_CHECKING:
    from quadrants.run_plan import RunPlan

# Keys that say where a run's records go and how fast it runs, never what it trains; the same
# run under another value is the same run. Also left out of the sweep id (launch/hydra_setup.py
# `with_sweep_id`), so that changing them reaches the same run directories.
OUTSIDE_THE_RUN: dict[str, str] = {
    "outputs": "where the run directories are: the run directory itself is the key of a resume",
    "run_dir": "derived from outputs, study, sweep_id and the job's overrides",
    # the MLflow store (tracking=local|server, tracking.uri), what is logged and how often
    "tracking": "where the records are sent and which: what is trained is the same",
    "train.threads": "torch's intra-op threads: throughput, not arithmetic that a step keeps",
    "task.grader_workers": "processes that grade answers: the grades do not depend on them",
    "train.cpu.omp_spincount": "how long idle OpenMP threads spin before sleeping",
}

# The keys a resume may change (prefixes: `tracking` covers `tracking.uri`, ...), each with why.
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    **OUTSIDE_THE_RUN,
    "train.steps": "extending (or shortening) a run: the steps done so far are the same steps",
    "checkpoint": "how often checkpoints are written and how many are kept, and this opt-in",
}


@dataclass(frozen=True)
class Change:
    """One key whose value differs between the checkpoint's config and this run's."""

    key: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key}: {_show(self.old)} → {_show(self.new)}"


@dataclass(frozen=True)
class ResumeChange:
    """An allowed change: the step it takes effect after, and what changed."""

    step: int
    changes: tuple[Change, ...]


class ConfigChangedError(ValueError):
    """A resume whose config differs from its checkpoint's, without the opt-in."""


_ABSENT = object()


def _show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else str(value)


def may_change(key: str, keys: dict[str, str] = MAY_CHANGE_ON_RESUME) -> bool:
    """Whether `key` (dotted) is one of `keys` or lies under one of them."""
    return any(key == name or key.startswith(name + ".") for name in keys)


def flat_config(cfg: RunConfig) -> dict[str, Any]:
    """The resolved config as dotted keys with JSON values (tuples as lists); free-form mappings
    (an objective's params) are flattened too, so a changed clip names its own key."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if dataclasses.is_dataclass(node):
            node = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
            return
        out[prefix.rstrip(".")] = json.loads(json.dumps(node, default=str))

    walk(cfg, "")
    return out


def resume_identity(cfg: RunConfig) -> dict[str, Any]:
    """`flat_config(cfg)` less the keys that may change on resume."""
    return {k: v for k, v in flat_config(cfg).items() if not may_change(k)}


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def identity_record(plan: RunPlan) -> dict[str, Any]:
    """What a checkpoint of `plan`'s run keeps in `config.json`: the identity and its hash."""
    identity = resume_identity(plan.cfg)
    return {"hash": identity_hash(identity), "config": identity}


@functools.cache
def _schema_defaults() -> dict[str, Any]:
    """`flat_config` of the schema's own defaults (RunConfig())."""
    return flat_config(RunConfig())


def _added_at_default(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A key the checkpoint's record lacks because the schema gained it later (`reward.name`, say),
    now at the schema's default: the default is what the code did before the key existed, so it is
    no change. An objective's own params are not covered: a new param's default may change the
    recipe (Archer's kl_normaliser did), so an added param is still said."""
    return (
        key not in old
        and not key.startswith("objective.params.")
        and key in _schema_defaults()
        and new.get(key, _ABSENT) == _schema_defaults()[key]
    )


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The keys whose values differ (a key on one side only: `(absent)` on the other), sorted;
    keys that may change on resume are not compared, nor a schema key the old record predates
    that is at its default (`_added_at_default`)."""
    keys = sorted(set(old) | set(new))
    return [
        Change(key, old.get(key, _ABSENT), new.get(key, _ABSENT))
        for key in keys
        if not may_change(key)
        and old.get(key, _ABSENT) != new.get(key, _ABSENT)
        and not _added_at_default(key, old, new)
    ]


def recorded_identity(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """(step, recorded identity) of the newest complete checkpoint under `run_dir`; None without a
    checkpoint, or for one written before identities were recorded."""
    found = latest_path(run_dir)
    if found is None or not (found[1] / IDENTITY_FILE).exists():
        return None
    return found[0], json.loads((found[1] / IDENTITY_FILE).read_text())["config"]


def check_resume(plan: RunPlan) -> ResumeChange | None:
    """None when `plan`'s run starts afresh or resumes its checkpoint's config; the change when it
    differs and `checkpoint.allow_config_change` is set. Raises ConfigChangedError otherwise,
    naming the run directory, the step, each change `key: old → new` and the two ways on."""
    if not plan.run_dir:
        return None
    recorded = recorded_identity(Path(plan.run_dir))
    if recorded is None:
        return None
    step, old = recorded
    changes = tuple(config_changes(old, resume_identity(plan.cfg)))
    if not changes:
        return None
    if plan.checkpoint.allow_config_change:
        return ResumeChange(step, changes)
    lines = "\n".join(f"    {change}" for change in changes)
    raise ConfigChangedError(
        f"{plan.run_dir} has a checkpoint of step {step} trained with another configuration; "
        f"resuming it with this one would attribute the next steps to the first:\n{lines}\n"
        "  Run the new configuration under its own sweep_id (or drop sweep_id=, which names it "
        "from the overrides), or continue this run with the change recorded: "
        "checkpoint.allow_config_change=true"
    )


def change_params(change: ResumeChange) -> dict[str, str]:
    """An allowed change as tracker params, one per key: `config_change/<step>/<key>` = `old →
    new`, `<step>` the completed steps it takes effect after. MLflow refuses a param logged again
    with another value (mlflow/store/tracking/sqlalchemy_store.py `log_param` raises
    INVALID_PARAMETER_VALUE), so the run's first params stay as they were and each change is a
    param of its own."""
    return {
        f"config_change/{change.step}/{c.key}": f"{_show(c.old)} → {_show(c.new)}"
        for c in change.changes
    }


def history_name(change: ResumeChange | None) -> str:
    """The file a run directory keeps this invocation's config in: `config.yaml` for the first,
    `config.<step>.yaml` for an allowed change after `<step>` steps (the first never
    overwritten)."""
    return "config.yaml" if change is None else f"config.{change.step}.yaml"
