"""The exact strings of every prompt format (the strings a model is trained and evaluated on)."""

from __future__ import annotations

import pytest

from quadrants.models.tokenizer import char_tokenizer
from quadrants.tasks.prompts import (
    PROMPT_FORMATS,
    make_renderer,
    render_prompt,
    resolve_format,
)

PROBLEM = "What is 2+3?"
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."


class ToyChat:
    """A tokenizer whose chat template is easy to read: <role>content</role>, then <assistant>."""

    chat_template = "toy"

    def apply_chat_template(self, conversation, *, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return (
            "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in conversation)
            + "<assistant>"
        )


def test_raw_is_the_problem_as_given():
    assert render_prompt(PROBLEM, format="raw") == "What is 2+3?"


def test_plain_appends_the_boxed_instruction_on_its_own_line():
    assert render_prompt(PROBLEM, format="plain") == "What is 2+3?\n" + BOXED


def test_chat_puts_problem_and_instruction_in_the_user_turn():
    assert (
        render_prompt(PROBLEM, format="chat", tokenizer=ToyChat())
        == f"<user>What is 2+3?\n{BOXED}</user><assistant>"
    )


def test_qwen_math_is_the_qwen25_math_cot_template_whatever_the_tokenizer():
    expected = (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_prompt(PROBLEM, format="qwen_math") == expected
    assert render_prompt(PROBLEM, format="qwen_math", tokenizer=ToyChat()) == expected


def test_deepscaler_appends_the_datas_suffix_after_one_space():
    expected = "<user>What is 2+3? Let's think step by step and output the final answer within \\boxed{}.</user><assistant>"
    assert render_prompt(PROBLEM, format="deepscaler", tokenizer=ToyChat()) == expected


def test_instruction_replaces_the_formats_own():
    assert render_prompt(PROBLEM, format="plain", instruction="Answer:") == "What is 2+3?\nAnswer:"
    assert render_prompt(PROBLEM, format="qwen_math", instruction="Be brief.").startswith(
        "<|im_start|>system\nBe brief.<|im_end|>\n"
    )


def test_auto_is_the_tasks_format_else_chat_with_a_template_else_plain():
    assert resolve_format("auto", tokenizer=ToyChat(), task_format="raw") == "raw"
    assert resolve_format("auto", tokenizer=ToyChat()) == "chat"
    assert resolve_format("auto", tokenizer=char_tokenizer()) == "plain"
    assert resolve_format("qwen_math", tokenizer=ToyChat(), task_format="raw") == "qwen_math"


def test_bad_formats_fail_naming_the_key_and_the_choices():
    with pytest.raises(
        ValueError, match=r"prompt.format='fancy' is unknown; choose one of \['auto', 'raw'"
    ):
        render_prompt(PROBLEM, format="fancy")
    with pytest.raises(
        ValueError, match="prompt.format=chat needs a tokenizer with a chat template"
    ):
        make_renderer("chat", tokenizer=char_tokenizer())  # fails when built, not mid-run
    assert set(PROMPT_FORMATS) == {"auto", "raw", "plain", "chat", "qwen_math", "deepscaler"}
