"""`rollout.mismatch_correction` with top-p truncation is refused at compose time: the engine's
log-probs (vLLM's processed ones, of the truncated distribution) and the trainer's untruncated
recompute are not of the same distribution, so their ratio would carry the nucleus mass."""

from __future__ import annotations

import pytest

from quadrants.config import RolloutConfig, RunConfig
from quadrants.run_plan import RunPlan
from quadrants.run_plan.composition import validate_mismatch_truncation


def test_a_correction_under_top_p_is_refused_naming_both_keys_and_the_fixes():
    for correction in ("token", "sequence"):
        with pytest.raises(
            ValueError,
            match=rf"rollout.mismatch_correction={correction} with rollout.top_p=0.95: .*"
            r"Set rollout.top_p=1.0, or rollout.mismatch_correction=none",
        ):
            validate_mismatch_truncation(RolloutConfig(mismatch_correction=correction, top_p=0.95))
    cfg = RunConfig()
    cfg.rollout.mismatch_correction, cfg.rollout.top_p = "token", 0.9
    with pytest.raises(ValueError, match="rollout.mismatch_correction=token"):
        RunPlan.parse(cfg)  # the compose-time path


def test_what_stays_allowed():
    validate_mismatch_truncation(RolloutConfig(mismatch_correction="token", top_p=1.0))
    # the paper presets: top-p 0.95, no correction (the mismatch is only logged)
    validate_mismatch_truncation(RolloutConfig(mismatch_correction="none", top_p=0.95))
