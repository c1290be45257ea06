"""Per-quadrant telemetry by hand, including empty quadrants and an all-equal-reward batch (zeros)."""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.objectives.batch import make_token_batch
from quadrants.tracking import keys
from quadrants.train.telemetry import quadrant_telemetry
from quadrants.train.update import mean_metrics


def batch(rewards: list[float]):
    # one group of 2 sequences x 2 tokens; entropy [[1, 0], [0, 0]] -> group mean 0.25:
    # only token (0, 0) is high
    return make_token_batch(
        sequences=torch.zeros(2, 3, dtype=torch.long),
        attention_mask=torch.ones(2, 3, dtype=torch.bool),
        response_mask=torch.ones(2, 2, dtype=torch.bool),
        old_logp=torch.zeros(2, 2),
        entropy=torch.tensor([[1.0, 0.0], [0.0, 0.0]]),
        rewards=torch.tensor(rewards),
        group_ids=torch.tensor([0, 0]),
        normalize_std=False,
    )


def test_quadrant_telemetry_by_hand():
    # rewards [1, 0] -> advantages [+0.5, -0.5]; PHR = {(0,0)}, PLR = {(0,1)}, NLR = {(1,0), (1,1)}, NHR empty
    # |Δlogp| = [[0.2, 0.4], [0.1, 0.3]]
    out = quadrant_telemetry(batch([1.0, 0.0]), torch.tensor([[0.2, 0.4], [0.1, 0.3]]))
    expected = {
        "PHR": (0.25, 1.0, 0.5, 0.2),
        "PLR": (0.25, 0.0, 0.5, 0.4),
        "NHR": (0.0, 0.0, 0.0, 0.0),  # empty quadrant: zeros, not NaN
        "NLR": (0.5, 0.0, -1.0, 0.2),
    }
    for q, (frac, ent, mass, dlogp) in expected.items():
        got = [
            out[keys.quadrant(q, s)]
            for s in ("token_frac", "entropy_mean", "adv_mass", "dlogp_abs")
        ]
        assert got == pytest.approx([frac, ent, mass, dlogp], abs=1e-6)


def test_all_equal_rewards_give_zero_advantage_mass_and_finite_values():
    # rewards [1, 1] -> advantages 0 (counted positive): PHR 1 token, PLR 3 tokens, no negatives
    out = quadrant_telemetry(batch([1.0, 1.0]), None)
    assert all(math.isfinite(v) for v in out.values())
    assert (
        out[keys.quadrant("PHR", "adv_mass")] == 0.0
        and out[keys.quadrant("PLR", "adv_mass")] == 0.0
    )
    assert (
        out[keys.quadrant("NHR", "token_frac")] == 0.0
        and out[keys.quadrant("NLR", "token_frac")] == 0.0
    )
    assert keys.quadrant("PHR", "dlogp_abs") not in out


def test_mean_metrics_averages_over_updates():
    # clip_frac 0.1 and 0.3 over two mini-batches -> 0.2; a key seen once keeps its value
    out = mean_metrics(
        [
            {"clip_frac": torch.tensor(0.1)},
            {"clip_frac": torch.tensor(0.3), "kl": torch.tensor(2.0)},
        ]
    )
    assert out == pytest.approx({"clip_frac": 0.2, "kl": 2.0})


def test_mean_metrics_leaves_out_mini_batches_with_nothing_to_measure():
    # ratio_mean NaN on the second mini-batch (no row carried gradient): (1.2 + 1.0) / 2 = 1.1
    # over the other two, not (1.2 + 0 + 1.0) / 3; a metric NaN on every mini-batch is not logged
    nan = torch.tensor(float("nan"))
    out = mean_metrics(
        [
            {"ratio_mean": torch.tensor(1.2), "clip_frac": nan, "kept_frac": torch.tensor(0.5)},
            {"ratio_mean": nan, "clip_frac": nan, "kept_frac": torch.tensor(0.0)},
            {"ratio_mean": torch.tensor(1.0), "clip_frac": nan, "kept_frac": torch.tensor(0.4)},
        ]
    )
    assert out == pytest.approx({"ratio_mean": 1.1, "kept_frac": 0.3})


