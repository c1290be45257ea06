"""UI links: exact URLs for a server and a local store (the rich ones with the MLflow whose UI was
checked, the plain pages with another), the pieces taken from MLflow's public API checked against
the installed MLflow, and the training-kind tag on new experiments."""

from __future__ import annotations

import re
from pathlib import Path

import click
import mlflow
import pytest
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

from quadrants.tracking.delivery import experiment_id_for
from quadrants.tracking.links import (
    LOCAL_UI,
    ROLE_TAG,
    RUN_NAME_SORT_KEY,
    VERIFIED_UI,
    experiment_id_of,
    experiment_url,
    link_lines,
    run_url,
    sweep_filter,
    verified_ui,
)

ROOT = Path(__file__).resolve().parents[3]


def test_the_pinned_mlflow_is_one_whose_ui_was_checked():
    """Bumping mlflow in pyproject.toml without checking its UI fails here, not silently in a
    browser; the installed MLflow is the pinned one, so the tests below see the rich links."""
    pin = re.search(r'"mlflow==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert pin in VERIFIED_UI, (
        f"mlflow=={pin} is pinned but its UI was not checked with quadrants' links: run "
        f"`bash tests/browser/run.sh` with it installed, then add it to links.VERIFIED_UI"
    )
    assert mlflow.__version__ == pin and verified_ui()


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


def test_an_unchecked_mlflow_gets_the_plain_pages_and_one_notice(unverified_mlflow):
    """With MLflow 3.18.0 (simulated: conftest.unverified_mlflow) no UI state is put in a URL: the
    experiment's and the run's pages, as MLflow itself prints them at the end of a run."""
    assert experiment_url("http://host:5000/", "7", "s1a2", view="quadrants-s1a2") == (
        "http://host:5000/#/experiments/7"
    )
    assert run_url("https://h", "7", "abc", "artifacts/analysis/report.html") == (
        "https://h/#/experiments/7/runs/abc"
    )
    uri = "sqlite:////data/outputs/mlflow.db"
    lines = link_lines(
        uri, "3", sweep_id="s1", view="quadrants-s1", runs={"parent run": "p1"}, report_run="p1"
    )
    assert lines == [
        f"quadrants: browse with  mlflow ui --backend-store-uri {uri}   (then open the links below)",
        "quadrants: runs        http://127.0.0.1:5000/#/experiments/3",
        "quadrants: parent run  http://127.0.0.1:5000/#/experiments/3/runs/p1",
        "quadrants: report      http://127.0.0.1:5000/#/experiments/3/runs/p1"
        "   (artifact analysis/report.html)",
    ]
    # six links were built above; the notice came once, on one line
    assert [record.getMessage() for record in unverified_mlflow.records] == [
        "MLflow 3.18.0's web UI was not checked with quadrants' links (checked: 3.17.2): the links "
        "open the plain experiment and run pages, without the sweep's filter, columns or report "
        "tab (install mlflow==3.17.2 for them)"
    ]


def test_the_local_address_is_where_mlflow_ui_listens_by_default():
    """`mlflow ui` (an alias of `mlflow server`) binds --host and --port: their defaults."""
    from mlflow.cli import cli

    command = cli.get_command(click.Context(cli), "ui")
    defaults = {param.name: param.default for param in command.params}
    assert LOCAL_UI == f"http://{defaults['host']}:{defaults['port']}"


def test_the_filter_and_the_order_are_mlflows_search_syntax(store_uri):
    """The runs link's searchFilter and orderByKey are MlflowClient.search_runs' filter and order
    by: on a real store they pick a sweep's training runs and sort them by name."""
    assert RUN_NAME_SORT_KEY == f"tags.`{MLFLOW_RUN_NAME}`"
    client = MlflowClient(store_uri)
    experiment = client.create_experiment("study")
    for name, sweep, role in [
        ("quadrant=PHR", "s1", "train"),
        ("quadrant=PLR", "s1", "train"),
        ("quadrant=NHR", "s1", "train"),
        ("eval", "s1", "eval"),  # another role of the same sweep
        ("quadrant=NLR", "s2", "train"),  # another sweep
    ]:
        client.create_run(
            experiment, run_name=name, tags={"quadrants.sweep_id": sweep, ROLE_TAG: role}
        )
    found = client.search_runs(
        [experiment], sweep_filter("s1"), order_by=[f"{RUN_NAME_SORT_KEY} ASC"]
    )
    # by name, not in the creation order (PHR, PLR, NHR) nor MLflow's default, newest first
    assert [run.info.run_name for run in found] == ["quadrant=NHR", "quadrant=PHR", "quadrant=PLR"]
