"""UI links: exact URLs for a server and a local store, and the training-kind tag on new experiments."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from quadrants.tracking.delivery import experiment_id_for
from quadrants.tracking.links import experiment_id_of, experiment_url, link_lines, run_url


def test_server_links_are_the_servers_pages():
    assert experiment_url("http://host:5000/", "7") == (
        "http://host:5000/#/experiments/7/runs?workflowType=machine_learning"
    )
    # the sweep filter is quoted, and sorting by name keeps child runs out of the collapsed parent
    assert experiment_url("http://host:5000", "7", "s1a2") == (
        "http://host:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&orderByKey=tags.%60mlflow.runName%60"  # the sort menu's "Run Name" (not "undefined")
        "&orderByAsc=true&searchFilter=tags.%60quadrants.sweep_id%60%20%3D%20%27s1a2%27"
        "%20and%20tags.%60quadrants.role%60%20%3D%20%27train%27"
    )
    # a stored view (tracking/view.py): its key alone, no search facets (they would override it)
    assert experiment_url("http://host:5000", "7", "s1a2", view="quadrants-s1a2") == (
        "http://host:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&viewStateShareKey=quadrants-s1a2"
    )
    assert run_url("https://h", "7", "abc", "artifacts/analysis/report.html") == (
        "https://h/#/experiments/7/runs/abc/artifacts/analysis/report.html?workflowType=machine_learning"
    )
    assert link_lines("http://host:5000", "7", runs={"parent run": "abc", "eval run": None}) == [
        "quadrants: runs        http://host:5000/#/experiments/7/runs?workflowType=machine_learning",
        "quadrants: parent run  http://host:5000/#/experiments/7/runs/abc?workflowType=machine_learning",
    ]


def test_local_store_links_say_how_to_serve_it():
    uri = "sqlite:////data/outputs/mlflow.db"
    assert link_lines(uri, "3", runs={"parent run": "p1"}) == [
        f"quadrants: browse with  mlflow ui --backend-store-uri {uri}   (then open the links below)",
        "quadrants: runs        http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning",
        "quadrants: parent run  http://127.0.0.1:5000/#/experiments/3/runs/p1?workflowType=machine_learning",
    ]
    assert link_lines(uri, None) == [  # store unreachable: the command only, no guessed ids
        f"quadrants: browse with  mlflow ui --backend-store-uri {uri}   (then open the links below)"
    ]


@pytest.mark.slow
def test_experiments_are_tagged_as_training(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    created = experiment_id_for(client, "study", None)
    assert (
        client.get_experiment(created).tags["mlflow.experimentKind"] == "custom_model_development"
    )
    assert experiment_id_of(uri, "study") == created and experiment_id_of(uri, "missing") is None
    # an experiment made elsewhere without a kind gets it; one with a kind keeps its own
    bare = client.create_experiment("bare")
    chosen = client.create_experiment("chosen", tags={"mlflow.experimentKind": "genai_development"})
    assert experiment_id_for(client, "bare", None) == bare
    assert client.get_experiment(bare).tags["mlflow.experimentKind"] == "custom_model_development"
    experiment_id_for(client, "chosen", None)
    assert client.get_experiment(chosen).tags["mlflow.experimentKind"] == "genai_development"


def test_a_sweep_with_a_report_links_it_directly():
    """The parent run's analysis report opens in MLflow's artifact viewer from the printed line."""
    assert link_lines("http://host:5000", "7", runs={"parent run": "abc"}, report_run="abc")[
        -1
    ] == (
        "quadrants: report      http://host:5000/#/experiments/7/runs/abc/artifacts/analysis/"
        "report.html?workflowType=machine_learning"
    )
