"""`python -m quadrants.plan` names a renamed key's replacement, as the sweep does
(launch/hydra_setup.py REMOVED_KEYS), instead of Hydra's "Could not override" advice."""

from __future__ import annotations

import pytest

from quadrants.launch.memory_plan import main


def test_the_plan_names_the_renamed_gpu_memory_key():
    with pytest.raises(SystemExit) as refused:
        main(["cluster.gpu_memory_gb=80"])
    said = str(refused.value.code)
    assert said.startswith("quadrants.plan: invalid configuration.")
    assert "cluster.gpu_memory_gb was removed; use cluster.gpu_memory_gib (usable GiB" in said
