"""The matched random control as a user runs it: `python -m quadrants.sweep -m quadrant=PHR,random
quadrant.match=PHR train.steps=3`; both runs log their kept-token counts every step, equal at
step 1 (the same seed, so the same first batch from the same initial policy)."""

from __future__ import annotations

import pytest

from tests.sweep_store import client, history, sweep_arms


@pytest.mark.slow
@pytest.mark.integration  # runs the sweep command
def test_phr_and_its_random_control_keep_equal_counts_at_step_one(tmp_path):
    children = sweep_arms(tmp_path, "quadrant=PHR,random", "quadrant.match=PHR", "train.steps=3")
    by_tag = {r.data.tags["quadrant"]: r.info.run_id for r in children}
    assert sorted(by_tag) == ["PHR", "random:PHR"]
    kept = {tag: history(tmp_path, run, "train/kept_tokens") for tag, run in by_tag.items()}
    phr = {tag: history(tmp_path, run, "train/quadrant/PHR/tokens") for tag, run in by_tag.items()}
    for tag in by_tag:  # every step logged, in both runs
        assert sorted(kept[tag]) == [1, 2, 3] and sorted(phr[tag]) == [1, 2, 3]
    # the PHR arm keeps its PHR tokens; the control keeps as many as PHR holds on its own batch,
    # every step
    assert kept["PHR"] == phr["PHR"]
    assert kept["random:PHR"] == phr["random:PHR"]
    # step 1: the same batch in both runs, so the same count, and not a trivial one
    assert kept["PHR"][1] == kept["random:PHR"][1] > 0
    assert "train/quadrant/PHR/flip_frac" in client(tmp_path).get_run(by_tag["PHR"]).data.metrics
