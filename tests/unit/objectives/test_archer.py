"""Archer: per response, tokens above the 0.8 entropy quantile clip at 0.5 and get no KL; the rest
clip at 0.2 and carry the KL; and ArcherCodeR's own loss and KL functions on the same tensors."""

import math

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput, token_advantages
from quadrants.objectives.registry import resolve_objective

from .helpers import batch, close, grad_of, logp_for_ratios, random_batch, run, t
from .upstream import archer_functions

# One group, 2 responses x 5 tokens: rewards [2, -2] -> A = [+2, -2].
# Entropy quantile 0.8 per response (linear interpolation, position 0.8 * 4 = 3.2):
#   seq 0 [0.1, 2.0, 0.3, 0.2, 0.5]: sorted [.1 .2 .3 .5 2.0] -> 0.5 + 0.2 * 1.5 = 0.8 -> high: t1
#   seq 1 [1.0, 0.0, 0.4, 3.0, 0.2]: sorted [0 .2 .4 1 3] -> 1.0 + 0.2 * 2.0 = 1.4  -> high: t3
ENTROPY = [[0.1, 2.0, 0.3, 0.2, 0.5], [1.0, 0.0, 0.4, 3.0, 0.2]]
HIGH = [[0, 1, 0, 0, 0], [0, 0, 0, 1, 0]]
# Ratios and the per-token loss (low: clip [0.8, 1.2]; high: clip [0.5, 1.5]; dual clip 10 idle):
#   seq 0, A=+2, r [1.3, 1.3, 1, 0.9, 1]: t0 low  max(-2.6, -2.4) = -2.4 clipped, no gradient
#                                         t1 high max(-2.6, -2.6) = -2.6 free, d/dlogp -A r = -2.6
#                                         t2..t4  -2, -1.8, -2            d/dlogp -2, -1.8, -2
#   seq 1, A=-2, r [0.6, 1, 1, 0.6, 1]:   t0 low  max(1.2, 1.6) = 1.6 clipped, no gradient
#                                         t3 high max(1.2, 1.0) = 1.2 free, d/dlogp +1.2
#                                         t1, t2, t4  2 each              d/dlogp +2 each
#   sum -10.8 + 8.8 = -2.0 over 10 tokens -> -0.2
# GRPO's single clip at 0.2 would leave t1 of seq 0 and t3 of seq 1 without gradient.
RATIOS = [[1.3, 1.3, 1.0, 0.9, 1.0], [0.6, 1.0, 1.0, 0.6, 1.0]]
GRAD = [[0.0, -0.26, -0.2, -0.18, -0.2], [0.0, 0.2, 0.2, 0.12, 0.2]]
K3_LOG2 = 2.0 - 1.0 - math.log(2.0)  # k3 at δ = log 2: e^δ - 1 - δ = 0.3068528


def _batch(ref_shift=None):
    tb = batch(entropy=ENTROPY, rewards=[2.0, -2.0], group_ids=[0, 0])
    logp = logp_for_ratios(tb, RATIOS)
    if ref_shift is not None:
        tb = batch(
            entropy=ENTROPY,
            rewards=[2.0, -2.0],
            group_ids=[0, 0],
            ref_logp=(logp.detach() + torch.tensor(ref_shift)).tolist(),
        )
    return tb, logp


@pytest.mark.parametrize("entropy_source", ["current", "behaviour"])
def test_dual_clip_ranges_by_hand(entropy_source):
    tb, logp = _batch()
    current = torch.tensor(ENTROPY)  # the same values either way in this test
    loss, metrics = run("archer", tb, logp, current, entropy_source=entropy_source)
    close(loss, -0.2)
    close(grad_of(loss, logp), GRAD)
    close(metrics["high_entropy_frac"], 0.2)
    close(metrics["low_entropy/clip_frac"], 2 / 8)  # t0 of each response, of the 8 low tokens
    close(metrics["high_entropy/clip_frac"], 0.0)


def test_the_split_is_per_response_and_the_kl_weights_by_hand():
    tb, logp = _batch()
    spec, params = resolve_objective("archer", {"kl_normaliser": "entropy_group"})
    out = spec.fn(tb, PolicyOutput(logp, torch.tensor(ENTROPY)), **params)
    high = torch.tensor(HIGH, dtype=torch.bool)
    # entropy_group: low tokens weigh |tokens| / |low| = 10 / 8 = 1.25, high 0 (scale 0)
    close(out.kl_weight, torch.where(high, 0.0, 1.25))
    _, params = resolve_objective(
        "archer", {"high_entropy_kl_scale": 0.5, "kl_normaliser": "entropy_group"}
    )
    out = spec.fn(tb, PolicyOutput(logp, torch.tensor(ENTROPY)), **params)
    close(out.kl_weight, torch.where(high, 0.5 * 10 / 2, 1.25))  # 2.5 on the 2 high tokens
    _, params = resolve_objective("archer", {"kl_normaliser": "response_tokens"})
    out = spec.fn(tb, PolicyOutput(logp, torch.tensor(ENTROPY)), **params)
    close(out.kl_weight, torch.where(high, 0.0, 1.0))


