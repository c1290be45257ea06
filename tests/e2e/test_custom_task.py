"""A task and a reward from the user's own module, as docs/tools.md shows them: a module in a
directory on PYTHONPATH, `task=custom task.params.target=... task.reward=...` on the sweep's command
line, no edit to quadrants. The reward writes down what it graded, so the test sees that training
and the held-out check asked it about the module's problems, and MLflow holds its rewards."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from mlflow.tracking import MlflowClient

from tests import commands
from tests.commands import TINY

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODULE = '''
import json
import os

from quadrants.tasks.base import Problem


class Colours:
    name = "colours"

    def __init__(self, heldout_size, words):
        self.words = list(words)
        self.heldout_size = heldout_size

    def train_batch(self, n, rng):
        return [Problem(f"t-{w}", f"Say {w}:", w) for w in rng.choices(self.words[1:], k=n)]

    def heldout(self, n=None):
        return [Problem(f"h-{w}", f"Say {w}:", w) for w in self.words[:1]][:n]


def make_task(heldout_size, words):
    return Colours(heldout_size, words)


def generous(completion, answer):
    """Every completion is correct; each call is written down."""
    with open(os.environ["GRADED_LOG"], "a") as log:
        log.write(json.dumps([completion, answer]) + "\\n")
    return True
'''


def test_a_users_task_and_reward_train_without_editing_the_package(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_study.py").write_text(textwrap.dedent(MODULE))
    graded = tmp_path / "graded.jsonl"
    path = os.pathsep.join(p for p in (str(tmp_path / "pkg"), os.environ.get("PYTHONPATH")) if p)
    env = commands.command_env(PYTHONPATH=path, GRADED_LOG=str(graded))
    done = commands.run(
        "quadrants.sweep",
        "sweep_id=X",
        "train.steps=2",
        "task=custom",
        "task.params.target=my_study:make_task",
        "+task.params.words=[red,green,blue]",
        "task.heldout_size=1",
        "task.reward=my_study:generous",
        *TINY,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pairs = [json.loads(line) for line in graded.read_text().splitlines()]
    # the compose-time call (validation.py `check_reward_computes`): the held-out problem's gold,
    # boxed; no 8-token completion of the model can be that 11-character text
    probes = [pair for pair in pairs if pair == ["\\boxed{red}", "red"]]
    pairs = [pair for pair in pairs if pair not in probes]
    assert 1 <= len(probes) <= 2  # the sweep's preflight, and the job's own check unless cached
    # 2 steps x 2 prompts x 2 samples in training; the held-out 'red' once before training and once
    # at the end (eval.samples=1)
    assert len(pairs) == 10
    assert {answer for _, answer in pairs} <= {"red", "green", "blue"}
    assert [answer for _, answer in pairs].count("red") == 2  # held out: never a training answer

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    (run,) = [r for r in client.search_runs([experiment.experiment_id]) if "steps" in r.data.params]
    rewards = client.get_metric_history(run.info.run_id, "train/reward_mean")
    assert [(m.step, m.value) for m in rewards] == [(1, 1.0), (2, 1.0)]  # every answer correct
    assert run.data.params["task"] == "custom" == run.data.tags["task"]
    assert run.data.tags["quadrants.role"] == "train"  # what the printed link filters on
