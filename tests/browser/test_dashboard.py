"""What a researcher sees in MLflow after a four-quadrant sweep, checked in a real browser.

A real `mlflow server` (SQLite store, served artifacts) on 127.0.0.1, a real 2-step sweep of the tiny
base policy tracking to it (`tracking=server`), and headless Chromium (Playwright) following the
links the sweep printed. An evaluation run of the sweep is added by hand (`decoy`) to check that
the printed view leaves it out. Screenshots go to $QUADRANTS_BROWSER_ARTIFACTS (default
<tmp>/screenshots); tests/browser/run.sh keeps them in outputs/browser/.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import chromium_path

pytestmark = pytest.mark.browser

QUADRANTS = ("NHR", "NLR", "PHR", "PLR")
SWEEP = [
    "train.steps=2",
    "eval.every=2",
    "eval.problems=16",
    "tracking.log_samples_every=1",
    "train.threads=1",
    "launcher=sequential",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` in its own process group (stopped with SIGTERM to the group)."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail(
                    f"mlflow server did not start:\n{(root / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
    yield url
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def sweep(server, tmp_path_factory):
    """A real four-quadrant sweep (2 steps) tracking to the server; returns its stdout."""
    cwd = tmp_path_factory.mktemp("sweep")
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quadrants.sweep",
            "-m",
            "quadrant=PHR,PLR,NHR,NLR",
            "tracking=server",
            f"tracking.uri={server}",
            *SWEEP,
        ],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"sweep: {time.monotonic() - started:.0f} s")
    return done.stdout


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--headless=new", "--no-sandbox"]
        )
        tab = browser.new_page(viewport={"width": 1600, "height": 1000})
        tab.set_default_timeout(60_000)
        yield tab
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    out = Path(
        os.environ.get("QUADRANTS_BROWSER_ARTIFACTS") or tmp_path_factory.mktemp("screenshots")
    )
    out.mkdir(parents=True, exist_ok=True)
    return out


def _open(page, url: str) -> None:
    """Go to `url`; close MLflow's assistant side panel if it opens (it covers a fifth of the page)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url)
    try:
        page.locator("button[data-component-id='mlflow.assistant.chat_panel.close']").click(
            timeout=5_000
        )
    except PlaywrightTimeout:
        pass


def _printed(stdout: str, label: str) -> str:
    found = re.findall(rf"^quadrants: {label}\s+(http\S+)$", stdout, re.MULTILINE)
    assert found, f"the sweep printed no {label!r} link:\n{stdout[-3000:]}"
    return found[-1]


HEADLINE = ("final/avg_at_4", "final/pass_at_4", "final/entropy")  # eval.samples = 4


@pytest.fixture(scope="module")
def decoy(server, sweep):
    """An evaluation run of the sweep (its sweep id and quadrant, role eval), as
    `quadrants.evaluate` of a checkpoint makes: the printed view must leave it out."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server)
    experiment = client.get_experiment_by_name("quadrants")
    trained = client.search_runs([experiment.experiment_id], "tags.quadrant = 'PHR'")[0]
    sweep_id = trained.data.tags["quadrants.sweep_id"]
    tags = {"quadrants.sweep_id": sweep_id, "quadrants.role": "eval", "quadrant": "PHR"}
    run = client.create_run(experiment.experiment_id, run_name="eval-decoy", tags=tags)
    client.log_metric(run.info.run_id, "final/avg_at_4", 0.5)
    client.set_terminated(run.info.run_id)
    return "eval-decoy"


def _grid_text(page) -> tuple[list[str], list[str]]:
    """The runs table's column headers and cell texts, as the browser rendered them."""
    headers = page.locator(".ag-header-cell").all_inner_texts()
    cells = page.locator(".ag-cell").all_inner_texts()
    return [h.strip() for h in headers], [c.strip() for c in cells]


