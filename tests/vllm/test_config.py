"""rollout=vllm and the mismatch correction in the Hydra tree: they compose, and bad values stop the
command at compose time naming the key and the allowed values (no vLLM needed)."""

from __future__ import annotations

import pytest

from quadrants.launch.hydra_setup import compose_run_config, preflight


@pytest.mark.slow
def test_rollout_vllm_composes_with_its_engine_settings():
    cfg = compose_run_config(
        ["rollout=vllm", "rollout.mismatch_correction=sequence", "rollout.vllm.sleep_level=2"]
    )
    assert cfg.rollout.engine == "vllm"
    assert cfg.rollout.mismatch_correction == "sequence" and cfg.rollout.mismatch_cap == 2.0
    assert cfg.rollout.vllm.sleep_level == 2 and cfg.rollout.vllm.tensor_parallel_size == 1
    assert (
        compose_run_config([]).rollout.mismatch_correction == "none"
    )  # default: measured, not corrected


def test_the_paper_presets_use_the_vllm_engine():
    cfg = compose_run_config(["experiment=paper_quadrants_qwen7b", "quadrant=PHR"])
    assert cfg.rollout.engine == "vllm"


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "rollout.mismatch_correction=tokens",
            r"rollout.mismatch_correction='tokens' is unknown; choose one of \['none', 'token', 'sequence'\]",
        ),
        (
            "rollout.mismatch_cap=0.5",
            r"rollout.mismatch_cap=0.5 is out of range; allowed: \[1, inf\)",
        ),
        (
            "rollout.vllm.sleep_level=3",
            r"rollout.vllm.sleep_level=3 is unknown; choose one of \[0, 1, 2\]",
        ),
        (
            "rollout.vllm.gpu_memory_utilization=1.5",
            r"rollout.vllm.gpu_memory_utilization=1.5 is out of range; allowed: \(0, 1\]",
        ),
        (
            "rollout.vllm.tensor_parallel_size=0",
            r"rollout.vllm.tensor_parallel_size=0 is out of range",
        ),
        (
            "rollout.engine=sglang",
            r"rollout.engine='sglang' is unknown; choose one of \['hf', 'vllm'\]",
        ),
    ],
)
def test_bad_values_fail_before_anything_starts(override, message):
    with pytest.raises(ValueError, match=message):
        preflight(["-m", "rollout=vllm", override])
