"""Fixtures for the distributed tests: the worker harness (harness.py), the
equivalence runs every case of test_equivalence.py reads, and the evaluation runs of test_sharded_eval.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import LAYOUT_CASES, Worker


@pytest.fixture(scope="session")
def worker() -> type[Worker]:
    return Worker


CASES = [
    "grpo",
    "hapo",
    "forking",
    "kl_cov",
    "PHR",
    "PHR_micro",
    "grpo_clipped",
    "clip_cov_draw",
]  # 2 steps each, checkpoints after steps 1 and 2


@pytest.fixture(scope="session")
def equivalent_runs(tmp_path_factory, base_policy, worker) -> Path:
    """The same cases trained by 1 plain process (`one/`) and by 2 gloo ranks (`two/`)."""
    return one_and_two_ranks(tmp_path_factory.mktemp("equivalence"), CASES, worker)


@pytest.fixture(scope="session")
def recompute_runs(tmp_path_factory, base_policy, worker) -> Path:
    """One 2-rank launch (one step each) of every objective that trains without LoRA, as it
    comes (engine numbers: `NAME`), with the behaviour pass recomputed (`always-NAME`) and packed
    (`packed-NAME`), and of LAYOUT_CASES recomputed and packed, in float32 and under
    train.precision=bf16-mixed (`bf16-always-NAME`, `bf16-packed-NAME`): test_behaviour_pass.py
    and test_packed.py read it, so the two share one process start-up and one set of rollouts."""
    from quadrants.objectives.registry import get_objective, known_objectives

    objectives = [
        name for name in known_objectives() if "adapter_residual" not in get_objective(name).needs
    ]
    cases = [f"{prefix}{name}:1" for name in objectives for prefix in ("", "always-", "packed-")]
    layouts = [f"{prefix}{name}:1" for name in LAYOUT_CASES for prefix in ("always-", "packed-")]
    cases += layouts + [f"bf16-{case}" for case in layouts]
    root = tmp_path_factory.mktemp("recompute")
    # no checkpoints: both files read only what rank 0 logged (one sharded save per case spared)
    worker.run(root, cases, ranks=2, timeout=2700, checkpoints=False)
    return root


EVAL_CASES = ["grpo_eval:1", "grpo_bench:1"]  # evaluation at step 0 and after step 1


@pytest.fixture(scope="session")
def evaluated_runs(tmp_path_factory, base_policy, worker) -> Path:
    """The evaluation cases trained by 1 plain process (`one/`) and by 2 gloo ranks (`two/`)."""
    return one_and_two_ranks(tmp_path_factory.mktemp("evaluation"), EVAL_CASES, worker)


def one_and_two_ranks(root: Path, cases: list[str], worker: type[Worker]) -> Path:
    """Train `cases` by 1 plain process into `root/one` and by 2 gloo ranks into `root/two`."""
    worker.run(root / "one", cases, ranks=1)
    worker.run(root / "two", cases, ranks=2)
    return root
