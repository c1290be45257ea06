"""An analysis reads artifacts without MLflow's "Downloading artifacts" progress bars (a sweep's
summary printed one per file), on the real sqlite store of conftest.py; a value the user set for
MLflow's switch is kept."""

from __future__ import annotations

import os

from quadrants.analysis import load

BAR = "Downloading artifacts"


def test_samples_are_read_without_a_progress_bar(study_store, capfd, monkeypatch):
    run = study_store["runs"][("NHR", 1)]
    monkeypatch.delenv(load.PROGRESS_BAR_VARIABLE, raising=False)
    assert len(load.load_samples(study_store["client"], run)) == 2
    assert BAR not in capfd.readouterr().err
    assert load.PROGRESS_BAR_VARIABLE not in os.environ  # put back as it was
    # the user's own choice wins: with the bar switched on, MLflow draws it (so the check above
    # can fail), once per download
    monkeypatch.setenv(load.PROGRESS_BAR_VARIABLE, "true")
    assert len(load.load_samples(study_store["client"], run)) == 2
    assert BAR in capfd.readouterr().err
    assert os.environ[load.PROGRESS_BAR_VARIABLE] == "true"
