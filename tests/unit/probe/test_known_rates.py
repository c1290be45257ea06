"""The probe's branching and estimates against the truth: a stub engine whose outcome rates are known.

`KnownRatesEngine.generate_from_ids` continues every prefix with one answer, ``\\boxed{1}`` with
probability p(forced token) and ``\\boxed{0}`` otherwise, then EOS: the success rate of every branch
is known, so I(o_t; r | s_t) is known exactly. Everything else is the probe's own code
(branching.roll_out_branches, estimates.estimate_credit, report.probe_metrics, the branch file) and
the real grader (in-process). What only a real policy can show (that the continuations of a
language model behave like independent draws at these rates) is not tested here.

Worlds (π over 8 plain tokens, p = success rate after each):
- fork: π = [0.5, 0.3, then 0.2 / 6 on each of 6 tokens], p = [0.9, 0.4, then 0.1]: two top branches
  (0.5 + 0.3 reach the 0.75 coverage) and a rest of mass 0.2 with p_rest = 0.1.
- near-deterministic: π = [0.999, then 0.001 / 7 each], p = [0.9, then 0]: the issue's low-entropy
  case (a rare token that makes the outcome wrong): one top branch and a rest of mass 0.001. Truth
  h(0.8991) − 0.999 h(0.9) = 0.0023 nats; the old rule (no rest below 0.001 mass) reported 0.
"""

from __future__ import annotations

import math

import pytest
import torch

from quadrants.config import ProbeConfig, RolloutConfig, RunConfig
from quadrants.objectives.batch import make_token_batch
from quadrants.probe.branching import SampledBatch, plan_branches, roll_out_branches
from quadrants.probe.credit import cmi, entropy, jackknife_cmi, top_branches
from quadrants.probe.estimates import estimate_credit
from quadrants.probe.positions import Positions
from quadrants.probe.report import probe_metrics, read_branches, write_branches_csv
from quadrants.rewards.grader import Grader
from quadrants.rollout.engine import Rollouts, SamplingSettings, encode_prompts

PLAIN = 8  # tokens 0..7 are letters
RIGHT, WRONG, EOS, PAD = 8, 9, 10, 11
TEXT = {**{i: chr(ord("a") + i) for i in range(PLAIN)}, RIGHT: "\\boxed{1}", WRONG: "\\boxed{0}"}


class StubTokenizer:
    pad_token_id = PAD

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(TEXT.get(int(i), "") for i in ids)


class KnownRatesEngine:
    """Continues each prefix with RIGHT (probability rates[forced token]) or WRONG, then EOS."""

    def __init__(self, rates: torch.Tensor) -> None:
        self.rates = rates
        self.calls = 0

    def generate_from_ids(self, prompts: list[list[int]], sampling: SamplingSettings) -> Rollouts:
        self.calls += 1
        g = torch.Generator().manual_seed(int(sampling.seed or 0))
        forced = torch.tensor([ids[-1] for ids in prompts])
        right = torch.rand(len(prompts), generator=g, dtype=torch.float64) < self.rates[forced]
        first = torch.where(right, RIGHT, WRONG)
        response = torch.stack([first, torch.full_like(first, EOS)], 1)
        enc = encode_prompts(StubTokenizer(), prompts)
        b = len(prompts)
        return Rollouts(
            prompt_ids=enc["input_ids"],
            prompt_mask=enc["attention_mask"].bool(),
            response_ids=response,
            response_mask=torch.ones_like(response, dtype=torch.bool),
            behaviour_logp=torch.zeros(b, 2),
            texts=[TEXT[int(t)] for t in first],
            group_ids=torch.arange(b),
            finished=torch.ones(b, dtype=torch.bool),
        )


def world(top: list[float], rest_each: float, p_top: list[float], p_rest: float):
    pi = torch.zeros(PAD + 1, dtype=torch.float64)
    pi[: len(top)] = torch.tensor(top, dtype=torch.float64)
    pi[len(top) : PLAIN] = rest_each
    rates = torch.zeros(PAD + 1, dtype=torch.float64)
    rates[: len(top)] = torch.tensor(p_top, dtype=torch.float64)
    rates[len(top) : PLAIN] = p_rest
    return pi / pi.sum(), rates


def truth_of(pi: torch.Tensor, rates: torch.Tensor, coverage: float, branches: int) -> float:
    """I(b(o_t); r | s_t) of the probe's branches (top tokens, rest merged): the rest's success rate
    is the π-weighted mean over its tokens (here equal, so it is also I(o_t; r | s_t))."""
    b = top_branches(pi[None], coverage=coverage, max_branches=branches)
    ids = b.token_ids[0]
    p = [float(rates[i]) if i >= 0 else 0.0 for i in ids.tolist()]
    rest = pi.clone()
    rest[ids[ids >= 0]] = 0
    p.append(float((rest * rates).sum() / rest.sum()) if rest.sum() > 0 else 0.0)
    q = torch.tensor(p, dtype=torch.float64)
    return cmi(b.mass[0], torch.stack([1 - q, q], -1)).item()


