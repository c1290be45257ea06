"""What logging costs the training thread: `log_metrics` with MlflowTracker vs NullTracker.

--steps steps of --metrics metrics each, logged back to back (no training in between, which is the
worst case for the delivery thread competing for the GIL). Targets: NullTracker; MlflowTracker to a
sqlite file (with and without fsync per record, and with --pace-ms between calls); MlflowTracker to
a local `mlflow server` (sqlite backend, loopback). For each: per-call microseconds
(mean, median, p99, max), the share of a 1 s training step the mean represents, and how long
`flush()` then took to deliver the backlog. Store creation and server start-up are not timed.

Live view: the delay from a step's `log_metrics` returning to its value being readable from the
store (`get_metric_history`, what MLflow's charts read), through the spool and the delivery thread
with its default settings, for sqlite and for the server: --live-steps steps, --live-step-s apart, a
reader polling every 50 ms. MLflow's UI then shows it at its charts' next auto-refresh, or on a
reload.

    python benchmarks/tracking_overhead.py [--steps 500] [--metrics 60] [--pace-ms 20] [--no-server]
                                           [--live-steps 12] [--live-step-s 1.3]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mlflow.tracking import MlflowClient

from quadrants.tracking.base import NullTracker, Tracker
from quadrants.tracking.mlflow_tracker import MlflowTracker

STEP_S = 1.0


def time_calls(tracker: Tracker, steps: int, metrics: int, pace_s: float = 0.0) -> list[float]:
    keys = [f"train/quadrant/PHR/stat{i}" for i in range(metrics)]
    durations = []
    for step in range(steps):
        values = {key: step + i * 1e-3 for i, key in enumerate(keys)}
        began = time.perf_counter()
        tracker.log_metrics(values, step=step)
        durations.append(time.perf_counter() - began)
        if pace_s:
            time.sleep(pace_s)  # stands in for the training step, so delivery overlaps less
    return durations


def report(name: str, durations: list[float], flush_s: float | None) -> None:
    us = sorted(d * 1e6 for d in durations)
    mean = statistics.fmean(us)
    p99 = us[min(len(us) - 1, int(0.99 * len(us)))]
    flushed = f"{flush_s:6.2f} s" if flush_s is not None else "     -  "
    print(
        f"{name:<28} {mean:9.1f} {statistics.median(us):9.1f} {p99:9.1f} {us[-1]:9.1f} "
        f"{mean / (STEP_S * 1e6) * 100:9.4f}%   {flushed}"
    )


def run_tracker(
    name: str,
    uri: str,
    spool: Path,
    steps: int,
    metrics: int,
    pace_s: float = 0.0,
    **options: object,
) -> None:
    tracker = MlflowTracker(uri, "overhead", run_name=name, spool_dir=spool, **options)
    tracker.start()
    durations = time_calls(tracker, steps, metrics, pace_s)
    began = time.perf_counter()
    delivered = tracker.flush(timeout_s=600)
    flush_s = time.perf_counter() - began
    tracker.finish()
    report(name + ("" if delivered else " (NOT DELIVERED)"), durations, flush_s)


def live_delays(uri: str, spool: Path, steps: int, step_s: float, metrics: int) -> list[float]:
    """Seconds from `log_metrics` returning to the step being readable from the store, per step."""
    tracker = MlflowTracker(uri, "live", run_name="live", spool_dir=spool)
    run_id = tracker.start()
    reader = MlflowClient(uri)
    keys = ["train/entropy", *[f"train/quadrant/PHR/stat{i}" for i in range(metrics - 1)]]
    delays = []
    for step in range(steps):
        began = time.perf_counter()
        tracker.log_metrics({key: step + 0.5 for key in keys}, step=step)
        logged = time.perf_counter()
        while not any(m.step == step for m in reader.get_metric_history(run_id, "train/entropy")):
            time.sleep(0.05)
        delays.append(time.perf_counter() - logged)
        time.sleep(max(0.0, step_s - (time.perf_counter() - began)))
    tracker.finish()
    return delays


def report_live(name: str, delays: list[float]) -> None:
    print(
        f"{name:<28} {statistics.fmean(delays):9.2f} {statistics.median(delays):9.2f} "
        f"{max(delays):9.2f}   ({len(delays)} steps)"
    )


def start_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'server.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1).close()
            return process, uri
        except OSError:
            time.sleep(0.2)
    stop_server(process)
    raise TimeoutError("mlflow server did not start")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--metrics", type=int, default=60)
    parser.add_argument(
        "--pace-ms", type=float, default=20.0, help="gap between calls in the paced run"
    )
    parser.add_argument("--no-server", action="store_true")
    parser.add_argument(
        "--live-steps", type=int, default=12, help="steps of the live-view measurement (0: skip)"
    )
    parser.add_argument(
        "--live-step-s", type=float, default=1.3, help="seconds between those steps"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tracking_overhead_") as scratch:
        root = Path(scratch)
        sqlite_uri = f"sqlite:///{root / 'mlflow.db'}"
        MlflowClient(sqlite_uri).search_experiments()  # create the schema outside the timing
        print(
            f"{args.steps} steps x {args.metrics} metrics; share = mean call / {STEP_S:.0f} s step"
        )
        print(
            f"{'target':<28} {'mean us':>9} {'p50 us':>9} {'p99 us':>9} "
            f"{'max us':>9} {'share':>10}   flush"
        )
        report("NullTracker", time_calls(NullTracker(), args.steps, args.metrics), None)
        run_tracker("sqlite", sqlite_uri, root / "spool_sqlite", args.steps, args.metrics)
        run_tracker(
            "sqlite, no fsync",
            sqlite_uri,
            root / "spool_nofsync",
            args.steps,
            args.metrics,
            fsync=False,
        )
        run_tracker(
            f"sqlite, {args.pace_ms:.0f} ms apart",
            sqlite_uri,
            root / "spool_paced",
            args.steps,
            args.metrics,
            pace_s=args.pace_ms / 1e3,
        )
        process, uri = (None, None) if args.no_server else start_server(root)
        try:
            if uri is not None:
                run_tracker(
                    "server (loopback)", uri, root / "spool_server", args.steps, args.metrics
                )
            if args.live_steps:
                print(
                    "\nlive view: step logged -> readable from the store, default tracker "
                    f"settings, a step every {args.live_step_s} s"
                )
                print(f"{'target':<28} {'mean s':>9} {'p50 s':>9} {'max s':>9}")
                report_live(
                    "sqlite",
                    live_delays(
                        sqlite_uri,
                        root / "live_sqlite",
                        args.live_steps,
                        args.live_step_s,
                        args.metrics,
                    ),
                )
                if uri is not None:
                    report_live(
                        "server (loopback)",
                        live_delays(
                            uri,
                            root / "live_server",
                            args.live_steps,
                            args.live_step_s,
                            args.metrics,
                        ),
                    )
        finally:
            if process is not None:
                stop_server(process)


if __name__ == "__main__":
    main()
