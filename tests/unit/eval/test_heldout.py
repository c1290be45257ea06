"""The in-training held-out check: Avg@n, the unbiased Pass@k curve and the no-answer share, graded by
the real math-verify grader."""

from __future__ import annotations

import pytest
import torch

from quadrants import seeds
from quadrants.eval.heldout import ChunkCounts, heldout_metrics, summarize
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import Rollouts, SamplingSettings
from quadrants.tasks.base import Problem


class ScriptedEngine:
    """Returns fixed response texts (the model is not under test here: only how answers are counted).
    Only `texts` and `group_ids` are read by heldout_metrics; the tensors are placeholders of the
    right shapes."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.seeds: list[int | None] = []  # each generate call's sampling seed

    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        self.seeds.append(sampling.seed)
        b = len(prompts) * sampling.n
        assert b == len(self.texts)
        zeros = torch.zeros(b, 1)
        return Rollouts(
            prompt_ids=zeros.long(),
            prompt_mask=zeros.bool(),
            response_ids=zeros.long(),
            response_mask=zeros.bool(),
            behaviour_logp=zeros,
            texts=self.texts,
            group_ids=torch.arange(len(prompts)).repeat_interleave(sampling.n),
            finished=torch.ones(b, dtype=torch.bool),
        )

    def sync_weights(self, model: object) -> None: ...

    def close(self) -> None: ...


@pytest.mark.subprocess
def test_avg_pass_curve_and_no_answer_by_hand() -> None:
    problems = [
        Problem(id="a", prompt="1+2=", answer="3"),
        Problem(id="b", prompt="2+3=", answer="5"),
    ]
    texts = [
        r"\boxed{3}",
        r"\boxed{3}",
        r"\boxed{4}",
        "no idea",  # c = 2 of n = 4
        r"\boxed{5}",
        r"\boxed{1}",
        r"\boxed{1}",
        r"\boxed{1}",
    ]  # c = 1 of n = 4
    with Grader(num_workers=1, timeout_s=5.0) as grader:
        metrics = heldout_metrics(
            ScriptedEngine(texts), grader, problems, SamplingSettings(n=4), "toy"
        )
    # Avg@4 = (2/4 + 1/4) / 2 = 0.375 = Pass@1
    # Pass@2 = mean(1 - C(2,2)/C(4,2), 1 - C(3,2)/C(4,2)) = mean(5/6, 1/2) = 2/3
    # Pass@4 = mean(1, 1) = 1; one of eight responses has no answer -> 0.125
    # standard error of Avg@4 over the 2 problems: scores 0.5, 0.25, sample sd = 0.125 * sqrt(2)
    # -> SE = sd / sqrt(2) = 0.125
    expected = {
        "eval/toy/avg_at_4": 0.375,
        "eval/toy/problems": 2.0,
        "eval/toy/avg_at_4_stderr": 0.125,
        "eval/toy/pass_at_1": 0.375,
        "eval/toy/pass_at_2": 2 / 3,
        "eval/toy/pass_at_4": 1.0,
        "eval/toy/no_answer_frac": 0.125,
    }
    assert metrics.keys() == expected.keys()
    for key, value in expected.items():
        assert abs(metrics[key] - value) < 1e-12, key


def test_no_problems_is_refused_not_scored_zero() -> None:
    # a held-out split of 0 problems (task.heldout_size=0): Avg@4 over no problem is 0 / 0, which
    # used to be logged as 0.0; summarize and heldout_metrics refuse it instead
    with pytest.raises(ValueError, match=r"^toy: no held-out problems to evaluate"):
        summarize([], 4, "toy")
    with pytest.raises(ValueError, match=r"^toy: no held-out problems to evaluate"):
        summarize([ChunkCounts(correct_fraction=[], correct_count=[], no_answer=0)], 4, "toy")
    with Grader(num_workers=0) as grader:
        with pytest.raises(ValueError, match=r"set task.heldout_size and eval.problems"):
            heldout_metrics(ScriptedEngine([]), grader, [], SamplingSettings(n=4), "toy")


def test_one_problem_is_still_scored() -> None:
    # the smallest split: 1 problem, c = 1 of n = 2 -> Avg@2 = Pass@1 = 0.5, Pass@2 = 1, no
    # standard error (it needs 2 problems), no missing answers
    metrics = summarize([ChunkCounts([0.5], [1], 0)], 2, "toy")
    assert metrics == {
        "eval/toy/avg_at_2": 0.5,
        "eval/toy/problems": 1.0,
        "eval/toy/pass_at_1": 0.5,
        "eval/toy/pass_at_2": 1.0,
        "eval/toy/no_answer_frac": 0.0,
    }


def test_eval_ks_off_the_curve_are_added() -> None:
    # 2 problems, n = 4, c = 2 and 1; eval.ks = [3]: Pass@3 = mean(1 - C(2,3)/C(4,3),
    # 1 - C(3,3)/C(4,3)) = mean(1 - 0, 1 - 1/4) = 0.875; the curve's 1, 2, 4 stay
    metrics = summarize([ChunkCounts([0.5, 0.25], [2, 1], 0)], 4, "toy", extra_ks=[3])
    assert metrics["eval/toy/pass_at_3"] == pytest.approx(0.875, abs=1e-15)
    assert [key for key in metrics if "pass_at" in key] == [
        f"eval/toy/pass_at_{k}" for k in (1, 2, 3, 4)
    ]


def test_every_chunk_has_seeds_of_its_own() -> None:
    """6 problems in chunks of 2 prompts x n = 3, seed 7: chunk c is seeded by the stream
    `heldout` of (c,) (quadrants/seeds.py), so with vLLM's per-request seeds (seeds.vllm_request)
    the 18 samples get 18 distinct seeds; one seed for every chunk (7, 7, 7) gave problem r of
    each chunk the seeds of problem r of the others, for which vLLM draws the same noise."""
    engine = ScriptedEngine(["1"] * 6)  # each call: 2 prompts x 3 samples
    problems = [Problem(id=str(i), prompt=f"{i}+0=", answer=str(i)) for i in range(6)]
    with Grader(num_workers=0) as grader:
        heldout_metrics(
            engine, grader, problems, SamplingSettings(n=3, seed=7), "toy", batch_prompts=2
        )
    assert engine.seeds == [seeds.heldout(7, c) for c in range(3)]
    samples = {
        seeds.vllm_sample(seeds.vllm_request(call, r, 3), j)
        for call in engine.seeds
        for r in range(2)
        for j in range(3)
    }
    assert len(samples) == 18
