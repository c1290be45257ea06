"""DAPO's refill under the distributed path: every round's prompts are dealt to the ranks in blocks
and gathered, so a 2-rank run keeps the same groups as a 1-process run (same rounds, same rewards)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_refill_two_ranks_match_one_process(tmp_path_factory, base_policy, worker):
    root = tmp_path_factory.mktemp("refill")
    worker.run(root / "one", ["dapo_refill"], ranks=1)
    worker.run(root / "two", ["dapo_refill"], ranks=2)
    one, two = (
        worker.logged(root / "one" / "dapo_refill"),
        worker.logged(root / "two" / "dapo_refill"),
    )
    assert (one["world_size"], two["world_size"]) == (1, 2)
    for step in ("1", "2"):
        a, b = one["steps"][step], two["steps"][step]
        for key in (
            "refill/rounds",
            "refill/groups_kept",
            "refill/groups_generated",
            "reward_mean",
            "overlong_penalty_mean",
            "response_length",
        ):
            assert b[f"train/{key}"] == a[f"train/{key}"], (
                step,
                key,
            )  # the same rounds, graded the same
        assert b["train/objective/loss"] == pytest.approx(a["train/objective/loss"], abs=1e-6)
        assert b["train/objective/kept_group_frac"] == a["train/objective/kept_group_frac"]
