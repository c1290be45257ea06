"""The user's own reward and task by path (rewards/custom.py, tasks/registry.py `CustomKind`): a
module written into tmp_path and put on the Python path, as a user's own package is."""

from __future__ import annotations

import random
import re
import sys
import textwrap

import pytest

from quadrants.rewards.custom import FunctionGrader, load_callable, probe_reward
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
        ("no_such_module:exact", "module 'no_such_module' is not on the Python path"),
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


PROBED = """
def nan(completion, answer):
    return float("nan")


def number(completion, answer):
    return 1.0


def raises(completion, answer):
    raise LookupError("no table for " + answer)


def two_keywords(*, completion, answer):
    return True


def fine(completion, answer):
    return completion == "\\\\boxed{" + answer + "}"
"""

BROKEN_IMPORT = """
import os

VALUE = {"a": 1}["b"]
"""


@pytest.fixture
def probed(tmp_path, monkeypatch):
    (tmp_path / "probed.py").write_text(textwrap.dedent(PROBED))
    (tmp_path / "broken_at_import.py").write_text(textwrap.dedent(BROKEN_IMPORT))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("probed", "broken_at_import"):  # this test's files, not an earlier test's
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("nan", "returned nan (not a finite number)"),
        ("number", "returned 1.0; a reward returns True, False, None or an Outcome"),
        ("raises", "raised LookupError: no table for 7 at "),
        ("two_keywords", "cannot be called as reward(completion, answer)"),
    ],
)
def test_the_compose_time_call_refuses_a_reward_that_cannot_be_computed(probed, name, said):
    function = load_callable(f"probed:{name}", "task.reward")
    with pytest.raises(ValueError, match=re.escape(said)) as refused:
        probe_reward(function, "task.reward", f"probed:{name}", "7")
    assert f"task.reward=probed:{name}" in str(refused.value)
    if name == "raises":  # the user's line: 11 of the file, `raise LookupError(...)`
        assert str(probed / "probed.py") + ":11" in str(refused.value)


def test_the_compose_time_call_passes_any_grade(probed):
    function = load_callable("probed:fine", "task.reward")
    assert probe_reward(function, "task.reward", "probed:fine", "7") is Outcome.correct


def test_a_module_that_fails_at_import_shows_its_own_error_and_line(probed):
    with pytest.raises(ValueError) as refused:
        load_callable("broken_at_import:reward", "task.reward")
    said = str(refused.value)
    assert "module 'broken_at_import' was found but raised while importing: KeyError: 'b'" in said
    assert f"{probed / 'broken_at_import.py'}:4" in said  # line 4: VALUE = ... (line 1 is blank)
    assert "PYTHONPATH" not in said
