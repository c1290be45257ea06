"""train.attention_layout=packed on 2 gloo ranks against the padded layout on 2 gloo ranks (the
one-process packed update: tests/unit/train/test_packed_update.py; 2 ranks against one process:
tests/distributed/test_equivalence.py): for every registered objective that trains without LoRA
(one step of 4 prompts x 4 samples, 2 updates), with DAPO under micro-batches of 4 rows (2 per rank;
PHR: rows without a kept token run without grad) and under a token budget of 120 per rank (padded
tokens against real ones: the two layouts split the mini-batch differently), the loss, the gradient
norm and every logged metric agree.

Both runs recompute the behaviour pass (the `always-` and `packed-` cases of
tests/distributed/worker.py, from the one launch of conftest.py's `recompute_runs`), so the old
log-probs, the update and the |Δ log-prob| pass all run in the layout under test. Tolerances
(float32) as tests/distributed/test_behaviour_pass.py's: atol 1e-5 and rel 1e-5 (the packed forward
rounds differently at ~1e-6 per log-prob: tests/unit/models/test_packed_forward.py), the gradient
norm rel 5e-5; the train–inference mismatch metrics measure float32 rounding between the engine's
decode and each run's recompute, so each lies in [0, 1e-4) (tests/distributed/test_behaviour_pass.py
measured up to 1.6e-5); the flip diagnostics as tests/flip_metrics.py says."""

from __future__ import annotations

import pytest

from quadrants.objectives.registry import known_objectives
from quadrants.validation import NEEDS_LORA
from tests.flip_metrics import flip_metric_agrees

from .harness import LAYOUT_CASES

# LoRA trains in one process (validation.check_lora_ranks), so ARCA has no 2-rank run
CASES = [name for name in known_objectives() if name not in NEEDS_LORA] + LAYOUT_CASES
MISMATCH = ("train/engine_logp_abs_diff", "train/engine_logp_abs_diff_max")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_packed_runs_log_what_the_padded_run_logs(recompute_runs, worker, case):
    padded = worker.logged(recompute_runs / f"always-{case}")
    assert padded["world_size"] == 2
    want = padded["steps"]["1"]
    assert want["train/grad_norm"] > 1e-4  # a non-trivial update
    packed = worker.logged(recompute_runs / f"packed-{case}")
    assert packed["world_size"] == 2
    got = packed["steps"]["1"]
    assert set(got) == set(want)
    assert got["train/reward_mean"] == want["train/reward_mean"]  # the same rollouts
    for key, value in want.items():
        if key.startswith("time/"):
            continue
        if key in MISMATCH:
            assert 0.0 <= got[key] < 1e-4 and 0.0 <= value < 1e-4, (case, key)
        elif (agrees := flip_metric_agrees(key, got[key], value, 1e-5)) is not None:
            assert agrees, (case, key, got[key], value)
        else:
            rel = 5e-5 if key == "train/grad_norm" else 1e-5
            assert got[key] == pytest.approx(value, abs=1e-5, rel=rel), (case, key)
