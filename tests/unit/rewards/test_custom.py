"""The user's own reward and task by path (rewards/custom.py, tasks/registry.py `CustomKind`): a
module written into tmp_path and put on the Python path, as a user's own package is."""

from __future__ import annotations

import random
import re
import textwrap

import pytest

from quadrants.rewards.custom import FunctionGrader, load_callable
from quadrants.rewards.outcome import Outcome
from quadrants.tasks import make_task, validate_task

MODULE = '''
from quadrants.rewards.outcome import Outcome
from quadrants.tasks.base import Problem


def exact(completion, answer):
    """Correct when the completion ends with the answer; no answer when it is empty."""
    if not completion.strip():
        return None
    return completion.strip().endswith(answer)


def picky(completion, answer):
    if completion == "boom":
        raise RuntimeError("cannot grade this")
    return Outcome.timeout if completion == "slow" else completion == answer


class Echo:
    """Problems 'say <word>' whose answer is the word; held out: the first `heldout_size` words."""

    name = "echo"

    def __init__(self, heldout_size, words):
        self.words = list(words)
        self.kept = self.words[:heldout_size]

    def train_batch(self, n, rng):
        pool = self.words[len(self.kept):]
        return [Problem(f"t{i}", f"say {w}", w) for i, w in enumerate(rng.choices(pool, k=n))]

    def heldout(self, n=None):
        return [Problem(f"h{i}", f"say {w}", w) for i, w in enumerate(self.kept[:n])]


def make_echo(heldout_size, words=("red", "green", "blue")):
    return Echo(heldout_size, words)


def not_a_task(heldout_size):
    return 42
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards"


def test_the_reward_function_grades_every_completion(user_module):
    grader = FunctionGrader(f"{user_module}:exact")
    batch = grader.grade(["so it is 42", "it is 41", "   "], ["42", "42", "42"])
    assert batch.outcomes == [Outcome.correct, Outcome.wrong, Outcome.no_answer]
    assert batch.rewards == [1.0, 0.0, 0.0]  # reward 1 exactly for correct


def test_an_outcome_is_kept_and_a_raising_reward_grades_error_once_logged(user_module, caplog):
    grader = FunctionGrader(f"{user_module}:picky")
    batch = grader.grade(["x", "slow", "boom", "boom"], ["x", "x", "x", "x"])
    assert batch.outcomes == [Outcome.correct, Outcome.timeout, Outcome.error, Outcome.error]
    assert caplog.text.count("cannot grade this") == 1


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("my_rewards.exact", "is not a 'module:function' path"),
        ("no_such_module:exact", "module 'no_such_module' cannot be imported"),
        ("my_rewards:missing", "my_rewards has no callable 'missing'"),
    ],
)
def test_a_bad_path_is_refused_naming_the_key(user_module, path, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        load_callable(path, "task.reward")


def test_the_custom_task_is_made_by_the_users_factory(user_module):
    params = {"target": f"{user_module}:make_echo", "words": ["a", "b", "c", "d"]}
    validate_task("custom", 1, params)
    task = make_task("custom", 1, params)
    assert task.name == "echo" and [p.answer for p in task.heldout()] == ["a"]
    drawn = task.train_batch(5, random.Random(0))
    assert len(drawn) == 5 and all(
        p.answer in "bcd" and p.prompt == f"say {p.answer}" for p in drawn
    )


def test_a_bad_custom_task_is_refused_at_compose_time_naming_the_key(user_module):
    with pytest.raises(ValueError, match=r"task.params.target=None is not a 'module:function'"):
        validate_task("custom", 1, {})
    with pytest.raises(ValueError, match=r"make_echo does not take \['colours'\]"):
        validate_task("custom", 1, {"target": f"{user_module}:make_echo", "colours": ["a"]})
    with pytest.raises(TypeError, match=r"returned int, which has no \['name', 'train_batch'"):
        make_task("custom", 1, {"target": f"{user_module}:not_a_task"})
