"""Every test session reads benchmark and training files from a data home of small fixture files.

`pytest_configure` writes `tests/data_fixtures.py`'s files into a temporary directory and points
``$QUADRANTS_DATA`` at it before collection (subprocesses inherit it), so no test depends on data
beside the repository or in the user's data home, and none skips for want of it. Tests over the
complete real files are marked ``full_data`` (deselected by default) and take `full_data_dir`: the
``$QUADRANTS_DATA`` this session started with (.ci/run's full-data stage sets it).
"""

from __future__ import annotations

import os

# Under pytest-xdist (the README's `pytest -n auto`), each worker's torch, and the processes its
# tests start, get an equal share of the cores as OpenMP threads (2 workers on 2 cores: 1 each), and
# idle OpenMP threads spin 1,000 times, not libgomp's 300,000, before they sleep (the setting for a
# machine shared with other CPU jobs: quadrants/cpu/openmp.py); a run that sets train.threads still
# gets its own count. Set before anything imports torch: libgomp reads both once, when torch loads.
# Without them every worker runs as many threads as the machine has cores, and their busy-waiting
# threads take each other's cores. A user's own setting of either wins.
# The tiny base policy is built with the threads the session started with (tests/e2e/pinned pins
# runs of it per machine kind): its build gets the environment without these two settings.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    _STARTED_ENVIRONMENT: dict[str, str] | None = dict(os.environ)
    os.environ.setdefault(
        "OMP_NUM_THREADS",
        str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))),
    )
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "1000")
else:
    _STARTED_ENVIRONMENT = None  # subprocesses inherit the session's own

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from quadrants.home import DATA_ENV
from tests.data_fixtures import write_fixture_data
from tests.tiers import (
    FOLDER_MARKERS,
    MODEL_FIXTURES,
    NOT_QUICK_MARKERS,
    STAGES,
    heavy_command,
)

_STARTED_WITH: dict[str, str | None] = {}


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--stage") is not None and _default_markexpr(config):
        config.option.markexpr = ""  # a stage is chosen by --stage, not by addopts' -m
    if "data_home" in _STARTED_WITH:
        return
    _STARTED_WITH["data_home"] = os.environ.get(DATA_ENV)
    root = Path(tempfile.mkdtemp(prefix="quadrants-test-data-"))
    _STARTED_WITH["fixtures"] = str(write_fixture_data(root))
    os.environ[DATA_ENV] = str(root)


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_background_build()
    fixtures = _STARTED_WITH.pop("fixtures", None)
    started = _STARTED_WITH.pop("data_home", None)
    if fixtures is None:
        return
    shutil.rmtree(fixtures, ignore_errors=True)
    if started is None:
        os.environ.pop(DATA_ENV, None)
    else:
        os.environ[DATA_ENV] = started


# --- Tiers and stages (tests/tiers.py says what each is) ----------------------------------------
def stage_of(item: pytest.Item) -> str:
    return next((s for s in STAGES if item.get_closest_marker(s) is not None), "default")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stage",
        choices=("default", "all", *STAGES),
        default=None,
        help="run one stage of .ci/run (the default stage is the README's bare `pytest`), or all",
    )


def _default_markexpr(config: pytest.Config) -> bool:
    """True when -m is the one pyproject's addopts give (so --stage=may replace it)."""
    return config.option.markexpr == "not (" + " or ".join(STAGES) + ")"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).resolve().relative_to(root).as_posix()
        for folder, marker in FOLDER_MARKERS.items():
            if where.startswith(folder):
                item.add_marker(marker)
        if item.get_closest_marker("quick") is not None:
            raise pytest.UsageError(
                f"{item.nodeid}: `quick` is set by tests/conftest.py from what a test does; "
                "remove the hand-written marker (tests/tiers.py)"
            )
        if (
            stage_of(item) == "default"
            and not any(item.get_closest_marker(m) for m in NOT_QUICK_MARKERS)
            and not any(f in getattr(item, "fixturenames", ()) for f in MODEL_FIXTURES)
        ):
            item.add_marker(pytest.mark.quick)
    # The tests that need the base policy run last, so that its first build on a machine (started
    # in the background by pytest_collection_finish) overlaps the tests that do not need it.
    items.sort(key=lambda item: any(f in getattr(item, "fixturenames", ()) for f in MODEL_FIXTURES))
    stage = config.getoption("--stage")
    if stage is None or stage == "all":
        return
    keep = [i for i in items if stage_of(i) == stage]
    dropped = [i for i in items if stage_of(i) != stage]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


