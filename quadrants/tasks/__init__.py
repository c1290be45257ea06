"""Tasks: sources of verifiable problems. `make_task` builds one from the run config; the tasks
by name (`task.name`), and how to add one, are in quadrants/tasks/registry.py."""

from __future__ import annotations

from quadrants.tasks.base import Problem, RenderedTask, Task
from quadrants.tasks.registry import (
    DATASET_PRESETS,
    check_task_files,
    get_task,
    is_char_level,
    known_tasks,
    make_task,
    validate_task,
)

__all__ = [
    "DATASET_PRESETS",
    "check_task_files",
    "Problem",
    "RenderedTask",
    "Task",
    "get_task",
    "is_char_level",
    "known_tasks",
    "make_task",
    "validate_task",
]
