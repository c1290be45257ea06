"""train.behaviour_pass on 2 gloo ranks: each rank's HF engine samples from its replica (synced with
the sharded policy) and records log-probs and entropy; `auto` takes them, `always` recomputes them
with the sharded no-grad pass. For every registered objective, one step of 4 prompts x 4 samples
(2 updates): the loss, the gradient norm and every logged metric agree (tolerances as in
tests/e2e/test_behaviour_pass.py: atol 1e-5, float32 summation order only; the mismatch metrics
and the gradient norm as MISMATCH below says).

Parameters are not compared: a first AdamW update is ~lr * sign(gradient) per entry, so an entry whose
gradient is rounding noise in both runs (an attention key bias, see worker.parameter_atol) moves by
+-lr either way; what the gradients agree on is checked through the gradient norm and the losses."""

from __future__ import annotations

import pytest

from quadrants.objectives.registry import get_objective, known_objectives
from tests.flip_metrics import flip_metric_agrees

# LoRA trains in one process (validation.check_lora_ranks), so ARCA has no 2-rank run
OBJECTIVES = [
    name for name in known_objectives() if "adapter_residual" not in get_objective(name).needs
]
# The train–inference mismatch metrics. Under auto the engine's log-probs are the old ones, so they
# are exactly 0; under always they measure the float32 rounding between the engine's decode (a few
# rows per multiply) and the sharded recompute (every position at once): the largest over a step's
# tokens measured 1.6e-5 with oneDNN's multiplies (train.cpu_matmul=auto on AMD processors), under
# 1e-5 with MKL's. Rounding, not a mismatch: a bf16 engine's is ~1e-2.
MISMATCH = ("train/engine_logp_abs_diff", "train/engine_logp_abs_diff_max")
# The gradient norm feels those old log-probs through the importance ratios: relative differences
# of 1.0-1.1e-5 measured with oneDNN (under 1e-5 with MKL), so 5e-5 for it; 1e-5 for the rest.


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_engine_numbers_equal_the_sharded_recompute(recompute_runs, worker, objective):
    auto, always = (
        worker.logged(recompute_runs / objective),
        worker.logged(recompute_runs / f"always-{objective}"),
    )
    assert auto["world_size"] == always["world_size"] == 2
    a, b = always["steps"]["1"], auto["steps"]["1"]
    assert set(a) == set(b)
    assert b["train/reward_mean"] == a["train/reward_mean"]  # the same rollouts, graded the same
    takes_engine = not get_objective(objective).recomputed_old_logp  # KL-Cov keeps the pass
    for key, value in a.items():
        if key.startswith("time/"):
            continue
        if key in MISMATCH and takes_engine:
            assert b[key] == 0.0 and 0.0 <= value < 1e-4, (objective, key, value)
        elif (agrees := flip_metric_agrees(key, b[key], value, 1e-5)) is not None:
            assert agrees, (objective, key, b[key], value)  # tests/flip_metrics.py
        else:
            rel = 5e-5 if key == "train/grad_norm" else 1e-5
            assert b[key] == pytest.approx(value, abs=1e-5, rel=rel), (objective, key)
    assert a["train/grad_norm"] > 1e-4  # a non-trivial update
