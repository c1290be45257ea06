"""Confound rewards (`reward=random`, `reward=random_solve_rate`, `reward=format_only`,
`reward=box_only_format`): the training reward of a run that asks whether a gain needs the verifier
at all (docs/science.md, "Confound rewards").

Each takes the grader's outcomes of a round (rewards/grader.py) or the responses' texts, so the
verifier still grades every response and the run logs the true solve rate next to the reward it
trains on:

- `verifier` (the default): 1.0 for `Outcome.correct`, else 0.0 (the grader's own reward).
- `random`: Spurious Rewards' `random0.5`: each response independently 1.0 with probability p,
  else 0.0, whatever it says and whatever the policy does; p = `probability`, 0.5 when unset.
  The authors' code: ruixin31/Spurious_Rewards code/ttrl/verifier/auto_verify.py,
  `random_reward_fn` returns ``int(random.random() < rate)`` with ``rate`` parsed from the task
  name `random0.5`, the completion and the label unused.
- `random_solve_rate`: the same Bernoulli draw at p = the round's true solve rate (the fraction of
  its responses the verifier graded correct). It rewards as many responses as the verifier would
  in expectation (the advantage scale and the share of constant groups stay comparable with the
  verifier arm) but depends on the policy through that rate: not the paper's reward.
- `format_only`: 1.0 when the grader found a parseable final answer: its outcome is `correct` or
  `wrong` (a closed last ``\\boxed{}`` whose content math-verify parsed, under the run's
  `task.answer_extraction`), else 0.0 (`no_answer`; `timeout` and `error`, where the grader could
  not finish reading it, count as no answer too). Stricter than the paper's format reward: an
  empty-looking or unparseable box earns nothing.
- `box_only_format`: the paper's format reward: 1.0 when the response's last ``boxed`` has
  non-empty content, parseable or not (`box_only_content`). The authors' code:
  ruixin31/Spurious_Rewards code/ttrl/verifier/qwen/qwen_eval.py `box_only_format_reward_fn`
  (``1.0 if model_answer else 0.0``) over qwen_math_parser.py `extract_answer_box_only`.

All draws come from the caller's generator (seeded from the `reward` stream of quadrants/seeds.py).
Pure: outcomes, texts (and a generator) in, floats out.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from quadrants.rewards.outcome import Outcome

__all__ = [
    "CONFOUNDS",
    "box_only_content",
    "box_only_rewards",
    "format_rewards",
    "random_rewards",
    "training_rewards",
]

CONFOUNDS = ("verifier", "random", "random_solve_rate", "format_only", "box_only_format")
"""The training rewards `reward.name` chooses from."""

RANDOM_PROBABILITY = 0.5
"""`reward=random`'s success probability when `reward.probability` is unset (the paper's
random0.5)."""

_ANSWERED = (Outcome.correct, Outcome.wrong)


def verifier_rewards(outcomes: Sequence[Outcome]) -> list[float]:
    """1.0 for each `correct` outcome, else 0.0 (the grader's reward)."""
    return [float(o is Outcome.correct) for o in outcomes]


def format_rewards(outcomes: Sequence[Outcome]) -> list[float]:
    """1.0 where the grader read a final answer (outcome `correct` or `wrong`), else 0.0."""
    return [float(o in _ANSWERED) for o in outcomes]


def random_rewards(
    outcomes: Sequence[Outcome], probability: float | None, rng: random.Random
) -> list[float]:
    """One Bernoulli(p) reward per response, in order, from `rng`: p = `probability`, or when it
    is None the fraction of `outcomes` that are `correct` (0 for an empty round; the
    `random_solve_rate` reward)."""
    if probability is None:
        probability = sum(verifier_rewards(outcomes)) / max(len(outcomes), 1)
    return [float(rng.random() < probability) for _ in outcomes]


def box_only_content(text: str) -> str:
    """The content of the last ``boxed`` of `text`, as the authors' `extract_answer_box_only`
    reads it: after a ``{``, everything up to its matching ``}`` (to the end when unclosed);
    otherwise the text up to the next ``$``; newlines and the whitespace after them removed, and
    surrounding whitespace stripped. "" when `text` has no ``boxed``. Their final
    `strip_string` normalisation (units, spaces, LaTeX spellings) is not repeated: it decides
    what a box says, not whether it is empty, except for a box holding only such markup."""
    if "boxed" not in text:
        return ""
    tail = text.split("boxed")[-1]
    if tail.startswith("{"):
        depth, content = 1, []
        for char in tail[1:]:
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    break
            content.append(char)
        found = "".join(content)
    else:
        found = tail.split("$")[0]
    return re.sub(r"\n\s*", "", found).strip()


def box_only_rewards(texts: Sequence[str]) -> list[float]:
    """1.0 for each response whose last box has content (`box_only_content`), else 0.0."""
    return [float(bool(box_only_content(t))) for t in texts]


def training_rewards(
    name: str,
    outcomes: Sequence[Outcome],
    *,
    probability: float | None = None,
    rng: random.Random | None = None,
    texts: Sequence[str] | None = None,
) -> list[float]:
    """The 0/1 reward `reward.name` gives each response of a round (the module docstring); `rng`
    is used, and needed, only by `random` and `random_solve_rate`, `texts` (the responses, in the
    outcomes' order) only by `box_only_format`."""
    if name == "verifier":
        return verifier_rewards(outcomes)
    if name == "format_only":
        return format_rewards(outcomes)
    if name == "box_only_format":
        if texts is None or len(texts) != len(outcomes):
            raise ValueError("reward.name=box_only_format reads the responses: pass their texts")
        return box_only_rewards(texts)
    if name in ("random", "random_solve_rate"):
        if rng is None:
            raise ValueError(f"reward.name={name} draws its rewards: pass the round's generator")
        if name == "random_solve_rate":
            if probability is not None:
                raise ValueError(
                    f"reward.probability={probability} is reward=random's rate; "
                    "random_solve_rate draws at the round's solve rate: drop it"
                )
            return random_rewards(outcomes, None, rng)
        rate = RANDOM_PROBABILITY if probability is None else probability
        return random_rewards(outcomes, rate, rng)
    raise ValueError(f"reward.name={name!r} is unknown; choose one of {list(CONFOUNDS)}")
