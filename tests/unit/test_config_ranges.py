"""Every leaf key of RunConfig declares, beside its default in quadrants/config.py, an allowed range
checked at compose time or a stated reason why it has none (`checked`, quadrants/config_ranges.py),
and each range is enforced by the run plan (`RunPlan.parse`) at both ends."""

from __future__ import annotations

import copy
import math
import re

import pytest

from quadrants.config import EvalConfig, RunConfig, TaskConfig
from quadrants.config_ranges import ALLOWED, UNCHECKED, Choice, Range, checked, leaves, lookup
from quadrants.run_plan import RunPlan
from quadrants.run_plan.composition import validate_heldout_split

# every leaf key's declared range (a Range), choice (a Choice) or reason for none (a str), read
# from its field
RULES: dict[str, Range | Choice | str] = {
    key: item.metadata.get(ALLOWED) or item.metadata.get(UNCHECKED, "")
    for key, _, item in leaves(RunConfig())
}
RANGES = {key: rule for key, rule in RULES.items() if isinstance(rule, Range)}
CHOICES = {key: rule for key, rule in RULES.items() if isinstance(rule, Choice)}
NO_RANGE = {key: rule for key, rule in RULES.items() if isinstance(rule, str)}


def test_every_leaf_key_has_a_range_or_a_reason():
    missing = [k for k, rule in RULES.items() if not rule]
    assert not missing, (
        f"RunConfig key(s) {missing} have neither an allowed range nor a stated reason for none. In "
        f"quadrants/config.py declare the key with `checked`: for a number, `checked(default, "
        f"Range(low, high, ...))` (checked at compose time by the run plan); for anything else (a "
        f"name, a flag, a path, a range that depends on another key), `checked(default, "
        f'why="<where it is checked, or why it needs no check>")`.'
    )
    assert all(reason.strip() for reason in NO_RANGE.values())
    assert len(RULES) == len(RANGES) + len(CHOICES) + len(NO_RANGE)


def test_a_field_states_either_a_range_or_a_reason():
    with pytest.raises(TypeError, match="either its allowed range or why it has none"):
        checked(1, Range(0), why="both")
    with pytest.raises(TypeError, match="either its allowed range or why it has none"):
        checked(1)


def test_numeric_leaves_have_ranges():
    # a number with no range needs a reason that says where its bounds are checked
    numeric = [
        k
        for k in RULES
        if isinstance(lookup(RunConfig(), k), (int, float))
        and not isinstance(lookup(RunConfig(), k), bool)
    ]
    assert numeric and all(k in RANGES or k in CHOICES or "check" in NO_RANGE[k] for k in numeric)


def _outside(allowed: Range, default: object) -> list[float]:
    """Values just outside each finite end of the range (ints step by 1, floats by 0.5)."""
    step = (
        1
        if isinstance(default, int)
        or (
            isinstance(default, (list, tuple))
            and all(isinstance(v, int) for v in default)
            and default
        )
        else 0.5
    )
    values = []
    if allowed.low is not None:
        values.append(allowed.low if allowed.low_open else allowed.low - step)
    if allowed.high is not None:
        values.append(allowed.high if allowed.high_open else allowed.high + step)
    return values


def _set(cfg: RunConfig, key: str, value: object) -> None:
    *path, last = key.split(".")
    node = cfg
    for part in path:
        node = getattr(node, part)
    setattr(node, last, value)


CASES = [
    (key, bad)
    for key, allowed in RANGES.items()
    for bad in _outside(allowed, lookup(RunConfig(), key))
]


