"""Tasks by name: the one place that knows `task.name` values.

A task enters a run through its `TaskKind`, registered under the name the config uses
(`sweeps/task/<name>.yaml`); the rest of the code asks the registry, never the name:
- `make(heldout_size, params)`: the task itself (quadrants/tasks/base.py's `Task`);
- `validate(heldout_size, params, model=, files=)`: compose-time checks of `task.params` and of the
  task matching the model (ValueError naming the key); reads no dataset and loads no model;
- `check_files(params)`: that the local data files `task.params` names exist and hold the rows
  (`validate(files=True)` ends with it; `RunPlan.parse` runs it on its own, once).

Registered here:
- ``arithmetic``: the embedded synthetic world (character-level prompts such as ``12+34*5=``), for
  the embedded tiny model only (`tasks/synthetic.py`).
- ``dataset``: problems from a JSONL/Parquet file or the Hugging Face Hub (`tasks/dataset.py`).
- ``deepscaler``, ``gsm8k``, ``math``: `dataset` with the settings of the paper's training set,
  GSM8K's train split and MATH's train split (`DATASET_PRESETS`; `task.params` override them).
- ``reasoning_gym``: a procedural curriculum from reasoning-gym (`tasks/reasoning_gym.py`).
- ``custom``: the task a function of the user's own module makes (`task.params.target`,
  `CustomKind`): a task without an edit to this package (docs/tools.md).

To add a task: write its module (a `Task`), subclass `TaskKind` and `register_task(YourKind())`,
add `sweeps/task/<name>.yaml` (tests/unit/tasks/test_registry.py checks that every YAML names a
registered task and every task has its YAML) and its test. Task modules import lazily here so that
composing a config reads no task code it does not use.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from quadrants.registry import Registry
from quadrants.tasks.base import Task

DATASET_PRESETS: dict[str, dict[str, Any]] = {
    # The paper's training set: DeepScaleR-Preview (40,315 problems) on the Hub; offline, the
    # 1,209-problem subset dsr_sub.jsonl (problem text without the data's instruction suffix).
    # The Hub's rows carry only problem, answer and solution: no `index`, so their ids are hashes
    # of their problem (tasks/dataset.py `problem_hash`); the offline rows keep their index.
    "deepscaler": dict(
        source="local",
        path="dsr_sub/dsr_sub.jsonl",
        hub="agentica-org/DeepScaleR-Preview-Dataset",
        problem_key="problem",
        answer_key="answer",
        id_key="index",
        gold="plain",
    ),
    "gsm8k": dict(
        source="local",
        path="gsm8k/train.jsonl",
        hub="openai/gsm8k",
        hub_config="main",
        problem_key="question",
        answer_key="answer",
        gold="gsm8k",
    ),
    # MATH train (7,500): Hub only (no redistributable offline copy); the gold is
    # the solution's last box.
    "math": dict(
        source="hub",
        path=None,
        hub="DigitalLearningGmbH/MATH-lighteval",
        problem_key="problem",
        answer_key="solution",
        gold="boxed",
    ),
}
_CHAR_LEVEL_VOCAB = 512  # the embedded tiny models' character vocabularies are far smaller


class TaskKind:
    """How a task is validated and built; subclass and set `name`."""

    name: str = ""

    def make(self, heldout_size: int, params: dict[str, Any]) -> Task:
        """The task with its keyword `params` (validated), holding out `heldout_size` problems."""
        raise NotImplementedError

    def validate(
        self, heldout_size: int, params: dict[str, Any], *, model: str | None, files: bool
    ) -> None:
        """Raise ValueError, naming the key, when `params` (or the model) cannot make this task;
        `files=False`: do not check that local files exist (`check_files`)."""

    def check_files(self, params: dict[str, Any]) -> None:
        """Raise when a local data file `params` names is missing or unreadable; none by default."""


TASKS: Registry[TaskKind] = Registry("task.name", "task")


def register_task(kind: TaskKind) -> TaskKind:
    """Register `kind` under `kind.name`; a second registration of the same name is an error."""
    return TASKS.register(kind)


def known_tasks() -> list[str]:
    return TASKS.names()


def get_task(name: str) -> TaskKind:
    """The registered task `name`; an unknown name lists the known ones."""
    return TASKS.get(name)


def make_task(name: str, heldout_size: int, params: dict[str, Any]) -> Task:
    """The task called `name` with its keyword `params`; unknown names list the known ones."""
    return get_task(name).make(heldout_size, params)


def validate_task(
    name: str,
    heldout_size: int,
    params: dict[str, Any],
    *,
    model: str | None = None,
    files: bool = True,
) -> None:
    """Compose-time checks: the name, the held-out size, then the task's own (its parameter names
    and values, local files unless ``files=False``, the task matching the model); reads no dataset
    and loads no model."""
    kind = get_task(name)
    if heldout_size < 0:
        raise ValueError(f"task.heldout_size={heldout_size} is out of range; allowed: >= 0")
    kind.validate(heldout_size, params, model=model, files=files)


def check_task_files(name: str, params: dict[str, Any]) -> None:
    """The local data files of task `name` with `params` (an already validated task): each exists
    and every line holds the fields the task reads."""
    get_task(name).check_files(params)


def _dataset_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The DatasetTask keyword arguments of task `name`: its preset overridden by `params`."""
    merged = {**DATASET_PRESETS.get(name, {}), **params}
    if not any(merged.get(k) for k in ("source", "path", "hub")):  # task=dataset as it comes
        raise ValueError(
            f"task {name} reads its problems from a file or the Hugging Face Hub, and neither is "
            "set. Fix: task.params.path=FILE (a JSONL or Parquet file, or a directory of them; "
            "relative to $QUADRANTS_DATA unless it exists here) or task.params.hub=DATASET_ID"
        )
    source = merged.pop("source", "local" if merged.get("path") else "hub")
    if source not in ("local", "hub"):
        raise ValueError(
            f"task.params.source={source!r} is unknown; choose one of ['local', 'hub']"
        )
    if source == "local":
        merged.pop("hub", None), merged.pop("hub_config", None)
        if not merged.get("path"):
            raise ValueError(
                f"task {name}: task.params.source=local needs task.params.path"
                + (
                    " (this dataset is on the Hub only: task.params.source=hub)"
                    if name in DATASET_PRESETS and not DATASET_PRESETS[name].get("path")
                    else ""
                )
            )
    else:
        merged.pop("path", None)
        if not merged.get("hub"):
            raise ValueError(
                f"task {name}: task.params.source=hub needs task.params.hub (a dataset id)"
            )
    merged.setdefault("name", name)
    return merged


