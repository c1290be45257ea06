"""Which problems an evaluation runs, and the checks that stop a bad config before any generation."""

from __future__ import annotations

import json

import pytest

from quadrants.config import EvalConfig, PromptConfig, TaskConfig
from quadrants.eval.suite import build_plans, suite, validate_eval
from quadrants.models.tokenizer import char_tokenizer
from quadrants.tasks.benchmarks import INSTRUCTION, known_benchmarks
from quadrants.tasks.synthetic import ArithmeticTask


@pytest.fixture
def data_dir(tmp_path):
    """A gsm8k file of three rows in the real file's format."""
    rows = [
        {"question": "Ann has 2 apples and buys 3. How many?", "answer": "2 + 3 = 5\n#### 5"},
        {"question": "What is 1,000 + 234?", "answer": "1000 + 234 = 1234\n#### 1,234"},
        {"question": "What is 7 - 7?", "answer": "#### 0"},
    ]
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_empty_mapping_means_the_runs_task():
    assert suite(EvalConfig(samples=3), TaskConfig(name="arithmetic")) == {"arithmetic": 3}
    assert suite(EvalConfig(benchmarks={"gsm8k": 2}), TaskConfig()) == {"gsm8k": 2}


def test_unknown_benchmark_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown benchmark 'aime2024'") as err:
        validate_eval(EvalConfig(benchmarks={"aime2024": 32}), TaskConfig())
    for name in [*known_benchmarks(), "arithmetic"]:
        assert repr(name) in str(err.value)


def test_missing_data_file_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="eval.benchmarks.math500: no data file at") as err:
        validate_eval(EvalConfig(benchmarks={"math500": 4}, data_dir=str(tmp_path)), TaskConfig())
    assert str(tmp_path / "math500" / "test.jsonl") in str(err.value) and "eval.data_dir" in str(
        err.value
    )
    # from the hub nothing is read locally, so nothing is missing
    validate_eval(
        EvalConfig(benchmarks={"math500": 4}, data_dir=str(tmp_path), source="hub"), TaskConfig()
    )


def test_k_larger_than_n_is_refused_naming_the_benchmark(data_dir):
    with pytest.raises(
        ValueError, match=r"eval.ks=\[8\]: pass@k needs k <= n, but gsm8k draws n=4"
    ):
        validate_eval(
            EvalConfig(benchmarks={"gsm8k": 4}, ks=[8], data_dir=str(data_dir)), TaskConfig()
        )
    validate_eval(EvalConfig(benchmarks={"gsm8k": 8}, ks=[8], data_dir=str(data_dir)), TaskConfig())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"benchmarks": {"gsm8k": 0}}, r"eval.benchmarks.gsm8k=0 is out of range"),
        ({"limit": 0}, r"eval.limit=0 is out of range"),
        ({"source": "s3"}, r"eval.source='s3' is unknown; choose one of \['local', 'hub'\]"),
        ({"ks": [0]}, r"eval.ks=\[0\] is out of range; allowed: \[1, inf\)"),
        ({"batch_size": 0}, r"eval.batch_size=0"),
    ],
)
def test_other_bad_values_name_their_key(data_dir, changes, message):
    with pytest.raises(ValueError, match=message):
        validate_eval(
            EvalConfig(**{"benchmarks": {"gsm8k": 2}, "data_dir": str(data_dir), **changes}),
            TaskConfig(),
        )


def test_plans_take_the_first_limit_problems_with_plain_prompts(data_dir):
    cfg = EvalConfig(benchmarks={"gsm8k": 2, "arithmetic": 3}, limit=2, data_dir=str(data_dir))
    gsm8k, arithmetic = build_plans(cfg, TaskConfig())
    assert (gsm8k.name, gsm8k.samples, len(gsm8k.problems)) == ("gsm8k", 2, 2)
    assert [p.answer for p in gsm8k.problems] == ["5", "1234"]  # "#### 1,234" -> 1234
    assert gsm8k.problems[0].prompt == f"Ann has 2 apples and buys 3. How many?\n{INSTRUCTION}"
    assert arithmetic.samples == 3 and list(arithmetic.problems) == ArithmeticTask().heldout(2)
    assert not gsm8k.whole and not arithmetic.whole  # limit 2 < the file's rows, < heldout_size


