"""Branching rollouts: sample the policy's responses, branch at chosen tokens,
grade the continuations.

1. `sample_batch`: `probe.prompts` training prompts, `rollout.group_size` responses each at the
   rollout temperature, graded; the trainer's no-grad pass gives H_t and the TokenBatch (advantages,
   quadrants) exactly as a training step builds it.
2. `next_token_probs`: π(·|s_t) at the probed positions (one forward pass over their sequences),
   the distribution the engines sample from: softmax(logits / T) after transformers'
   TopPLogitsWarper at `rollout.top_p` (quadrants.rollout.decode.sampling_setup, the HF engine's own
   processor: ascending cumulative probability <= 1 − top_p is removed). vLLM's native sampler
   applies the same rule (vllm-project/vllm, vllm/v1/sample/ops/topk_topp_sampler.py,
   apply_top_k_top_p: `probs_sum <= 1 - p` masked, the top token kept); its FlashInfer kernel on
   CUDA samples the nucleus without materialising it, which only a GPU run can compare. No engine
   applies a top-k (hf.py passes top_k=0, vllm.py top_k=-1), so there is none to mirror.
3. `roll_out_branches`: for every position, the top branches (credit.top_branches) and the rest
   branch (rolled out whenever it has mass; its tokens drawn from the same truncated π); K
   continuations of each from token ids (prompt + response[:t] + forced token), sampled at
   the rollout temperature by `RolloutEngine.generate_from_ids` in calls of at most
   `probe.batch_size` sequences; each full response (response[:t] + forced + continuation, cut at
   the first stop token and at `rollout.max_new_tokens` tokens, as in training) is graded like a
   training reward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from quadrants import seeds
from quadrants.config import AdvantageConfig, ProbeConfig, RolloutConfig
from quadrants.models.policy import behaviour_pass, position_ids_from_mask
from quadrants.objectives.batch import TokenBatch, make_token_batch
from quadrants.ops.quadrants import QuadrantSettings
from quadrants.probe.credit import Branches, entropy, sample_rest_tokens, top_branches
from quadrants.probe.positions import Positions, branching_cost
from quadrants.progress import Progress
from quadrants.rewards.grader import Grader
from quadrants.rollout.decode import sampling_setup
from quadrants.rollout.engine import RolloutEngine, Rollouts, SamplingSettings
from quadrants.tasks.base import Problem

log = logging.getLogger("quadrants.probe")


@dataclass(frozen=True)
class ProbeSettings:
    """What a probe reads of a run: the `probe`, `rollout` and `advantage` sections, the run's
    parsed `quadrant` settings, the rows (`batch_size`) and vocabulary chunk (`chunk_size`) of the
    trainer's no-grad pass, and the `run_dir` an in-training probe writes under (None: no files).
    The caller hands them from its run plan (`ProbeSettings.of`)."""

    probe: ProbeConfig
    rollout: RolloutConfig
    advantage: AdvantageConfig
    quadrant: QuadrantSettings
    chunk_size: int
    batch_size: int
    run_dir: str | None = None

    @classmethod
    def of(cls, plan: Any) -> ProbeSettings:
        """The settings of `plan`, a `RunPlan` (quadrants/run_plan, above this layer, which takes
        its parts): its sections, its `quadrant_settings` and its forwards' `chunk_size` and
        `batch_size` (`plan.forward`)."""
        return cls(
            probe=plan.probe,
            rollout=plan.rollout,
            advantage=plan.advantage,
            quadrant=plan.quadrant_settings,
            chunk_size=plan.forward.chunk_size,
            batch_size=plan.forward.batch_size,
            run_dir=plan.run_dir,
        )


@dataclass(frozen=True)
class SampledBatch:
    """The probe's population: G graded responses per prompt and their TokenBatch."""

    rollouts: Rollouts
    rewards: Tensor  # [B] float
    golds: list[str]  # [B]
    batch: TokenBatch


