"""The custom task and reward of docs/tools.md (its code block is this file, checked by
tests/unit/test_docs_commands.py): a toy task of saying a word."""

from quadrants.tasks.base import Problem


class Colours:
    name = "colours"  # shows in MLflow's `task` tag

    def __init__(self, heldout_size, words):
        self.words, self.heldout_size = list(words), heldout_size

    def train_batch(self, n, rng):  # rng: a random.Random the run seeds
        pool = self.words[self.heldout_size :]
        return [Problem(f"t-{w}", f"Say {w}:", w) for w in rng.choices(pool, k=n)]

    def heldout(self, n=None):  # fixed, never in a training batch
        return [Problem(f"h-{w}", f"Say {w}:", w) for w in self.words[: self.heldout_size]][:n]


def make_task(heldout_size, words):
    return Colours(heldout_size, words)


def reward(completion, answer):  # True correct, False wrong, None no answer
    return completion.strip().endswith(answer)
