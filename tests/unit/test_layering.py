"""The package's import graph: no cycles, and no component imports one above it.

Every module of `quadrants/` is parsed with `ast` and every import is an edge: top level, inside a
function (lazy imports), under `if TYPE_CHECKING:`, absolute and relative. A module belongs to a
component, read from its place alone (no per-module exception): its subpackage
(`quadrants/eval/runner.py` -> `eval`); for a module at the top level, its own name
(`quadrants/config.py` -> `config`; the `python -m quadrants.<command>` aliases are each their own
component, allowed to import `launch` only); a package's `__main__.py` is `entry`. The console
script `quadrants/cli.py` imports its commands by name (`importlib`, so that `quadrants --help`
loads none of them): its verb table's modules are its edges (`console_script_edges`). `ALLOWED` below is the layering: which components a
component may import besides itself. It is itself acyclic (checked), so it orders the components.

The one cycle allowed is the objective registry's self-registration: `registry.get_objective` imports
`objectives/builtin.py`, which imports every objective module, each of which registers itself with
`registry.register_objective`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import quadrants

PACKAGE = Path(quadrants.__file__).resolve().parent

# the `python -m quadrants.<command>` modules at the package's top level: thin aliases of a command
# line in launch/ (test_entry_modules_are_thin_aliases)
ENTRY_COMMANDS = (
    "sweep",
    "submit",
    "plan",
    "status",
    "evaluate",
    "data",
    "distributed_main",
    "export",
    "counterfactual",
)

# component -> the components it may import (besides itself); bottom to top
ALLOWED: dict[str, frozenset[str]] = {
    # leaves
    # the schema: dataclasses, each leaf key declared with its range (config_ranges)
    "config": frozenset({"config_ranges"}),
    "config_ranges": frozenset(),  # the range type and how a key declares it
    # what a run on the CPU tunes (quadrants/cpu): oneDNN linear maps, allocator, SDPA, OpenMP
    "cpu": frozenset(),
    "device": frozenset(),  # where a run's tensors live (train.device): torch only
    # pure tensor math (the fused head's multiply: cpu/matmul.py); the trainer's precision
    "ops": frozenset({"cpu", "seeds"}),
    "rewards": frozenset(),  # text in, float out
    "home": frozenset(),  # where the user's files live: the cache root and the data home
    "seeds": frozenset(),  # every random stream of a run, by name: a stable hash, hashlib only
    "progress": frozenset(),  # a loop's bar on a terminal, a line every 10 % off one: tqdm only
    "registry": frozenset(),  # the one registry type (rollout engines, tasks)
    # the research core and the data
    # (config_ranges: the one range type their hyper-parameter checks declare)
    "objectives": frozenset({"cpu", "ops", "config_ranges"}),
    "tasks": frozenset({"rewards", "home", "seeds", "progress", "registry"}),
    # models: the embedded tiny policy is warm-started on the synthetic arithmetic task
    "models": frozenset({"cpu", "ops", "tasks", "home", "progress"}),
    "tracking": frozenset({"config", "cpu"}),
    "rollout": frozenset(
        {"config", "config_ranges", "cpu", "device", "ops", "models", "seeds", "registry"}
    ),  # an engine starts from its config section (config_ranges: Choice checks its settings)
    # process groups and collectives (ops/precision.py: the sharding's mixed precision)
    "distributed": frozenset({"config", "cpu", "device", "ops", "rollout"}),
    # the memory plan: traces the policy's forward (models) sharded as the trainer shards it
    # (distributed); the engine's share is what its registry entry answers (rollout)
    "memory": frozenset({"config", "cpu", "ops", "models", "rollout", "distributed", "run_plan"}),
    # components that use the ones above
    "eval": frozenset(
        {"config", "cpu", "device", "ops", "rewards", "tasks", "models", "tracking", "rollout"}
        | {"distributed", "config_ranges", "seeds", "progress"}
    ),
    # finished runs in MLflow -> tables and figures (the benchmark averages of eval/metrics.py)
    "analysis": frozenset({"eval", "tracking"}),
    "probe": frozenset(
        {"config", "cpu", "ops", "objectives", "rewards", "tasks", "models", "tracking", "rollout"}
        | {"distributed", "config_ranges", "seeds", "progress"}
    ),
    # the step: its phases, their frozen settings, placement, micro-batches, blocks, refill, signals
    # and telemetry (no config, no process group)
    "train": frozenset(
        {"ops", "objectives", "rewards", "tasks", "models", "tracking", "rollout", "seeds"}
    ),
    # the run plan: a configuration parsed once, checked against the package that owns each name
    # and the rules between owners; it hands on what it parsed (the forwards' settings: train)
    "run_plan": frozenset(
        {"config", "config_ranges", "cpu", "device", "ops", "objectives", "rewards", "tasks"}
        | {"models", "rollout", "distributed", "eval", "probe", "tracking", "home", "train"}
    ),
    # one run of the step: built from the config (run/build.py), looped, recorded, checkpointed,
    # preempted, its optimizer offloaded
    "run": frozenset(
        {"config", "cpu", "device", "ops", "objectives", "rewards", "tasks", "models", "tracking"}
        | {"rollout", "distributed", "eval", "probe", "run_plan", "train", "seeds", "progress"}
    ),
    # Hydra set-up, sweep callbacks and manifest, SLURM submission and status, the jobs, every
    # command line (sweep, submit, plan, status, evaluate, data, distributed_main, export, probe,
    # analysis, tracking)
    "launch": frozenset(
        {"config", "cpu", "device", "ops", "objectives", "rewards", "tasks", "models", "tracking"}
        | {"rollout", "distributed", "eval", "analysis", "probe", "run_plan", "run", "home"}
        | {"memory"}
    ),
    # a package's `__main__` (`python -m quadrants.probe`, `python -m quadrants.analysis`): an alias
    "entry": frozenset({"launch"}),
    # the top-level `python -m quadrants.<command>` aliases, which nothing imports
    **{command: frozenset({"launch"}) for command in ENTRY_COMMANDS},
    # the console script `quadrants VERB`: each verb runs a command line of launch/, as an alias does
    "cli": frozenset({"launch"}),
    "root": frozenset(),  # quadrants/__init__.py
}

# the only import edges allowed to close a cycle
CYCLE_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset(
    {("quadrants.objectives.registry", "quadrants.objectives.builtin")}
)


def module_files(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return modules


def _resolve(name: str, modules: dict) -> str | None:
    """The module that `import name` runs last (a name inside a module -> that module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module of the same package: line of the first such import}."""
    root = package.name
    modules = module_files(package)
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_init) in modules.items():
        here = name if is_init else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x, from ..a import b
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from pkg import mod` imports the module pkg.mod; `from mod import name` runs mod
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            for target in targets:
                if target != root and not target.startswith(root + "."):
                    continue
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != name:
                    edges.setdefault(resolved, node.lineno)
        graph[name] = edges
    return graph


def console_script_edges(package: Path = PACKAGE) -> dict[str, int]:
    """The imports of `quadrants.cli` that the walk cannot see: each verb's module, named as a
    string in its `VERBS` table and imported by `importlib` when the verb runs (line: where the
    table names it)."""
    from quadrants.cli import VERBS

    lines = (package / "cli.py").read_text().splitlines()
    return {
        verb.module: next(n for n, line in enumerate(lines, 1) if f'"{verb.module}"' in line)
        for verb in VERBS.values()
    }


def package_graph() -> dict[str, dict[str, int]]:
    """The package's import graph (`import_graph`) with the console script's edges."""
    graph = import_graph(PACKAGE)
    graph["quadrants.cli"] = {**graph["quadrants.cli"], **console_script_edges()}
    return graph


def component(module: str) -> str:
    """A module's component, read from where it lies: a package's `__main__` is an entry (the
    target of `python -m quadrants.<package>`); a module inside a subpackage belongs to the
    subpackage (`quadrants/eval/runner.py` -> `eval`); a module at the top level is its own component
    (`quadrants/config.py` -> `config`); `quadrants/__init__.py` is `root`."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "entry"
    return parts[1] if len(parts) > 1 else "root"


