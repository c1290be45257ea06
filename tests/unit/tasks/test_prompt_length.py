"""task.max_prompt_tokens: prompts longer than the run planned for are dropped when the task loads,
and counted; a generating task replaces an over-long draw. The character tokenizer makes a
prompt's length its number of characters."""

from __future__ import annotations

import json
import logging
import random

import pytest

from quadrants.config import RunConfig
from quadrants.models.tokenizer import char_tokenizer
from quadrants.run.build import make_run_task
from quadrants.run_plan import RunPlan
from quadrants.tasks.base import Problem, RenderedTask
from quadrants.tasks.prompt_length import LengthLimitedTask, prompt_token_counter


def _task_file(tmp_path, lengths):
    path = tmp_path / "hand_made.jsonl"
    rows = [{"problem": "x" * n, "answer": str(index)} for index, n in enumerate(lengths)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_hand_made_task_file_loses_its_long_prompts_at_load(tmp_path, caplog):
    # 8 problems of 5, 10, ..., 40 characters = tokens (raw format: the text as it is);
    # the limit 25 keeps 5, 10, 15, 20, 25 and drops 30, 35, 40: 3 dropped in all
    path = _task_file(tmp_path, [5, 10, 15, 20, 25, 30, 35, 40])
    cfg = RunConfig()
    cfg.task.name, cfg.task.heldout_size = "dataset", 2
    cfg.task.params = {"path": str(path), "decontaminate": [], "split_seed": 0}
    cfg.prompt.format = "raw"
    cfg.task.max_prompt_tokens = 25
    with caplog.at_level(logging.INFO, logger="quadrants.tasks.prompt_length"):
        task = make_run_task(RunPlan.parse(cfg, files=False), char_tokenizer())
    dataset = task.task.task  # under the prompt-length limit and the rendering
    kept = [*task.heldout(), *task.train_batch(len(dataset), random.Random(0))]
    assert sorted(len(problem.prompt) for problem in kept) == [5, 10, 15, 20, 25]
    assert task.too_long + task.too_long_heldout == 3  # 30, 35 and 40
    assert len(dataset) + len(task.heldout()) == 5
    assert "dropped, their prompts longer than task.max_prompt_tokens=25 tokens" in caplog.text
    # at 40 nothing is dropped
    cfg.task.max_prompt_tokens = 40
    everything = make_run_task(RunPlan.parse(cfg, files=False), char_tokenizer())
    assert (everything.too_long, everything.too_long_heldout, len(everything.task.task)) == (
        0,
        0,
        6,
    )


def test_a_limit_nothing_fits_names_the_key(tmp_path):
    path = _task_file(tmp_path, [30, 35, 40, 45])
    cfg = RunConfig()
    cfg.task.name, cfg.task.heldout_size = "dataset", 1
    cfg.task.params = {"path": str(path), "decontaminate": []}
    cfg.prompt.format, cfg.task.max_prompt_tokens = "raw", 20
    with pytest.raises(ValueError, match=r"longer than task.max_prompt_tokens=20 tokens; raise it"):
        make_run_task(RunPlan.parse(cfg, files=False), char_tokenizer())


class _Generated:
    """A generating task: draw k is a prompt of `lengths[k % len(lengths)]` characters."""

    name = "generated"

    def __init__(self, lengths):
        self.lengths, self.drawn = lengths, 0

    def train_batch(self, n, rng):
        out = []
        for _ in range(n):
            length = self.lengths[self.drawn % len(self.lengths)]
            out.append(Problem(id=str(self.drawn), prompt="y" * length, answer="0"))
            self.drawn += 1
        return out

    def heldout(self, n=None):
        return [Problem(id="h0", prompt="y" * 3, answer="0"), Problem("h1", "y" * 9, "0")]


def test_a_generating_task_replaces_an_over_long_draw():
    # draws of 3, 9, 3, 9, ... tokens against a limit of 5: a batch of 2 draws 0 and 1 (3 and 9
    # tokens); the 9-token draw 1 is replaced by draw 2 (3 tokens): 1 replaced, 3 draws
    inner = _Generated([3, 9])
    task = LengthLimitedTask(
        RenderedTask(inner, lambda text: text), prompt_token_counter(char_tokenizer()), 5
    )
    batch = task.train_batch(2, random.Random(0))
    assert [len(problem.prompt) for problem in batch] == [3, 3]
    assert (task.too_long, inner.drawn) == (1, 3)
    assert [problem.id for problem in task.heldout()] == ["h0"]  # the 9-token one left out
    with pytest.raises(ValueError, match=r"within task.max_prompt_tokens=2 tokens; raise it"):
        LengthLimitedTask(
            RenderedTask(_Generated([3]), lambda t: t), prompt_token_counter(char_tokenizer()), 2
        ).train_batch(1, random.Random(0))
