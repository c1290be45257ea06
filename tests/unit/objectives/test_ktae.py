"""KTAE: token advantage Â + w(token id), w from the group's correct-vs-wrong contingency table of
the id (Fisher exact test, information gain, Cohen's h, term frequency); and the authors' own
ComputeKeyTokens on the same token ids."""

import math
from types import SimpleNamespace

import pytest
import torch

from quadrants.objectives.batch import PolicyOutput, make_token_batch
from quadrants.objectives.ktae import key_token_weights
from quadrants.objectives.registry import resolve_objective

from .helpers import close, grad_of, run
from .upstream import ktae_functions, load_functions, upstream_file

# One group: response 0 [5, 7] correct (reward 1), response 1 [5, 9] wrong (0); Dr. GRPO centring
# gives Â = [+0.5, -0.5]. gamma 0 (no term-frequency term) keeps the arithmetic short:
#   id 5 in both: a=1 b=1 c=0 d=0 -> Fisher p = 1 -> F = 0; IG = H(Y) - H(Y|X) = 1 - 1 = 0;
#                 h = asin 1 - asin 1 = 0 -> w = 0
#   id 7 correct only: a=1 b=0 c=0 d=1 -> tables k=0,1 each 1/2, p = 1 -> F = 0; IG = 1 - 0 = 1 bit;
#                 h = asin 1 - asin 0 = π/2 -> score (0 + 1)(π/2)/2 = 0.7853982
#                 w = 2 (sigmoid(0.7853982) - 1/2) = 2 (0.6868424 - 0.5) = 0.3736847
#   id 9 wrong only: the mirror image, w = -0.3736847
# token advantages [[0.5, 0.8736847], [-0.5, -0.8736847]]; at ratio 1 the loss is -Σ Â_t / 4 = 0
# and its gradient -Â_t / 4 = [[-0.125, -0.2184212], [0.125, 0.2184212]]
W = 2 * (1 / (1 + math.exp(-math.pi / 4)) - 0.5)


def _batch(ids, rewards):
    ids = torch.tensor(ids)
    b, t = ids.shape
    return make_token_batch(
        sequences=torch.cat([torch.zeros(b, 1, dtype=torch.long), ids], dim=1),
        attention_mask=torch.ones(b, t + 1, dtype=torch.bool),
        response_mask=torch.ones(b, t, dtype=torch.bool),
        old_logp=torch.full((b, t), -1.0),
        entropy=torch.ones(b, t),
        rewards=torch.tensor(rewards),
        group_ids=torch.zeros(b, dtype=torch.long),
        normalize_std=False,
    )


def test_key_token_advantage_by_hand():
    assert W == pytest.approx(0.3736847, abs=1e-7)
    tb = _batch([[5, 7], [5, 9]], [1.0, 0.0])
    logp = tb.old_logp.clone().requires_grad_(True)
    loss, metrics = run("ktae", tb, logp, gamma=0.0)
    close(loss, 0.0)
    close(grad_of(loss, logp), [[-0.125, -(0.5 + W) / 4], [0.125, (0.5 + W) / 4]])
    close(metrics["key_weight_abs_mean"], 2 * W / 4)
    close(metrics["key_weight_positive_frac"], 1 / 4)


def test_zero_token_ids_and_one_sided_groups_get_no_weight():
    tb = _batch([[5, 7], [5, 9]], [1.0, 0.0])
    spec, params = resolve_objective("ktae", {"gamma": 0.0, "zero_token_ids": [7]})
    out = spec.fn(tb, PolicyOutput(tb.old_logp.clone()), **params)
    close(out.per_token_loss, [[-0.5, -0.5], [0.5, 0.5 + W]])  # id 7's weight forced to 0
    # an all-correct group has no wrong rollouts to contrast: w = 0 (and Â = 0)
    weights = key_token_weights(
        torch.tensor([[5, 7], [5, 9]]),
        torch.ones(2, 2, dtype=torch.bool),
        torch.tensor([True, True]),
        alpha=1.0,
        beta=1.0,
        gamma=1.0,
        top=1.0,
        zero_token_ids=(),
    )
    close(weights, torch.zeros(2, 2))


