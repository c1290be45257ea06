"""The run plan's second half: the local files a checked configuration reads, checked on the
machine that reads them (`RunPlan.with_data_files`, quadrants/run_plan/parse.py).

The task's files (`task.params.path`, `heldout_path`) and the evaluation's benchmarks
(`eval.source=local`); a user's own dataset must leave training problems after its held-out split;
a user's reward function (`task.reward`) is called once on a problem of the task. The task is built
once here, for both of the last two checks, from local files only.
"""

from __future__ import annotations

import inspect
import random
import re
from typing import Any

from quadrants.config import RunConfig
from quadrants.eval.suite import check_eval_files
from quadrants.rewards.custom import load_callable, probe_reward
from quadrants.tasks import DATASET_PRESETS, check_task_files, make_task


def check_data_files(cfg: RunConfig) -> None:
    """The local data files a checked configuration reads: the task's (`task.params.path`,
    `heldout_path`) and the evaluation's benchmarks (`eval.source=local`), then the held-out split
    and the reward function on the task built from them."""
    check_task_files(cfg.task.name, dict(cfg.task.params))
    check_eval_files(cfg.eval, cfg.task)
    task = _LocalTask(cfg)
    check_heldout_fits(cfg, task)
    check_reward_computes(cfg, task)


class _LocalTask:
    """The run's task, built at most once and only when a check asks for it, from local files
    only (`task_is_local`)."""

    def __init__(self, cfg: RunConfig) -> None:
        self._cfg = cfg
        self._task: Any = None

    def get(self) -> Any:
        if self._task is None:
            task = self._cfg.task
            self._task = make_task(task.name, task.heldout_size, dict(task.params))
        return self._task


def check_heldout_fits(cfg: RunConfig, task: _LocalTask) -> None:
    """A local dataset split into held-out and training problems (no `heldout_path`): it must have
    more usable rows than `task.heldout_size`. `check_task_files` has read every line already;
    building the task counts its usable rows (empty ones and decontaminated ones dropped) and
    refuses naming both numbers, before anything is written, instead of 27 s into the job."""
    params = dict(cfg.task.params)
    # the user's own file (`task=dataset`); the catalogue's presets have their known sizes
    if cfg.task.name != "dataset" or not task_is_local(cfg.task.name, params):
        return
    if params.get("heldout_path"):
        return
    try:
        task.get()
    except ValueError as error:
        found = re.search(
            r"task.heldout_size=\d+ leaves no training problems.* has (\d+) usable", str(error)
        )
        if found is None:
            raise
        rows = int(found.group(1))
        fix = f"task.heldout_size={rows // 5} (a fifth of them), " if rows >= 5 else ""
        raise ValueError(
            f"{error} in task.params.path={params.get('path')}, so the held-out split of "
            f"task.heldout_size={cfg.task.heldout_size} takes them all. Fix: {fix}more rows, or "
            "task.params.heldout_path=FILE (a held-out file of its own)"
        ) from None


def task_is_local(name: str, params: dict) -> bool:
    """Whether task `name` is built from this machine alone (no Hub download): the generated
    tasks, the user's own, and datasets read from a local file."""
    if name in ("arithmetic", "reasoning_gym", "custom"):
        return True
    merged = {**DATASET_PRESETS.get(name, {}), **params}
    return merged.get("source", "local" if merged.get("path") else "hub") == "local"


def check_reward_computes(cfg: RunConfig, task: _LocalTask) -> None:
    """`task.reward`: called once on a problem of the task (its first held-out problem, else one
    training problem), as training calls it; refused naming the key when it cannot take
    (completion, answer), raises, or returns NaN or another value that is not a grade
    (rewards/custom.py `probe_reward`). A task on the Hub is not downloaded for this: there only
    the signature is checked here, and the run's guard (run/grading.py) stops a run whose
    completions fail to grade."""
    if cfg.task.reward is None:
        return
    function = load_callable(cfg.task.reward, "task.reward")
    params = dict(cfg.task.params)
    if not task_is_local(cfg.task.name, params):
        probe = None
    else:
        built = task.get()
        found = built.heldout(1) or built.train_batch(1, random.Random(0))
        probe = found[0].answer if found else None
    if probe is None:  # the signature only
        try:
            inspect.signature(function).bind("", "")
        except TypeError as error:
            raise ValueError(
                f"task.reward={cfg.task.reward}: it cannot be called as reward(completion, "
                f"answer) ({error})"
            ) from None
        except ValueError:
            pass
        return
    probe_reward(function, "task.reward", cfg.task.reward, probe)
