"""Out-of-domain benchmarks in the evaluation path: chance levels, per-group metrics and the ood avg
by hand; plans take the first problems of every group; the runner grades by each problem's rule."""

from __future__ import annotations

import json

import pytest
import torch

from quadrants.config import EvalConfig, TaskConfig
from quadrants.eval.generation import TextEngine
from quadrants.eval.metrics import chance_pass_at_k, ood_avg
from quadrants.eval.results import (
    BenchmarkResult,
    ProblemResult,
    SampleResult,
    suite_metrics,
    write_benchmark,
)
from quadrants.eval.runner import SuiteReport, format_table, grade_benchmark
from quadrants.eval.suite import build_plans, validate_eval
from quadrants.models.loading import load_policy
from quadrants.rewards.choice import ChoiceRule
from quadrants.rewards.grader import Grader
from tests.ood_samples import write_ood_samples


def problem(pid: str, outcomes: list[str], *, group: str, chance: float) -> ProblemResult:
    samples = tuple(SampleResult(f"answer {i}", o, True, 3) for i, o in enumerate(outcomes))
    return ProblemResult(
        pid, f"prompt {pid}", "B", samples, group=group, chance=chance, rule={"rule": "choice"}
    )


@pytest.fixture
def mmlu():
    # three problems x n = 2: law (10 options) c = 2 and 0, math (4 options) c = 1
    return BenchmarkResult(
        "mmlu_pro",
        (
            problem("mmlu_pro/1", ["correct", "correct"], group="law", chance=0.1),
            problem("mmlu_pro/2", ["wrong", "no_answer"], group="law", chance=0.1),
            problem("mmlu_pro/3", ["correct", "wrong"], group="math", chance=0.25),
        ),
        group_kind="domain",
    )


def test_chance_level_by_hand():
    # Pass@k of a guesser: 1 - (1 - p)^k. Four options, k = 4: 1 - 0.75^4 = 1 - 0.31640625 = 0.68359375
    assert chance_pass_at_k([0.25], 4) == pytest.approx(0.68359375, abs=1e-15)
    # mean over problems: (1 - 0.9^2 + 1 - 0.5^2) / 2 = (0.19 + 0.75) / 2 = 0.47
    assert chance_pass_at_k([0.1, 0.5], 2) == pytest.approx(0.47, abs=1e-15)
    assert chance_pass_at_k([0.0, 1.0], 3) == 0.5
    with pytest.raises(ValueError, match=r"chances must lie in \[0, 1\]"):
        chance_pass_at_k([1.5], 1)


def test_ood_avg_is_the_mean_of_the_ood_benchmarks_present():
    assert ood_avg({"gpqa": 0.3, "graphwiz": 0.4, "aime24": 0.9}) == pytest.approx(0.35, abs=1e-15)
    with pytest.raises(ValueError, match="needs at least one of"):
        ood_avg({"aime24": 0.9})


def test_suite_metrics_add_chance_groups_and_ood_avg(mmlu):
    m = suite_metrics([mmlu])
    # overall: avg@2 = (1 + 0 + 0.5) / 3 = 0.5; chance = (0.1 + 0.1 + 0.25) / 3 = 0.15
    assert m["eval/mmlu_pro/avg_at_2"] == pytest.approx(0.5, abs=1e-15)
    assert m["eval/mmlu_pro/chance"] == pytest.approx(0.15, abs=1e-15)
    # chance pass@2: (0.19 + 0.19 + (1 - 0.75^2)) / 3 = (0.19 + 0.19 + 0.4375) / 3 = 0.2725
    assert m["eval/mmlu_pro/chance_pass_at_2"] == pytest.approx(0.2725, abs=1e-15)
    # per domain: law avg@2 = (1 + 0) / 2 = 0.5, pass@2 = 0.5; math avg@2 = 0.5, pass@2 = 1
    assert m["eval/mmlu_pro/domain/law/avg_at_2"] == pytest.approx(0.5, abs=1e-15)
    assert m["eval/mmlu_pro/domain/law/pass_at_2"] == pytest.approx(0.5, abs=1e-15)
    assert (
        m["eval/mmlu_pro/domain/law/problems"] == 2 and m["eval/mmlu_pro/domain/law/chance"] == 0.1
    )
    assert (
        m["eval/mmlu_pro/domain/math/pass_at_2"] == 1.0
        and m["eval/mmlu_pro/domain/math/chance"] == 0.25
    )
    assert m["eval/ood_avg"] == m["eval/mmlu_pro/avg_at_2"]
    # a math benchmark has no chance level and no ood avg
    plain = BenchmarkResult(
        "gsm8k", (ProblemResult("g/0", "p", "1", (SampleResult("x", "wrong", True, 1),)),)
    )
    assert not any(
        "chance" in key for key in suite_metrics([plain])
    ) and "eval/ood_avg" not in suite_metrics([plain])


