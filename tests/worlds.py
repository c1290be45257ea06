"""The small in-process training world the step-level tests share.

`small_world(seed)`: the default tiny world (the warm-started tiny policy, the arithmetic task) at 4
prompts x 4 samples a step, the 16 rows in one mini-batch, one thread, no held-out check. Tests set
the keys they are about on the returned config.
"""

from __future__ import annotations

from quadrants.config import RunConfig


def small_world(seed: int) -> RunConfig:
    cfg = RunConfig(seed=seed)
    cfg.train.prompts_per_step = 4
    cfg.rollout.group_size = 4
    cfg.train.mini_batch_size = 16
    cfg.train.threads = 1
    cfg.eval.problems = 0
    return cfg
