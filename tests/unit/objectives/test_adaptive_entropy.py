"""Adaptive entropy control: the DAPO-style loss minus c · 1[on] · H (current entropy, with grad),
and Skywork-OR1's controller stepping c by Δ towards the target entropy, within [c_min, c_max]."""

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput
from quadrants.objectives.control import STATE_KEY, advance_state, restore_state, with_initial_state
from quadrants.objectives.loss import LossSettings, compute_loss
from quadrants.objectives.registry import get_objective, resolve_objective

from .helpers import (
    GRPO_RATIOS,
    batch,
    close,
    grad_of,
    grpo_batch,
    logp_for_ratios,
    random_batch,
    run,
)
from .upstream import skywork_entropy_metric, skywork_functions

# grpo_batch with GRPO_RATIOS and clip 0.2/0.2: surrogate sum -1.6 over 5 tokens -> -0.32.
# Current entropy [[1, 0, 0.5], [1, 0, pad]]: mean over the 5 response tokens 2.5 / 5 = 0.5.
#   on, c = 0.004: loss -0.32 - 0.004 * 0.5 = -0.322; d loss / d H_t = -0.004 / 5 = -0.0008
#   off (entropy was above the target last step): loss -0.32, no gradient into H
ENTROPY = [[1.0, 0.0, 0.5], [1.0, 0.0, 9.0]]


def _loss(state=None):
    spec, params = resolve_objective("adaptive_entropy", {})
    if state is not None:
        params = {**params, STATE_KEY: state}
    tb = grpo_batch()
    logp = logp_for_ratios(tb, GRPO_RATIOS)
    entropy = torch.tensor(ENTROPY, requires_grad=True)
    loss, metrics = compute_loss(spec, params, tb, PolicyOutput(logp, entropy), LossSettings())
    return loss, metrics, entropy


def test_bonus_on_by_hand():
    loss, metrics, entropy = _loss({"coef": 0.004, "enabled": 1.0})
    close(loss, -0.322)
    close(grad_of(loss, entropy), [[-0.0008] * 3, [-0.0008, -0.0008, 0.0]])
    close(metrics["current_entropy"], 0.5)
    # the controller's input: -mean old log-prob over the 5 response tokens of grpo_batch,
    # -(-1 - 0.5 - 2 - 0.3 - 1.5) / 5 = 5.3 / 5 = 1.06
    close(metrics["entropy_estimate"], 1.06)
    close(metrics["entropy_coef"], 0.004)
    close(metrics["entropy_bonus_on"], 1.0)


def test_bonus_off_and_initial_state_by_hand():
    loss, metrics, entropy = _loss({"coef": 0.004, "enabled": 0.0})
    close(loss, -0.32)
    close(grad_of(loss, entropy), torch.zeros(2, 3))
    # no state given: the initial one, c0 = 0 (the authors' entropy_coeff): plain surrogate
    loss, metrics, _ = _loss()
    close(loss, -0.32)
    close(metrics["entropy_coef"], 0.0)


def test_controller_steps_by_hand():
    # target 0.2, Δ 1e-4, c in [0, 0.005], c0 0. Entropies per step 0.1, 0.1, 0.3, 0.15:
    #   0.1 < 0.2: c 0 + 1e-4 = 1e-4, on | 0.1: 2e-4, on | 0.3: 1e-4, off | 0.15: 2e-4, on
    spec, params = resolve_objective("adaptive_entropy", {})
    params = with_initial_state(spec, params)
    assert params[STATE_KEY] == {"coef": 0.0, "enabled": 1.0}
    seen = []
    for e in (0.1, 0.1, 0.3, 0.15):
        advance_state(
            spec, params, {"train/objective/entropy_estimate": e}, prefix="train/objective/"
        )
        seen.append((params[STATE_KEY]["coef"], params[STATE_KEY]["enabled"]))
    expected = [(1e-4, 1.0), (2e-4, 1.0), (1e-4, 0.0), (2e-4, 1.0)]
    for (c, on), (c_expected, on_expected) in zip(seen, expected):
        assert c == pytest.approx(c_expected, abs=1e-12) and on == on_expected


def test_controller_stays_within_its_bounds():
    # c_max 0.005: from 0.00495 two steps below target -> 0.005, 0.005; c_min 0: from 0 above -> 0
    spec, params = resolve_objective("adaptive_entropy", {"coef_init": 0.00495})
    params = with_initial_state(spec, params)
    for _ in range(2):
        advance_state(spec, params, {"p/entropy_estimate": 0.0}, prefix="p/")
    assert params[STATE_KEY]["coef"] == pytest.approx(0.005, abs=1e-12)
    params[STATE_KEY] = {"coef": 0.0, "enabled": 1.0}
    advance_state(spec, params, {"p/entropy_estimate": 1.0}, prefix="p/")
    assert params[STATE_KEY] == {"coef": 0.0, "enabled": 0.0}