def sample_batch(
    model: nn.Module,
    tokenizer: Any,
    engine: RolloutEngine,
    grader: Grader,
    problems: list[Problem],
    settings: ProbeSettings,
) -> SampledBatch:
    """G responses per problem at the rollout settings, graded, with the
    training step's TokenBatch."""
    rollout, advantage = settings.rollout, settings.advantage
    sampling = SamplingSettings(
        n=rollout.group_size,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        max_new_tokens=rollout.max_new_tokens,
        seed=seeds.probe_rollout(settings.probe.seed),
    )
    rollouts = engine.generate([p.prompt for p in problems], sampling)
    golds = [problems[int(g)].answer for g in rollouts.group_ids]
    rewards = torch.tensor(grader.grade(rollouts.texts, golds).rewards, dtype=torch.float32)
    sequences = torch.cat([rollouts.prompt_ids, rollouts.response_ids], dim=1)  # [B, P + T]
    attention = torch.cat([rollouts.prompt_mask, rollouts.response_mask], dim=1)
    device = next(model.parameters()).device
    old_logp, entropy = behaviour_pass(
        model,
        sequences.to(device),
        attention.to(device),
        rollouts.response_ids.shape[1],
        temperature=rollout.temperature,
        chunk_size=settings.chunk_size,
        batch_size=settings.batch_size,
    )
    mask = rollouts.response_mask
    batch = make_token_batch(
        sequences=sequences,
        attention_mask=attention,
        response_mask=mask,
        old_logp=old_logp.cpu() * mask,
        entropy=entropy.cpu() * mask,
        rewards=rewards,
        group_ids=rollouts.group_ids,
        normalize_std=advantage.normalize_std,
        advantage_eps=advantage.eps,
        quadrant=settings.quadrant,
    )
    return SampledBatch(rollouts=rollouts, rewards=rewards, golds=golds, batch=batch)


@torch.no_grad()
def next_token_probs(
    model: nn.Module,
    rollouts: Rollouts,
    positions: Positions,
    *,
    temperature: float,
    top_p: float = 1.0,
) -> Tensor:
    """π(·|s_t) before response token t of each position, as the engines sample it:
    softmax(logits / temperature), truncated to the top-p nucleus and renormalised when
    top_p < 1 (transformers.TopPLogitsWarper, the HF engine's processor). [N, V] float32 (CPU)."""
    _, warper = sampling_setup(temperature, top_p)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    rows = []
    for sequence, token in zip(positions.sequence.tolist(), positions.token.tolist()):
        ids = torch.cat(
            [
                rollouts.prompt_ids[sequence][rollouts.prompt_mask[sequence]],
                rollouts.response_ids[sequence, :token],
            ]
        )[None].to(device)  # [1, L]: s_t
        mask = torch.ones_like(ids, dtype=torch.bool)
        logits = model(
            input_ids=ids,
            attention_mask=mask.long(),
            position_ids=position_ids_from_mask(mask),
            logits_to_keep=1,
            use_cache=False,
        ).logits[0, -1]  # [V]
        scores = logits.float()[None] / temperature  # [1, V]
        if warper is not None:
            scores = warper(ids, scores)  # the nucleus; the others -inf
        rows.append(torch.softmax(scores[0], dim=-1).cpu())
    model.train(was_training)
    return torch.stack(rows)


@dataclass(frozen=True)
class BranchOutcomes:
    """Graded continuations of every branch.

    Attributes:
        branches: top tokens and masses ([N, M]; a rest branch that was cut, `cut_rest_mass`, has
            mass 0 here).
        outcomes: [N, M, K] long, the reward class of each continuation (−1: branch not rolled out).
        forced: [N, M, K] long, the token each continuation was forced to start with (−1: none);
            the rest branch's K tokens are drawn from π restricted to the rest.
        cut_rest_mass: [N] float, π_rest of a rest branch that had mass but was not rolled out
            (`probe.min_rest_mass`), else 0.
        sampling_entropy: [N] float, the entropy of the truncated π the branches are drawn from
            (H(o_t | s_t) of the probe's estimand; H_t, the trainer's, is before top-p).
        classes: [C] float, the reward value of each class (ascending).
        rollouts: continuations generated.
        tokens: tokens those continuations generated.
    """

    branches: Branches
    outcomes: Tensor
    forced: Tensor
    cut_rest_mass: Tensor
    sampling_entropy: Tensor
    classes: Tensor
    rollouts: int
    tokens: int