def _check_keys(name: str, cls: type, params: dict[str, Any]) -> None:
    accepted = [
        p for p in inspect.signature(cls).parameters if p not in ("self", "heldout_size", "params")
    ]
    unknown = [key for key in params if key not in accepted]
    if unknown:
        raise ValueError(
            f"task.params: unknown key(s) {unknown} for task {name}; allowed: {accepted}"
        )


def is_char_level(model: str) -> bool:
    """Whether `model` is one of the embedded character-level models (which
    only know `arithmetic`)."""
    if model in ("tiny", "tiny-random"):
        return True
    config = Path(model).expanduser() / "config.json"
    if config.is_file():
        return int(json.loads(config.read_text()).get("vocab_size", 10**6)) < _CHAR_LEVEL_VOCAB
    return False


class ArithmeticKind(TaskKind):
    name = "arithmetic"

    def make(self, heldout_size, params):
        from quadrants.tasks.synthetic import ArithmeticTask

        return ArithmeticTask(heldout_size=heldout_size, **params)

    def validate(self, heldout_size, params, *, model, files):
        if model is not None and not is_char_level(model):
            raise ValueError(
                "task=arithmetic is the embedded character-level world (prompts such as "
                f"'12+34*5=', no instruction) and cannot train the pretrained model {model!r}; use "
                "a real task: task=gsm8k, task=deepscaler, task=dataset task.params.path=FILE, or "
                "task=reasoning_gym task.params.dataset=basic_arithmetic (with model=smollm2_135m, "
                "experiment=smollm2_arithmetic)"
            )