# Ragged: response 0 has 5 tokens (high t1, 4 low), response 1 has 3 and 2 padded. Response 1's
# quantile: sorted [0, 0.4, 1.0], position 0.8 * 2 = 1.6 -> 0.4 + 0.6 * 0.6 = 0.76 -> high: t0.
RAGGED_ENTROPY = [[0.1, 2.0, 0.3, 0.2, 0.5], [1.0, 0.0, 0.4, 9.0, 9.0]]
RAGGED_MASK = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
RAGGED_HIGH = [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0]]


def _ragged(ref_logp=None, rewards=(2.0, -2.0), groups=(0, 0)):
    rows = len(rewards)
    return batch(
        entropy=(RAGGED_ENTROPY * 2)[:rows],
        rewards=list(rewards),
        group_ids=list(groups),
        response_mask=(RAGGED_MASK * 2)[:rows],
        ref_logp=ref_logp,
    )


def test_the_per_response_kl_normaliser_by_hand():
    tb = _ragged()
    logp = logp_for_ratios(tb)
    spec = resolve_objective("archer", {})[0]
    high = torch.tensor(RAGGED_HIGH, dtype=torch.bool)
    mask = torch.tensor(RAGGED_MASK, dtype=torch.bool)

    def weights(**params):
        full = resolve_objective("archer", params)[1]
        return spec.fn(tb, PolicyOutput(logp, t(RAGGED_ENTROPY)), **full).kl_weight

    # response (the default): |o_i| / |low_i| = 5 / 4 = 1.25 and 3 / 2 = 1.5 on the low tokens
    low_w = torch.tensor([[1.25], [1.5]])
    close(weights(), torch.where(high, 0.0, low_w) * mask)
    # high scale 0.5: 0.5 * |o_i| / |high_i| = 0.5 * 5 / 1 = 2.5 and 0.5 * 3 / 1 = 1.5
    high_w = torch.tensor([[2.5], [1.5]])
    close(weights(high_entropy_kl_scale=0.5), torch.where(high, high_w, low_w) * mask)
    # entropy_group: the batch's counts, 8 tokens / 6 low = 4/3; high 0.5 * 8 / 2 = 2.0
    close(
        weights(kl_normaliser="entropy_group", high_entropy_kl_scale=0.5),
        torch.where(high, 2.0, 4.0 / 3.0) * mask,
    )


def test_the_recipe_loss_is_a_mean_per_response_by_hand():
    # ratios 1: the surrogate is -A per token, -2 on response 0 and +2 on response 1.
    # ref = logp + log 2 on one low token of each response (t2 of 0, t1 of 1): k3 = K3_LOG2 there.
    # seq-mean-token-mean with kl_normaliser=response, kl_coef 1:
    #   response 0: -2 + K3 / 4 (its 4 low tokens);  response 1: +2 + K3 / 2 (its 2 low tokens)
    #   mean over the 2 responses: (K3 / 4 + K3 / 2) / 2 = 3 K3 / 8
    shift = [[0.0, 0.0, math.log(2.0), 0.0, 0.0], [0.0, math.log(2.0), 0.0, 0.0, 0.0]]
    ref = (torch.full((2, 5), -1.0) + torch.tensor(shift)).tolist()  # old_logp -1 = logp
    tb = _ragged(ref_logp=ref)
    logp = logp_for_ratios(tb)
    entropy = t(RAGGED_ENTROPY)
    loss, _ = run("archer", tb, logp, entropy, loss_agg="seq-mean-token-mean", kl_coef=1.0)
    close(loss, 3 * K3_LOG2 / 8)
    # token-mean with entropy_group (the authors' formula on one 2-sequence micro-batch):
    #   pg (-2 * 5 + 2 * 3) / 8 = -0.5; KL 2 K3 * (4/3) / 8 = K3 / 3
    loss, _ = run("archer", tb, logp, entropy, kl_coef=1.0, kl_normaliser="entropy_group")
    close(loss, -0.5 + K3_LOG2 / 3)