def cycles(
    graph: dict[str, dict[str, int]], allowed: frozenset[tuple[str, str]]
) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), without the allowed
    edges: each is a set of modules that import each other, directly or not."""
    edges = {m: [t for t in ts if (m, t) not in allowed and t in graph] for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def upward_imports(
    graph: dict[str, dict[str, int]], allowed: dict[str, frozenset[str]], component_of
) -> list[str]:
    """Every import of a component that `allowed` does not list for the importer."""
    bad = []
    for module, targets in sorted(graph.items()):
        mine = component_of(module)
        for target, line in sorted(targets.items()):
            theirs = component_of(target)
            if theirs != mine and theirs not in allowed.get(mine, frozenset()):
                bad.append(f"{module} (line {line}) imports {target}: {mine} -> {theirs}")
    return bad


def layering_problems(
    graph: dict[str, dict[str, int]],
    allowed: dict[str, frozenset[str]] = ALLOWED,
    component_of=component,
    cycle_exceptions: frozenset[tuple[str, str]] = CYCLE_EXCEPTIONS,
) -> list[str]:
    """Everything wrong with `graph` under the layering: unplaced components, cycles, upward imports."""
    problems = [
        f"{module}: component {component_of(module)!r} is not in ALLOWED; place it in the layering"
        for module in sorted(graph)
        if component_of(module) not in allowed
    ]
    problems += [f"import cycle: {' <-> '.join(c)}" for c in cycles(graph, cycle_exceptions)]
    problems += upward_imports(graph, allowed, component_of)
    return problems


@pytest.mark.slow
def test_the_package_has_no_cycle_and_no_upward_import():
    graph = package_graph()
    assert len(graph) > 100  # the walk found the package
    assert layering_problems(graph) == []


def test_the_allowed_layering_is_itself_acyclic():
    graph = {c: {d: 0 for d in deps} for c, deps in ALLOWED.items()}
    assert cycles(graph, frozenset()) == []
    assert all(dep in ALLOWED for deps in ALLOWED.values() for dep in deps)


def test_the_walk_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """A made-up package with one import of each kind, and the cycle they close."""
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")  # lazy
    (pkg / "low" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high.b import X\n"
    )
    (pkg / "high").mkdir()
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "high" / "b.py").write_text("from ..low import a\nimport pkg.low.c\n")
    graph = import_graph(pkg)
    assert graph["pkg.low.a"] == {"pkg.high.b": 2}
    assert graph["pkg.low.c"] == {"pkg.high.b": 3}
    assert graph["pkg.high.b"] == {"pkg.low.a": 1, "pkg.low.c": 2}
    assert cycles(graph, frozenset()) == [["pkg.high.b", "pkg.low.a", "pkg.low.c"]]
    allowed = {"high": frozenset({"low"}), "low": frozenset(), "root": frozenset()}
    assert layering_problems(graph, allowed, cycle_exceptions=frozenset()) == [
        "import cycle: pkg.high.b <-> pkg.low.a <-> pkg.low.c",
        "pkg.low.a (line 2) imports pkg.high.b: low -> high",
        "pkg.low.c (line 3) imports pkg.high.b: low -> high",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        # ops importing an objective: upward, and a cycle with the objective that imports ops
        (
            ("quadrants.ops.quadrants", "quadrants.objectives.batch"),
            [
                "import cycle:",
                "quadrants.ops.quadrants (line 1) imports quadrants.objectives.batch: ops -> objectives",
            ],
        ),
        # config importing the checks that import it back: the cycle issue 20 measured
        (
            ("quadrants.config", "quadrants.run_plan.composition"),
            [
                "import cycle:",
                "quadrants.config (line 1) imports quadrants.run_plan.composition: config -> run_plan",
            ],
        ),
        # a component importing one above it without a cycle: eval -> train
        (
            ("quadrants.eval.metrics", "quadrants.train.telemetry"),
            ["quadrants.eval.metrics (line 1) imports quadrants.train.telemetry: eval -> train"],
        ),
        # the console script running a command that is not a command line of launch/
        (
            ("quadrants.cli", "quadrants.run.loop"),
            ["quadrants.cli (line 1) imports quadrants.run.loop: cli -> run"],
        ),
        # a new top-level module nobody placed in the layering
        (
            ("quadrants.new_thing", "quadrants.ops.groups"),
            [
                "quadrants.new_thing: component 'new_thing' is not in ALLOWED",
                "quadrants.new_thing (line 1) imports quadrants.ops.groups: new_thing -> ops",
            ],
        ),
    ],
)
def test_a_planted_violation_fails(planted, expected):
    """The real graph plus one planted edge: exactly the planted problems are reported."""
    graph = {module: dict(targets) for module, targets in package_graph().items()}
    source, target = planted
    graph.setdefault(source, {})[target] = 1
    problems = layering_problems(graph)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), (problem, start)


@pytest.mark.slow
def test_the_exception_covers_only_the_registrys_self_registration():
    """Without the named exception, the only cycle (if any: builtin.py may import the objectives
    dynamically) is the objective registry's self-registration, inside objectives/."""
    for cycle in cycles(package_graph(), frozenset()):
        assert {"quadrants.objectives.registry", "quadrants.objectives.builtin"} <= set(cycle)
        assert all(module.startswith("quadrants.objectives.") for module in cycle)


