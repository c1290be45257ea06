"""Importing this module registers every built-in objective (one module each)."""

from quadrants.objectives import (  # noqa: F401
    clip_cov,
    dapo,
    entroadv,
    entroreg,
    forking,
    grpo,
    hapo,
    kl_cov,
    w_reinforce,
)