def test_table_prints_chance_beside_the_scores_and_a_line_per_group(mmlu):
    table = format_table(SuiteReport(metrics=suite_metrics([mmlu]), results=[mmlu]))
    lines = table.splitlines()
    assert lines[0].split()[:9] == [
        "benchmark",
        "problems",
        "n",
        "avg@n",
        "+/-se",
        "pass@n",
        "chance",
        "chance@n",
        "no_answer",
    ]
    assert lines[1].split()[:8] == [
        "mmlu_pro",
        "3",
        "2",
        "0.500",
        "0.289",
        "0.667",
        "0.150",
        "0.273",
    ]
    assert lines[2].split()[:9] == [
        "domain",
        "law",
        "2",
        "2",
        "0.500",
        "0.500",
        "0.500",
        "0.100",
        "0.190",
    ]
    assert "25 % GPQA, 10 % MMLU-Pro, 50 % yes/no tasks" in table and "ood avg column" in table


def test_files_record_group_chance_and_rule(mmlu, tmp_path):
    write_benchmark(mmlu, tmp_path)
    header, first = (tmp_path / "mmlu_pro" / "counts.csv").read_text().splitlines()[:2]
    assert header.endswith(",gold,group,chance") and first.endswith(",B,law,0.1")
    table = json.loads((tmp_path / "mmlu_pro" / "counts.json").read_text())["problems"]
    assert table[2]["rule"] == {"rule": "choice"} and table[2]["group"] == "math"


def test_plans_take_the_first_problems_of_every_group(tmp_path):
    write_ood_samples(tmp_path)
    cfg = EvalConfig(
        benchmarks={"gpqa": 4, "mmlu_pro": 1, "graphwiz": 1}, limit=1, data_dir=str(tmp_path)
    )
    gpqa, mmlu, graphwiz = build_plans(cfg, TaskConfig())
    assert [p.id for p in gpqa.problems] == [
        "gpqa/recSample01",
        "gpqa/recSample03",
        "gpqa/recSample05",
    ]
    assert gpqa.groups == ("physics", "chemistry", "biology") and gpqa.group_kind == "domain"
    assert all(isinstance(rule, ChoiceRule) for rule in gpqa.rules) and len(mmlu.problems) == 3
    assert len(graphwiz.problems) == 9 and graphwiz.group_kind == "task"
    assert (
        len(
            build_plans(
                EvalConfig(benchmarks={"graphwiz": 1}, data_dir=str(tmp_path)), TaskConfig()
            )[0].problems
        )
        == 18
    )


def test_missing_ood_file_fails_before_generation_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="eval.benchmarks.gpqa: no data file at") as err:
        validate_eval(EvalConfig(benchmarks={"gpqa": 4}, data_dir=str(tmp_path)), TaskConfig())
    assert "gated" in str(err.value) and "eval.source=hub" in str(err.value)
    validate_eval(
        EvalConfig(benchmarks={"gpqa": 4}, data_dir=str(tmp_path), source="hub"), TaskConfig()
    )


class ScriptedEngine(TextEngine):
    """The real tiny-random engine, its texts replaced by scripted answers (one per sequence)."""

    def __init__(self, answers, *args) -> None:
        super().__init__(*args)
        self.answers = answers

    def generate(self, prompts, sampling):
        rollouts = super().generate(prompts, sampling)
        rollouts.texts[:] = [
            self.answers[p.split("\n")[0]] for p in prompts for _ in range(sampling.n)
        ]
        return rollouts