def test_the_printed_link_shows_the_study_at_first_sight(server, sweep, decoy, page, shots):
    """The runs link opens the sweep's view: one row per training run with its quadrant, objective,
    seed and final Avg@4, Pass@4 and entropy as columns, no evaluation run, sorted by name."""
    runs_url = _printed(sweep, "runs")
    assert (
        runs_url.startswith(f"{server}/#/experiments/")
        and "workflowType=machine_learning" in runs_url
        and "viewStateShareKey=quadrants-" in runs_url
    )
    _open(page, runs_url)
    for quadrant in QUADRANTS:  # child runs are rows of their own, no parent to expand
        page.get_by_text(f"quadrant={quadrant}", exact=True).first.wait_for()
    page.locator(".ag-header-cell", has_text="final/entropy").first.wait_for()
    page.wait_for_timeout(1_000)  # the last cells of the grid
    headers, cells = _grid_text(page)
    print(f"headers: {headers}")
    for column in ("quadrant", "objective", "seed", *HEADLINE):
        assert column in headers, (column, headers)
    for quadrant in QUADRANTS:
        assert quadrant in cells, (quadrant, cells)
    numbers = [c for c in cells if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", c)]
    print(f"cells: {cells}")
    assert len(numbers) >= 3 * len(QUADRANTS) + len(QUADRANTS)  # 3 metrics and the seed per run
    assert page.get_by_text(decoy).count() == 0  # the evaluation run is filtered out
    assert page.get_by_text("undefined").count() == 0  # the sort menu names its key
    # the stored view's name, in MLflow's saved-views menu (1 in the runs of 28 Nov 2026)
    assert page.get_by_text("quadrants sweep").count() >= 1
    page.screenshot(path=shots / "experiment_runs.png")
    # the charts of the headline keys: short titles, one per key, every run drawn
    _open(page, runs_url + "&compareRunsMode=CHART")
    page.get_by_placeholder("Search metric charts").fill("final/")
    for key in HEADLINE:
        page.get_by_text(key, exact=True).first.wait_for()
    page.locator(".js-plotly-plot").nth(len(HEADLINE) - 1).wait_for()  # drawn, not loading
    page.wait_for_timeout(2_000)
    page.screenshot(path=shots / "experiment_final_charts.png")
    _open(page, runs_url + "&compareRunsMode=CHART")
    page.get_by_placeholder("Search metric charts").fill("train/entropy")
    page.get_by_text("train/entropy", exact=True).first.wait_for()
    page.locator(".scatterlayer path.js-line").first.wait_for()
    for quadrant in QUADRANTS:
        page.get_by_text(f"quadrant={quadrant}", exact=True).first.wait_for()
    assert page.locator(".scatterlayer path.js-line").count() >= len(QUADRANTS)  # one line per run
    page.screenshot(path=shots / "experiment_entropy_chart.png")
    # the training view, not MLflow's GenAI overview
    assert page.get_by_text("Detect Issues").count() == 0


def test_run_page_shows_the_entropy_chart_with_data(server, sweep, page, shots):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server)
    experiment = client.get_experiment_by_name("quadrants")
    assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"
    run = client.search_runs(
        [experiment.experiment_id], "tags.quadrant = 'PHR' and tags.`quadrants.role` = 'train'"
    )[0]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/entropy")] == [1, 2]
    _open(
        page,
        f"{server}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}/model-metrics"
        "?workflowType=machine_learning",
    )
    # train/entropy, not entropy: final/entropy is one point (a line chart with no visible line)
    page.get_by_placeholder("Search metric charts").fill("train/entropy")
    page.get_by_text("train/entropy", exact=False).first.wait_for()
    page.locator(".scatterlayer path.js-line").first.wait_for()
    page.screenshot(path=shots / "run_entropy_chart.png")


def test_parent_run_link_opens_the_rendered_report(server, sweep, page, shots):
    parent_url = _printed(sweep, "parent run")
    _open(page, parent_url)  # the link as printed
    page.get_by_text(
        "Figures: artifacts", exact=False
    ).first.wait_for()  # the summary, as description
    # the study's table as the parent's metrics, one section per quadrant (one benchmark: no name)
    for quadrant in QUADRANTS:
        page.get_by_text(f"{quadrant}/avg_at_4", exact=True).first.wait_for()
        page.get_by_text(f"{quadrant}/pass_at_4", exact=True).first.wait_for()
    page.screenshot(path=shots / "parent_run.png")
    report_url = parent_url.replace("?", "/artifacts/analysis/report.html?")
    _open(page, report_url)
    frame = page.frame_locator("iframe").first
    frame.get_by_text("Analysis:", exact=False).first.wait_for()
    frame.locator("img[src^='data:image/png;base64,']").first.wait_for()
    assert frame.locator("img[src^='data:image/png;base64,']").count() >= 3
    assert frame.locator("table td").filter(has_text=re.compile(r"^PHR$")).count() >= 1
    page.screenshot(path=shots / "parent_report.png", full_page=True)


def test_the_plain_pages_open_in_a_browser_with_no_state(server, sweep, page, shots, monkeypatch):
    """The links an MLflow whose UI was not checked gets (links.verified_ui false; simulated by the
    version string, the check being what decides) open the parent run and the experiment here too,
    in a browser context with none of the state the links above left (mode, columns)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from quadrants.tracking.links import experiment_url, run_url

    monkeypatch.setattr(mlflow, "__version__", "0.0.0")
    experiment = MlflowClient(server).get_experiment_by_name("quadrants").experiment_id
    parent = re.search(r"/runs/([0-9a-f]+)\?", _printed(sweep, "parent run")).group(1)
    plain_run = run_url(server, experiment, parent)
    assert plain_run == f"{server}/#/experiments/{experiment}/runs/{parent}"
    context = page.context.browser.new_context(viewport={"width": 1600, "height": 1000})
    fresh = context.new_page()
    fresh.set_default_timeout(60_000)
    _open(fresh, plain_run)
    fresh.get_by_text("Figures: artifacts", exact=False).first.wait_for()  # the parent's summary
    fresh.screenshot(path=shots / "plain_run.png")
    plain_experiment = experiment_url(server, experiment, "any-sweep", view="any-view")
    assert plain_experiment == f"{server}/#/experiments/{experiment}"
    _open(fresh, plain_experiment)
    # the experiment's name: in 3.17.2 a fresh browser shows its GenAI overview there (no workflowType)
    fresh.get_by_text("quadrants", exact=True).first.wait_for()
    assert fresh.get_by_text("Page not found").count() == 0
    fresh.screenshot(path=shots / "plain_experiment.png")
    context.close()