def test_the_schema_fixes_its_own_choices():
    # the choices no other package owns; a name another package owns (train.precision,
    # rollout.hf_decode, ...) is checked by the run plan against that package's set
    assert sorted(CHOICES) == [
        "eval.source",
        "quadrant.axis",
        "rollout.vllm.sleep_level",
        "train.behaviour_pass",
        "train.minibatch_grouping",
    ]
    assert all(lookup(RunConfig(), key) in choice.values for key, choice in CHOICES.items())


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_each_choice_is_enforced(key):
    bad = 3 if key == "rollout.vllm.sleep_level" else "nope"  # one past 0, 1, 2; no name
    cfg = RunConfig()
    _set(cfg, key, bad)
    choices = re.escape(str(list(CHOICES[key].values)))
    with pytest.raises(ValueError, match=rf"^{key}={bad!r} is unknown; choose one of {choices}$"):
        RunPlan.parse(cfg, files=False)


def test_a_choice_owned_elsewhere_reads_the_same():
    # reward.name's set is rewards.confound.CONFOUNDS; the same Choice type, with its hint
    cfg = RunConfig()
    cfg.reward.name = "coin"
    with pytest.raises(ValueError) as error:
        RunPlan.parse(cfg, files=False)
    assert str(error.value) == (
        "reward.name='coin' is unknown; choose one of ['verifier', 'random', 'random_solve_rate', "
        "'format_only', 'box_only_format'] "
        "(e.g. reward=random)"
    )


def test_the_defaults_are_in_range():
    RunPlan.parse(RunConfig())


@pytest.mark.parametrize(("key", "bad"), CASES)
def test_each_range_is_enforced_at_both_ends(key, bad):
    cfg = copy.deepcopy(RunConfig())
    default = lookup(cfg, key)
    value = (
        [bad, *list(default)[1:]]
        if isinstance(default, (list, tuple)) and default
        else ([bad] if isinstance(default, list) else bad)
    )
    _set(cfg, key, value)
    with pytest.raises(ValueError, match=rf"^{key}=.* is out of range; allowed: "):
        RunPlan.parse(cfg)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "train.warmup_steps",
            -5,
            r"train.warmup_steps=-5 is out of range; allowed: \[0, inf\) \(0 = no warm-up",
        ),
        (
            "train.betas",
            (1.5, 0.9),
            r"train.betas=\[1.5, 0.9\] is out of range; allowed: \[0, 1\) \(AdamW",
        ),
        (
            "train.betas",
            (0.9, 1.0),
            r"train.betas=\[0.9, 1.0\] is out of range",
        ),  # the second beta too
        ("rollout.top_p", 1.5, r"rollout.top_p=1.5 is out of range; allowed: \(0, 1\]"),
        (
            "task.heldout_size",
            -1,
            r"task.heldout_size=-1 is out of range; allowed: \[0, inf\) \(0 = no held-out split",
        ),
        ("eval.ks", [1, 0], r"eval.ks=\[1, 0\] is out of range; allowed: \[1, inf\)"),
        ("train.lr", math.nan, r"train.lr=nan is out of range"),
        (
            "rollout.vllm.kv_cache_gib",
            0.0,
            r"rollout.vllm.kv_cache_gib=0.0 is out of range; allowed: \(0, inf\), or null",
        ),
    ],
)
def test_out_of_range_messages_name_the_key_and_the_range(key, value, message):
    cfg = RunConfig()
    _set(cfg, key, value)
    with pytest.raises(ValueError, match=message):
        RunPlan.parse(cfg)


def test_null_is_allowed_only_where_the_range_says():
    cfg = RunConfig()
    cfg.eval.limit = None  # null = every problem
    RunPlan.parse(cfg)
    cfg.train.lr = None
    with pytest.raises(ValueError, match=r"train.lr=None is out of range"):
        RunPlan.parse(cfg)


