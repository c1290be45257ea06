"""The console script `quadrants VERB ...` (quadrants/cli.py): one verb per `python -m` command,
each running the command's own `main` with the arguments that command reads after `python -m`."""

from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import pytest

from quadrants import cli
from tests.commands import command_env, run

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "quadrants"


def alias_targets() -> dict[str, str]:
    """`python -m` module -> the launch module whose `main` it runs, read from every alias file:
    the top-level `quadrants/<command>.py`, each package's `__main__.py`, and `analysis/`'s."""
    found = {}
    files = [
        *PACKAGE.glob("*.py"),
        *PACKAGE.glob("*/__main__.py"),
        ROOT / "analysis" / "__main__.py",
    ]
    for path in files:
        text = path.read_text()
        if 'if __name__ == "__main__":' not in text or path.name == "cli.py":
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        alias = ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
        imports = [n for n in ast.parse(text).body if isinstance(n, ast.ImportFrom)]
        assert [a.name for n in imports for a in n.names] == ["main"], path
        found[alias] = imports[0].module
    return found


def test_every_python_m_command_has_one_verb_running_the_same_main():
    verbs = {alias: verb.module for verb in cli.VERBS.values() for alias in verb.aliases}
    assert verbs == alias_targets()
    # the 12 commands: 9 top-level aliases, 3 packages' __main__ (probe, analysis, tracking); the
    # top-level `python -m analysis` is a second alias of `quadrants.analysis`
    assert len(cli.VERBS) == 12 and len(verbs) == 13


@pytest.mark.parametrize("name", sorted(cli.VERBS))
def test_a_verb_runs_its_command_with_the_arguments_python_m_gives_it(name, monkeypatch):
    """The verb's module's `main` runs with no argument and reads sys.argv as after `python -m`:
    the rest of the command line, unchanged (flags, `-m`, `--cfg job`, overrides); its return
    value is the exit status. The module is a stand-in here (the subprocess tests below run the real
    ones), so nothing is imported."""
    seen = []

    def main(*args):
        seen.append((args, list(sys.argv)))
        return 7

    module = types.ModuleType(cli.VERBS[name].module)
    module.main = main
    monkeypatch.setitem(sys.modules, cli.VERBS[name].module, module)
    monkeypatch.setattr(sys, "argv", ["quadrants"])
    rest = ["-m", "quadrant=PHR,NHR", "--cfg", "job", "--help", "x=a b"]
    assert cli.main([name, *rest]) == 7
    assert seen == [((), [f"quadrants {name}", *rest])]


def test_help_lists_every_verb_on_one_line(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == list(cli.VERBS)
    assert all(len(line) <= 100 for line in out.splitlines())
    assert cli.main([]) == 2  # no verb: the same list, on stderr
    assert "  sweep " in capsys.readouterr().err


def test_an_unknown_verb_is_refused_naming_the_verbs(capsys):
    assert cli.main(["evalute", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'evalute' (did you mean evaluate?)" in err
    assert all(name in err for name in cli.VERBS)


def test_the_docs_name_every_verb_and_its_python_m_form():
    """docs/cli.md's table: one row per verb, `quadrants VERB` beside `python -m ALIAS`."""
    doc = (ROOT / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| `quadrants (\S+)[^`]*` \| `python -m ([^\s`]+)`", doc, re.M)
    assert rows == [(name, verb.aliases[0]) for name, verb in cli.VERBS.items()]


def test_pyproject_declares_the_console_script():
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^quadrants = "quadrants\.cli:main"$', section, re.M)


# --- the real commands, in processes: the verb prints what `python -m` prints ------------------

CHEAP = [
    ("sweep", "--cfg", "job", "quadrant=PHR"),  # Hydra: the composed job config
    ("sweep", "--help"),  # Hydra's help
    ("probe", "--help"),  # argparse
    ("analysis", "power", "--help"),  # a sub-command's argparse
]


@pytest.mark.subprocess
@pytest.mark.parametrize("args", CHEAP, ids=["-".join(a) for a in CHEAP])
def test_a_verb_prints_what_its_python_m_form_prints(args, tmp_path):
    name, rest = args[0], args[1:]
    through_verb = run("quadrants.cli", name, *rest, cwd=tmp_path)
    direct = run(cli.VERBS[name].aliases[0], *rest, cwd=tmp_path)
    assert through_verb.returncode == direct.returncode == 0, through_verb.stderr
    assert through_verb.stdout == direct.stdout
    assert len(direct.stdout.splitlines()) > 5


SCRIPT = Path(sys.executable).parent / "quadrants"


@pytest.mark.subprocess
@pytest.mark.skipif(
    not SCRIPT.exists(),
    reason="the console script is not installed in this environment (pip install -e . puts it "
    "beside the interpreter)",
)
def test_the_installed_script_runs_the_sweep_as_python_m_does(tmp_path):
    import subprocess

    args = ["sweep", "--cfg", "job", "quadrant=PHR"]
    done = subprocess.run(
        [str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, env=command_env()
    )
    direct = run("quadrants.sweep", *args[1:], cwd=tmp_path)
    assert done.returncode == direct.returncode == 0, done.stderr
    assert done.stdout == direct.stdout and "quadrant:" in done.stdout
    listing = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True)
    assert listing.returncode == 0 and "counterfactual" in listing.stdout
