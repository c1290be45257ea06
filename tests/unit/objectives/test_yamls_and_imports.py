"""One source of truth per objective, and objectives that stand alone.

- Each `sweeps/objective/<name>.yaml` restates its objective's signature defaults, exactly (they are
  kept in the YAML so that `objective.params.alpha=0.5` overrides an existing key on the command
  line, which Hydra's struct mode requires); the keys outside `params` are the schema's defaults,
  except where a method's recipe fixes one (RECIPE_KEYS: GSPO's per-response mean, Archer's KL).
- An objective module imports only ops/, config_ranges (the range type), the shared objective
  modules and the registry, never a sibling objective, and the registry's lazy import of builtin.py (self-registration) is the only
  edge that closes a cycle inside quadrants/objectives/.
"""

from __future__ import annotations

import ast
from dataclasses import asdict
from pathlib import Path

import pytest

import quadrants.objectives as objectives_pkg
from quadrants.config import ObjectiveConfig
from quadrants.launch.hydra_setup import CONFIG_DIR, compose_run_config
from quadrants.objectives.builtin import SHARED
from quadrants.objectives.registry import get_objective, known_objectives

# keys outside `params` that a method's own recipe sets (each stated in its YAML and docs/science.md)
RECIPE_KEYS = {
    "gspo": {"loss_agg": "seq-mean-token-mean"},  # GSPO Eq. 5; verl's gspo hard-codes it
    # the low-entropy tokens' KL (the authors' kl_loss_coef); verl's token-mean of one-sequence
    # micro-batches (their script)
    "archer": {"kl_coef": 0.001, "loss_agg": "seq-mean-token-mean"},
}
YAMLS = sorted(p.stem for p in (CONFIG_DIR / "objective").glob("*.yaml"))
PACKAGE = Path(objectives_pkg.__file__).parent


def _plain(value):
    """YAML lists and signature tuples compare as lists."""
    return list(value) if isinstance(value, (list, tuple)) else value


def test_every_objective_has_a_yaml_and_every_yaml_an_objective():
    assert YAMLS == known_objectives()


def test_every_module_but_the_shared_ones_is_a_registered_objective():
    # builtin.py imports them by listing the package: a new objective is one new file
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert sorted(modules - SHARED) == known_objectives()
    assert SHARED <= modules


@pytest.mark.slow
@pytest.mark.parametrize("name", YAMLS)
def test_the_yaml_restates_the_signature_defaults(name):
    lora = (
        ["model.lora.enabled=true"] if "adapter_residual" in get_objective(name).needs else []
    )  # refused without (ARCA)
    composed = compose_run_config([f"objective={name}", *lora]).objective
    assert composed.name == name
    params = {k: _plain(v) for k, v in composed.params.items()}
    assert params == {k: _plain(v) for k, v in get_objective(name).defaults().items()}
    rest = {k: v for k, v in asdict(composed).items() if k not in ("name", "params")}
    assert rest == {
        **{k: v for k, v in asdict(ObjectiveConfig()).items() if k not in ("name", "params")},
        **RECIPE_KEYS.get(name, {}),
    }


def _imports(path: Path) -> set[str]:
    """Every quadrants module `path` imports, at the top or lazily inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            out |= {n for n in [node.module, *names] if n.startswith("quadrants.")}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("quadrants.")}
    return out


def _local_graph() -> dict[str, set[str]]:
    """Module stem -> the stems of quadrants/objectives/ it imports."""
    stems = {p.stem for p in PACKAGE.glob("*.py")}
    graph = {}
    for path in PACKAGE.glob("*.py"):
        targets = set()
        for name in _imports(path):
            parts = name.split(".")
            if parts[:2] == ["quadrants", "objectives"] and len(parts) > 2 and parts[2] in stems:
                targets.add(parts[2])
        graph[path.stem] = targets - {path.stem}
    return graph


@pytest.mark.slow
def test_objectives_import_only_ops_and_the_shared_objective_modules():
    for path in sorted(PACKAGE.glob("*.py")):
        packages = {".".join(n.split(".")[:2]) for n in _imports(path)}
        # config_ranges: the one range type the hyper-parameter checks declare (a leaf)
        allowed = {"quadrants.ops", "quadrants.objectives", "quadrants.config_ranges"}
        assert packages <= allowed, path.name
        if path.stem not in SHARED:
            siblings = _local_graph()[path.stem] - SHARED
            assert not siblings, f"{path.name} imports sibling objective(s) {sorted(siblings)}"


def test_the_only_cycle_is_the_registrys_self_registration():
    graph = _local_graph()
    assert "builtin" in graph["registry"]  # the lazy import that registers the built-ins
    graph["registry"].discard("builtin")
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        if node in path:
            pytest.fail(f"import cycle in quadrants/objectives: {' -> '.join((*path, node))}")
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, (*path, node))
        done.add(node)

    for node in sorted(graph):
        visit(node, ())
