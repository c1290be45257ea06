"""Reading runs back for the tracking tests, and the values the writers log (so tests can predict them)."""

from __future__ import annotations

from collections import Counter

from mlflow.tracking import MlflowClient

KEYS = tuple(f"train/m{i}" for i in range(3))


def step_metrics(step: int, offset: float = 0.0, keys: tuple[str, ...] = KEYS) -> dict[str, float]:
    """Step s logs m_i = s + i/10 + offset, so every value says which step and which writer made it."""
    return {key: step + i / 10 + offset for i, key in enumerate(keys)}


def history(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every logged (step, value) of every metric of the run, duplicates included."""
    keys = client.get_run(run_id).data.metrics
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        for key in keys
    }


def duplicates(hist: dict[str, list[tuple[int, float]]]) -> dict[tuple[str, int], int]:
    """(key, step) pairs logged more than once."""
    counts = Counter((key, step) for key, points in hist.items() for step, _ in points)
    return {pair: n for pair, n in counts.items() if n > 1}