class DatasetKind(TaskKind):
    """`dataset`, or one of its presets (`DATASET_PRESETS`) under the preset's name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def make(self, heldout_size, params):
        from quadrants.tasks.dataset import DatasetTask

        return DatasetTask(heldout_size, **_dataset_params(self.name, params))

    def validate(self, heldout_size, params, *, model, files):
        from quadrants.tasks.benchmarks import GOLD_RULES
        from quadrants.tasks.dataset import DatasetTask

        merged = _dataset_params(self.name, params)
        _check_keys(self.name, DatasetTask, merged)
        if merged.get("gold", "plain") not in GOLD_RULES:
            raise ValueError(
                f"task.params.gold={merged['gold']!r} is unknown; choose one of {list(GOLD_RULES)}"
            )
        if files:
            self.check_files(params)

    def check_files(self, params):
        from quadrants.tasks.dataset import check_rows, resolve_path

        merged = _dataset_params(self.name, params)
        # not the id key: a row without it gets a hash of its problem (tasks/dataset.py)
        fields = [merged.get("problem_key", "problem"), merged.get("answer_key", "answer")]
        for key in ("path", "heldout_path"):
            if merged.get(key):
                found = resolve_path(merged[key], merged.get("data_dir"))
                check_rows(found, fields, f"task.params.{key}")  # every line, at compose time


class ReasoningGymKind(TaskKind):
    name = "reasoning_gym"

    def make(self, heldout_size, params):
        from quadrants.tasks.reasoning_gym import ReasoningGymTask

        return ReasoningGymTask(heldout_size, **params)

    def validate(self, heldout_size, params, *, model, files):
        try:
            import reasoning_gym  # noqa: F401

            from quadrants.tasks.reasoning_gym import MATH_ANSWER_DATASETS, REWARDS
        except ImportError:
            raise ValueError(
                "task=reasoning_gym needs the reasoning-gym package: pip install -e '.[curricula]' "
                "(or pip install reasoning-gym)"
            ) from None
        dataset = params.get("dataset")
        if dataset not in MATH_ANSWER_DATASETS:
            raise ValueError(
                f"task.params.dataset={dataset!r}: choose one of {list(MATH_ANSWER_DATASETS)} "
                "(datasets whose answers math-verify can grade)"
            )
        if params.get("reward", "math_verify") not in REWARDS:
            raise ValueError(
                f"task.params.reward={params['reward']!r} is unknown; choose one of {list(REWARDS)}"
            )


class CustomKind(TaskKind):
    """`task=custom`: the task a function of the user's own module makes. `task.params.target` is
    its path ("package.module:function", importable from the Python path); every other param is
    passed to it as a keyword argument, with `heldout_size`. It returns a `Task` (tasks/base.py: a
    `name`, `train_batch(n, rng)` and `heldout(n)` handing out `Problem`s)."""

    name = "custom"

    def _factory(self, params: dict[str, Any]) -> Any:
        from quadrants.rewards.custom import load_callable

        return load_callable(params.get("target"), "task.params.target")

    def make(self, heldout_size, params):
        rest = {k: v for k, v in params.items() if k != "target"}
        task = self._factory(params)(heldout_size=heldout_size, **rest)
        missing = [a for a in ("name", "train_batch", "heldout") if not hasattr(task, a)]
        if missing:
            raise TypeError(
                f"task.params.target={params['target']} returned {type(task).__name__}, which has "
                f"no {missing}: a task has a name, train_batch(n, rng) and heldout(n) "
                "(quadrants/tasks/base.py Task)"
            )
        return task

    def validate(self, heldout_size, params, *, model, files):
        factory = self._factory(params)  # imports the user's module: a bad path fails here
        accepted = inspect.signature(factory).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        unknown = [k for k in params if k != "target" and k not in accepted and not takes_any]
        if "heldout_size" not in accepted and not takes_any:
            unknown.insert(0, "heldout_size")
        if unknown:
            raise ValueError(
                f"task.params.target={params['target']}: {factory.__name__} does not take "
                f"{unknown} (it is called with heldout_size= and every other task.params key)"
            )


register_task(ArithmeticKind())
for _name in ("dataset", *DATASET_PRESETS):
    register_task(DatasetKind(_name))
register_task(ReasoningGymKind())
register_task(CustomKind())
