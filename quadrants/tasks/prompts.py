"""Prompt formats: how a problem becomes the text the policy continues, one function for training
and evaluation alike (`render_prompt`), so the two can never disagree.

Formats (`prompt.format`; the exact strings are pinned in tests/unit/tasks/test_prompts.py):

- ``raw``: the problem text as the task gives it (the embedded arithmetic world, whose policy was
  warmed up on exactly these strings).
- ``plain``: ``{problem}\\n{instruction}`` as plain text, no template (base models without one).
- ``chat``: the tokenizer's chat template, the user turn being ``{problem}\\n{instruction}``, with
  the generation prompt appended. Instruction: ``INSTRUCTION`` ("Please reason step by step, and put
  your final answer within \\boxed{}.").
- ``qwen_math``: Qwen2.5-Math's chain-of-thought template as its evaluation code writes it,
  independent of the tokenizer: system prompt = the instruction, the problem as the user turn,
  generation starting after ``<|im_start|>assistant\\n`` (the paper's Qwen2.5-Math-7B runs).
- ``deepscaler``: the tokenizer's chat template with the suffix the DeepScaleR data carries,
  ``{problem} Let's think step by step and output the final answer within \\boxed{}.`` (the
  DeepScaleR-1.5B runs; its R1-distill template opens the ``<think>`` block itself).
- ``auto``: ``raw`` for tasks that ask for it (the embedded world), else ``chat`` when the tokenizer
  has a chat template and ``plain`` when it has none.

`prompt.instruction` replaces the format's instruction (the suffix, or qwen_math's system prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "DEEPSCALER_SUFFIX",
    "INSTRUCTION",
    "PROMPT_FORMATS",
    "QWEN_MATH_TEMPLATE",
    "make_renderer",
    "render_prompt",
    "resolve_format",
    "validate_prompt",
]

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The Qwen2.5-Math "boxed" instruction: appended on its own line (plain, chat),
or the system prompt."""

DEEPSCALER_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."
"""What DeepScaleR's training data appends to every problem, after one space."""

QWEN_MATH_TEMPLATE = (
    "<|im_start|>system\n{instruction}<|im_end|>\n"
    "<|im_start|>user\n{problem}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
"""Qwen2.5-Math's chain-of-thought prompt (its evaluation code's ``qwen25-math-cot``)."""

PROMPT_FORMATS = ("auto", "raw", "plain", "chat", "qwen_math", "deepscaler")


class ChatTokenizer(Protocol):
    """What we use of a Hugging Face tokenizer: its chat template."""

    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def validate_prompt(format: str) -> None:
    """Raise ValueError naming `prompt.format` and the known formats."""
    if format not in PROMPT_FORMATS:
        raise ValueError(
            f"prompt.format={format!r} is unknown; choose one of {list(PROMPT_FORMATS)}"
        )


def _has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_format(format: str, *, tokenizer: Any = None, task_format: str | None = None) -> str:
    """The concrete format `auto` stands for: the task's own (`task_format`, e.g. ``raw``) if it has
    one, else ``chat`` with a chat template, else ``plain``. Other formats come back unchanged."""
    validate_prompt(format)
    if format != "auto":
        return format
    if task_format is not None:
        return task_format
    return "chat" if _has_template(tokenizer) else "plain"


def render_prompt(
    problem: str,
    *,
    format: str,
    tokenizer: ChatTokenizer | None = None,
    instruction: str | None = None,
) -> str:
    """The text the policy continues for `problem` in `format` (not ``auto``: see `resolve_format`).

    Args:
        problem: the problem statement, without any instruction.
        format: raw | plain | chat | qwen_math | deepscaler.
        tokenizer: needed by chat and deepscaler (its chat template).
        instruction: replaces the format's instruction; None = the format's own.

    Raises:
        ValueError: an unknown format, ``auto``, or a chat format with a
            tokenizer without a template.
    """
    validate_prompt(format)
    if format == "auto":
        raise ValueError(
            "render_prompt needs a concrete format; resolve 'auto' with resolve_format first"
        )
    if format == "raw":
        return problem
    if format == "plain":
        return f"{problem}\n{INSTRUCTION if instruction is None else instruction}"
    if format == "qwen_math":
        return QWEN_MATH_TEMPLATE.format(
            instruction=INSTRUCTION if instruction is None else instruction, problem=problem
        )
    if tokenizer is None or not _has_template(tokenizer):
        raise ValueError(
            f"prompt.format={format} needs a tokenizer with a chat template; this one has none "
            "(use prompt.format=plain or qwen_math)"
        )
    if format == "chat":
        user = f"{problem}\n{INSTRUCTION if instruction is None else instruction}"
    else:  # deepscaler
        user = f"{problem} {DEEPSCALER_SUFFIX if instruction is None else instruction}"
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )


def make_renderer(
    format: str,
    *,
    tokenizer: Any = None,
    instruction: str | None = None,
    task_format: str | None = None,
) -> Callable[[str], str]:
    """`render_prompt` with everything but the problem fixed (`auto` resolved once)."""
    concrete = resolve_format(format, tokenizer=tokenizer, task_format=task_format)
    render_prompt(
        "", format=concrete, tokenizer=tokenizer, instruction=instruction
    )  # fail now, not mid-run

    def render(problem: str) -> str:
        return render_prompt(problem, format=concrete, tokenizer=tokenizer, instruction=instruction)

    render.format = concrete  # type: ignore[attr-defined]
    return render