def test_constant_groups_leave_the_batch_by_hand():
    # group 1 (rewards 1, 1) is constant: A = 0, surrogate 0 on its 8 tokens.
    # seq-mean-token-mean, ratios 1: group 0 alone gives (-2 + 2) / 2 = 0 -- so shift the ratios of
    # response 0 to 1.1 (unclipped, -2 * 1.1 = -2.2 per token): (-2.2 + 2) / 2 = -0.1.
    # dropped, over the kept responses (minibatch_scale=kept): -0.1 over 2 responses; over the
    # nominal 4 rows of the mini-batch (the default, the authors' fixed gradient_accumulation):
    # -0.2 / 4 = -0.05; group 1 kept (no dynamic sampling): (-2.2 + 2 + 0 + 0) / 4 = -0.05
    tb = _ragged(rewards=(2.0, -2.0, 1.0, 1.0), groups=(0, 0, 1, 1))
    ratios = [[1.1] * 5, [1.0] * 5, [1.0] * 5, [1.0] * 5]
    logp = logp_for_ratios(tb, ratios)
    entropy = t(RAGGED_ENTROPY * 2)
    loss, metrics = run(
        "archer", tb, logp, entropy, loss_agg="seq-mean-token-mean", minibatch_scale="kept"
    )
    close(loss, -0.1)
    close(metrics["kept_group_frac"], 0.5)
    loss, _ = run("archer", tb, logp, entropy, loss_agg="seq-mean-token-mean")
    close(loss, -0.05)
    loss, _ = run(
        "archer", tb, logp, entropy, loss_agg="seq-mean-token-mean", dynamic_sampling=False
    )
    close(loss, -0.05)


def test_kl_only_on_low_entropy_tokens_by_hand():
    # ref = logp + log 2 on t2 of seq 0 (low) and t1 of seq 0 (high): k3 = 0.3068528 each.
    # Only the low one counts: kl_coef 1 * 1.25 * 0.3068528 / 10 = 0.0383566 on top of -0.2
    shift = [[0.0, math.log(2.0), math.log(2.0), 0.0, 0.0], [0.0] * 5]
    tb, logp = _batch(shift)
    loss, metrics = run("archer", tb, logp, torch.tensor(ENTROPY), kl_coef=1.0)
    close(loss, -0.2 + 1.25 * K3_LOG2 / 10)
    # d/dlogp of k3 = 1 - e^δ = -1 at δ = log 2: -1.25 / 10 on t2 of seq 0 only
    expected = torch.tensor(GRAD)
    expected[0, 2] += -0.125
    close(grad_of(loss, logp), expected)


def test_dual_clip_by_hand():
    # one token per response: its own quantile, so low-entropy; A = [+2, -2], ratios [4, 4]
    # A = +2: max(-8, -2.4) = -2.4; A = -2: max(8, 2.4) = 8 -> min(-A c, 8): c = 10 leaves 8,
    # c = 3 caps it at 6. token-mean: (-2.4 + 8) / 2 = 2.8 and (-2.4 + 6) / 2 = 1.8
    tb = batch(entropy=[[0.5], [0.5]], rewards=[2.0, -2.0], group_ids=[0, 0])
    h = torch.tensor([[0.5], [0.5]])
    loss, metrics = run("archer", tb, logp_for_ratios(tb, [[4.0], [4.0]]), h)
    close(loss, 2.8)
    close(metrics["high_entropy_frac"], 0.0)
    loss, metrics = run("archer", tb, logp_for_ratios(tb, [[4.0], [4.0]]), h, clip_ratio_c=3.0)
    close(loss, 1.8)
    close(metrics["low_entropy/dual_clip_frac"], 0.5)


def test_validation_names_the_key():
    for params, pattern in (
        ({"quantile": 1.5}, r"^quantile=1.5 is out of range"),
        (
            {"scope": "batch"},
            r"^scope='batch' is unknown; choose one of \['response', 'mini_batch'\]",
        ),
        ({"high_clip_low": 1.0}, r"^high_clip_low=1.0 is out of range"),
        ({"low_clip_high": -0.1}, r"^low_clip_high=-0.1 is out of range"),
        ({"clip_ratio_c": 1.0}, r"^clip_ratio_c=1.0 is out of range"),
        ({"kl_normaliser": "x"}, r"^kl_normaliser='x' is unknown"),
    ):
        with pytest.raises(ValueError, match=pattern):
            resolve_objective("archer", params)