def probe_world(pi, rates, *, positions: int, k: int, seed: int, batch_size: int = 4096):
    """`positions` probed positions, all in this world: response [a, b, c] after prompt [a], each
    probed at response token 1; rewards alternate 1, 0 in groups of 2 (so no group is constant);
    `batch_size` continuations per generate call."""
    n = positions
    cfg = RunConfig(
        probe=ProbeConfig(
            branches=2,
            coverage=0.75,
            continuations=k,
            resamples=200,
            batch_size=batch_size,
            seed=seed,
        ),
        rollout=RolloutConfig(temperature=1.0, max_new_tokens=6),
    )
    response = torch.tensor([[0, 1, 2]] * n)
    rollouts = Rollouts(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long),
        prompt_mask=torch.ones(n, 1, dtype=torch.bool),
        response_ids=response,
        response_mask=torch.ones(n, 3, dtype=torch.bool),
        behaviour_logp=torch.zeros(n, 3),
        texts=["abc"] * n,
        group_ids=torch.arange(n) // 2,
        finished=torch.zeros(n, dtype=torch.bool),
    )
    rewards = torch.tensor([1.0, 0.0] * (n // 2))
    h = entropy(pi).item()
    batch = make_token_batch(
        sequences=torch.cat([rollouts.prompt_ids, response], 1),
        attention_mask=torch.ones(n, 4, dtype=torch.bool),
        response_mask=rollouts.response_mask,
        old_logp=torch.zeros(n, 3),
        entropy=torch.tensor([[0.0, h, 0.0]] * n),
        rewards=rewards,
        group_ids=rollouts.group_ids,
    )
    sampled = SampledBatch(rollouts=rollouts, rewards=rewards, golds=["1"] * n, batch=batch)
    where = Positions(
        sequence=torch.arange(n),
        token=torch.ones(n, dtype=torch.long),
        quadrant=torch.zeros(n, dtype=torch.long),
        weight=torch.ones(n, dtype=torch.float64),
    )
    generator = torch.Generator().manual_seed(seed)
    with Grader(num_workers=0) as grader:
        graded = roll_out_branches(
            KnownRatesEngine(rates),
            grader,
            StubTokenizer(),
            sampled,
            where,
            pi.float()[None].expand(n, -1).contiguous(),
            cfg.probe,
            cfg.rollout,
            stop_ids=[EOS],
            generator=generator,
            announce=False,
        )
    credit = estimate_credit(
        graded, where, sampled, resamples=200, confidence=0.9, pseudocount=0.5, generator=generator
    )
    return graded, credit, where, sampled


@pytest.mark.slow
def test_fork_world_estimate_is_unbiased_and_its_intervals_cover():
    pi, rates = world([0.5, 0.3], 0.2 / 6, [0.9, 0.4], 0.1)
    truth = truth_of(pi, rates, 0.75, 2)
    # by hand: masses [0.5, 0.3, 0.2], p [0.9, 0.4, 0.1]: mixture 0.45 + 0.12 + 0.02 = 0.59;
    # h(0.59) = 0.676858 - (0.5 h(0.9) + 0.3 h(0.4) + 0.2 h(0.1)) = 0.676858 - (0.162541 + 0.201904
    # + 0.065017) = 0.247397 nats
    assert truth == pytest.approx(0.247397, abs=1e-6)
    graded, credit, _, _ = probe_world(pi, rates, positions=60, k=16, seed=3)
    assert (credit.branches == 3).all() and torch.allclose(
        credit.rest_mass, torch.tensor(0.2, dtype=torch.float64), atol=1e-6
    )
    se = credit.cmi.std().item() / math.sqrt(60)
    assert abs(credit.cmi.mean().item() - truth) < 3 * se, (credit.cmi.mean().item(), truth, se)
    covered = ((credit.cmi_low <= truth) & (truth <= credit.cmi_high)).double().mean().item()
    # nominal 0.9 per position; the known-world table in docs/probe.md measures 0.85-0.88 at K = 16.
    # Binomial sd of 0.88 over 60 positions: 0.042; [0.7, 1] is -4 sd and above
    assert covered >= 0.7, covered
    # the plug-in is biased upward at K = 16; the jackknife's correction is downward on average
    assert credit.cmi_plugin.mean().item() > credit.cmi.mean().item()


@pytest.mark.slow
def test_near_deterministic_world_rolls_out_the_rest_and_is_not_a_structural_zero(tmp_path):
    pi, rates = world([0.999], 0.001 / 7, [0.9], 0.0)
    truth = truth_of(pi, rates, 0.75, 2)
    h = lambda p: -p * math.log(p) - (1 - p) * math.log(1 - p)  # noqa: E731
    assert truth == pytest.approx(h(0.999 * 0.9) - 0.999 * h(0.9), abs=1e-9)  # 0.0023 nats
    graded, credit, where, sampled = probe_world(pi, rates, positions=60, k=16, seed=5)
    # every position rolled out its rest branch (mass 0.001 < the old min_rest_mass): 2 branches
    assert (credit.branches == 2).all() and (credit.rest_cut == 0).all()
    assert torch.allclose(credit.rest_mass, torch.tensor(0.001, dtype=torch.float64), atol=1e-6)
    # rest tokens come from the rest only (tokens 1..7), never the top token
    rest_tokens = graded.forced[:, -1]
    assert ((rest_tokens >= 1) & (rest_tokens < PLAIN)).all()
    # not 0 by construction: the rest's continuations all fail, the top's succeed 90 %, so the mean
    # estimate is near the truth (0.0023); within 3 standard errors
    se = credit.cmi.std().item() / math.sqrt(60)
    assert abs(credit.cmi.mean().item() - truth) < 3 * se + 1e-4, (credit.cmi.mean(), truth, se)
    assert credit.cmi.mean().item() > 0.001
    # intervals of a non-negative quantity never go below 0
    assert (credit.cmi_low >= 0).all()
    # the branch file re-derives every position's estimate
    path = write_branches_csv(
        tmp_path / "branches.csv",
        graded.branches.mass.double(),
        graded.outcomes,
        graded.forced,
        graded.classes,
        StubTokenizer(),
    )
    for n in (0, 17, 59):
        mass, counts = read_branches(path, n)
        assert mass.shape == (2,) and counts.sum().item() == 32
        torch.testing.assert_close(jackknife_cmi(mass, counts), credit.cmi[n], rtol=0, atol=1e-12)
    # the metrics: 30 prompts (groups of 2) are the bootstrap's clusters; the interval is clipped
    metrics = probe_metrics(
        credit,
        where,
        sampled.rollouts.group_ids,
        num_classes=2,
        confidence=0.9,
        resamples=200,
        generator=torch.Generator().manual_seed(0),
    )
    assert metrics["probe/PHR/positions"] == 60 and metrics["probe/PHR/single_branch"] == 0
    assert 0 <= metrics["probe/PHR/cmi_mean_low"] <= metrics["probe/PHR/cmi_mean"]
    assert metrics["probe/PHR/cmi_mean"] <= metrics["probe/PHR/cmi_mean_high"]


def test_a_cut_rest_is_counted_and_bounded():
    # probe.min_rest_mass = 0.01 cuts the 0.001 rest: the estimate is (1 - 0.001) x the top branch's
    # (one branch: exactly 0), and the bound h(0.001) + 0.001 ln 2 = 0.0086 >= the truth 0.0023
    pi, rates = world([0.999], 0.001 / 7, [0.9], 0.0)
    n = 4
    probe = ProbeConfig(min_rest_mass=0.01)
    probs = pi.float()[None].expand(n, -1)
    branches, forced, cut = plan_branches(
        probs, torch.zeros(n, dtype=torch.long), probe, torch.Generator().manual_seed(0)
    )
    assert (forced[:, -1] == -1).all() and (branches.mass[:, -1] == 0).all()
    torch.testing.assert_close(cut, torch.full((n,), 0.001), atol=1e-6, rtol=0)
    # the sampled token in the rest forces the rest out even below the cut
    branches, forced, cut = plan_branches(
        probs, torch.full((n,), 3, dtype=torch.long), probe, torch.Generator().manual_seed(0)
    )
    assert (forced[:, -1] >= 1).all() and (cut == 0).all()
    # the default (0) never cuts
    branches, forced, cut = plan_branches(
        probs, torch.zeros(n, dtype=torch.long), ProbeConfig(), torch.Generator().manual_seed(0)
    )
    assert (forced[:, -1] >= 1).all() and (cut == 0).all()


@pytest.mark.slow
def test_off_a_terminal_the_probe_prints_a_line_every_ten_percent(capsys):
    # stderr captured by pytest is not a terminal, as in a SLURM log; nothing configures logging,
    # as in `python -m quadrants.probe`: the lines go to stderr
    pi, rates = world([0.5, 0.3], 0.2 / 6, [0.9, 0.4], 0.1)
    probe_world(pi, rates, positions=2, k=4, seed=3, batch_size=2)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("probe: ")]
    # 2 positions x 3 branches (two top tokens + the rest) x 4 continuations = 24 rollouts in 12
    # calls of 2; done * 10 // 24 after 2, 4, ..., 22 = 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, then the
    # end: a line after 4, 6, 8, 10, 12, 16, 18, 20, 22 and 24 rollouts (10 lines)
    assert [line.split(" (")[0] for line in lines] == [
        f"probe: {done}/24 rollouts" for done in (4, 6, 8, 10, 12, 16, 18, 20, 22, 24)
    ]
    assert all(", ETA " in line and " elapsed" in line for line in lines)
    assert "\r" not in err
