"""Defaults are stated once, in the schema (quadrants/config.py).

- `RunConfig()` is the run `python -m quadrants.sweep` composes with no overrides, field by field,
  except the two fields the command line derives from where and how it runs (`LAUNCH_FIELDS`).
- No YAML file under sweeps/ sets a key to the value it would have without that line: the schema's
  default, or, for a file whose defaults list selects group options (an experiment's
  `override /objective: dapo`), that option's value. The exceptions are named: the key that says
  what a group option is (`objective.name: dapo` in objective/dapo.yaml stays when DAPO is also the
  schema's default), and an objective YAML's `params`, which restate the objective's signature
  defaults on purpose (tests/unit/objectives/test_yamls_and_imports.py says why).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from quadrants.config import RunConfig
from quadrants.launch.hydra_setup import CONFIG_DIR, compose_run_config
from quadrants.objectives.registry import resolve_objective

# composed from the command line's context, not stated by the run: run_dir is config.yaml's
# interpolation of outputs/study/sweep_id/job (RunConfig() has none: no checkpoints), train.threads
# is launcher=local's share of this machine's cores per parallel job (RunConfig(): torch's default)
LAUNCH_FIELDS = {"run_dir", "train.threads"}

# the key that names what a group option selects; it stays in the option's own file
IDENTITY_KEYS = {
    "model": "name_or_path",
    "task": "name",
    "prompt": "format",
    "rollout": "engine",
    "objective": "name",
    "quadrant": "keep",
    "reward": "name",
}
# dict-valued schema fields: compared whole, except objective.params, compared key by key
DICT_FIELDS = {"task.params", "objective.params", "eval.benchmarks"}


def _flat_schema(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            out.update(_flat_schema(value, key + "."))
        else:
            out[key] = value
    return out


SCHEMA = _flat_schema(RunConfig())


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _same(a: Any, b: Any) -> bool:
    """YAML equality as the schema sees it: 1 and 1.0 are the same float; true is not 1."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _package(path: Path) -> str:
    """The dotted key prefix a file's keys land under."""
    if path.parent == CONFIG_DIR or "# @package _global_" in path.read_text():
        return ""
    return path.parent.name + "."


def _leaves(node: Any, prefix: str) -> dict[str, Any]:
    """Dotted key -> value for every key a YAML body sets (defaults lists and hydra excluded)."""
    out: dict[str, Any] = {}
    for name, value in (node or {}).items():
        key = prefix + str(name)
        if key in ("defaults", "hydra"):
            continue
        if isinstance(value, dict) and key not in DICT_FIELDS:
            out.update(_leaves(value, key + "."))
        elif isinstance(value, dict) and key == "objective.params":
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _file_leaves(path: Path) -> dict[str, Any]:
    return _leaves(yaml.safe_load(path.read_text()), _package(path))


def _selected(path: Path) -> dict[str, str]:
    """Group -> option that a file's defaults list selects (`override /objective: dapo`)."""
    chosen = {}
    for entry in (yaml.safe_load(path.read_text()) or {}).get("defaults", []):
        if isinstance(entry, dict):
            for name, option in entry.items():
                group = name.removeprefix("override ").strip().lstrip("/")
                if (CONFIG_DIR / group / f"{option}.yaml").is_file():
                    chosen[group] = option
    return chosen


def _base(path: Path) -> tuple[dict[str, Any], str]:
    """The values a file's keys would have without it, and where they come from."""
    base = dict(SCHEMA)
    where = "the schema's default (quadrants/config.py)"
    chosen = {**_selected(CONFIG_DIR / "config.yaml"), **_selected(path)}
    if path.parent.name == "objective":
        return base, where
    # an objective key outside the objective group lands on the selected objective's YAML
    objective_yaml = CONFIG_DIR / "objective" / f"{chosen['objective']}.yaml"
    base.update(_file_leaves(objective_yaml))
    for group, option in _selected(path).items():
        base.update(_file_leaves(CONFIG_DIR / group / f"{option}.yaml"))
    if _selected(path):
        where = f"the schema's default or what {sorted(_selected(path).items())} sets"
    return base, where


YAMLS = sorted(CONFIG_DIR.rglob("*.yaml"))


def _restated(path: Path) -> list[str]:
    base, where = _base(path)
    identity = IDENTITY_KEYS.get(path.parent.name)
    found = []
    for key, value in _file_leaves(path).items():
        if identity and key == f"{path.parent.name}.{identity}":
            continue  # the option says what it selects
        if key.startswith("objective.params.") and path.parent.name == "objective":
            continue  # the objective's recipe, checked against its signature elsewhere
        if isinstance(value, str) and value.startswith("${"):
            continue  # an interpolation, not a value
        if key in base and _same(value, base[key]):
            found.append(f"{key}={value!r}")
    return found


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_no_yaml_restates_a_default(path):
    restated = _restated(path)
    rel = path.relative_to(CONFIG_DIR.parent)
    assert not restated, (
        f"{rel} sets {', '.join(restated)}, the value it has without the line "
        f"({_base(path)[1]}); delete the line so the default is stated once"
    )


def test_the_check_finds_a_restated_key(tmp_path, monkeypatch):
    """The check is not vacuous: a group file that says `group_size: 8` (the schema's G) and
    `top_p: 0.9` (not the default 1.0) is reported for the first only."""
    group = tmp_path / "rollout"
    group.mkdir()
    (tmp_path / "config.yaml").write_text((CONFIG_DIR / "config.yaml").read_text())
    (tmp_path / "objective").mkdir()
    (tmp_path / "objective" / "dapo.yaml").write_text("name: dapo\n")
    path = group / "fake.yaml"
    path.write_text("engine: hf\ngroup_size: 8\ntop_p: 0.9\n")
    monkeypatch.setattr(f"{__name__}.CONFIG_DIR", tmp_path)
    assert _restated(path) == ["rollout.group_size=8"]


COMPOSED = None


def _composed() -> dict[str, Any]:
    global COMPOSED
    if COMPOSED is None:
        COMPOSED = _flat_schema(compose_run_config([], files=False))
    return COMPOSED


@pytest.mark.parametrize("key", sorted(set(SCHEMA) - LAUNCH_FIELDS))
def test_the_schema_default_is_the_composed_default(key):
    composed = _composed()[key]
    if key == "objective.params":
        # the schema's params are {} (a dict in the schema would be merged into every objective's
        # YAML); objective/dapo.yaml restates DAPO's signature defaults: compare them resolved
        plain, composed = (resolve_objective("dapo", p)[1] for p in (SCHEMA[key], composed))
        assert plain == composed
        return
    assert _same(SCHEMA[key], composed), (
        f"RunConfig().{key} = {SCHEMA[key]!r} but `python -m quadrants.sweep` composes "
        f"{composed!r}: change the default in quadrants/config.py, not in a YAML group"
    )


def test_the_composed_default_trains_dapo():
    """The must-show in one line: both say DAPO with DAPO's own hyper-parameters."""
    plain, composed = RunConfig().objective, compose_run_config([], files=False).objective
    assert plain.name == composed.name == "dapo"
    assert (
        resolve_objective(plain.name, plain.params)[1]
        == resolve_objective(composed.name, composed.params)[1]
    )