def _their_loss(fns, tb, logp, entropy, rows):
    """ArcherCodeR's policy_loss of one micro-batch (`rows`): the entropy split of their
    dp_actor.py (lines 405-410 at the commit compared, inline code restated here:
    torch.nanquantile per response, `<=` for low-entropy), then their compute_policy_loss
    (use_token_entropy_separate) + kl_loss_coef * agg_loss(kl, low) +
    high_entropy_kl_loss_scale_coef * agg_loss(kl, high), their script's values."""
    mask = tb.response_mask[rows]
    masked = torch.where(mask, entropy.detach()[rows], torch.nan)
    q80 = torch.nanquantile(masked, q=0.8, dim=-1, keepdim=True)
    their_low, their_high = (masked <= q80) & mask, (masked > q80) & mask
    pg_loss, *_ = fns["compute_policy_loss"](
        old_log_prob=tb.old_logp[rows],
        log_prob=logp[rows],
        advantages=token_advantages(tb)[rows],
        response_mask=mask.float(),
        use_token_entropy_separate=True,
        high_entropy_mask=their_low,  # their name for the low-entropy tokens
        cliprange=0.2,
        cliprange_low=0.2,
        cliprange_high=0.2,
        low_entropy_clip_ratio_low=0.2,
        low_entropy_clip_ratio_high=0.2,
        high_entropy_clip_ratio_low=0.5,
        high_entropy_clip_ratio_high=0.5,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
    )
    kld = fns["kl_penalty"](
        logprob=logp[rows], ref_logprob=tb.ref_logp[rows], kl_penalty="low_var_kl"
    )
    return (
        pg_loss
        + 0.001 * fns["agg_loss"](kld, their_low, "token-mean")
        + 0.0 * fns["agg_loss"](kld, their_high, "token-mean")
    ), their_high


def test_matches_the_authors_loss_and_kl_on_the_same_tensors():
    """The function: ArcherCodeR's compute_policy_loss, kl_penalty and agg_loss on seeded ragged
    batches taken as one micro-batch, against ours with the same aggregation (token-mean,
    `kl_normaliser=entropy_group`, no group filter)."""
    fns = archer_functions("compute_policy_loss", "agg_loss", "kl_penalty")
    worst = 0.0
    for seed in range(4):
        tb, logp, entropy = random_batch(seed, length=9)
        logp_a = logp.detach().clone().requires_grad_(True)
        theirs, their_high = _their_loss(fns, tb, logp_a, entropy, slice(None))
        ours, _ = run(
            "archer",
            tb,
            logp,
            entropy,
            kl_coef=0.001,
            kl_normaliser="entropy_group",
            dynamic_sampling=False,
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_a)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-7)
        assert their_high.any() and g_ours.abs().sum() > 0
        worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
    print(f"archer vs ArcherCodeR: largest difference {worst:.3g}")


def test_matches_the_authors_recipe_as_their_script_accumulates_it():
    """The recipe: their script's loss as verl accumulates it. `+trainer.rejection_sample=True`
    keeps the groups whose rewards are not all equal (dapo/dapo_ray_trainer.py; all-0 / all-1
    for these 0/1 rewards); `ppo_micro_batch_size_per_gpu=1` with `use_dynamic_bsz=False` runs
    each kept sequence as its own micro-batch and back-propagates policy_loss /
    gradient_accumulation (dp_actor.py), gradient_accumulation = ppo_mini_batch_size // 1, the
    nominal mini-batch: here the batch's B rows, of which the kept ones are a part (a partly
    filled mini-batch, scaled by kept / B). Ours: the YAML's defaults (seq-mean-token-mean,
    kl_normaliser=response, dynamic_sampling, minibatch_scale=nominal) through compute_loss; with
    minibatch_scale=kept the filtered batch is the whole mini-batch (divided by the kept count).
    Seeds 0, 2 and 3 hold a constant group."""
    fns = archer_functions("compute_policy_loss", "agg_loss", "kl_penalty")
    worst, dropped = 0.0, 0
    for seed in range(4):
        tb, logp, entropy = random_batch(seed, length=9)
        logp_a = logp.detach().clone().requires_grad_(True)
        kept = [int(i) for i in torch.nonzero(~tb.constant_group_mask).flatten()]
        dropped += tb.batch_size - len(kept)
        nominal = tb.batch_size  # their gradient_accumulation: the nominal mini-batch's rows
        theirs = sum(_their_loss(fns, tb, logp_a, entropy, [i])[0] / nominal for i in kept)
        ours, _ = run("archer", tb, logp, entropy, loss_agg="seq-mean-token-mean", kl_coef=0.001)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        over_kept, _ = run(
            "archer", tb, logp.detach(), entropy, loss_agg="seq-mean-token-mean", kl_coef=0.001,
            minibatch_scale="kept",
        )  # fmt: skip
        torch.testing.assert_close(
            over_kept, theirs.detach() * nominal / len(kept), atol=1e-6, rtol=0
        )
        g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_a)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-7)
        # the batch-level function (token-mean, every group) is a different loss on these batches
        function, _ = run(
            "archer",
            tb,
            logp.detach(),
            entropy,
            kl_coef=0.001,
            kl_normaliser="entropy_group",
            dynamic_sampling=False,
        )
        assert (function - theirs).abs() > 1e-3
        worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
    assert dropped == 12  # 3 groups of 4 rows left the batch
    print(f"archer recipe vs ArcherCodeR's accumulation: largest difference {worst:.3g}")
