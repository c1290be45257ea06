"""Inputs that used to be accepted silently or fail late now fail at compose time, before any file
or MLflow run is written, naming the key and what to do: a SLURM launcher without -m, out-of-range
numbers, a missing local model directory, a tracking target that is not a writable MLflow store,
uneven mini-batches."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time

import pytest

from quadrants.launch.hydra_setup import preflight


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["launcher=slurm"],
            r"launcher=slurm .*needs -m.*Add -m .*or submit detached with python -m quadrants.submit",
        ),
        (["launcher=slurm_dev", "quadrant=PHR"], r"needs -m"),
        (["train.warmup_steps=-5"], r"train.warmup_steps=-5 is out of range; allowed: \[0, inf\)"),
        (["train.betas=[1.5,0.9]"], r"train.betas=\[1.5, 0.9\] is out of range; allowed: \[0, 1\)"),
        (
            ["model.name_or_path=/does/not/exist"],
            r"model.name_or_path=/does/not/exist: no model directory at",
        ),
        (
            ["model.name_or_path=./missing_model"],
            r"model.name_or_path=./missing_model: no model directory",
        ),
        # 16 prompts x 8 = 128 sequences: 7 would leave a last mini-batch of 2
        (
            ["train.mini_batch_size=7"],
            r"train.mini_batch_size=7 does not divide the 128 sequences .* hold 2; "
            r"use a divisor of 128 \(e.g. 64, 32, 16\)",
        ),
        (["-m", "seed=0,1", "train.mini_batch_size=7"], r"train.mini_batch_size=7 does not divide"),
        # removed keys name their replacement (Hydra's own message would suggest appending them)
        (
            ["distributed.mixed_precision=bf16"],
            r"distributed.mixed_precision was removed; use train.precision=bf16-mixed",
        ),
        (
            ["distributed.activation_checkpointing=true"],
            r"was removed; use train.activation_checkpointing=true",
        ),
        # the CPU-only settings moved to train.cpu.*
        (["train.cpu_matmul=onednn"], r"train.cpu_matmul was removed; use train.cpu.matmul"),
        (
            ["train.retain_freed_mb=0"],
            r"train.retain_freed_mb was removed; use train.cpu.retain_freed_mb",
        ),
        # pure bf16 with AdamW rounds a small update away: refused unless allowed
        (
            ["model.dtype=bfloat16", "train.precision=bf16"],
            r"rounds away.*Use train.precision=bf16-mixed.*train.allow_pure_bf16=true",
        ),
        # vLLM's max_model_len below prompt + response: 1024 + 48 = 1072
        (
            ["rollout.vllm.max_model_len=1000"],
            r"rollout.vllm.max_model_len=1000 is below task.max_prompt_tokens \+ the longest "
            r"response .* = 1024 \+ 48 = 1072",
        ),
        (
            ["cluster.prompt_tokens=2048"],
            r"cluster.prompt_tokens was removed; use task.max_prompt_tokens",
        ),
        (
            ["cluster.gpu_memory_gb=80"],
            r"cluster.gpu_memory_gb was removed; use cluster.gpu_memory_gib \(usable GiB",
        ),
        (
            ["rollout.max_new_tokens=128", "train.micro_batch_tokens=64"],
            r"train.micro_batch_tokens=64 is below rollout.max_new_tokens=128",
        ),
    ],
)
def test_refused_at_compose_time(argv, message, tmp_path):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
    assert time.perf_counter() - started < 20  # seconds (composition only; ~1 s unloaded)
    assert not (tmp_path / "outputs").exists()  # nothing written


@pytest.mark.slow
def test_a_hub_id_and_the_multirun_slurm_launcher_still_compose():
    assert (
        preflight(["model.name_or_path=Qwen/Qwen2.5-Math-1.5B", "task=gsm8k"]) == 1
    )  # a hub id: resolved when loading
    assert preflight(["train.mini_batch_size=256"]) == 1  # >= the 128 sequences: one update
    # -m: the launcher is used (one machine: the SQLite store is allowed)
    assert preflight(["-m", "seed=0,1", "launcher=slurm", "tracking.sqlite_on_slurm=true"]) == 2


def test_tracking_server_that_does_not_answer_names_the_variable(monkeypatch, tmp_path):
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    said = (
        rf"tracking.uri={uri}: no MLflow tracking server answers there "
        rf"\(ConnectionRefusedError.*MLFLOW_TRACKING_URI={uri}\..*or use tracking=local"
    )
    with pytest.raises(ValueError, match=said):
        preflight(["tracking=server", f"outputs={tmp_path / 'outputs'}"])
    assert not (tmp_path / "outputs").exists()


def test_tracking_server_default_address_says_the_variable_is_not_set(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from quadrants.tracking.reachability import server_problem

    if server_problem("http://127.0.0.1:5000") is None:
        pytest.skip("something answers on 127.0.0.1:5000 on this machine")
    with pytest.raises(
        ValueError, match=r"MLFLOW_TRACKING_URI is not set, so tracking=server uses its default"
    ):
        preflight(["tracking=server"])


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.subprocess  # MLflow's client runs `uname -p` (platform.processor)
def test_a_web_service_that_is_not_mlflow_is_refused(monkeypatch, tmp_path):
    # it answers /health with 200 (what the old check asked) and every other path with 404, so
    # MLflow's call (a POST to /api/2.0/mlflow/experiments/search) fails
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        said = rf"tracking.uri={uri}: something answers there, but not an MLflow tracking server"
        with pytest.raises(ValueError, match=said):
            preflight(["tracking=server", f"outputs={tmp_path / 'outputs'}"])
    finally:
        server.shutdown()
        server.server_close()
    assert not (tmp_path / "outputs").exists()


def test_a_sqlite_store_where_no_file_can_be_written_is_refused(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    uri = f"sqlite:///{blocker / 'mlflow.db'}"  # its directory is a file
    said = rf"tracking.uri={uri}: the store cannot be written there \({blocker} is not a directory"
    with pytest.raises(ValueError, match=said):
        preflight([f"tracking.uri={uri}", f"outputs={tmp_path / 'outputs'}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing written


@pytest.mark.parametrize(
    "argv",
    [
        ["launcher=slurm"],  # the default store: <outputs>/mlflow.db
        ["launcher=slurm_ddp", "tracking.uri=sqlite:////shared/mlflow.db"],
    ],
)
def test_a_slurm_sweep_tracking_to_sqlite_is_refused_before_anything_is_queued(
    argv, tmp_path, monkeypatch
):
    """The jobs of a SLURM sweep land on several nodes; one SQLite file written from several nodes
    over a network file system is not safe. `quadrants.submit` stops at compose time: no sbatch is
    run (a fake one on PATH would leave its mark), nothing is written, and the message names the
    fix, tracking=server."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "sbatch-ran"
    for tool in ("sbatch", "scontrol", "srun"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {mark}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    from quadrants.launch.submit import main

    with pytest.raises(SystemExit) as refused:
        main(["-m", "seed=0,1", *argv, f"outputs={tmp_path / 'outputs'}"])
    message = str(refused.value)
    assert "nothing was submitted" in message and "SQLite file" in message, message
    assert "tracking=server" in message and "MLFLOW_TRACKING_URI" in message, message
    assert not mark.exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_the_suggested_tracking_server_composes_for_a_slurm_sweep(monkeypatch):
    """The fix the refusal names: tracking=server (MLFLOW_TRACKING_URI). Whether a server answers
    there is the reachability check's own question (test_a_web_service_that_is_not_mlflow_is_refused,
    tests/unit/tracking/test_reachability.py): here every URI counts as reachable."""
    from quadrants.launch import hydra_setup

    asked: list[str] = []
    monkeypatch.setattr(hydra_setup, "check_tracking_server", asked.append)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    with pytest.raises(ValueError, match="tracking=server"):
        preflight(["-m", "seed=0,1", "launcher=slurm_ddp"])
    assert preflight(["-m", "seed=0,1", "launcher=slurm_ddp", "tracking=server"]) == 2
    assert asked == ["http://127.0.0.1:5999"]  # the server is what the runs track to
    # one machine (the dev cluster's profile sets it): the SQLite store is allowed
    assert preflight(["-m", "seed=0,1", "launcher=slurm_dev"]) == 2
