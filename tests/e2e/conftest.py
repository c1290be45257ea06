"""Shared e2e fixtures: the embedded base policy (built once per machine and cached, like in real use)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def base_policy() -> str:
    """Build (first time, a few minutes) or reuse the cached warm-started tiny policy; returns its dir."""
    from quadrants.models.warmup import WarmupSettings, ensure_base_policy

    return str(ensure_base_policy(WarmupSettings()))
