"""The runs-page view a sweep stores on its experiment (MLflow's shared view state)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from quadrants.tracking.view import envelope, publish_view, stored_view, view_state


def test_the_view_selects_the_sweeps_training_runs_and_the_study_columns():
    state = view_state("s1a2", ["final/avg_at_4", "final/pass_at_4", "final/entropy"])
    assert state == {
        "searchFilter": ("tags.`quadrants.sweep_id` = 's1a2' and tags.`quadrants.role` = 'train'"),
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "selectedColumns": [
            "tags.`quadrant`",
            "tags.`objective`",
            "tags.`seed`",
            "metrics.`final/avg_at_4`",
            "metrics.`final/pass_at_4`",
            "metrics.`final/entropy`",
        ],
        "runsHiddenMode": "SHOW_ALL",
    }


def test_the_envelope_is_mlflows_saved_view_record():
    assert envelope("s1", {"orderByAsc": True}, now_ms=1700000000000) == {
        "name": "quadrants sweep s1",
        "createdAt": 1700000000000,
        "updatedAt": 1700000000000,
        "state": '{"orderByAsc": true}',
    }


@pytest.mark.slow
def test_the_view_is_stored_once_per_sweep_and_found_again(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("study")
    assert stored_view(uri, experiment, "s1a2") is None  # not stored yet: the plain filter link
    assert publish_view(uri, experiment, "s1a2", ["final/entropy"]) == "quadrants-s1a2"
    # stored again (a re-run with other columns): one tag, overwritten
    assert publish_view(uri, experiment, "s1a2", ["final/avg_at_4"]) == "quadrants-s1a2"
    tags = client.get_experiment(experiment).tags
    views = [key for key in tags if key.startswith("mlflow.sharedViewState.")]
    assert views == ["mlflow.sharedViewState.quadrants-s1a2"]
    # a saved-view envelope: menu name, times, the state as a JSON string
    stored = json.loads(tags[views[0]])
    assert stored["name"] == "quadrants sweep s1a2" and stored["createdAt"] == stored["updatedAt"]
    assert json.loads(stored["state"]) == view_state("s1a2", ["final/avg_at_4"])
    assert stored_view(uri, experiment, "s1a2") == "quadrants-s1a2"
    assert stored_view(uri, experiment, "other") is None
    # the store refuses (no such experiment): no view, no exception (the caller links the filter)
    assert publish_view(uri, "999", "s1a2", []) is None


def test_an_unchecked_mlflow_gets_no_view(store_uri, unverified_mlflow):
    """With MLflow 3.18.0 (simulated: conftest.unverified_mlflow) the view's format, the UI's own, is
    not written to the experiment: no tag, no key (the link is the experiment's plain page)."""
    client = MlflowClient(store_uri)
    experiment = client.create_experiment("study")
    assert publish_view(store_uri, experiment, "s1a2", ["final/entropy"]) is None
    tags = client.get_experiment(experiment).tags
    assert not [key for key in tags if key.startswith("mlflow.sharedViewState.")]
    assert len(unverified_mlflow.records) == 1  # the notice, once
