"""Every metric key quadrants logs is built here, so dashboards and analysis agree on names.

Keys are paths: `train/...` per training step, `eval/<benchmark>/<metric>` for evaluations,
`time/...` for wall time, `train/quadrant/<Q>/<stat>` for per-quadrant telemetry.
"""

from __future__ import annotations

QUADRANT_STATS = ("token_frac", "entropy_mean", "adv_mass", "dlogp_abs")


def train(name: str) -> str:
    return f"train/{name}"


def objective(name: str) -> str:
    """An objective's own metric (clip_frac, selected_frac, ...)."""
    return f"train/objective/{name}"


def quadrant(q: str, stat: str) -> str:
    return f"train/quadrant/{q}/{stat}"


def timing(name: str) -> str:
    return f"time/{name}_s"


def evaluation(benchmark: str, metric: str) -> str:
    return f"eval/{benchmark}/{metric}"
