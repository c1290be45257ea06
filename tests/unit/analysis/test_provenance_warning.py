"""`python -m analysis` warns when the runs it compares differ in their provenance params (a planted
vLLM version difference here), and stays quiet when they agree or predate provenance."""

from __future__ import annotations

from quadrants.analysis.provenance import provenance_warnings
from quadrants.launch.analysis import main

from .conftest import eval_metrics, make_child, make_parent, new_store

SAME = {"provenance.torch": "2.14.0", "provenance.git_commit": "abc123"}


def test_a_planted_vllm_version_difference_is_warned_about(template_db, tmp_path, capsys):
    uri, client = new_store(template_db, tmp_path)
    exp_id, parent = make_parent(client, tmp_path)
    versions = {("PHR", 0): "0.33.0", ("PHR", 1): "0.33.0", ("NHR", 0): "0.32.0"}
    for (quadrant, seed), vllm in versions.items():
        run = make_child(
            client, exp_id, parent, quadrant, seed, eval_metrics({"aime24": (0.3, 0.5)})
        )
        for key, value in {**SAME, "provenance.vllm": vllm}.items():
            client.log_param(run, key, value)
    assert (
        main(["--tracking-uri", uri, "--no-log", "--no-figures", "--out", str(tmp_path / "o")]) == 0
    )
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if "WARNING" in line]
    assert warnings == [
        "analysis: WARNING: the runs differ in provenance.vllm: 0.33.0 (2 runs: quadrant=PHR,seed=0, "
        "quadrant=PHR,seed=1); 0.32.0 (1 run: quadrant=NHR,seed=0). Their results may differ for "
        "that reason, not only for the method's."
    ]


def test_agreeing_runs_and_runs_without_provenance_give_no_warning():
    agree = {"a": {**SAME, "provenance.vllm": "0.33.0"}, "b": {**SAME, "provenance.vllm": "0.33.0"}}
    assert provenance_warnings({**agree, "old": {}}) == []  # "old": logged before provenance


def test_a_key_some_runs_lack_counts_as_a_difference():
    runs = {"a": {"provenance.data.aime24/test.jsonl": "f00"}, "b": {"provenance.torch": "2.14.0"}}
    found = provenance_warnings(runs, {"a": "run a", "b": "run b"})
    assert len(found) == 2
    assert found[0].startswith(
        "WARNING: the runs differ in provenance.data.aime24/test.jsonl: "
        "(not recorded) (1 run: run b); f00 (1 run: run a)"
    )
