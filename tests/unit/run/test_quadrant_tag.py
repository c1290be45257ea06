"""The `quadrant` tag of a run names its arm; the random control names what it matches."""

from __future__ import annotations

import pytest

from quadrants.config import RunConfig
from quadrants.run.run_info import flat_params, quadrant_tag, run_tags
from quadrants.run_plan import RunPlan


@pytest.mark.parametrize(
    ("section", "tag"),
    [
        ({"keep": "all"}, "all"),
        ({"keep": ["PHR", "nhr"]}, "PHR+NHR"),
        ({"keep": "PHR", "match": "PHR"}, "PHR"),  # match is read by the control only
        ({"keep": "random", "match": "PHR"}, "random:PHR"),
        (
            {"keep": "random", "match": ["PHR", "PLR"], "match_sign": True, "reweight": "ht"},
            "random:PHR+PLR:sign:ht",
        ),
        # the default within=minibatch adds nothing; every other design of the control is named
        ({"keep": "random", "match": "PHR", "within": "row"}, "random:PHR:row"),
        ({"keep": "random", "match": "PHR", "within": "nominal"}, "random:PHR:nominal"),
        ({"keep": "random", "match": "PHR", "stratify": "entropy"}, "random:PHR:entropy"),
        ({"keep": "random", "reweight": "ht", "match_fraction": 0.5}, "random:ht:f0.5"),
        (
            {"keep": "random", "match": "PHR", "reweight": "ht", "match_fraction": 0.08},
            "random:PHR:ht:f0.08",
        ),
    ],
)
def test_quadrant_tag(section, tag):
    cfg = RunConfig()
    for key, value in section.items():
        setattr(cfg.quadrant, key, value)
    assert quadrant_tag(cfg.quadrant) == tag


def test_the_reward_trained_on_is_a_tag_and_a_param():
    cfg = RunConfig()
    assert run_tags(RunPlan.parse(cfg, files=False))["reward"] == "verifier"
    cfg.reward.name, cfg.reward.probability = "random", 0.5
    plan = RunPlan.parse(cfg, files=False)
    assert run_tags(plan)["reward"] == "random"
    assert (flat_params(plan)["reward"], flat_params(plan)["reward.probability"]) == ("random", 0.5)
