"""A user's module (`task.reward=mod:fn`, `task=custom task.params.target=mod:fn`) that raises while
it is imported is refused at compose time with its own exception (type, message, the line of the
user's file that raised) and the config key that named it, with the fix; one that is not on the
Python path keeps the PYTHONPATH advice. Through `compose_run_config`, in process, as every
command composes."""

from __future__ import annotations

import sys
import textwrap

import pytest

from quadrants.launch.hydra_setup import compose_run_config
from quadrants.rewards.custom import load_callable

# line 1 `import os`, line 2 blank, line 3 the raise
BUG = """\
import os

raise RuntimeError("bug at import time")


def reward(completion, answer):
    return True


def make_task(heldout_size):
    return None
"""

# line 1 a comment, line 2 the import of a package that is not installed
MISSING_DEP = """\
# needs a package this machine does not have
import quadrants_no_such_dependency  # noqa: F401


def reward(completion, answer):
    return True
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    (tmp_path / "bugmod.py").write_text(BUG)
    (tmp_path / "needs_dep.py").write_text(textwrap.dedent(MISSING_DEP))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("bugmod", "needs_dep"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.slow  # composes the tree (3.1 s each on the loaded 2-core machine)
@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["task.reward=bugmod:reward"], "task.reward=bugmod:reward"),
        (
            ["task=custom", "task.params.target=bugmod:make_task"],
            "task.params.target=bugmod:make_task",
        ),
    ],
)
def test_a_module_that_raises_at_import_is_refused_with_its_error_and_key(modules, overrides, key):
    with pytest.raises(ValueError) as refused:
        compose_run_config(overrides)
    said = str(refused.value)
    assert said.startswith(f"{key}: module 'bugmod' was found but raised while importing")
    assert f"RuntimeError: bug at import time at {modules / 'bugmod.py'}:3" in said
    assert "Fix the module" in said and "python -c 'import bugmod'" in said
    assert "PYTHONPATH" not in said  # it was found: the path is not what is wrong


def test_a_missing_dependency_of_the_module_is_its_own_error(modules):
    with pytest.raises(ValueError) as refused:
        load_callable("needs_dep:reward", "task.reward")
    said = str(refused.value)
    assert "task.reward=needs_dep:reward: module 'needs_dep' was found but raised" in said
    assert "No module named 'quadrants_no_such_dependency'" in said
    assert f"{modules / 'needs_dep.py'}:2" in said
    assert "PYTHONPATH" not in said


def test_a_module_not_on_the_path_is_told_to_put_it_there(modules):
    with pytest.raises(
        ValueError,
        match=r"task.reward=not_here_mod:reward: module 'not_here_mod' is not on the Python path .*put its directory on PYTHONPATH",
    ):
        load_callable("not_here_mod:reward", "task.reward")