def test_an_empty_heldout_split_is_refused_when_the_evaluation_needs_it():
    # task.heldout_size=0 is in range (>= 0) on its own, but the default evaluation (no
    # eval.benchmarks, eval.problems=100) draws from the task's held-out split: 0 problems
    cfg = RunConfig()
    cfg.task.heldout_size = 0
    with pytest.raises(
        ValueError,
        match=r"^task.heldout_size=0 is out of range for this evaluation; allowed: >= 1, since "
        r"eval.problems=100 evaluates the held-out split of arithmetic \(0 problems\); set "
        r"task.heldout_size to a positive size, eval.problems=0",
    ):
        RunPlan.parse(cfg)
    cfg.eval.problems = 0  # no held-out evaluation: nothing needs the split
    RunPlan.parse(cfg)
    # a task among the benchmarks gets task.heldout_size problems (eval/suite.py build_plans): 0
    # here, found after aime24 was generated (suite_metrics: min() of an empty sequence)
    benchmarks = EvalConfig(benchmarks={"deepscaler": 4, "aime24": 4})
    with pytest.raises(
        ValueError,
        match=r"^task.heldout_size=0 is out of range for this evaluation; allowed: >= 1, since "
        r"eval.benchmarks names the task deepscaler, .* or remove deepscaler from eval.benchmarks$",
    ):
        validate_heldout_split(benchmarks, TaskConfig(name="deepscaler", heldout_size=0))
    validate_heldout_split(benchmarks, TaskConfig(name="deepscaler", heldout_size=1))


@pytest.mark.parametrize(
    ("eval_cfg", "task_cfg"),
    [
        # gsm8k among the benchmarks is the GSM8K test set, not the task's held-out split
        (EvalConfig(benchmarks={"gsm8k": 4}), TaskConfig(name="gsm8k", heldout_size=0)),
        # a held-out file replaces the carved split: task.heldout_size is not read
        (EvalConfig(), TaskConfig(name="dataset", heldout_size=0, params={"heldout_path": "h"})),
    ],
)
def test_heldout_size_zero_is_allowed_where_no_split_is_carved(eval_cfg, task_cfg):
    validate_heldout_split(eval_cfg, task_cfg)


def test_one_range_type_one_message_for_config_keys_objectives_and_sections():
    """The run configuration, an objective's hyper-parameter check and a section's own check (the
    probe command) all raise through Range.check, so the same interval reads the same:
    (0, inf) for train.lr and for GSPO's max_log_ratio, both open at 0."""
    from quadrants.config import ProbeConfig
    from quadrants.config_ranges import check_section
    from quadrants.objectives.registry import check_range, resolve_objective

    cfg = RunConfig()
    cfg.train.lr = 0.0
    with pytest.raises(ValueError) as config_error:
        RunPlan.parse(cfg, files=False)
    with pytest.raises(ValueError) as objective_error:
        resolve_objective("gspo", {"max_log_ratio": 0.0})
    assert str(config_error.value) == "train.lr=0.0 is out of range; allowed: (0, inf)"
    assert str(objective_error.value) == "max_log_ratio=0.0 is out of range; allowed: (0, inf)"
    # the objectives' keyword form builds the same Range as the table's row
    with pytest.raises(ValueError) as keyword_error:
        check_range("train.lr", 0.0, low=0.0, low_open=True)
    assert str(keyword_error.value) == str(config_error.value)
    # a section alone: probe.continuations=1 against [2, inf) and the row's reason
    with pytest.raises(ValueError) as section_error:
        check_section(ProbeConfig(continuations=1), "probe")
    assert str(section_error.value) == (
        "probe.continuations=1 is out of range; allowed: [2, inf) (the jackknife leaves one out)"
    )
    check_section(ProbeConfig(), "probe")  # the defaults lie inside every range


def test_overlong_buffer_is_bounded_by_max_new_tokens_through_the_same_type():
    cfg = RunConfig()
    cfg.rollout.max_new_tokens, cfg.rollout.overlong_buffer = 48, 49  # 49 > 48: out
    with pytest.raises(ValueError) as error:
        RunPlan.parse(cfg, files=False)
    assert str(error.value) == (
        "rollout.overlong_buffer=49 is out of range; allowed: [0, 48] "
        "(0 = no overlong penalty; at most rollout.max_new_tokens)"
    )
    cfg.rollout.overlong_buffer = 48  # the upper end is closed
    RunPlan.parse(cfg, files=False)
