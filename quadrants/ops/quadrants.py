"""The four quadrants: polarity (advantage sign) x entropy (vs. a threshold).

| quadrant | polarity | entropy |
|---|---|---|
| PHR | advantage >= 0 | H >= threshold |
| PLR | advantage >= 0 | H <  threshold |
| NHR | advantage <  0 | H >= threshold |
| NLR | advantage <  0 | H <  threshold |

A zero advantage counts as positive. It contributes no policy-gradient either way (the surrogate is
-A * r = 0); only additive terms (a KL penalty, an entropy bonus) see the side it is put on.

Threshold rules (docs/science.md):
- `group_mean` (paper default): the mean entropy over all response tokens of the G rollouts of the
  same prompt, one threshold per group.
- `batch_quantile`: the q-quantile (linear interpolation, as numpy's default) of all response-token
  entropies in the batch; q = 0.8 marks the top 20 % high (the 80/20 rule).
- `fixed`: a constant τ in nats.

Shape legend: **B** sequences · **T** response tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from quadrants.ops.groups import group_token_mean_std
from quadrants.ops.random_control import (
    REWEIGHTS,
    STRATIFIES,
    WITHINS,
    Reweight,
    Stratify,
    Within,
)


class Quadrant(str, Enum):
    PHR = "PHR"
    PLR = "PLR"
    NHR = "NHR"
    NLR = "NLR"

    @classmethod
    def parse(cls, name: str | Quadrant) -> Quadrant:
        if isinstance(name, cls):
            return name
        try:
            return cls(str(name).upper())
        except ValueError:
            raise ValueError(
                f"unknown quadrant {name!r}; known: {[q.value for q in cls]}"
            ) from None


ThresholdRule = Literal["group_mean", "batch_quantile", "fixed"]
THRESHOLD_RULES: tuple[str, ...] = get_args(ThresholdRule)

# the loss's normaliser under quadrant isolation (objectives/loss.py)
Denominator = Literal["all_response_tokens", "kept_tokens"]
DENOMINATORS: tuple[str, ...] = get_args(Denominator)


@dataclass(frozen=True)
class QuadrantMasks:
    """Four disjoint [B, T] bool masks whose union is the response mask, and the threshold used.

    Attributes:
        PHR, PLR, NHR, NLR: [B, T] bool.
        threshold: [B] float, the entropy threshold each sequence was compared against (float64 for
            group_mean, so that comparing a float32 entropy with it is exact).
    """

    PHR: Tensor
    PLR: Tensor
    NHR: Tensor
    NLR: Tensor
    threshold: Tensor

    def __getitem__(self, quadrant: Quadrant | str) -> Tensor:
        return getattr(self, Quadrant.parse(quadrant).value)

    def union(self, quadrants: Iterable[Quadrant | str]) -> Tensor:
        """[B, T] bool: tokens in any of `quadrants` (all False for an empty list)."""
        out = torch.zeros_like(self.PHR)
        for q in quadrants:
            out = out | self[q]
        return out


def validate_threshold(rule: str, value: float | None) -> None:
    """Raise ValueError naming the rule and the allowed range when (rule, value) is not usable."""
    if rule not in THRESHOLD_RULES:
        raise ValueError(
            f"entropy threshold rule {rule!r} is unknown; choose one of {list(THRESHOLD_RULES)}"
        )
    if rule == "group_mean" and value is not None:
        raise ValueError(
            f"threshold rule group_mean takes no threshold_value (got {value}); set it to null"
        )
    if rule == "batch_quantile" and (value is None or not 0.0 < value < 1.0):
        raise ValueError(
            f"threshold rule batch_quantile needs threshold_value q in (0, 1), got {value}"
        )
    if rule == "fixed" and (value is None or not 0.0 <= value < float("inf")):
        raise ValueError(
            f"threshold rule fixed needs threshold_value tau in [0, inf) nats, got {value}"
        )


def parse_keep(keep: str | Sequence[str] | None) -> tuple[Quadrant, ...] | None:
    """Normalise a `quadrant.keep` value: "all"/None -> None (no isolation),
    else a tuple of quadrants.

    Accepts "PHR", "PHR,NHR", ["PHR", "NHR"], ["all"]; unknown names list the known ones.
    """
    if keep is None:
        return None
    names = (
        [k.strip() for k in keep.split(",")] if isinstance(keep, str) else [str(k) for k in keep]
    )
    if not names:
        raise ValueError("quadrant.keep is empty; give 'all' or one or more of PHR, PLR, NHR, NLR")
    if any(n.lower() == "all" for n in names):
        if len(names) > 1:
            raise ValueError(
                f"quadrant.keep={names}: 'all' cannot be combined with named quadrants"
            )
        return None
    parsed = tuple(dict.fromkeys(Quadrant.parse(n) for n in names))
    return None if len(parsed) == 4 else parsed


def parse_match(match: str | Sequence[str] | None) -> tuple[Quadrant, ...]:
    """Normalise a `quadrant.match` value (the arm the random control matches): one quadrant or a
    union of them, as `quadrant.keep` takes them ("PHR", "PHR,PLR", [PHR, PLR]).

    Raises ValueError naming `quadrant.match` and the fix when it names no arm (null, empty,
    "all", "random" or an unknown name)."""
    fix = "give one or more of PHR, PLR, NHR, NLR (e.g. quadrant.match=PHR)"
    if match is None:
        raise ValueError(
            "quadrant=random needs quadrant.match=<arm>, the arm whose gradient-carrying tokens "
            f"the control matches (quadrant.within: per mini-batch by default); {fix}"
        )
    names = (
        [k.strip() for k in match.split(",")] if isinstance(match, str) else [str(k) for k in match]
    )
    known = {q.value for q in Quadrant}
    if not names or any(n.upper() not in known for n in names):
        raise ValueError(f"quadrant.match={match!r} names no arm; {fix}")
    return tuple(dict.fromkeys(Quadrant.parse(n) for n in names))


def is_positive(quadrant: Quadrant) -> bool:
    """Whether the quadrant holds the tokens of non-negative advantage (PHR, PLR)."""
    return quadrant in (Quadrant.PHR, Quadrant.PLR)


@dataclass(frozen=True)
class RandomControl:
    """`quadrant=random`: the matched random-token control (ops/random_control.py).

    Attributes:
        match: the arm whose count the control draws (a union of quadrants); empty only with
            `match_fraction`.
        match_sign: draw per advantage sign, among the tokens of the matched arm's sign (its arms
            must share one sign).
        reweight: `none`, or `ht` (Horvitz–Thompson: each drawn token's loss times 1/π).
        within: where the count is matched: `minibatch` (the arm's gradient-carrying tokens in
            each mini-batch), `row` (in each row) or `nominal` (the arm's nominal count over the
            step, the suite's first design); ops/random_control.py WITHINS.
        stratify: `none`, or `entropy` (the arm's count in each decile of the step's entropy).
        match_fraction: a budget instead of an arm: this share of the gradient-carrying tokens of
            every stratum, in (0, 1]; None = the arm's count.
    """

    match: tuple[Quadrant, ...]
    match_sign: bool = False
    reweight: Reweight = "none"
    within: Within = "minibatch"
    stratify: Stratify = "none"
    match_fraction: float | None = None

    def __post_init__(self) -> None:
        check_control_options(self.within, self.stratify, self.match_fraction)
        if not self.match and self.match_fraction is None:
            parse_match([])
        if self.reweight not in REWEIGHTS:
            raise ValueError(
                f"quadrant.reweight={self.reweight!r} is unknown; choose one of {list(REWEIGHTS)}"
            )
        if self.stratify == "entropy" and not self.match:
            raise ValueError(
                "quadrant.stratify=entropy draws the matched arm's entropy histogram, but the "
                "control matches no arm (quadrant.match is null); set quadrant.match=<arm> (e.g. "
                "quadrant.match=PHR) and quadrant.match_fraction=null, or quadrant.stratify=none"
            )
        if self.within == "nominal" and (self.stratify != "none" or self.match_fraction):
            raise ValueError(
                "quadrant.within=nominal is the first design (the arm's nominal count over the "
                "step) and takes no quadrant.stratify or quadrant.match_fraction; use "
                "quadrant.within=minibatch or row with them"
            )
        signs = {is_positive(q) for q in self.match}
        if self.match_sign and len(signs) > 1:
            names = ",".join(q.value for q in self.match)
            raise ValueError(
                f"quadrant.match_sign=true draws the control among the tokens of the matched "
                f"arm's advantage sign, but quadrant.match={names} mixes positive (PHR, PLR) and "
                "negative (NHR, NLR) arms; match arms of one sign (e.g. quadrant.match=[PHR,PLR]) "
                "or set quadrant.match_sign=false"
            )


def check_control_options(within: str, stratify: str, match_fraction: float | None) -> None:
    """Raise ValueError naming the key and the fix for an unknown `quadrant.within` or
    `quadrant.stratify`, or a `quadrant.match_fraction` outside (0, 1]."""
    if within not in WITHINS:
        raise ValueError(
            f"quadrant.within={within!r} is unknown; choose one of {list(WITHINS)} "
            "(minibatch: the arm's gradient-carrying count per mini-batch; row: per row; "
            "nominal: the arm's nominal count per step)"
        )
    if stratify not in STRATIFIES:
        raise ValueError(
            f"quadrant.stratify={stratify!r} is unknown; choose one of {list(STRATIFIES)}"
        )
    if match_fraction is not None and not (
        isinstance(match_fraction, (int, float)) and 0.0 < float(match_fraction) <= 1.0
    ):
        raise ValueError(
            f"quadrant.match_fraction={match_fraction!r} is outside (0, 1]; give the share of the "
            "gradient-carrying tokens the control draws (e.g. quadrant.match_fraction=0.5), or "
            "null to match quadrant.match's count"
        )


def check_denominator(denominator: str) -> None:
    """Raise ValueError naming `quadrant.denominator` and the allowed names."""
    if denominator not in DENOMINATORS:
        raise ValueError(
            f"quadrant.denominator={denominator!r} is unknown; choose one of {list(DENOMINATORS)}"
        )


@dataclass(frozen=True)
class QuadrantSettings:
    """Everything `quadrant=...` decides, in one object: which tokens get gradient and how they are
    split and counted. The token-batch builder reads the threshold, the loss the keep set and the
    denominator.

    Attributes:
        keep: quadrants that get gradient, or None for all tokens (plain objective).
        threshold: the entropy threshold rule, one of THRESHOLD_RULES.
        threshold_value: q for batch_quantile, tau (nats) for fixed, None for group_mean.
        denominator: `all_response_tokens` or `kept_tokens` (only matters with `keep` or
            `control`).
        control: the matched random-token control (`quadrant=random`), or None; with it, `keep`
            is None and the loss keeps the control's draw (objectives/loss.py `kept_tokens`).
    """

    keep: tuple[Quadrant, ...] | None = None
    threshold: ThresholdRule = "group_mean"
    threshold_value: float | None = None
    denominator: Denominator = "all_response_tokens"
    control: RandomControl | None = None

    def __post_init__(self) -> None:
        check_denominator(self.denominator)
        try:
            validate_threshold(self.threshold, self.threshold_value)
        except ValueError as err:
            raise ValueError(f"quadrant.threshold: {err}") from None
        if self.control is not None and self.keep is not None:
            raise ValueError("quadrant=random keeps its own draw: quadrant.keep must be 'random'")
        if (
            self.control is not None
            and self.control.reweight == "ht"
            and self.denominator == "kept_tokens"
        ):
            raise ValueError(
                "quadrant.reweight=ht makes the expected loss the full objective's only under a "
                "normaliser that does not depend on the draw, but quadrant.denominator=kept_tokens "
                "divides by the drawn tokens; set quadrant.denominator=all_response_tokens or "
                "quadrant.reweight=none"
            )

    @classmethod
    def from_config(cls, section: Any) -> QuadrantSettings:
        """The settings of a run's `quadrant` config section (keep, threshold, threshold_value,
        denominator, and the random control's match, match_sign, reweight); each failure names its
        key and the fix.

        `quadrant.match` is read by `quadrant=random` only; another arm accepts it (so that
        `-m quadrant=PHR,random quadrant.match=PHR` composes) but checks that it names an arm.
        `quadrant.reweight=ht` with another arm is refused: it would weight nothing."""
        check_denominator(section.denominator)
        try:
            validate_threshold(section.threshold, section.threshold_value)
        except ValueError as err:
            raise ValueError(f"quadrant.threshold: {err}") from None
        if section.reweight not in REWEIGHTS:
            raise ValueError(
                f"quadrant.reweight={section.reweight!r} is unknown; choose one of "
                f"{list(REWEIGHTS)}"
            )
        within = getattr(section, "within", "minibatch")
        stratify = getattr(section, "stratify", "none")
        fraction = getattr(section, "match_fraction", None)
        check_control_options(within, stratify, fraction)
        if is_random(section.keep):
            control = RandomControl(
                ()
                if fraction is not None and section.match is None
                else parse_match(section.match),
                match_sign=bool(section.match_sign),
                reweight=section.reweight,
                within=within,
                stratify=stratify,
                match_fraction=None if fraction is None else float(fraction),
            )
            return cls(
                threshold=section.threshold,
                threshold_value=section.threshold_value,
                denominator=section.denominator,
                control=control,
            )
        if section.reweight != "none":
            raise ValueError(
                f"quadrant.reweight={section.reweight} weights the random control's draw, but "
                f"quadrant.keep={section.keep!r} draws nothing; use quadrant=random "
                "quadrant.match=<arm>, or quadrant.reweight=none"
            )
        if stratify != "none" or fraction is not None:
            raise ValueError(
                f"quadrant.stratify={stratify} / quadrant.match_fraction={fraction} shape the "
                f"random control's draw, but quadrant.keep={section.keep!r} draws nothing; use "
                "quadrant=random quadrant.match=<arm>, or leave them at none / null"
            )
        if section.match is not None:
            parse_match(section.match)  # a typo fails here too, though only the control reads it
        try:
            keep = parse_keep(section.keep)
        except ValueError as err:
            raise ValueError(f"quadrant.keep: {err}") from None
        return cls(
            keep=keep,
            threshold=section.threshold,
            threshold_value=section.threshold_value,
            denominator=section.denominator,
        )


def is_random(keep: Any) -> bool:
    """Whether a `quadrant.keep` value asks for the random control ("random", alone)."""
    names = (
        [k.strip() for k in keep.split(",")]
        if isinstance(keep, str)
        else [str(k) for k in keep or []]
    )
    if not any(n.lower() == "random" for n in names):
        return False
    if len(names) > 1:
        raise ValueError(
            f"quadrant.keep={keep!r}: 'random' is an arm of its own (the matched control) and "
            "cannot be combined with named quadrants; use quadrant=random quadrant.match=<arm>"
        )
    return True


def quantile_of_sorted(ordered: Tensor, q: float) -> Tensor:
    """q-quantile of an ascending 1-D tensor, linear interpolation (numpy's default); 0 if empty."""
    if ordered.numel() == 0:
        return ordered.new_zeros((), dtype=torch.float32)
    pos = q * (ordered.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, ordered.numel() - 1)
    return ordered[lo].float() + (ordered[hi].float() - ordered[lo].float()) * (pos - lo)


def masked_quantile(values: Tensor, mask: Tensor, q: float) -> Tensor:
    """q-quantile of values[mask] with linear interpolation (numpy's default); 0 if mask is empty.

    Sort-based rather than torch.quantile, which refuses inputs over 16M elements (a 7B-recipe batch
    has 12M response tokens).
    """
    ordered, _ = torch.sort(values[mask.bool()].float())
    return quantile_of_sorted(ordered, q)


def entropy_threshold(
    entropy: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    rule: ThresholdRule = "group_mean",
    value: float | None = None,
) -> Tensor:
    """Per-sequence entropy threshold.

    Args:
        entropy: [B, T] float, behaviour-policy entropy in nats.
        response_mask: [B, T] bool.
        group_ids: [B] long.
        rule: one of THRESHOLD_RULES.
        value: q for batch_quantile, τ for fixed; unused for group_mean.

    Returns:
        [B] threshold (float64 for group_mean, float32 otherwise).
    """
    validate_threshold(rule, value)
    batch = entropy.shape[0]
    if rule == "group_mean":
        # float64 so that a token equal to its group's mean compares >= (a float32 mean of seven
        # equal values can land an ulp above them)
        mean, _, _ = group_token_mean_std(entropy.double(), response_mask, group_ids)
        return mean
    if rule == "batch_quantile":
        return masked_quantile(entropy, response_mask, float(value)).expand(batch).clone()
    return torch.full((batch,), float(value), dtype=torch.float32, device=entropy.device)


def split_quadrants(
    entropy: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    *,
    rule: ThresholdRule = "group_mean",
    value: float | None = None,
) -> QuadrantMasks:
    """Split response tokens by polarity (advantage sign) and entropy (vs. the threshold).

    Args:
        entropy: [B, T] float, full-vocabulary entropy in nats.
        advantages: [B] float, one per sequence; zero counts as positive.
        response_mask: [B, T] bool, True on generated tokens.
        group_ids: [B] long, the prompt each sequence answers.
        rule, value: the threshold rule (see `entropy_threshold`).

    Returns:
        PHR, PLR, NHR, NLR masks, each [B, T] bool; disjoint, their union is response_mask.
    """
    response_mask = response_mask.bool()
    threshold = entropy_threshold(entropy, response_mask, group_ids, rule=rule, value=value)  # [B]
    high = (entropy.double() >= threshold.double()[:, None]) & response_mask  # [B, T]
    low = ~high & response_mask
    positive = (advantages >= 0)[:, None]  # [B, 1]
    return QuadrantMasks(
        PHR=high & positive,
        PLR=low & positive,
        NHR=high & ~positive,
        NLR=low & ~positive,
        threshold=threshold,
    )
