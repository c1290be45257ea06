"""The sweep manifest (atomic write, lookup by directory or id), the parent-run bookkeeping against a
real MLflow SQLite store, and how `quadrants.status` reads SLURM's job ids. No cluster needed (the
end-to-end versions are in tests/slurm/test_quadrants_on_slurm.py)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from quadrants.launch.status import JobStatus, _expand, format_table
from quadrants.launch.sweep_manifest import (
    JobRecord,
    Manifest,
    close_parent_if_done,
    find_manifest,
    write_manifest,
)


def _manifest(sweep_dir, jobs=2) -> Manifest:
    return Manifest(
        sweep_id="s1",
        study="quadrants",
        sweep_dir=str(sweep_dir),
        tracking_uri="sqlite:///x.db",
        parent_run_id="p",
        command=["-m", "quadrant=PHR,NHR"],
        array_job_id="12",
        submitted_at="2026-01-01T00:00:00+00:00",
        slurm_conf=None,
        jobs=[
            JobRecord(
                i,
                f"12_{i}",
                f"quadrant={q}",
                [f"quadrant={q}"],
                str(sweep_dir / f"quadrant={q}"),
                "out",
                "err",
            )
            for i, q in enumerate(["PHR", "NHR"][:jobs])
        ],
    )


def test_manifest_is_written_atomically_and_reads_back(tmp_path):
    sweep_dir = tmp_path / "outputs" / "quadrants" / "s1"
    manifest = _manifest(sweep_dir)
    path = write_manifest(manifest)
    assert path == sweep_dir / "sweep.json"
    assert [p.name for p in sweep_dir.iterdir()] == ["sweep.json"]  # no temporary file left
    assert Manifest.from_dict(json.loads(path.read_text())) == manifest


def test_manifest_is_found_by_directory_file_or_sweep_id(tmp_path):
    sweep_dir = tmp_path / "outputs" / "quadrants" / "s1"
    path = write_manifest(_manifest(sweep_dir))
    assert find_manifest(str(sweep_dir)) == path
    assert find_manifest(str(path)) == path
    assert find_manifest("s1", str(tmp_path / "outputs")) == path
    with pytest.raises(FileNotFoundError, match="no sweep 's2'"):
        find_manifest("s2", str(tmp_path / "outputs"))
    write_manifest(_manifest(tmp_path / "outputs" / "other_study" / "s1"))
    with pytest.raises(FileNotFoundError, match="several studies"):
        find_manifest("s1", str(tmp_path / "outputs"))


def test_sacct_array_ranges_expand_to_job_ids():
    assert _expand("12_[0-2,5]") == ["12_0", "12_1", "12_2", "12_5"]  # pending tasks, one line
    assert _expand("12_[3-4%2]") == ["12_3", "12_4"]  # with an array throttle
    assert _expand("12_7") == ["12_7"] and _expand("13") == ["13"]


def test_status_table_has_one_row_per_job(tmp_path):
    jobs = [
        JobStatus(
            "12_0", "quadrant=PHR", "COMPLETED", "FINISHED", "r0", 3, {"train/solve_rate": 0.25}
        ),
        JobStatus("12_1", "quadrant=NHR", "PENDING"),
    ]
    lines = format_table(_manifest(tmp_path), jobs).splitlines()
    assert lines[0].startswith("sweep s1 (quadrants), array 12")
    assert lines[1].split() == ["job", "slurm", "state", "run", "step", "solve_rate"]
    assert lines[2].split() == ["quadrant=PHR", "12_0", "COMPLETED", "FINISHED", "3", "0.250"]
    assert lines[3].split() == ["quadrant=NHR", "12_1", "PENDING", "-", "-", "-"]


@pytest.mark.slow
def test_parent_is_closed_only_when_every_child_run_ended(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(
        "quadrants", artifact_location=(tmp_path / "art").as_uri()
    )
    parent = client.create_run(experiment).info.run_id
    children = [
        client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        for _ in range(2)
    ]
    client.set_terminated(children[0], "FINISHED")
    assert close_parent_if_done(uri, parent, jobs=2) is None  # one child still RUNNING
    assert close_parent_if_done(uri, parent, jobs=3) is None  # a third job has no run yet
    client.set_terminated(children[1], "FAILED")
    assert close_parent_if_done(uri, parent, jobs=2) == "FAILED"  # all ended, not all finished
    assert client.get_run(parent).info.status == "FAILED"
    client.update_run(children[1], "FINISHED")  # a resubmitted job finished it
    assert close_parent_if_done(uri, parent, jobs=2) == "FINISHED"
    assert client.get_run(parent).info.status == "FINISHED"
    assert close_parent_if_done(uri, None, jobs=2) is None  # a sweep without a parent run


@pytest.mark.subprocess
def test_status_prints_the_links_to_the_runs_page_and_the_parent_run(tmp_path, capsys, monkeypatch):
    from dataclasses import replace

    from quadrants.launch.status import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(
        "quadrants", artifact_location=(tmp_path / "art").as_uri()
    )
    parent = client.create_run(experiment, run_name="s1").info.run_id
    sweep_dir = tmp_path / "outputs" / "quadrants" / "s1"
    write_manifest(replace(_manifest(sweep_dir), tracking_uri=uri, parent_run_id=parent))
    monkeypatch.setenv(
        "PATH", str(tmp_path)
    )  # no sacct/squeue here: status says so and still prints the links
    main([str(sweep_dir)])
    printed = capsys.readouterr().out.splitlines()
    assert printed[-3:] == [
        f"quadrants: browse with  mlflow ui --backend-store-uri {uri}   (then open the links below)",
        f"quadrants: runs        http://127.0.0.1:5000/#/experiments/{experiment}/runs?workflowType=machine_learning"
        "&orderByKey=tags.%60mlflow.runName%60&orderByAsc=true"
        "&searchFilter=tags.%60quadrants.sweep_id%60%20%3D%20%27s1%27"
        "%20and%20tags.%60quadrants.role%60%20%3D%20%27train%27",
        f"quadrants: parent run  http://127.0.0.1:5000/#/experiments/{experiment}/runs/{parent}"
        "?workflowType=machine_learning",
    ]
    # once the sweep stored its view on the experiment (tracking/view.py), the runs link opens it
    from quadrants.tracking.view import publish_view

    assert publish_view(uri, experiment, "s1", ["final/entropy"]) == "quadrants-s1"
    main([str(sweep_dir)])
    assert capsys.readouterr().out.splitlines()[-2] == (
        f"quadrants: runs        http://127.0.0.1:5000/#/experiments/{experiment}/runs?"
        "workflowType=machine_learning&viewStateShareKey=quadrants-s1"
    )
