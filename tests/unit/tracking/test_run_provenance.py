"""A run's provenance (quadrants/tracking/provenance.py): versions, git state, GPUs, data hashes, as
the `provenance.*` params every training, evaluation and probe run logs."""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess

import pytest
import torch

from quadrants.tasks.dataset import read_rows
from quadrants.tasks.read_log import files_read
from quadrants.tracking import provenance


def test_versions_name_every_package_and_say_when_one_is_missing():
    found = provenance.versions()
    assert set(found) == {"python", "torch", "transformers", "vllm", "math-verify", "quadrants"}
    assert found["python"] == platform.python_version()
    assert found["torch"] == importlib.metadata.version("torch")
    assert found["transformers"] == importlib.metadata.version("transformers")
    # the main environment has no vLLM (it lives in its own, tests/vllm/run.sh)
    assert found["vllm"] == provenance.NOT_INSTALLED


@pytest.mark.subprocess
def test_git_state_gives_the_commit_and_whether_tracked_files_changed(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    commit = git("rev-parse", "HEAD")
    assert provenance.git_state(tmp_path) == {"git_commit": commit, "git_dirty": "false"}
    (tmp_path / "untracked.txt").write_text("not part of the code\n")  # untracked: still clean
    assert provenance.git_state(tmp_path)["git_dirty"] == "false"
    (tmp_path / "a.txt").write_text("two\n")
    assert provenance.git_state(tmp_path) == {"git_commit": commit, "git_dirty": "true"}
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    (outside / ".git").write_text("gitdir: /nonexistent\n")  # a broken checkout
    assert provenance.git_state(outside) == {"git_commit": "unknown", "git_dirty": "unknown"}


def test_gpus_on_a_machine_without_cuda():
    if not torch.cuda.is_available():
        assert provenance.gpus() == {"gpu_model": "none", "gpu_count": "0"}


def test_data_hashes_are_the_sha256_of_the_bytes_keyed_by_directory_and_name(tmp_path):
    folder = tmp_path / "aime24"
    folder.mkdir()
    (folder / "test.jsonl").write_bytes(b"abc")
    # sha256("abc"), the FIPS 180-2 test vector
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert hashlib.sha256(b"abc").hexdigest() == expected
    assert provenance.data_hashes([folder / "test.jsonl"]) == {"data.aime24/test.jsonl": expected}
    # a file removed since it was read (a deleted temporary data home) does not stop the run
    gone = tmp_path / "gone" / "test.jsonl"
    assert provenance.data_hashes([gone]) == {"data.gone/test.jsonl": "missing"}


@pytest.mark.subprocess
def test_params_are_prefixed_and_include_the_data_files_the_process_read(tmp_path):
    folder = tmp_path / "mytask"
    folder.mkdir()
    data = folder / "train.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    assert read_rows(data) == [{"problem": "1+1", "answer": "2"}]
    assert data.resolve() in files_read()  # read_rows notes every file it reads
    params = provenance.params(files_read())
    assert params["provenance.torch"] == importlib.metadata.version("torch")
    assert (
        params["provenance.data.mytask/train.jsonl"]
        == hashlib.sha256(data.read_bytes()).hexdigest()
    )
    assert {"provenance.git_commit", "provenance.git_dirty", "provenance.gpu_model"} <= set(params)
    only_data = provenance.params([data], environment=False)
    assert list(only_data) == ["provenance.data.mytask/train.jsonl"]
