"""The end-of-sweep table: one row per child run, read back from a real MLflow store."""

from __future__ import annotations

import pandas as pd
from mlflow.tracking import MlflowClient

from quadrants.tracking.summary import _eval_columns, sweep_summary


def test_only_the_largest_k_of_each_benchmark_is_a_column() -> None:
    names = pd.Index(
        [
            "metrics.train/solve_rate",
            "metrics.eval/aime24/avg_at_32",
            "metrics.eval/aime24/avg_at_32_stderr",
            "metrics.eval/aime24/pass_at_1",
            "metrics.eval/aime24/pass_at_2",
            "metrics.eval/aime24/pass_at_32",
            "metrics.eval/arithmetic/avg_at_4",
            "metrics.eval/arithmetic/pass_at_4",
            "metrics.eval/arithmetic/no_answer_frac",
        ]
    )
    assert _eval_columns(names) == {
        "metrics.eval/aime24/avg_at_32": "aime24/avg_at_32",
        "metrics.eval/aime24/pass_at_32": "aime24/pass_at_32",
        "metrics.eval/arithmetic/avg_at_4": "arithmetic/avg_at_4",
        "metrics.eval/arithmetic/pass_at_4": "arithmetic/pass_at_4",
    }


def test_the_summary_lists_each_child_run_with_its_final_numbers(store_uri: str) -> None:
    client = MlflowClient(store_uri)
    experiment = client.create_experiment("study")
    parent = client.create_run(
        experiment, run_name="s1", tags={"quadrants.sweep_id": "s1"}
    ).info.run_id
    for quadrant, solve in (("PHR", 0.75), ("NLR", 0.125)):
        run = client.create_run(
            experiment,
            run_name=f"quadrant={quadrant}",
            tags={"quadrants.sweep_id": "s1", "mlflow.parentRunId": parent, "quadrant": quadrant},
        )
        client.log_metric(run.info.run_id, "train/solve_rate", solve, step=3)
        client.log_metric(run.info.run_id, "eval/aime24/pass_at_1", 0.5, step=3)
        client.log_metric(run.info.run_id, "eval/aime24/pass_at_2", solve, step=3)
        client.set_terminated(run.info.run_id)
    lines = sweep_summary(store_uri, "study", "s1").splitlines()
    assert lines[0] == "quadrants: sweep s1 (2 runs)"
    assert lines[1].split() == ["run", "status", "quadrant", "solve_rate", "aime24/pass_at_2"]
    assert lines[2].split() == ["quadrant=NLR", "FINISHED", "NLR", "0.125", "0.125"]
    assert lines[3].split() == ["quadrant=PHR", "FINISHED", "PHR", "0.750", "0.750"]