def test_dlogp_from_a_row_subsample_and_its_standard_error():
    # only row 1 measured (|Δlogp| [0.1, 0.3]), of 2 rows: NLR = both of its tokens -> mean 0.2;
    # one row -> no spread to estimate, SE reported as 0; PHR/PLR (row 0) unmeasured -> 0
    out = quadrant_telemetry(batch([1.0, 0.0]), torch.tensor([[0.1, 0.3]]), torch.tensor([1]))
    assert out[keys.quadrant("NLR", "dlogp_abs")] == pytest.approx(0.2, abs=1e-6)
    assert out[keys.quadrant("NLR", "dlogp_abs_se")] == 0.0
    assert (
        out[keys.quadrant("PHR", "dlogp_abs")] == 0.0
        and out[keys.quadrant("PLR", "dlogp_abs")] == 0.0
    )
    # the full batch (rows None): the exact means of test_quadrant_telemetry_by_hand, SE 0
    full = quadrant_telemetry(batch([1.0, 0.0]), torch.tensor([[0.2, 0.4], [0.1, 0.3]]))
    assert (
        full[keys.quadrant("NLR", "dlogp_abs")] == pytest.approx(0.2)
        and full[keys.quadrant("NLR", "dlogp_abs_se")] == 0.0
    )


def cov_batch():
    # the batch of `batch([1, 0])` with old log-probs [[-1, -2], [-3, -2]]: advantages +0.5 / -0.5,
    # PHR = {(0,0)}, PLR = {(0,1)}, NLR = {(1,0), (1,1)}, NHR empty
    return make_token_batch(
        sequences=torch.zeros(2, 3, dtype=torch.long),
        attention_mask=torch.ones(2, 3, dtype=torch.bool),
        response_mask=torch.ones(2, 2, dtype=torch.bool),
        old_logp=torch.tensor([[-1.0, -2.0], [-3.0, -2.0]]),
        entropy=torch.tensor([[1.0, 0.0], [0.0, 0.0]]),
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        normalize_std=False,
    )


def stats(out, stat):
    return [out[keys.quadrant(q, stat)] for q in ("PHR", "PLR", "NHR", "NLR")]


def test_covariance_term_and_measured_entropy_change_by_hand():
    # mean A = 0, mean logp = -2; cov_t = A (logp + 2): (0,0) 0.5 * 1 = 0.5, (0,1) 0,
    # (1,0) -0.5 * -1 = 0.5, (1,1) 0; per quadrant / N = 4: PHR 0.125, PLR 0, NHR 0, NLR 0.125
    # entropy after [[0.5, 0.25], [0, 0.5]] - before [[1, 0], [0, 0]] = ΔH [[-0.5, 0.25], [0, 0.5]]
    # dentropy: PHR -0.5, PLR 0.25, NHR 0, NLR (0 + 0.5) / 2 = 0.25
    # entropy_change = token_frac * dentropy: -0.125, 0.0625, 0, 0.125 (sum 0.0625 = mean ΔH)
    dlogp = torch.zeros(2, 2)
    after = torch.tensor([[0.5, 0.25], [0.0, 0.5]])
    out = quadrant_telemetry(cov_batch(), dlogp, None, after)
    assert stats(out, "cov") == pytest.approx([0.125, 0.0, 0.0, 0.125], abs=1e-6)
    assert stats(out, "cov_share") == pytest.approx([0.5, 0.0, 0.0, 0.5], abs=1e-6)
    # cov_state = (logp + H) A / 4: (0,0) (-1 + 1) 0.5 = 0, (0,1) (-2 + 0) 0.5 = -1,
    # (1,0) (-3 + 0) -0.5 = 1.5, (1,1) (-2 + 0) -0.5 = 1 -> PHR 0, PLR -0.25, NHR 0, NLR 0.625
    assert stats(out, "cov_state") == pytest.approx([0.0, -0.25, 0.0, 0.625], abs=1e-6)
    assert stats(out, "dentropy") == pytest.approx([-0.5, 0.25, 0.0, 0.25], abs=1e-6)
    assert stats(out, "dentropy_se") == [0.0] * 4  # every row measured
    assert stats(out, "entropy_change") == pytest.approx([-0.125, 0.0625, 0.0, 0.125], abs=1e-6)
    # no post-update pass: the covariance is logged, the measured change is not
    bare = quadrant_telemetry(cov_batch())
    assert stats(bare, "cov") == stats(out, "cov")
    assert keys.quadrant("PHR", "dentropy") not in bare