def test_the_dual_clip_caps_a_negative_token_advantage_by_hand():
    # gamma 0: token advantages [[0.5, 0.5 + W], [-0.5, -(0.5 + W)]]; ratio 20 on the last token.
    # Its surrogate max(20 (0.5 + W), 1.28 (0.5 + W)) = 20 (0.5 + W); the dual clip c = 10 (the
    # authors' scripts, our default) caps it at 10 (0.5 + W), with no gradient. Token-mean:
    #   c 10:  (-0.5 - (0.5 + W) + 0.5 + 10 (0.5 + W)) / 4 = 9 (0.5 + W) / 4 = 1.9657906
    #   off:   (-0.5 - (0.5 + W) + 0.5 + 20 (0.5 + W)) / 4 = 19 (0.5 + W) / 4 = 4.1500025
    tb = _batch([[5, 7], [5, 9]], [1.0, 0.0])
    logp = tb.old_logp.clone()
    logp[1, 1] += math.log(20.0)
    logp.requires_grad_(True)
    loss, metrics = run("ktae", tb, logp, gamma=0.0)
    close(loss, 9 * (0.5 + W) / 4)
    close(grad_of(loss, logp), [[-0.125, -(0.5 + W) / 4], [0.125, 0.0]])
    close(metrics["dual_clip_frac"], 1 / 4)
    loss, _ = run("ktae", tb, logp, gamma=0.0, clip_ratio_c=None)
    close(loss, 19 * (0.5 + W) / 4)


def test_validation_names_the_key():
    with pytest.raises(ValueError, match=r"^top=-1.0 is out of range"):
        resolve_objective("ktae", {"top": -1.0})
    with pytest.raises(ValueError, match=r"alpha \+ beta = 0.0 must be > 0"):
        resolve_objective("ktae", {"alpha": 0.0, "beta": 0.0})