@pytest.mark.slow
def test_entry_modules_are_thin_aliases():
    """Every `python -m` target inside the package (the top-level commands and the packages'
    `__main__`) is an alias: one `from quadrants.launch.<x> import main` and the `__main__` guard,
    so that each command line lives in launch/; and no module imports one (the console script
    neither: its verbs run the launch modules themselves)."""
    graph = package_graph()
    entries = {m for m in graph if component(m) == "entry" or component(m) in ENTRY_COMMANDS}
    # the ten top-level commands and the three packages' `__main__` (probe, analysis, tracking)
    assert {f"quadrants.{c}" for c in ENTRY_COMMANDS} | {
        "quadrants.probe.__main__",
        "quadrants.analysis.__main__",
        "quadrants.tracking.__main__",
    } == entries
    files = module_files(PACKAGE)
    for module in sorted(entries):
        tree = ast.parse(files[module][0].read_text())
        body = [n for n in tree.body if not isinstance(n, ast.Expr)]  # the docstring
        launch = [n for n in body if isinstance(n, ast.ImportFrom)]
        assert len(launch) == 1, module
        assert launch[0].module.startswith("quadrants.launch."), module
        assert [a.name for a in launch[0].names] == ["main"], module
        rest = [n for n in body if not isinstance(n, ast.ImportFrom)]
        assert all(
            isinstance(n, ast.If) or (isinstance(n, ast.Import) and n.names[0].name == "sys")
            for n in rest
        ), module
        assert sum(isinstance(n, ast.If) for n in rest) == 1, module
    importers = [(m, t) for m, targets in graph.items() for t in targets if t in entries]
    assert importers == []


