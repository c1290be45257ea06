"""A submitted sweep's plan names its runs' headline keys, the columns of the view its runs link
opens (tracking/view.py), from the composed job config."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_the_plan_names_the_headline_keys_of_its_runs(tmp_path):
    from quadrants.launch.submit import plan_sweep

    plan = plan_sweep(["-m", "seed=0,1", "eval.samples=2", f"outputs={tmp_path / 'outputs'}"])
    # the task's held-out split at n = eval.samples = 2, then the entropy
    assert plan.headline == ("final/avg_at_2", "final/pass_at_2", "final/entropy")
    assert not (tmp_path / "outputs").exists()  # planning writes nothing
