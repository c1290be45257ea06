"""Every command the README and docs/*.md show runs as written on a fresh machine, as far as it can
be checked without doing the work.

- Every `python -m quadrants.sweep|submit|plan` command of their code blocks, and the examples in
  the Hydra tree's comments, composes: its overrides (the first job of a multirun) give a valid
  RunConfig, as `--cfg job` would print it. Data files are not asked for there; a documented sweep
  or submission that reads the data home then passes its pre-flight's data checks on an empty one,
  after the `python -m quadrants.data` commands above it in its block (the rule below).
- Every other command of their code blocks (`python -m quadrants.evaluate`, `probe`, `data`,
  `status`, `export`, `counterfactual`, `tracking deliver`, `distributed_main`, `python -m
  analysis`, `tests.ood_samples`) is parsed by its own command line and checked as its `main`
  checks it before loading anything, with an empty data home: the rules (placeholders, data) are
  stated above `documented_runs`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from quadrants.launch import (
    analysis_command,
    counterfactual,
    data,
    evaluate,
    export,
    probe,
    status,
    tracking,
)
from quadrants.launch.hydra_setup import compose_run_config, expand_jobs, split_hydra_argv
from quadrants.tasks.data_files import CATALOGUE
from tests.data_fixtures import FIXTURE_ROWS

ROOT = Path(__file__).resolve().parents[2]
HYDRA_COMMANDS = ("quadrants.sweep", "quadrants.submit", "quadrants.plan")
EXAMPLES = ROOT / "docs" / "examples"
_FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def documented_commands() -> list[tuple[str, str]]:
    """(where, the command's arguments after `python -m MODULE`) of every Hydra command."""
    found = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for block in _FENCE.findall(page.read_text(encoding="utf-8")):
            found += [(page.name, line) for line in _logical_lines(block)]
    for preset in sorted((ROOT / "sweeps").rglob("*.yaml")):
        text = "\n".join(
            line.lstrip("#") for line in preset.read_text().splitlines() if line.startswith("#")
        )
        found += [(str(preset.relative_to(ROOT)), line) for line in _logical_lines(text)]
    commands = []
    for where, line in found:
        # a command at the start of a line or of a `&&` chain, not one named in prose
        match = re.search(
            r"(?:^|\s|/)python -m (quadrants\.(?:sweep|submit|plan))\b([^&|;]*)", line
        )
        if match and match.group(1) in HYDRA_COMMANDS:
            commands.append((where, match.group(2)))
    return commands


COMMANDS = documented_commands()


def test_the_custom_task_example_is_the_code_the_docs_show():
    # docs/tools.md shows docs/examples/mystudy.py's code (less its docstring) in a python block
    shown = re.search(
        r"```python\n# mystudy.py\n(.*?)```", (ROOT / "docs/tools.md").read_text(), re.S
    )
    assert shown is not None
    module = (EXAMPLES / "mystudy.py").read_text()
    assert module.split('"""\n\n', 1)[1] == shown.group(1)


def test_the_documents_hold_the_commands():
    # the README's first bash block starts with the four-quadrant ablation
    assert ("README.md", " -m quadrant=PHR,NHR,PLR,NLR") in COMMANDS
    assert len(COMMANDS) >= 40, len(COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[f"{w}:{a[:60]}" for w, a in COMMANDS])
def test_a_documented_command_composes_as_written(where, args, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the custom task's module (docs/tools.md)
    argv = shlex.split(args.replace("$PWD", os.getcwd()), comments=True)
    assert not any(a.startswith("<") or "<" in a.split("=", 1)[-1][:1] for a in argv), argv
    _, overrides = split_hydra_argv(argv)
    job = expand_jobs(overrides)[0] if overrides else []
    compose_run_config(job, files=False)


# --- every other documented command: its own parser, and what it checks before doing anything ---
#
# Every line of a fenced block in README.md and docs/*.md that runs `python -m MODULE` (also as
# `.venv/bin/python -m`, after `VAR=value`, after `&&`, under `srun`) or `torchrun ... -m MODULE`
# is parsed by that command's own parse step, as written, and checked as far as its `main` checks
# before it loads a model, opens a store, fetches or writes anything. The Hydra commands (sweep,
# submit, plan) are composed above; `python -m venv|pip|pytest` are other tools'.
#
# Placeholders, substituted before parsing (no `<...>` may be left):
#   <sweep_id>, <sweep>                      -> s0123abcd, a made-up sweep id
#   <run_dir>, RUN_DIR                       -> outputs/quadrants/s0123abcd/default
#   <target>, <run dir | model dir | hub id> -> tiny, the embedded model
# Words a command takes as text (ID, URI, DIR, FILE, exported/phr) are kept as written.
# A training run directory a command names (a path under outputs/quadrants/) is made in the test's
# working directory with what target resolution reads before loading: config.yaml (model tiny) and
# a checkpoint of step 60 (checkpoints/step_0000060/state.pt, empty); `./NAME` is made a model
# directory (config.json). No weights are read from them.
#
# Data: the checks run against an empty data home, a fresh machine's. The `python -m quadrants.data`
# commands above a command in its block count as run (the data sets they download or import are put
# in the data home, as the session's fixture files), so a command that needs benchmark files passes
# only when its block shows the data command that fetches them first. A command that names its own
# data directory (`eval.data_dir=DIR`, `QUADRANTS_DATA=DIR`: the out-of-domain sets, which that
# command does not manage) is checked without its files: DIR is the reader's.

SWEEP = "s0123abcd"
RUN = f"outputs/quadrants/{SWEEP}/default"
PLACEHOLDERS = (
    ("<run dir | model dir | hub id>", "tiny"),
    ("<target>", "tiny"),
    ("<run_dir>", RUN),
    ("RUN_DIR", RUN),
    ("<sweep_id>", SWEEP),
    ("<sweep>", SWEEP),
)
OTHER_TOOLS = {"venv", "pytest", "pip"}
_RUN_COMMAND = re.compile(
    r"^((?:[A-Za-z_]+=\S*\s+)*)"  # environment assignments
    r"(?:(?:torchrun|srun)\s+(?:\S+\s+)*?)?"  # a launcher and its flags
    r"(?:\S*/)?(?:python\s+)?-m\s+([\w.]+)(.*)$"
)


@dataclass(frozen=True)
class Documented:
    where: str  # the page
    env: str  # `VAR=value ` assignments before the command
    module: str  # what `python -m` runs
    args: str  # the rest of the line, comment included
    above: tuple[str, ...]  # the commands of its block above it, as (module, args)

    @property
    def id(self) -> str:
        return f"{self.where}:{self.module} {self.args.split('#')[0].strip()}"[:90]


def _commands(line: str) -> list[re.Match]:
    return [m for part in line.split("&&") if (m := _RUN_COMMAND.match(part.strip()))]


def documented_runs(*, hydra: bool = False) -> list[Documented]:
    """Every `python -m` / `torchrun -m` command of a fenced block of README.md and docs/*.md
    that is not another tool's: the Hydra ones (sweep, submit, plan) with `hydra`, else the
    others."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in _FENCE.findall(page.read_text(encoding="utf-8")):
            above: list[tuple[str, str]] = []
            for line in _logical_lines(block):
                for match in _commands(line):
                    env, module, args = match.groups()
                    if module not in OTHER_TOOLS and (module in HYDRA_COMMANDS) == hydra:
                        found.append(Documented(page.name, env, module, args, tuple(above)))
                    above.append((module, args))
    return found


RUNS = documented_runs()
# the commands whose checks compose the Hydra tree (half a second or more each)
COMPOSING = {"quadrants.evaluate", "quadrants.probe", "quadrants.distributed_main"}


def _argv(text: str) -> list[str]:
    for placeholder, value in PLACEHOLDERS:
        text = re.sub(rf"(?<![\w<]){re.escape(placeholder)}(?![\w>])", value, text)
    argv = shlex.split(text, comments=True)
    assert not any("<" in a for a in argv), f"a placeholder without a substitution rule: {argv}"
    return argv


def _make_named_directories(argv: list[str]) -> None:
    """The run and model directories `argv` names, made as the rule above says."""
    for arg in argv:
        parts = Path(arg).parts
        if parts[:2] == ("outputs", "quadrants") and len(parts) >= 4:
            run = Path(*parts[:4])
            step = run / "checkpoints" / "step_0000060"
            step.mkdir(parents=True, exist_ok=True)
            (step / "state.pt").touch()
            (run / "config.yaml").write_text("model:\n  name_or_path: tiny\n  dtype: float32\n")
        elif arg.startswith("./") and len(parts) == 1:
            Path(arg).mkdir(exist_ok=True)
            (Path(arg) / "config.json").write_text("{}\n")


def _fetched_above(command: Documented, home: Path) -> list[str]:
    """Run the data commands above `command` as far as the data home goes: each data set they
    download or import gets its fixture file there. Returns their names."""
    names = []
    for module, args in command.above:
        if module == "quadrants.data":
            parsed = data.parse(_argv(args))
            names += parsed.names if parsed.command == "download" else []
            names += [parsed.name] if parsed.command == "import" else []
    for name in names:
        relative = CATALOGUE[name].relative
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in FIXTURE_ROWS[relative]))
    return names


def _prepare_as_main(module: str, argv: list[str], files: bool) -> None:
    """evaluate / probe: parse, then `prepare` as the command's `main` calls it (`evaluate --cfg`
    asks for no data files; `files=False`: nor does a command that names its data directory)."""
    probing = module == "quadrants.probe"
    args = (probe if probing else evaluate).parser().parse_args(argv)
    files = files and (probing or not args.cfg)
    evaluate.prepare(args.target, list(args.overrides), files=files, task_used=probing)


def check_command(module: str, argv: list[str], *, files: bool) -> None:
    """Parse `argv` with `module`'s own parse step and run the checks its `main` runs before it
    reads a model, a store or the network."""
    if module in ("quadrants.evaluate", "quadrants.probe"):
        _prepare_as_main(module, argv, files)
    elif module == "quadrants.distributed_main":  # one run: the overrides of a sweep, no -m
        flags, overrides = split_hydra_argv(argv)
        assert not {"-m", "--multirun"} & set(flags), argv
        compose_run_config(overrides, files=files)
    elif module in ("analysis", "quadrants.analysis"):
        analysis_command.parse(argv)
    elif module == "quadrants.data":
        data.parse(argv)
    elif module == "quadrants.status":
        status.parser().parse_args(argv)
    elif module == "quadrants.export":
        args = export.parser().parse_args(argv)
        export.checkpoint_target(args.run, args.step)
    elif module == "quadrants.counterfactual":
        counterfactual.parse(argv)
    elif module == "quadrants.tracking":
        assert argv[:1] == ["deliver"], argv
        tracking.parser().parse_args(argv[1:])
    elif module == "tests.ood_samples":  # the made-up out-of-domain files: one directory
        assert len(argv) == 1, argv
    else:
        raise AssertionError(f"python -m {module}: a documented command this test does not know")


def test_the_documents_hold_every_kind_of_command():
    assert {c.module for c in RUNS} == {
        "analysis",
        "quadrants.evaluate",
        "quadrants.probe",
        "quadrants.data",
        "quadrants.status",
        "quadrants.export",
        "quadrants.counterfactual",
        "quadrants.tracking",
        "quadrants.distributed_main",
        "tests.ood_samples",
    }
    assert len(RUNS) >= 40, len(RUNS)
    # the data commands above a command are found: evaluation.md's block fetches eval=quick's files
    quick = next(c for c in RUNS if c.where == "evaluation.md" and "eval=quick" in c.args)
    assert ("quadrants.data", " download gsm8k math500") in [
        (m, a.split("#")[0].rstrip()) for m, a in quick.above
    ]


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(c, marks=[pytest.mark.slow] if c.module in COMPOSING else [], id=c.id)
        for c in RUNS
    ],
)
def test_a_documented_command_parses_as_written(command, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # a hub id is named, never fetched
    home = tmp_path / "data home"
    monkeypatch.setenv("QUADRANTS_DATA", str(home))  # empty, as on a fresh machine
    argv = _argv(command.args)
    _make_named_directories(argv)
    fetched = _fetched_above(command, home)
    own_data = "QUADRANTS_DATA=" in command.env or any(a.startswith("eval.data_dir=") for a in argv)
    try:
        check_command(command.module, argv, files=not own_data)
    except SystemExit as exit_:  # argparse's refusal, as the command would exit
        raise AssertionError(
            f"python -m {command.module} {' '.join(argv)}: refused (exit {exit_}; the parser's message "
            "is in the captured stderr)"
        ) from None
    except FileNotFoundError as error:
        if "no data file at" not in str(error):
            raise
        raise AssertionError(
            f"{command.where}: `python -m {command.module}{command.args}` needs data files a "
            f"fresh machine lacks ({error}); the data commands above it fetch {fetched or 'none'}: "
            "show the `python -m quadrants.data download ...` that fetches them first"
        ) from None


def _reads_data(command: Documented) -> bool:
    """A sweep or submission that reads the data home: its pre-flight asks for the data files
    (`python -m quadrants.plan` and `--cfg` do not; a command naming its own data path, e.g.
    `task.params.path=$PWD/my_verl.parquet`, brings it)."""
    argv = shlex.split(command.args, comments=True)
    own = ("task.params.path=", "eval.data_dir=")
    return (
        command.module != "quadrants.plan"
        and "--cfg" not in argv
        and "QUADRANTS_DATA=" not in command.env
        and not any(a.startswith(own) for a in argv)
    )


DATA_RUNS = [c for c in documented_runs(hydra=True) if _reads_data(c)]


@pytest.mark.slow
@pytest.mark.parametrize("command", DATA_RUNS, ids=[c.id for c in DATA_RUNS])
def test_a_documented_run_shows_the_data_it_needs_first(command, monkeypatch, tmp_path):
    # the sweep's pre-flight (hydra_setup: RunPlan.parse(files=True)) on a fresh machine's empty
    # data home, after the `python -m quadrants.data` commands above it in its block
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the custom task's module (docs/tools.md)
    home = tmp_path / "data home"
    monkeypatch.setenv("QUADRANTS_DATA", str(home))
    fetched = _fetched_above(command, home)
    argv = shlex.split(command.args.replace("$PWD", os.getcwd()), comments=True)
    _, overrides = split_hydra_argv(argv)
    job = expand_jobs(overrides)[0] if overrides else []
    try:
        compose_run_config(job, files=True)
    except FileNotFoundError as error:
        raise AssertionError(
            f"{command.where}: `python -m {command.module}{command.args}` needs data files a "
            f"fresh machine lacks ({error}); the data commands above it fetch {fetched or 'none'}: "
            "show the `python -m quadrants.data download|import ...` that brings them first"
        ) from None
