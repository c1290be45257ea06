"""The documented commands as the subprocess tests start them: one override list, one runner.

`TINY` is the smallest sweep that exercises the whole path (the random tiny model, so no warm-up;
2 prompts x 2 samples of 8 tokens; a 2-problem held-out check at the end only). Learning is not what
such tests check: its rewards are mostly 0. `run` and `start` start `python -m MODULE ARGS` in `cwd`
with the Hub offline, as a user on an offline machine would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TINY = [
    "model=tiny_random",
    "train.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "eval.problems=2",
    "eval.samples=1",
    "eval.max_new_tokens=8",
    "eval.every=0",
    "tracking.log_samples_every=2",
]


def command_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", **extra}


def command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def run(
    module: str,
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS` to its end; stdout and stderr captured as text."""
    return subprocess.run(
        command(module, *args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else command_env(),
    )


def start(
    module: str, *args: str, cwd: Path, env: dict[str, str] | None = None, **popen
) -> subprocess.Popen:
    """Start `python -m MODULE ARGS` and return at once (stdout/stderr piped as text by default)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(
        command(module, *args),
        cwd=cwd,
        env=env if env is not None else command_env(),
        text=True,
        **popen,
    )
