"""The step's other per-token signals on toy runs (train/signals.py, hooked in train/score.py
`build_batch`): ARCA under LoRA logs the adapter residual per quadrant next to the entropy;
`quadrant.axis=attention_entropy` splits the quadrants by the attention entropy.

CPU only, the embedded tiny policy, 2 steps of 16 rollouts. What only a GPU can show: the same
passes under bf16 autocast and their memory on a long-context model."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.objectives.batch import make_token_batch
from quadrants.ops.quadrants import Quadrant
from quadrants.run.loop import run_training
from quadrants.run_plan import RunPlan
from quadrants.tracking import keys
from quadrants.tracking.base import RecordingTracker
from tests.unit.train.test_lora import small

QUADRANTS = [q.value for q in Quadrant]


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.subprocess
def test_arca_toy_run_logs_the_adapter_residual_per_quadrant(tmp_path):
    """2 steps of ARCA with LoRA: every quadrant's adapter_residual_mean next to its entropy_mean.
    Step 1 runs with peft's B = 0, so the residual is exactly 0 and ARCA's weights are all 1
    (effective-token ratio 1); after one update the adapters change the hidden state, so step 2's
    residual is positive and the weights are no longer uniform."""
    cfg = small(tmp_path, steps=2, objective="arca")
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    history = [m for _, m in tracker.history if keys.train("grad_norm") in m]
    assert len(history) == 2
    first, second = history
    for q in QUADRANTS:
        assert keys.quadrant(q, "entropy_mean") in second
        assert first[keys.quadrant(q, "adapter_residual_mean")] == 0.0
    assert first[keys.objective("arca_effective_token_ratio")] == pytest.approx(1.0)
    filled = [q for q in QUADRANTS if second[keys.quadrant(q, "token_frac")] > 0]
    assert filled
    assert all(second[keys.quadrant(q, "adapter_residual_mean")] > 0 for q in filled)
    assert second[keys.objective("arca_effective_token_ratio")] < 1.0
    assert second[keys.objective("arca_weight_max")] > 1.0
    assert all(math.isfinite(v) for v in second.values())


@pytest.mark.subprocess
def test_lora_telemetry_is_on_for_any_objective_and_can_be_switched_off(tmp_path):
    cfg = small(tmp_path / "on", steps=1, objective="grpo")
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    metrics = tracker.history[-1][1]
    assert all(keys.quadrant(q, "adapter_residual_mean") in metrics for q in QUADRANTS)
    cfg = small(tmp_path / "off", steps=1, objective="grpo")
    cfg.model.lora.residual_telemetry = False
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    assert not any("adapter_residual" in k for k in tracker.history[-1][1])


@pytest.mark.subprocess
def test_attention_entropy_axis_toy_run(tmp_path):
    """2 steps with quadrant.axis=attention_entropy (no LoRA): the per-quadrant attention entropy is
    logged, and the split is by it: with the group-mean threshold, the high quadrants' mean attention
    entropy is above the low ones' (PHR > PLR, NHR > NLR), which the token entropy need not be."""
    cfg = small(tmp_path, steps=2, objective="grpo")
    cfg.model.lora.enabled = False
    cfg.quadrant.axis = "attention_entropy"
    tracker = RecordingTracker()
    run_training(RunPlan.parse(cfg), tracker)
    history = [m for _, m in tracker.history if keys.train("grad_norm") in m]
    assert len(history) == 2
    for metrics in history:
        assert not any("adapter_residual" in k for k in metrics)
        att = {q: metrics[keys.quadrant(q, "attention_entropy_mean")] for q in QUADRANTS}
        frac = {q: metrics[keys.quadrant(q, "token_frac")] for q in QUADRANTS}
        assert all(math.isfinite(v) and v >= 0 for v in att.values())
        for high, low in (("PHR", "PLR"), ("NHR", "NLR")):
            if frac[high] > 0 and frac[low] > 0:
                assert att[high] > att[low], (high, low, att)


def test_the_split_follows_the_attention_entropy_when_given():
    # one group of 2, rewards [1, 0]: row 0 positive, row 1 negative. Token entropy [1, 3 | 1, 3]
    # would put token 1 high; attention entropy [3, 1 | 1, 3] (group mean 2) puts row 0's token 0
    # high (PHR) and token 1 low (PLR), row 1's token 0 low (NLR) and token 1 high (NHR)
    args = dict(
        sequences=torch.zeros(2, 3, dtype=torch.long),
        attention_mask=torch.ones(2, 3, dtype=torch.bool),
        response_mask=torch.ones(2, 2, dtype=torch.bool),
        old_logp=torch.full((2, 2), -1.0),
        entropy=torch.tensor([[1.0, 3.0], [1.0, 3.0]]),
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
    )
    by_attention = make_token_batch(
        **args, attention_entropy=torch.tensor([[3.0, 1.0], [1.0, 3.0]])
    )
    q = by_attention.quadrants
    assert q.PHR.tolist() == [[True, False], [False, False]]
    assert q.PLR.tolist() == [[False, True], [False, False]]
    assert q.NHR.tolist() == [[False, False], [False, True]]
    assert q.NLR.tolist() == [[False, False], [True, False]]
    # HAPO's group statistics stay on the token entropy: mean 2, population std 1
    assert by_attention.group_entropy_mean.tolist() == [2.0, 2.0]
    assert by_attention.group_entropy_std.tolist() == [1.0, 1.0]
    by_token = make_token_batch(**args)
    assert by_token.quadrants.PHR.tolist() == [[False, True], [False, False]]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["quadrant.axis=attention"], r"quadrant.axis='attention' is unknown"),
        (["quadrant.attention_layers=first"], r"quadrant.attention_layers='first' is not a layer"),
        (["quadrant.attention_layers=[0,0]"], r"quadrant.attention_layers=\[0, 0\] is not a layer"),
        (["objective=arca"], r"objective.name=arca .* set model.lora.enabled=true"),
    ],
)
def test_compose_time_refusals(overrides, message):
    """Hydra composes the new keys and the run plan refuses bad values before anything runs."""
    from quadrants.launch.hydra_setup import compose_run_config

    with pytest.raises(ValueError, match=message):
        compose_run_config(overrides)


def test_hydra_composes_the_attention_axis():
    from quadrants.launch.hydra_setup import compose_run_config

    cfg = compose_run_config(["quadrant.axis=attention_entropy", "quadrant.attention_layers=[-1]"])
    assert cfg.quadrant.axis == "attention_entropy"
    assert list(cfg.quadrant.attention_layers) == [-1]


def test_signal_passes_chunk_by_the_forward_token_budget():
    """A 7B preset's 256-row mini-batch of 3,328-token rows must not go through a signal pass at
    once: with train.forward_tokens=65536 a call takes 65536 // 3328 = 19 rows (19 x 3328 = 63,232
    tokens; 20 rows would be 66,560 > 65,536); a budget below one row still takes 1 row; without a
    budget, train.mini_batch_size rows."""
    from quadrants.train.signals import chunk_rows

    assert chunk_rows(256, 65536, 3328) == 19
    assert chunk_rows(256, 100, 3328) == 1
    assert chunk_rows(256, 0, 3328) == 256
