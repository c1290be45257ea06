"""The matched random control as a user runs it: `python -m quadrants.sweep -m quadrant=PHR,random
quadrant.match=PHR quadrant.match_sign=true train.steps=3`. In the control's run MLflow holds, at
every step, the gradient-carrying token counts (objectives/loss.py `gradient_tokens`: in the loss's
denominator, non-zero advantage) of the control and of the arm it matches on the same batch, equal
per sign, and a zero per-mini-batch gap; at step 1 they equal the PHR run's own (the same seed, so
the same first batch from the same initial policy)."""

from __future__ import annotations

import pytest

from tests.sweep_store import child_runs, client, history, sweep

SIGNS = ("pos", "neg")
# The warmed tiny base policy (the default model; ~57 % held-out accuracy), so that step 1 has
# mixed groups and gradient-carrying tokens: on the tiny random model of tests/commands.py TINY
# every reward is 0 and every count compared below would be a vacuous 0.
SMALL = [
    "train.prompts_per_step=4",
    "rollout.group_size=4",
    "eval.problems=2",
    "eval.samples=1",
    "eval.every=0",
    "hydra.launcher.n_jobs=2",
]


@pytest.mark.slow
@pytest.mark.integration  # runs the sweep command
def test_the_control_trains_the_arms_gradient_tokens_per_sign_every_step(tmp_path):
    done = sweep(
        tmp_path, "-m", "quadrant=PHR,random", "quadrant.match=PHR", "quadrant.match_sign=true",
        "train.steps=3", *SMALL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    children = child_runs(tmp_path)
    by_tag = {r.data.tags["quadrant"]: r.info.run_id for r in children}
    assert sorted(by_tag) == ["PHR", "random:PHR:sign"]
    control, phr = by_tag["random:PHR:sign"], by_tag["PHR"]
    for sign in SIGNS:
        drawn = history(tmp_path, control, f"train/grad_tokens_{sign}")
        matched = history(tmp_path, control, f"train/matched/grad_tokens_{sign}")
        own = history(tmp_path, phr, f"train/grad_tokens_{sign}")
        assert sorted(drawn) == sorted(matched) == sorted(own) == [1, 2, 3]
        assert drawn == matched  # every step, on the control's own batch
        assert drawn[1] == own[1]  # step 1: the PHR run's batch is the same
    # PHR trains positive tokens only, and some at step 1
    assert history(tmp_path, phr, "train/grad_tokens_pos")[1] > 0
    assert set(history(tmp_path, phr, "train/grad_tokens_neg").values()) == {0.0}
    gap = history(tmp_path, control, "train/control/minibatch_count_gap")
    assert gap == {1: 0.0, 2: 0.0, 3: 0.0}
    assert "train/quadrant/PHR/flip_frac" in client(tmp_path).get_run(phr).data.metrics