@pytest.mark.parametrize("gamma", [1.0, 0.0])
def test_matches_the_authors_key_tokens_on_the_same_ids(gamma):
    """xiaolizh1/KTAE verl/workers/actor/compute_key_tokens.py ComputeKeyTokens (with its
    fisher_exact_test, calculate_ig, compute_tf, compute_Cohen), run per group on seeded ragged
    responses over 12 token ids, two of them at or above 151643 (their code indexes that id);
    their per-id weights gathered at each response token are our per-token weights."""
    fns = ktae_functions(
        "compute_Cohen", "fisher_exact_test", "calculate_ig", "compute_tf", "ComputeKeyTokens"
    )
    vocab = torch.tensor([3, 4, 5, 8, 13, 21, 34, 55, 89, 144, 151643, 151650])
    worst = 0.0
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        n, t = 8, 12
        ids = vocab[torch.randint(0, vocab.numel(), (n, t), generator=g)]
        lengths = torch.randint(3, t + 1, (n,), generator=g)
        mask = torch.arange(t)[None, :] < lengths[:, None]
        rewards = torch.randint(0, 2, (n,), generator=g).float()
        rewards[0], rewards[1] = 1.0, 0.0  # both outcomes present
        theirs_per_id = fns["ComputeKeyTokens"](
            alpha=1.0,
            beta_ig=1.0,
            gamma_tf=gamma,
            top=1.0,
            bottom=-1.0,
            responses_ids=ids,
            mask=mask.long(),
            rewards=rewards,
            max_token_num=int(ids.max()),
        ).get_key_tokens()
        theirs = theirs_per_id[ids] * mask
        ours = key_token_weights(
            ids,
            mask,
            rewards > 0,
            alpha=1.0,
            beta=1.0,
            gamma=gamma,
            top=1.0,
            zero_token_ids=(151643,),
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        assert (ours.abs() > 1e-3).sum() > 10  # real weights, not zeros
        worst = max(worst, (ours - theirs).abs().max().item())
    print(f"ktae (gamma {gamma}) vs KTAE: largest difference {worst:.3g}")


@pytest.mark.slow  # their ComputeKeyTokens sizes its tables by the largest id, 151643: ~20 s
def test_matches_the_authors_recipe_with_their_scripts_clip_arguments():
    """The recipe: both of the authors' scripts (recipe/dapo/run_dapo_qwen2.5_{1.5b,7b}.sh at
    ea9fb77) keep the groups whose accuracy varies (`algorithm.filter_groups.enable=True`,
    metric acc; recipe/dapo/src/dapo_ray_trainer.py) and run their fork's compute_policy_loss
    (verl/trainer/ppo/core_algos.py, run here) with clip_ratio_low 0.2, clip_ratio_high 0.28
    (1.5B; the 7B script's 0.24 also checked), clip_ratio_c 10.0, token-mean, on the token
    advantages Â + w (their compute_ktae_outcome_advantage_and_keytokens; w from their
    ComputeKeyTokens, run here). The filtered batch is taken as one micro-batch (their
    use_dynamic_bsz packs rows up to a token budget). Log-ratios of spread 1.5 put some
    negative-advantage tokens past c = 10."""
    names = ("compute_Cohen", "fisher_exact_test", "calculate_ig", "compute_tf")
    key = ktae_functions(*names, "ComputeKeyTokens")["ComputeKeyTokens"]
    core = upstream_file("QUADRANTS_KTAE_SRC", "verl/trainer/ppo/core_algos.py")
    functional = core.parent.parent.parent / "utils" / "torch_functional.py"
    helpers = load_functions(functional, ["masked_sum", "masked_mean"], {"torch": torch})
    namespace = {"torch": torch, "verl_F": SimpleNamespace(**helpers)}
    policy_loss = load_functions(core, ["agg_loss", "compute_policy_loss"], namespace)
    vocab = torch.tensor([3, 4, 5, 8, 13, 21, 34, 151643])  # their code zeroes id 151643
    worst, dual_clipped, filtered = 0.0, 0, 0
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        groups, size, length = 3, 4, 8
        n = groups * size
        ids = vocab[torch.randint(0, vocab.numel(), (n, length), generator=g)]
        lengths = torch.randint(2, length + 1, (n,), generator=g)
        mask = torch.arange(length)[None, :] < lengths[:, None]
        rewards = torch.randint(0, 2, (n,), generator=g).float()
        rewards[:size] = float(seed % 2)  # group 0 constant: the filter drops it
        old = -torch.rand(n, length, generator=g) * 2.0
        group_ids = torch.arange(groups).repeat_interleave(size)
        tb = make_token_batch(
            sequences=torch.cat([torch.zeros(n, 1, dtype=torch.long), ids], dim=1),
            attention_mask=torch.cat([torch.ones(n, 1, dtype=torch.bool), mask], dim=1),
            response_mask=mask,
            old_logp=old,
            entropy=torch.ones(n, length),
            rewards=rewards,
            group_ids=group_ids,
        )
        logp = (old + 1.5 * torch.randn(n, length, generator=g)).requires_grad_(True)
        logp_a = logp.detach().clone().requires_grad_(True)
        keep = ~tb.constant_group_mask
        filtered += int((~keep).sum())
        weights = torch.zeros(n, length)
        for group in range(groups):
            rows = group_ids == group
            if not keep[rows].all():
                continue
            per_id = key(
                alpha=1.0,
                beta_ig=1.0,  # hard-coded in compute_ktae_outcome_advantage_and_keytokens
                gamma_tf=1.0,
                top=1.0,
                bottom=-1.0,
                responses_ids=ids[rows],
                mask=mask[rows].long(),
                rewards=rewards[rows],
                max_token_num=int(ids.max()),
            ).get_key_tokens()
            weights[rows] = per_id[ids[rows]] * mask[rows]
        token_adv = (tb.advantages[:, None] + weights) * mask
        for clip_high in (0.28, 0.24):
            theirs, *_, lower = policy_loss["compute_policy_loss"](
                old_log_prob=old[keep],
                log_prob=logp_a[keep],
                advantages=token_adv[keep],
                response_mask=mask[keep].float(),
                cliprange=0.2,
                cliprange_low=0.2,
                cliprange_high=clip_high,
                clip_ratio_c=10.0,
                loss_agg_mode="token-mean",
            )
            ours, metrics = run("ktae", tb, logp, clip_high=clip_high)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
            g_ours, g_theirs = grad_of(ours, logp), grad_of(theirs, logp_a)
            torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-6)
            dual_clipped += int(metrics["dual_clip_frac"] > 0)
            worst = max(worst, (ours - theirs).abs().item(), (g_ours - g_theirs).abs().max().item())
            without, _ = run("ktae", tb, logp.detach(), clip_high=clip_high, clip_ratio_c=None)
            if lower > 0:  # the cap bit: without the dual clip the loss is another
                assert (without - theirs).abs() > 1e-3
    assert dual_clipped > 0 and filtered > 0
    print(f"ktae recipe vs KTAE's compute_policy_loss: largest difference {worst:.3g}")