def test_runner_grades_each_problem_by_its_rule_without_the_grader_pool(tmp_path):
    write_ood_samples(tmp_path)
    torch.set_num_threads(1)
    plan = build_plans(
        EvalConfig(benchmarks={"gpqa": 2}, limit=1, data_dir=str(tmp_path)), TaskConfig()
    )[0]
    # physics: newton is (C); chemistry recSample03 and biology recSample05 get answers by the letters of their
    # permutation: right, unparseable
    letter = {p.prompt.split("\n")[0]: p.answer for p in plan.problems}
    answers = {
        "What is the SI unit of force?": "The answer is (C).",
        "What is the chemical symbol of sodium?": f"\\boxed{{{letter['What is the chemical symbol of sodium?']}}}",
        "Which molecule carries genetic information in humans?": "I do not know.",
    }
    engine = ScriptedEngine(answers, *load_policy("tiny-random", seed=0))
    grader = Grader(num_workers=0)
    grader.grade = None  # type: ignore[method-assign]  # the pool must not be asked
    result = grade_benchmark(engine, grader, plan, EvalConfig(max_new_tokens=2), seed=0)
    assert [[s.outcome for s in p.samples] for p in result.problems] == [
        ["correct", "correct"],
        ["correct", "correct"],
        ["no_answer", "no_answer"],
    ]
    assert [p.group for p in result.problems] == ["physics", "chemistry", "biology"]
    assert result.problems[0].chance == 0.25 and result.problems[0].rule["permutation"] == [
        1,
        3,
        0,
        2,
    ]


def test_paper_ood_preset_composes_to_the_papers_sampling(tmp_path):
    from quadrants.launch.hydra_setup import compose_run_config

    write_ood_samples(tmp_path)
    cfg = compose_run_config(["eval=paper_ood", f"eval.data_dir={tmp_path}"]).eval
    assert (cfg.temperature, cfg.top_p, cfg.max_new_tokens) == (0.6, 0.95, 3072)
    assert dict(cfg.benchmarks) == {"gpqa": 16, "mmlu_pro": 1, "graphwiz": 1} and cfg.limit is None
    with pytest.raises(FileNotFoundError, match="eval.benchmarks.gpqa: no data file at"):
        compose_run_config(["eval=paper_ood", f"eval.data_dir={tmp_path / 'empty'}"])


class FakeChatTokenizer:
    chat_template = "fake"

    def __call__(self, text, add_special_tokens=False):
        # one token per character: the evaluation plan counts prompt tokens (task.max_prompt_tokens)
        return {"input_ids": list(range(len(text)))}

    def apply_chat_template(self, conversation, tokenize, add_generation_prompt):
        (message,) = conversation
        return f"<user>{message['content']}</user><assistant>"


def test_prompts_follow_the_run_format_with_the_benchmarks_own_instruction(tmp_path):
    from quadrants.config import PromptConfig
    from quadrants.tasks.ood import CHOICE_INSTRUCTION
    from quadrants.tasks.prompts import INSTRUCTION

    write_ood_samples(tmp_path)
    cfg = EvalConfig(benchmarks={"mmlu_pro": 1, "graphwiz": 1}, limit=1, data_dir=str(tmp_path))
    mmlu, graphwiz = build_plans(
        cfg, TaskConfig(), FakeChatTokenizer(), PromptConfig(format="chat")
    )
    assert mmlu.problems[0].prompt.startswith("<user>What is 2 + 3?\n\n(A) 1\n")
    assert mmlu.problems[0].prompt.endswith(f"(J) 10\n{CHOICE_INSTRUCTION}</user><assistant>")
    assert graphwiz.problems[0].prompt.endswith(
        f"Is there a cycle in this graph?\n{INSTRUCTION}</user><assistant>"
    )
    # qwen_math: the instruction is its system prompt; prompt.instruction replaces the benchmark's own
    (qwen,) = build_plans(
        EvalConfig(benchmarks={"mmlu_pro": 1}, limit=1, data_dir=str(tmp_path)),
        TaskConfig(),
        None,
        PromptConfig(format="qwen_math", instruction="Answer with a letter."),
    )
    assert qwen.problems[0].prompt.startswith("<|im_start|>system\nAnswer with a letter.<|im_end|>")
