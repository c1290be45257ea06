"""Behaviour pinned bit for bit: two training steps of every objective, of each quadrant and of a
2-rank run, compared with values recorded by the same code at the commit named in the pin file.

Each job runs the way a sweep's job does (`quadrants.launch.job.run_job` on the composed tree, with
its MLflow store and checkpoints), in this process; only the 2-rank case starts processes
(``torchrun --standalone --nproc-per-node 2 -m quadrants.distributed_main``). For every run it reads,
from the on-disk formats users rely on, (a) the step-2 checkpoint's model parameters
(``checkpoints/step_0000002/model_optim``, a torch.distributed checkpoint), pinned as one SHA-256 of
every parameter's float32 bytes in name order, and (b) the exact ``repr`` of the GUARDED metrics at
every step: the loss, gradient norm, entropy, rewards, token counts, quadrant fractions and update
sizes, and the held-out check, which together follow every phase of the step (rollout, grading,
signals, masks, update, evaluation). Other logged values are derived from these or describe the
machine, and are not pinned, so adding a metric never needs a re-pin.

The file holds one pin per machine kind (the CPU capability torch reports, the CPU matmul backend
that train.cpu.matmul=auto picks, and torch's version): bit-for-bit equality holds within a kind.
On another kind the kernels round differently, the sampled tokens diverge within a step, and no
tolerance would mean anything, so the test skips there, naming the kinds it has pins for; record the
new kind's pin with the command below (it adds that kind and leaves the others).

Regenerate (only for an intended behaviour change, naming it in the commit):
    QUADRANTS_PIN_WRITE=1 QUADRANTS_PIN_COMMIT=<commit> python -m pytest --stage=pinned \\
        tests/e2e/test_pinned_behaviour.py
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from mlflow.tracking import MlflowClient
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from quadrants.cpu.matmul import auto_backend, cpu_vendor, onednn_available
from quadrants.launch.hydra_setup import CONFIG_DIR, _compose_job, register
from quadrants.launch.job import run_job

pytestmark = pytest.mark.pinned

PIN_FILE = Path(__file__).with_name("pinned") / "behaviour.json"
WRITE = os.environ.get("QUADRANTS_PIN_WRITE") == "1"
OBJECTIVES = [
    "clip_cov",
    "dapo",
    "entroadv",
    "entroreg",
    "forking",
    "grpo",
    "hapo",
    "kl_cov",
    "w_reinforce",
]
QUADRANTS = ["PHR", "NHR", "PLR", "NLR"]
# The warm-started tiny policy (rewards vary within groups, so every objective has a gradient),
# 4 prompts x 4 samples, one 8-sequence micro-step per half batch, a 4-problem held-out check.
SMALL = [
    "train.steps=2",
    "train.prompts_per_step=4",
    "rollout.group_size=4",
    "train.mini_batch_size=8",
    "train.threads=1",
    "eval.every=0",
    "eval.problems=4",
    "eval.samples=2",
    "checkpoint.every=1",
    "tracking.report=false",
]
GUARDED = [
    "train/objective/loss",
    "train/grad_norm",
    "train/entropy",
    "train/reward_mean",
    "train/solve_rate",
    "train/response_length",
    "train/engine_logp_abs_diff",
    "train/objective/denominator_tokens",
    "train/objective/kept_frac",
    *(f"train/quadrant/{q}/{key}" for q in QUADRANTS for key in ("token_frac", "dlogp_abs")),
    "eval/arithmetic/avg_at_2",
    "eval/arithmetic/pass_at_2",
]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def in_process(cwd: Path, *overrides: str) -> None:
    """One job as the sweep runs it, in this process, with its outputs under `cwd`."""
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        job = _compose_job([*SMALL, *overrides, "sweep_id=pin", f"outputs={cwd / 'outputs'}"])
    torch.set_num_threads(1)
    run_job(job, parent_run_id=None)


def two_ranks(cwd: Path, *overrides: str) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command = [*torchrun, "--nproc-per-node", "2", "-m", "quadrants.distributed_main"]
    done = subprocess.run(
        [*command, *SMALL, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env=_env(),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def parameters(run_dir: Path) -> str:
    """SHA-256 of every parameter's float32 bytes, in name order, at the step-2 checkpoint."""
    out = run_dir / "pinned_params.pt"
    dcp_to_torch_save(run_dir / "checkpoints" / "step_0000002" / "model_optim", out)
    model = torch.load(out, weights_only=False)["model"]
    digest = hashlib.sha256()
    for name in sorted(model):
        digest.update(name.encode())
        digest.update(model[name].detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def observed(cwd: Path) -> dict:
    """{"params": sha256, "metrics": {key: [[step, repr(value)], ...]}} of the one run under cwd."""
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("quadrants")
    assert experiment is not None, "no MLflow experiment was written"
    runs = [r for r in client.search_runs([experiment.experiment_id])]
    assert len(runs) == 1, [r.info.run_name for r in runs]
    (run_dir,) = (cwd / "outputs" / "quadrants").glob(f"*/{runs[0].info.run_name}")
    logged = client.get_run(runs[0].info.run_id).data.metrics
    missing = [key for key in GUARDED if key not in logged]
    assert not missing, f"guarded metrics not logged: {missing}"
    return {
        "params": parameters(run_dir),
        "metrics": {
            key: sorted(
                [m.step, repr(m.value)] for m in client.get_metric_history(runs[0].info.run_id, key)
            )
            for key in GUARDED
        },
    }


def cpu_capability() -> str:
    """The machine kind bit-for-bit equality needs: torch's CPU capability, the matmul backend
    that train.cpu.matmul=auto picks here (cpu/matmul.py; the runs use the default), and torch."""
    vendor = auto_backend(cpu_vendor(), platform.machine(), onednn_available())
    return f"{torch.backends.cpu.get_cpu_capability()} matmul {vendor} torch {torch.__version__}"


def _in_process(root: Path, key: str, values: list[str]) -> dict:
    """One job per value of `key`, each in a directory of its own under `root`."""
    runs = {}
    for value in values:
        (root / value).mkdir()
        in_process(root / value, f"{key}={value}")
        runs[f"{key}={value}"] = observed(root / value)
    return runs


def _two_ranks(root: Path) -> dict:
    two_ranks(root, "objective=grpo", "sweep_id=two_ranks")
    return {"default": observed(root)}


CASES = {
    "objectives": lambda root: _in_process(root, "objective", OBJECTIVES),
    "quadrants": lambda root: _in_process(root, "quadrant", QUADRANTS),
    "two_ranks": _two_ranks,
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_steps_equal_the_pinned_commit(case, tmp_path, base_policy):
    kind = cpu_capability()
    pins = json.loads(PIN_FILE.read_text()) if PIN_FILE.exists() else {}
    kinds = pins.setdefault("kinds", {})
    if not WRITE and kind not in kinds:
        # Another machine kind rounds its kernels differently, the sampled tokens diverge within a
        # step and no tolerance is meaningful: the behaviour is pinned per kind.
        pytest.skip(
            f"no pin for this machine kind ({kind!r}; pinned: {sorted(kinds)}): record one with "
            "QUADRANTS_PIN_WRITE=1 (module docstring)"
        )
    runs = CASES[case](tmp_path)
    if WRITE:
        entry = kinds.setdefault(kind, {})
        entry.setdefault("cases", {})[case] = runs
        entry["commit"] = os.environ.get("QUADRANTS_PIN_COMMIT", entry.get("commit", "unknown"))
        PIN_FILE.parent.mkdir(exist_ok=True)
        PIN_FILE.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote the pin of {case!r} for {kind!r} to {PIN_FILE.name}")
    pinned = kinds[kind]
    assert case in pinned.get("cases", {}), f"no pin for {case!r}: regenerate (module docstring)"
    expected = pinned["cases"][case]
    assert sorted(runs) == sorted(expected), "the runs differ from the pinned ones"
    for name, want in expected.items():
        got = runs[name]
        for key, history in want["metrics"].items():
            assert key in got["metrics"], f"{name}: {key} is pinned but not guarded any more"
            steps = [s for s, _ in got["metrics"][key]]
            assert steps == [s for s, _ in history], f"{name} {key}: steps differ"
            for (step, v), (_, w) in zip(got["metrics"][key], history):
                assert v == w, f"{name} {key} step {step}: {v} != pinned {w}"
        assert got["params"] == want["params"], f"{name}: the step-2 parameters differ"