def test_covariance_term_counts_only_trained_tokens():
    # quadrant=PHR: the applied advantage is [[0.5, 0], [0, 0]], mean 0.125; mean logp -2
    # cov_t: (0,0) 0.375 * 1 = 0.375, (0,1) 0, (1,0) -0.125 * -1 = 0.125, (1,1) 0
    # / 4: PHR 0.09375, NLR 0.03125; shares 0.75 and 0.25
    tb = cov_batch()
    out = quadrant_telemetry(tb, trained=tb.quadrants.union(["PHR"]))
    assert stats(out, "cov") == pytest.approx([0.09375, 0.0, 0.0, 0.03125], abs=1e-6)
    assert stats(out, "cov_share") == pytest.approx([0.75, 0.0, 0.0, 0.25], abs=1e-6)


def test_entropy_change_from_a_row_subsample():
    # row 1 only (of 2), entropy after [0, 0.5]: NLR dentropy 0.25, SE 0 (one row),
    # entropy_change = 0.5 * 0.25 = 0.125; PHR/PLR unmeasured -> 0
    out = quadrant_telemetry(
        cov_batch(), torch.zeros(1, 2), torch.tensor([1]), torch.tensor([[0.0, 0.5]])
    )
    assert stats(out, "dentropy") == pytest.approx([0.0, 0.0, 0.0, 0.25], abs=1e-6)
    assert stats(out, "entropy_change") == pytest.approx([0.0, 0.0, 0.0, 0.125], abs=1e-6)


def cancellation_batch():
    """One group of 3 (prompt token 1): row 0 (+) [5, 6, 7], row 1 (-) [5, 6, 8], row 2 (-) [9, 6, 7];
    rewards [1, 0, 0], normalize_std=False -> advantages [+2/3, -1/3, -1/3].
    entropy [[1, 1, 0], [1, 0, 0], [1, 1, 1]], group mean 6/9:
        PHR (0,0) (0,1) · PLR (0,2) · NHR (1,0) (2,0) (2,1) (2,2) · NLR (1,1) (1,2).
    Shared (same prefix in an opposite response): (0,0) (0,1) (1,0) (1,1); the rest unique."""
    return make_token_batch(
        sequences=torch.tensor([[1, 5, 6, 7], [1, 5, 6, 8], [1, 9, 6, 7]]),
        attention_mask=torch.ones(3, 4, dtype=torch.bool),
        response_mask=torch.ones(3, 3, dtype=torch.bool),
        old_logp=torch.zeros(3, 3),
        entropy=torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]),
        rewards=torch.tensor([1.0, 0.0, 0.0]),
        group_ids=torch.tensor([0, 0, 0]),
        normalize_std=False,
    )


# Δ log-prob after the update; flips (against the own advantage): (0,1) (row 0 is +, moved down),
# (1,0) and (2,1) (rows 1, 2 are -, moved up)
DLOGP = torch.tensor([[0.2, -0.1, 0.3], [0.4, -0.2, -0.5], [-0.1, 0.1, -0.3]])