@pytest.fixture(autouse=True)
def _tiers_hold(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a default-stage test runs, starting an install, a rank group, a server or a cluster
    fails it, naming the stage marker; a quick test may start no process at all and may not build
    the base policy."""
    item = request.node
    if stage_of(item) != "default":
        return
    import multiprocessing.process

    from quadrants.models import warmup

    def refuse(what: str, marker: str) -> AssertionError:
        return AssertionError(
            f"{item.nodeid} is in the {'quick tier' if quick else 'default stage'} "
            f"(tests/conftest.py) but {what}: mark it @pytest.mark.{marker}"
        )

    quick = item.get_closest_marker("quick") is not None
    execute_child = subprocess.Popen._execute_child

    def guarded(self, args, *rest, **kwargs):
        if quick:
            raise refuse(f"started a command ({args!r})", "subprocess")
        marker = heavy_command(args)
        if marker is not None:
            raise refuse(f"started {args!r}", marker)
        return execute_child(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)
    if quick:

        def no_process(*args, **kwargs):
            raise refuse("started a process", "subprocess")

        def no_build(*args, **kwargs):
            raise refuse("built the base policy", "slow")

        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", no_process)
        monkeypatch.setattr(warmup, "_build", no_build)


_BACKGROUND: dict[str, subprocess.Popen] = {}
BUILD = "from quadrants.models.warmup import WarmupSettings as S, ensure_base_policy as e; e(S())"


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a machine whose cache lacks the tiny base policy, start building it in a background
    process once the selected tests are known (a few minutes, once per machine): the tests that do
    not need it run meanwhile, and the `base_policy` fixture waits on the build's file lock and
    reuses it. The build is the one `ensure_base_policy` does in process (same settings, torch's
    default threads), so the model is the same."""
    from quadrants.models.warmup import WarmupSettings, is_built

    wanted = any(
        f in getattr(item, "fixturenames", ()) for item in session.items for f in MODEL_FIXTURES
    )
    if not wanted or session.config.option.collectonly or is_built(WarmupSettings()):
        return
    log = Path(tempfile.gettempdir()) / "quadrants-base-policy-build.log"
    with open(log, "w") as out:
        _BACKGROUND["build"] = subprocess.Popen(
            [sys.executable, "-c", BUILD],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_STARTED_ENVIRONMENT,
        )
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"building the tiny base policy in the background (first run on this machine, a few "
            f"minutes; log: {log}); the tests that need it run last"
        )


def _stop_background_build() -> None:
    build = _BACKGROUND.pop("build", None)
    if build is not None and build.poll() is None:
        build.terminate()  # the session ended first (-x, ^C): the next one builds again
        build.wait(timeout=30)


@pytest.fixture(scope="session")
def base_policy() -> str:
    """The warm-started tiny policy, built on first use into the user's cache (a few minutes; the
    build is file-locked, so concurrent sessions build it once) and reused after; returns its dir."""
    from quadrants.models.warmup import WarmupSettings, ensure_base_policy, is_built

    if not is_built(WarmupSettings()):  # build it as the background build does (same environment)
        subprocess.run([sys.executable, "-c", BUILD], env=_STARTED_ENVIRONMENT, check=True)
    return str(ensure_base_policy(WarmupSettings()))


@pytest.fixture
def fixture_data_dir() -> Path:
    """The session's data home of fixture files."""
    return Path(_STARTED_WITH["fixtures"])


@pytest.fixture
def full_data_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The complete data home the session started with, also set as ``$QUADRANTS_DATA``."""
    started = _STARTED_WITH.get("data_home")
    if not started:
        pytest.skip(
            "a full_data test: set QUADRANTS_DATA to a complete data home "
            "(python -m quadrants.data download --all)"
        )
    monkeypatch.setenv(DATA_ENV, started)
    return Path(started)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may use, at most 8 (each holds torch and a model,
    about 0.7 GB, and some tests start training processes of their own)."""
    return max(1, min(8, len(os.sched_getaffinity(0))))