# Two groups of 2 x 2 tokens: group 0 rewards [2, -2] (mixed), group 1 [1, 1] (constant).
KEPT_OLD_LOGP = [[-1.0, -1.0], [-0.5, -0.5], [-3.0, -3.0], [-3.0, -3.0]]
KEPT_ENTROPY = [[0.2, 0.4], [0.6, 0.8], [2.0, 2.0], [2.0, 2.0]]


def _two_groups():
    tb = batch(
        entropy=KEPT_ENTROPY,
        rewards=[2.0, -2.0, 1.0, 1.0],
        group_ids=[0, 0, 1, 1],
        old_logp=KEPT_OLD_LOGP,
    )
    return tb, logp_for_ratios(tb), torch.tensor(KEPT_ENTROPY)


def test_sampled_nll_over_the_kept_groups_by_hand():
    tb, logp, entropy = _two_groups()
    # sampled_nll (the default), group 1 dropped: -(-1 - 1 - 0.5 - 0.5) / 4 = 0.75
    _, metrics = run("adaptive_entropy", tb, logp, entropy)
    close(metrics["entropy_estimate"], 0.75)
    close(metrics["kept_group_frac"], 0.5)
    # every group kept: (1 + 1 + 0.5 + 0.5 + 3 * 4) / 8 = 15 / 8 = 1.875
    _, metrics = run("adaptive_entropy", tb, logp, entropy, dynamic_sampling=False)
    close(metrics["entropy_estimate"], 1.875)
    # full: the current entropy over the kept tokens, (0.2 + 0.4 + 0.6 + 0.8) / 4 = 0.5; over all
    # 8 (current_entropy, logged whatever the estimate): (2 + 8) / 8 = 1.25
    _, metrics = run("adaptive_entropy", tb, logp, entropy, entropy_estimate="full")
    close(metrics["entropy_estimate"], 0.5)
    close(metrics["current_entropy"], 1.25)


def test_the_controller_steps_on_the_estimate_by_hand():
    # target 0.2 by default: the sampled-NLL estimate 0.75 is above it -> c 0 - 1e-4 -> 0, off.
    # With target 1.0 it is below -> c 1e-4, on; `full` (0.5) is below 1.0 as well, and below 0.6
    # where sampled_nll (0.75) is not.
    tb, logp, entropy = _two_groups()
    for params, expected in (
        ({}, {"coef": 0.0, "enabled": 0.0}),
        ({"target": 1.0}, {"coef": 1e-4, "enabled": 1.0}),
        ({"target": 0.6}, {"coef": 0.0, "enabled": 0.0}),
        ({"target": 0.6, "entropy_estimate": "full"}, {"coef": 1e-4, "enabled": 1.0}),
    ):
        spec, full = resolve_objective("adaptive_entropy", params)
        state = with_initial_state(spec, full)
        _, metrics = run("adaptive_entropy", tb, logp, entropy, **params)
        advance_state(spec, state, {f"o/{k}": v for k, v in metrics.items()}, prefix="o/")
        assert state[STATE_KEY] == pytest.approx(expected, abs=1e-12), params


def test_state_is_no_config_key_and_restores_from_a_checkpoint():
    spec = get_objective("adaptive_entropy")
    assert STATE_KEY not in spec.parameters() and STATE_KEY not in spec.defaults()
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['state'\]"):
        resolve_objective("adaptive_entropy", {"state": {"coef": 1.0}})
    params = with_initial_state(spec, resolve_objective("adaptive_entropy", {})[1])
    restore_state(params, {"coef": 0.003, "enabled": 0.0})
    assert params[STATE_KEY] == {"coef": 0.003, "enabled": 0.0}
    stateless = with_initial_state(get_objective("dapo"), {"clip_low": 0.2})
    restore_state(stateless, {"coef": 0.003})
    assert STATE_KEY not in stateless