def test_the_console_script_reaches_its_commands_only_through_its_verbs():
    """`quadrants/cli.py` imports nothing of the package as code (the walk finds no edge): each verb
    names a command line of launch/ that defines `main`, and those names are its edges here."""
    assert import_graph(PACKAGE)["quadrants.cli"] == {}
    edges = console_script_edges()
    assert len(edges) == 12  # the twelve commands (tests/unit/test_cli.py: one verb each)
    files = module_files(PACKAGE)
    for module in edges:
        assert component(module) == "launch", module
        tree = ast.parse(files[module][0].read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), module


def test_the_architecture_doc_states_this_table():
    """docs/architecture.md's layer table is this test's `ALLOWED`, row for row: its first column
    names the component (`ops/`, `config.py`; "entry modules" for the entries and the `python -m`
    aliases), its last column what it may import (backticked names, or "nothing"). A layering
    change that does not redraw the doc fails here."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    rows = doc.split("## The layers", 1)[1].split("\n\n")
    table = next(block for block in rows if block.startswith("| layer |"))
    stated: dict[str, frozenset[str]] = {}
    for line in table.splitlines()[2:]:
        first, *_, last = [cell.strip() for cell in line.strip("|").split("|")]
        name = first.strip("`").removesuffix("/").removesuffix(".py")
        names = frozenset(part.strip().strip("`") for part in last.split(",") if "`" in part)
        assert names or last == "nothing", f"{first}: say `nothing` or list the layers"
        stated[name] = names
    # the console script is an entry module too (it imports `launch` only)
    entries = {"entry", "cli", *ENTRY_COMMANDS}
    expected = {k: v for k, v in ALLOWED.items() if k not in entries and k != "root"}
    expected["entry modules"] = ALLOWED["entry"]
    assert {k: stated.get(k) for k in expected} == expected
    assert set(stated) == set(expected), "rows the layering test does not know"
    assert all(ALLOWED[name] == ALLOWED["entry"] for name in (*ENTRY_COMMANDS, "cli"))


# The modules that may name `RunConfig` (issue 62: at most 8): the run plan, which parses it; the
# Hydra schema's registration; the engines' own rules over a config; the resume identity (the
# schema's defaults); evaluate, which fits a composed config to its target before its one parse.
# Everything else takes the plan or its part of it (docs/architecture.md, "One parse").
RUN_CONFIG_NAMERS = frozenset(
    {
        "quadrants.run_plan.parse",
        "quadrants.run_plan.composition",
        "quadrants.run_plan.data_files",
        "quadrants.launch.hydra_setup",
        "quadrants.rollout.registry",
        "quadrants.run.resume_identity",
        "quadrants.launch.evaluate",
    }
)


def run_config_importers(package: Path) -> set[str]:
    """The modules of `package` that import the name RunConfig (any `from ... import RunConfig`:
    top level, in a function, under TYPE_CHECKING)."""
    found = set()
    for name, (path, _) in module_files(package).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and any(a.name == "RunConfig" for a in node.names):
                found.add(name)
    return found


def test_only_the_run_plan_and_its_few_neighbours_name_the_config(tmp_path):
    assert run_config_importers(PACKAGE) == RUN_CONFIG_NAMERS
    assert len(RUN_CONFIG_NAMERS) <= 8
    # a planted lazy import in a lower layer is seen: eval taking the whole config again
    planted = tmp_path / "quadrants" / "eval"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "runner.py").write_text("def f():\n    from quadrants.config import RunConfig\n")
    assert run_config_importers(tmp_path / "quadrants") == {"quadrants.eval.runner"}
