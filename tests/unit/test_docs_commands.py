"""Every `python -m quadrants.sweep|submit|plan` command in the README's and docs' code blocks, and
in the examples of the Hydra tree's comments, composes as written: its overrides (the first job of
a multirun) give a valid RunConfig, as `--cfg job` would print it. Data files are not asked for (a
fresh machine has none until `python -m quadrants.data download`); everything else is checked."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from quadrants.launch.hydra_setup import compose_run_config, expand_jobs, split_hydra_argv

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