@pytest.mark.parametrize(
    "params, pattern",
    [
        ({"target": -0.1}, r"^target=-0.1 is out of range"),
        ({"delta": -1e-4}, r"^delta=-0.0001 is out of range"),
        ({"coef_max": -1.0}, r"^coef_max=-1.0 is out of range"),
        ({"coef_init": 0.1}, r"^coef_init=0.1 is out of range; allowed: \[0, 0.005\]"),
        ({"entropy_estimate": "x"}, r"^entropy_estimate='x' is unknown"),
    ],
)
def test_validation_names_the_key(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        resolve_objective("adaptive_entropy", params)


@pytest.mark.parametrize(
    "params",
    [{}, {"target": 0.5, "delta": 0.002, "coef_max": 0.01, "coef_init": 0.004}],
)
def test_controller_matches_the_authors_on_the_same_entropies(params):
    """SkyworkAI/Skywork-OR1 verl/trainer/ppo/core_algos.py EntController, stepped on the same
    seeded entropy sequence as ours (200 steps wandering around the target; the second setting
    reaches both c_min and c_max, the defaults c_min only); its
    `value` and `entropy_loss_enabled` after each step are our `coef` and `enabled`."""
    theirs_cls = skywork_functions("EntController")["EntController"]
    spec, full = resolve_objective("adaptive_entropy", params)
    ours = with_initial_state(spec, full)
    theirs = theirs_cls(
        init_ent_coef=full["coef_init"],
        max_ent_coef=full["coef_max"],
        min_ent_coef=full["coef_min"],
        delta_ent_coef=full["delta"],
        target_ent=full["target"],
        use_adapt_ent=True,
    )
    g = torch.Generator().manual_seed(0)
    walk = full["target"] + 0.3 * torch.randn(200, generator=g).cumsum(0) / 10
    worst = 0.0
    for e in walk.tolist():
        theirs.update(e)
        advance_state(spec, ours, {"o/entropy_estimate": e}, prefix="o/")
        assert ours[STATE_KEY]["enabled"] == theirs.entropy_loss_enabled
        worst = max(worst, abs(ours[STATE_KEY]["coef"] - theirs.value))
    assert worst < 1e-12
    print(f"adaptive_entropy controller vs Skywork-OR1: largest difference {worst:.3g}")


def test_the_controller_input_matches_the_authors_over_their_filtered_batch():
    """The recipe: Skywork-OR1's trainer (verl/trainer/ppo/ray_trainer.py at 64e96af) drops the
    groups whose rewards are all 0 or all 1 (`trainer.rejection_sample=True`; inline code,
    restated here), hands the filtered batch to the actor, whose `get_entropy_metric` (run here
    from their dp_actor.py) gives `actor/entropy_loss` = -masked_mean(old_log_probs) before any
    update, and feeds that to `EntController.update`. Ours: the objective with its defaults on
    the unfiltered batch (sampled_nll over the kept groups), then advance_state. Seeds 0, 2, 3 hold
    a constant group; the estimate over every group differs from theirs there."""
    metric = skywork_entropy_metric()
    controller_cls = skywork_functions("EntController")["EntController"]
    spec, full = resolve_objective("adaptive_entropy", {"target": 1.4})  # near these batches'
    ours = with_initial_state(spec, full)
    theirs = controller_cls(
        init_ent_coef=full["coef_init"],
        max_ent_coef=full["coef_max"],
        min_ent_coef=full["coef_min"],
        delta_ent_coef=full["delta"],
        target_ent=full["target"],
        use_adapt_ent=True,
    )
    worst, filtered = 0.0, 0
    for seed in range(6):
        tb, logp, entropy = random_batch(seed, length=9)
        rewards = torch.stack([tb.rewards[tb.group_ids == g] for g in tb.group_ids.unique()])
        constant = (rewards == 0).all(-1) | (rewards == 1).all(-1)  # [groups], their rule
        keep = ~constant[tb.group_ids]
        filtered += int((~keep).sum())
        their_batch = {
            "advantages": tb.advantages[keep][:, None].expand(-1, tb.response_length),
            "old_log_probs": tb.old_logp[keep],
            "attention_mask": tb.attention_mask[keep].float(),
        }
        their_input = metric(None, their_batch, theirs.__dict__)["actor/entropy_loss"]
        theirs.update(their_input)
        _, metrics = run("adaptive_entropy", tb, logp, entropy, target=1.4)
        advance_state(spec, ours, {f"o/{k}": float(v) for k, v in metrics.items()}, prefix="o/")
        assert abs(metrics["entropy_estimate"].item() - their_input) < 1e-6
        assert ours[STATE_KEY]["enabled"] == theirs.entropy_loss_enabled
        assert abs(ours[STATE_KEY]["coef"] - theirs.value) < 1e-12
        worst = max(worst, abs(metrics["entropy_estimate"].item() - their_input))
        if not keep.all():  # every group in: another input
            _, unfiltered = run("adaptive_entropy", tb, logp, entropy, dynamic_sampling=False)
            assert abs(unfiltered["entropy_estimate"].item() - their_input) > 1e-3
    assert filtered > 0
    print(f"adaptive_entropy controller input vs Skywork-OR1: largest difference {worst:.3g}")
