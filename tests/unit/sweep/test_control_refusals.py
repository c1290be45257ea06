"""The random control's bad inputs fail at compose time, before anything is written, naming the key
and the fix; the sweep of the issue composes."""

from __future__ import annotations

import pytest

from quadrants.launch.hydra_setup import preflight


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["quadrant=random"],
            r"quadrant=random needs quadrant.match=<arm>.*e.g. quadrant.match=PHR",
        ),
        (["quadrant=random", "quadrant.match=XYZ"], r"quadrant.match='XYZ' names no arm; give one"),
        (["quadrant=random", "quadrant.match=all"], r"quadrant.match='all' names no arm"),
        (
            ["quadrant=random", "quadrant.match=[PHR,NHR]", "quadrant.match_sign=true"],
            r"quadrant.match_sign=true .* quadrant.match=PHR,NHR mixes positive .*"
            r"set quadrant.match_sign=false",
        ),
        (
            ["quadrant=PHR", "quadrant.reweight=ht"],
            r"quadrant.reweight=ht weights the random control's draw.*use quadrant=random",
        ),
        (
            ["quadrant=random", "quadrant.match=PHR", "quadrant.reweight=hh"],
            r"quadrant.reweight='hh' is unknown; choose one of \['none', 'ht'\]",
        ),
        (
            [
                "quadrant=random",
                "quadrant.match=PHR",
                "quadrant.reweight=ht",
                "quadrant.denominator=kept_tokens",
            ],
            r"quadrant.reweight=ht .*quadrant.denominator=kept_tokens.*"
            r"set quadrant.denominator=all_response_tokens",
        ),
        (["quadrant.keep=[random,PHR]"], r"'random' is an arm of its own"),
        (
            ["quadrant=random", "quadrant.match=PHR", "quadrant.within=prompt"],
            r"quadrant.within='prompt' is unknown; choose one of \['minibatch', 'row', 'nominal'\]",
        ),
        (
            ["quadrant=random", "quadrant.match_fraction=0.5", "quadrant.stratify=entropy"],
            r"quadrant.stratify=entropy draws the matched arm's entropy histogram.*"
            r"set quadrant.match=<arm>",
        ),
        (
            ["quadrant=PHR", "quadrant.stratify=entropy"],
            r"shape the random control's draw.*use quadrant=random quadrant.match=<arm>",
        ),
        (
            ["quadrant=random", "quadrant.match=PHR", "quadrant.match_fraction=1.5"],
            r"quadrant.match_fraction",
        ),
        (["quadrant=random", "quadrant.match_fraction=0"], r"quadrant.match_fraction"),
        (["quadrant.gradient_cosine_every=0"], r"quadrant.gradient_cosine_every"),
        (["-m", "quadrant=PHR,random"], r"quadrant=random needs quadrant.match"),
        (
            ["train.minibatch_grouping=query", "train.mini_batch_size=12"],
            r"train.minibatch_grouping=query .* train.mini_batch_size=12 is not a multiple of "
            r"rollout.group_size=8; .*\(e.g. 8\)",
        ),
        (["train.minibatch_grouping=prompt"], r"train.minibatch_grouping='prompt' is unknown"),
    ],
)
def test_control_refused_at_compose_time(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
    assert not (tmp_path / "outputs").exists()  # nothing written


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "quadrant=PHR,random", "quadrant.match=PHR", "train.steps=3"],
        [
            "quadrant=random",
            "quadrant.match=[PHR,PLR]",
            "quadrant.match_sign=true",
            "quadrant.reweight=ht",
        ],
        ["train.minibatch_grouping=query", "train.mini_batch_size=16"],
        ["quadrant=random", "quadrant.match=PHR", "quadrant.within=row"],
        ["quadrant=random", "quadrant.match=NHR", "quadrant.stratify=entropy"],
        ["quadrant=random", "quadrant.match_fraction=0.5", "quadrant.reweight=ht"],
        ["quadrant=random", "quadrant.match=PHR", "quadrant.within=nominal"],
        ["quadrant=PHR", "quadrant.gradient_cosine_every=5"],
    ],
)
def test_control_composes(argv, tmp_path):
    preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