def test_a_plan_without_limit_is_whole(data_dir):
    cfg = EvalConfig(benchmarks={"gsm8k": 2, "arithmetic": 3}, data_dir=str(data_dir))
    assert all(plan.whole for plan in build_plans(cfg, TaskConfig()))
    rows = len(build_plans(cfg, TaskConfig())[0].problems)
    limited = EvalConfig(benchmarks={"gsm8k": 2}, limit=rows, data_dir=str(data_dir))
    (plan,) = build_plans(limited, TaskConfig())
    assert plan.whole  # a limit at the benchmark's size leaves nothing out


def test_default_plan_is_the_tasks_heldout_split():
    (plan,) = build_plans(EvalConfig(problems=4, samples=2), TaskConfig(heldout_size=10))
    assert (
        plan.name == "arithmetic"
        and plan.samples == 2
        and list(plan.problems) == ArithmeticTask().heldout(4)
    )


def test_chat_template_wraps_benchmark_prompts_but_not_the_toy_task(data_dir):
    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<u>{{ m['content'] }}{% endfor %}<a>"
    cfg = EvalConfig(benchmarks={"gsm8k": 1, "arithmetic": 1}, limit=1, data_dir=str(data_dir))
    gsm8k, arithmetic = build_plans(cfg, TaskConfig(), tokenizer)
    assert (
        gsm8k.problems[0].prompt == f"<u>Ann has 2 apples and buys 3. How many?\n{INSTRUCTION}<a>"
    )
    assert arithmetic.problems[0] == ArithmeticTask().heldout(1)[0]
    gsm8k_only = EvalConfig(benchmarks={"gsm8k": 1}, limit=1, data_dir=str(data_dir))
    plain = build_plans(gsm8k_only, TaskConfig(), tokenizer, PromptConfig(format="plain"))
    assert plain[0].problems[0].prompt == f"Ann has 2 apples and buys 3. How many?\n{INSTRUCTION}"
    with pytest.raises(
        ValueError, match="prompt.format=chat needs a tokenizer with a chat template"
    ):
        build_plans(gsm8k_only, TaskConfig(), char_tokenizer(), PromptConfig(format="chat"))


def test_evaluation_renders_with_the_training_renderer(data_dir):
    """One function renders both: the plan's gsm8k prompt is `render_prompt` of the question, in
    every format, and the embedded task's held-out prompts stay raw under `auto`."""
    from quadrants.tasks.prompts import render_prompt

    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<u>{{ m['content'] }}{% endfor %}<a>"
    question = "Ann has 2 apples and buys 3. How many?"
    for fmt in ("plain", "chat", "qwen_math", "deepscaler"):
        cfg = EvalConfig(benchmarks={"gsm8k": 1}, limit=1, data_dir=str(data_dir))
        (plan,) = build_plans(cfg, TaskConfig(), tokenizer, PromptConfig(format=fmt))
        assert plan.problems[0].prompt == render_prompt(question, format=fmt, tokenizer=tokenizer)


def test_benchmark_prompts_over_the_prompt_limit_are_dropped_and_counted(data_dir, caplog):
    """One character per token (char_tokenizer); a plain prompt is the question, a newline and the
    70-character INSTRUCTION: 38 + 1 + 70 = 109, 20 + 1 + 70 = 91 and 14 + 1 + 70 = 85 tokens. At
    task.max_prompt_tokens=100 the first is dropped (109 > 100), counted, logged, and the
    benchmark is no longer whole; at 109 every prompt stays (the limit is inclusive)."""
    assert len(INSTRUCTION) == 70
    cfg = EvalConfig(benchmarks={"gsm8k": 2}, data_dir=str(data_dir))
    plain = PromptConfig(format="plain")
    with caplog.at_level("INFO", logger="quadrants.eval.suite"):
        (plan,) = build_plans(cfg, TaskConfig(max_prompt_tokens=100), char_tokenizer(), plain)
    assert [p.answer for p in plan.problems] == ["1234", "0"]
    assert (plan.too_long, plan.whole) == (1, False)
    assert "gsm8k: 1 of 3 problems dropped" in caplog.text
    assert "task.max_prompt_tokens=100" in caplog.text
    (kept,) = build_plans(cfg, TaskConfig(max_prompt_tokens=109), char_tokenizer(), plain)
    assert (len(kept.problems), kept.too_long, kept.whole) == (3, 0, True)
