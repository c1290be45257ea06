"""The task registry (quadrants/tasks/registry.py): a task is its module, its YAML in sweeps/task/
and its test; the run, the evaluation and the compose-time validation look it up by name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from quadrants.launch.hydra_setup import CONFIG_DIR
from quadrants.tasks import make_task, validate_task
from quadrants.tasks.base import Problem
from quadrants.tasks.registry import TASKS, TaskKind, get_task, known_tasks, register_task


def test_every_task_yaml_names_a_registered_task_and_every_task_has_its_yaml():
    files = sorted((CONFIG_DIR / "task").glob("*.yaml"))
    named = {path.stem: yaml.safe_load(path.read_text())["name"] for path in files}
    # each group file is named after the task it selects (task=gsm8k -> name: gsm8k)
    assert all(stem == name for stem, name in named.items()), named
    assert sorted(named) == sorted(known_tasks())
    assert sorted(known_tasks()) == [
        "arithmetic",
        "custom",
        "dataset",
        "deepscaler",
        "gsm8k",
        "math",
        "reasoning_gym",
    ]


def test_an_unknown_name_lists_the_known_ones_for_make_and_validate():
    with pytest.raises(ValueError, match=r"task.name='gsm9k' is unknown; choose one of \['arith"):
        make_task("gsm9k", 0, {})
    with pytest.raises(ValueError, match=r"task.name='gsm9k' is unknown"):
        validate_task("gsm9k", 0, {})


def test_a_name_is_registered_once_and_must_be_given():
    with pytest.raises(ValueError, match=r"task 'gsm8k' is already registered"):
        register_task(get_task("gsm8k"))
    with pytest.raises(ValueError, match=r"TaskKind has no name"):
        register_task(TaskKind())


@dataclass
class _Echo:
    """A made-up task: problem i asks for i."""

    heldout_size: int
    size: int

    def problems(self) -> list[Problem]:
        return [Problem(id=str(i), prompt=f"{i}?", answer=str(i)) for i in range(self.size)]


class _EchoKind(TaskKind):
    name = "echo_for_test"

    def make(self, heldout_size, params):
        return _Echo(heldout_size, **params)

    def validate(self, heldout_size, params, *, model, files):
        if params.get("size", 1) < 1:
            raise ValueError(f"task.params.size={params['size']} is out of range; allowed: >= 1")


def test_a_registered_task_is_made_and_validated_by_name():
    register_task(_EchoKind())
    try:
        assert "echo_for_test" in known_tasks()
        task = make_task("echo_for_test", 2, {"size": 3})
        assert isinstance(task, _Echo) and (task.heldout_size, task.size) == (2, 3)
        validate_task("echo_for_test", 2, {"size": 3})
        with pytest.raises(ValueError, match=r"task.params.size=0 is out of range"):
            validate_task("echo_for_test", 2, {"size": 0})
        # the shared check runs before the task's own
        with pytest.raises(ValueError, match=r"task.heldout_size=-1 is out of range"):
            validate_task("echo_for_test", -1, {"size": 3})
    finally:
        del TASKS.kinds["echo_for_test"]
    assert "echo_for_test" not in known_tasks()