def plan_branches(
    probs: Tensor, sampled_tokens: Tensor, probe: ProbeConfig, generator: torch.Generator
) -> tuple[Branches, Tensor, Tensor]:
    """Branches of every position, the forced token of every continuation ([N, M, K] long, −1 =
    not rolled out) and the rest mass that was cut ([N]).

    The rest branch is rolled out whenever its mass is above 0. Only with `probe.min_rest_mass` > 0
    is a smaller rest cut (unless the sampled token is in it: its pointwise credit needs it); a cut
    rest is dropped from the branch masses and returned, so the estimate can account for it
    (estimates.estimate_credit: the top branches' credit scaled by 1 − π_rest, and the bound
    probe.credit.rest_cut_bound on what was lost)."""
    branches = top_branches(probs, coverage=probe.coverage, max_branches=probe.branches)
    k = probe.continuations
    top = branches.token_ids[:, :, None].expand(-1, -1, k)  # [N, M-1, K]
    rest = sample_rest_tokens(probs, branches, k, generator=generator)  # [N, K]
    rest_mass = branches.mass[:, -1]
    in_rest = ~(branches.token_ids == sampled_tokens[:, None]).any(-1)
    keep_rest = (rest_mass > 0) & ((rest_mass >= probe.min_rest_mass) | in_rest)
    rest = torch.where(keep_rest[:, None], rest, torch.full_like(rest, -1))
    mass = branches.mass.clone()
    mass[:, -1] = torch.where(keep_rest, rest_mass, torch.zeros_like(rest_mass))
    cut = torch.where(keep_rest, torch.zeros_like(rest_mass), rest_mass)
    forced = torch.cat([top, rest[:, None]], 1)
    return Branches(token_ids=branches.token_ids, mass=mass), forced, cut


def roll_out_branches(
    engine: RolloutEngine,
    grader: Grader,
    tokenizer: Any,
    sampled: SampledBatch,
    positions: Positions,
    probs: Tensor,
    probe: ProbeConfig,
    rollout: RolloutConfig,
    *,
    stop_ids: list[int],
    generator: torch.Generator,
    announce: bool = True,
) -> BranchOutcomes:
    """K graded continuations per branch of every position (module docstring); a response ends at
    the first of `stop_ids` (the engines' stop tokens, quadrants.rollout.hf.stop_token_ids), as
    the `probe` and `rollout` sections say."""
    rollouts = sampled.rollouts
    sampled_tokens = rollouts.response_ids[positions.sequence, positions.token]  # [N]
    branches, forced, cut = plan_branches(probs, sampled_tokens, probe, generator)
    jobs = torch.nonzero(forced >= 0)  # [J, 3]: (position, branch, continuation)
    cost = branching_cost(
        (forced[:, :, 0] >= 0).sum(-1),
        continuations=probe.continuations,
        max_new_tokens=rollout.max_new_tokens,
        batch_size=probe.batch_size,
    )
    if announce:
        print(f"quadrants probe: {len(positions)} positions, {cost.line()}", flush=True)
    prefixes, responses, budgets = [], [], []
    for n, m, k in jobs.tolist():
        b, t = int(positions.sequence[n]), int(positions.token[n])
        head = rollouts.response_ids[b, :t].tolist() + [int(forced[n, m, k])]
        prefixes.append(rollouts.prompt_ids[b][rollouts.prompt_mask[b]].tolist() + head)
        responses.append(head)
        budgets.append(max(0, rollout.max_new_tokens - t - 1))
    stops = set(stop_ids)
    texts: list[str] = []
    generated = 0
    bar = Progress(
        total=len(prefixes),
        desc="probe",
        unit="rollout",
        logger=log,
        leave=False,
    )
    for call, start in enumerate(range(0, len(prefixes), probe.batch_size)):
        chunk = slice(start, start + probe.batch_size)
        width = max(1, max(budgets[chunk]))
        sampling = SamplingSettings(
            n=1,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            max_new_tokens=width,
            seed=seeds.probe_branch(probe.seed, call),
        )
        out = engine.generate_from_ids(prefixes[chunk], sampling)
        for row, (head, budget) in enumerate(zip(responses[chunk], budgets[chunk])):
            continuation = out.response_ids[row][out.response_mask[row]].tolist()[:budget]
            full = head if head[-1] in stops else head + continuation
            end = next((i for i, token in enumerate(full) if token in stops), None)
            full = full if end is None else full[: end + 1]
            generated += len(continuation)
            texts.append(tokenizer.decode(full, skip_special_tokens=True))
        bar.update(len(responses[chunk]))
    bar.close()
    golds = [sampled.golds[int(positions.sequence[n])] for n in jobs[:, 0].tolist()]
    rewards = (
        torch.tensor(grader.grade(texts, golds).rewards, dtype=torch.float32)
        if texts
        else torch.zeros(0)
    )
    classes = torch.unique(torch.cat([rewards, sampled.rewards]))  # ascending
    outcomes = torch.full(forced.shape, -1, dtype=torch.long)
    if len(jobs):
        outcomes[jobs[:, 0], jobs[:, 1], jobs[:, 2]] = torch.searchsorted(classes, rewards)
    return BranchOutcomes(
        branches=branches,
        outcomes=outcomes,
        forced=forced,
        cut_rest_mass=cut,
        sampling_entropy=entropy(probs.double()),
        classes=classes,
        rollouts=len(prefixes),
        tokens=generated,
    )