def test_flip_and_cancellation_diagnostics_by_hand():
    out = quadrant_telemetry(cancellation_batch(), DLOGP)

    def stat(q: str, name: str) -> float:
        return out[keys.quadrant(q, name)]

    expected = {
        # flip_frac, _shared, _unique, dlogp_signed, _shared, _unique, shared_frac
        # PHR: (0,0) +0.2, (0,1) -0.1 flipped, both shared: 1/2; mean 0.05; no unique token
        "PHR": (0.5, 0.5, 0.0, 0.05, 0.05, 0.0, 1.0),
        # PLR: (0,2) +0.3, unique, no flip
        "PLR": (0.0, 0.0, 0.0, 0.3, 0.0, 0.3, 0.0),
        # NHR: (1,0) +0.4 flip shared; (2,0) -0.1, (2,1) +0.1 flip, (2,2) -0.3 unique:
        # 2/4, shared 1/1, unique 1/3; mean 0.1/4 = 0.025, shared 0.4, unique -0.3/3 = -0.1
        "NHR": (0.5, 1.0, 1 / 3, 0.025, 0.4, -0.1, 0.25),
        # NLR: (1,1) -0.2 shared, (1,2) -0.5 unique, no flip; mean -0.35
        "NLR": (0.0, 0.0, 0.0, -0.35, -0.2, -0.5, 0.5),
    }
    names = ("flip_frac", "flip_frac_shared", "flip_frac_unique", "dlogp_signed",
             "dlogp_signed_shared", "dlogp_signed_unique", "shared_frac")  # fmt: skip
    for q, want in expected.items():
        assert [stat(q, n) for n in names] == pytest.approx(want, abs=1e-6), q
    # |Δ| is still the absolute change: NHR (0.4 + 0.1 + 0.1 + 0.3) / 4 = 0.225
    assert stat("NHR", "dlogp_abs") == pytest.approx(0.225)
    # the kept-token counts: every arm's, and the run's own (all 9 tokens, 3 positive)
    assert [stat(q, "tokens") for q in ("PHR", "PLR", "NHR", "NLR")] == [2, 1, 4, 2]
    assert out[keys.train("kept_tokens")] == 9 and out[keys.train("kept_tokens_pos")] == 3


def test_flips_count_only_trained_tokens():
    # quadrant=PHR: only PHR tokens have an applied advantage; the others cannot flip
    tb = cancellation_batch()
    out = quadrant_telemetry(tb, DLOGP, trained=tb.quadrants.union(["PHR"]))
    assert out[keys.quadrant("PHR", "flip_frac")] == pytest.approx(0.5)
    assert out[keys.quadrant("NHR", "flip_frac")] == 0.0  # no signed token: reported as 0
    assert out[keys.quadrant("NHR", "dlogp_signed")] == pytest.approx(0.025)  # still measured
    assert out[keys.train("kept_tokens")] == 2 and out[keys.train("kept_tokens_neg")] == 0


def test_covariance_and_token_test_take_the_applied_weights():
    # W-REINFORCE-like weights [[0.1, 0.1], [-1, -1]] instead of the advantages [±0.5]:
    # mean w = (0.2 - 2) / 4 = -0.45, mean logp -2; cov_t = (w + 0.45)(logp + 2):
    # (0,0) 0.55 * 1 = 0.55, (0,1) 0, (1,0) -0.55 * -1 = 0.55, (1,1) 0; / 4: PHR 0.1375, NLR 0.1375
    # per-token prediction -(logp + H) w = [[0, 0.2], [-3, -2]] against ΔH [[-0.5, 0.25], [0, 0.5]]:
    # r over all 4 tokens = -0.325764 (tests/unit/ops/test_entropy_change.py); NLR has 2 tokens and
    # the high-entropy set 1: undefined, not logged
    tb = cov_batch()
    w = torch.tensor([[0.1, 0.1], [-1.0, -1.0]])
    after = torch.tensor([[0.5, 0.25], [0.0, 0.5]])
    out = quadrant_telemetry(tb, torch.zeros(2, 2), None, after, None, w, tb.response_mask)
    assert stats(out, "cov") == pytest.approx([0.1375, 0.0, 0.0, 0.1375], abs=1e-6)
    assert out[keys.train("entropy_token_r")] == pytest.approx(-0.325764, abs=1e-5)
    assert keys.train("entropy_token_r_high") not in out
    assert keys.quadrant("NLR", "token_r") not in out
    # a denominator without row 1 (a dropped group, weight 0 there): N = 2, mean w = 0.1 so
    # every centred weight is 0 and the covariance is 0 in every quadrant
    only_row0 = torch.tensor([[True, True], [False, False]])
    out = quadrant_telemetry(tb, None, None, None, None, w * only_row0, only_row0)
    assert stats(out, "cov") == pytest.approx([0.0] * 4, abs=1e-7)
