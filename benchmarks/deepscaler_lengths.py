"""Row lengths of a DeepScaleR-shaped step: real prompts, a stated response-length distribution.

Shared by benchmarks/padding_fraction.py (the padding arithmetic) and benchmarks/gpu_acceptance.py
(the update timed on those rows). (Scripts import it as `deepscaler_lengths`: benchmarks/ is their
directory.)

Prompts: `--prompts` DeepScaleR problems drawn without replacement from the data home's
`dsr_sub/dsr_sub.jsonl` (a random subset of DeepScaleR-Preview; `python -m quadrants.data import
dsr_sub PATH` brings it, or point $QUADRANTS_DATA at a data home that has it), rendered in the
`deepscaler` prompt format and counted by `--tokenizer`: by default the SmolLM2-135M tokenizer the
quadrants cache holds, a stand-in for DeepScaleR-1.5B's Qwen2 tokenizer, which is not on this
machine; `chars` (or no tokenizer in the cache) counts 4 characters per token. Each prompt has
`--group` rows (G responses). Responses: log-normal with median `--median` tokens and log-sd
`--sigma`, at least 1, cut at `--max-new-tokens` (a row that reaches it is truncated, as in
DeepScaleR's 8K stage).

Randomness: one torch generator seeded with `--seed` draws, in this order, the prompts, the
response lengths and the shuffle of the rows (the order the trainer deals rows to mini-batches in).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from quadrants.home import DATA_ENV, default_cache_root, default_data_dir
from quadrants.tasks.prompts import render_prompt

DATA = "dsr_sub/dsr_sub.jsonl"
CHARS = "chars"  # --tokenizer: 4 characters per token


def add_length_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the drawn rows, with the defaults docs/performance.md's figures use."""
    parser.add_argument("--prompts", type=int, default=128, help="DeepScaleR prompts drawn")
    parser.add_argument("--group", type=int, default=8, help="rows (responses) per prompt")
    parser.add_argument("--median", type=float, default=3000.0, help="median response tokens")
    parser.add_argument("--sigma", type=float, default=0.6, help="log-sd of response lengths")
    parser.add_argument("--max-new-tokens", type=int, default=8192, help="response length cut")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tokenizer",
        default=None,
        help=f"a local tokenizer directory, or {CHARS!r} for 4 characters per token (default: "
        "the cached SmolLM2-135M tokenizer if there, else 4 characters per token)",
    )


@dataclass(frozen=True)
class DrawnRows:
    """The drawn step's rows.

    Attributes:
        prompt_tokens: each drawn problem's prompt length, in draw order.
        prompts: each row's prompt length (`group` consecutive rows per problem).
        responses: each row's response length.
        order: the rows shuffled (a permutation of range(rows)).
        counted: how the prompt tokens were counted.
        path: the file the problems came from.
    """

    prompt_tokens: list[int]
    prompts: list[int]
    responses: list[int]
    order: list[int]
    counted: str
    path: Path

    def describe(self, args: argparse.Namespace) -> str:
        truncated = sum(r == args.max_new_tokens for r in self.responses) / len(self.responses)
        median = sorted(self.prompt_tokens)[len(self.prompt_tokens) // 2]
        return (
            f"{len(self.prompts)} rows ({args.prompts} DeepScaleR prompts from {self.path} x G = "
            f"{args.group}); prompt tokens by {self.counted}: median {median}, max "
            f"{max(self.prompts)}; responses log-normal(median {args.median:g}, sigma "
            f"{args.sigma:g}) cut at {args.max_new_tokens}: mean "
            f"{sum(self.responses) / len(self.responses):.0f}, {truncated:.0%} truncated"
        )


def missing_data(path: Path) -> str:
    """What to do when the data home lacks the DeepScaleR problems."""
    return (
        f"no DeepScaleR prompts at {path}: the data home (${DATA_ENV}, else the quadrants cache's "
        f"data/) lacks {DATA}. Bring One-Shot-RLVR's dsr_sub.jsonl with `python -m quadrants.data "
        f"import dsr_sub PATH`, or set {DATA_ENV} to a data home that has it"
    )


def data_file() -> Path:
    """The DeepScaleR problems in the data home (which may lack them: `missing_data`)."""
    return default_data_dir() / DATA


def require_data_file(script: str, otherwise: str) -> Path:
    """The DeepScaleR problems in the data home; without them `script` stops, saying what to do
    and then `otherwise`."""
    path = data_file()
    if not path.is_file():
        raise SystemExit(f"{script}: {missing_data(path)}. {otherwise}")
    return path


def prompt_lengths(problems: list[str], tokenizer_dir: str | None) -> tuple[list[int], str]:
    """Token counts of the problems in the deepscaler format, and how they were counted."""
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
        texts = [render_prompt(p, format="deepscaler", tokenizer=tokenizer) for p in problems]
        counts = [len(tokenizer(text)["input_ids"]) for text in texts]
        return counts, f"tokenizer {tokenizer_dir}"
    texts = [render_prompt(p, format="plain") for p in problems]
    return [math.ceil(len(text) / 4) for text in texts], "4 characters per token (no tokenizer)"


def response_lengths(rows: int, args: argparse.Namespace, generator: torch.Generator) -> list[int]:
    """Log-normal(log median, sigma) lengths, at least 1, cut at max_new_tokens."""
    normal = torch.randn(rows, generator=generator, dtype=torch.float64)
    drawn = torch.exp(math.log(args.median) + args.sigma * normal).round().long()
    return drawn.clamp(1, args.max_new_tokens).tolist()


def tokenizer_dir(choice: str | None) -> str | None:
    """`--tokenizer` as a directory, or None for 4 characters per token."""
    if choice == CHARS:
        return None
    if choice is not None:
        return choice
    smollm2 = default_cache_root() / "models" / "smollm2-135m"
    return str(smollm2) if (smollm2 / "tokenizer.json").is_file() else None


def draw_rows(args: argparse.Namespace, path: Path) -> DrawnRows:
    """The step's rows from the problems at `path` (module docstring), by `add_length_arguments`'
    options."""
    problems = [json.loads(line)["problem"] for line in path.read_text().splitlines() if line]
    if args.prompts > len(problems):
        raise SystemExit(f"--prompts {args.prompts}: {path} holds {len(problems)} problems")
    generator = torch.Generator().manual_seed(args.seed)
    chosen = torch.randperm(len(problems), generator=generator)[: args.prompts].tolist()
    lengths, counted = prompt_lengths([problems[i] for i in chosen], tokenizer_dir(args.tokenizer))
    prompts = [length for length in lengths for _ in range(args.group)]  # G rows per prompt
    responses = response_lengths(len(prompts), args, generator)
    order = torch.randperm(len(prompts), generator=generator).tolist()
    return DrawnRows(lengths, prompts, responses, order, counted, path)
