"""Every metric key quadrants logs is built here, so dashboards and analysis agree on names.

Keys are paths: `train/...` per training step, `eval/<benchmark>/<metric>` for evaluations,
`time/...` for wall time, `train/quadrant/<Q>/<stat>` for per-quadrant telemetry. Avg@k and Pass@k
are `eval/<benchmark>/avg_at_<k>` and `pass_at_<k>` (MLflow does not accept '@' in a metric name).
"""

from __future__ import annotations

# Logged with every delivered step (value 1.0); how a resumed run knows which
# steps MLflow already has.
SENTINEL = "tracking/step_logged"

QUADRANT_STATS = (
    "token_frac",
    "tokens",  # the count the quadrant's arm keeps (train/kept_tokens: the run's own arm)
    "entropy_mean",
    "adv_mass",
    "dlogp_abs",
    "dlogp_abs_se",
    "cov",
    "cov_share",
    "cov_state",
    "dentropy",
    "dentropy_se",
    "entropy_change",
    "token_r",  # within-step correlation over tokens of −(log π + H) w with the measured ΔH
    "attention_entropy_mean",  # with quadrant.axis=attention_entropy
    "adapter_residual_mean",  # under LoRA: ||h_adapted - h_base||, ARCA's credit signal
    # flips and cancellation (ops/cancellation.py): shared between a group's positive and negative
    # responses; moved against the applied advantage; the mean signed Δ log-prob
    "shared_frac",
    "flip_frac",
    "flip_frac_se",
    "flip_frac_shared",
    "flip_frac_unique",
    "dlogp_signed",
    "dlogp_signed_se",
    "dlogp_signed_shared",
    "dlogp_signed_unique",
)


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


def avg_at(k: int) -> str:
    """Avg@k as a metric name. MLflow rejects '@' in metric names, so Avg@k
    is logged as avg_at_k."""
    return f"avg_at_{k}"


def pass_at(k: int) -> str:
    """Pass@k as a metric name (pass_at_k; see avg_at)."""
    return f"pass_at_{k}"


def stderr(metric: str) -> str:
    """The standard error (over problems) of an eval metric: ``avg_at_32`` ->
    ``avg_at_32_stderr``."""
    return f"{metric}_stderr"


def paper_avg() -> str:
    """The paper's "avg" column: the mean of Avg@k over its six benchmarks."""
    return "eval/avg"


def ood_avg() -> str:
    """The "ood avg" column: the mean Avg@k of the out-of-domain benchmarks a run evaluated."""
    return "eval/ood_avg"


def eval_group(benchmark: str, group_kind: str, group: str) -> str:
    """The `<benchmark>` part of a group's eval keys: ``eval/mmlu_pro/domain/law/avg_at_1``."""
    return f"{benchmark}/{group_kind}/{group}"
