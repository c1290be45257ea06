"""One training run over several ranks: `torchrun` locally, `srun` on SLURM.

    torchrun --standalone --nproc-per-node 2 -m quadrants.distributed_main \\
        objective=grpo train.threads=1
    # inside an sbatch job
    srun --ntasks 2 python -m quadrants.distributed_main objective=grpo

Overrides are those of `python -m quadrants.sweep` for a single run (no `-m`): the same Hydra tree,
the same sweep id and run directory (`<outputs>/<study>/<sweep_id>/default`), so re-running the same
command, with any number of ranks, resumes from the run's newest checkpoint into the same MLflow
run. Rank 0 writes config.yaml and logs to MLflow; the other ranks use a NullTracker (their metrics
are global already or reduced onto rank 0 first, see distributed.reduce_metrics). The rank layout
comes from torchrun's or SLURM's environment (distributed.launch_info).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from quadrants.device import require_usable_device
from quadrants.distributed.collectives import init_distributed, shutdown
from quadrants.launch.hydra_setup import (
    compose_run_plan,
    name_runs_by_swept_keys,
    split_hydra_argv,
    with_sweep_id,
)
from quadrants.tracking.base import NullTracker, Tracker

log = logging.getLogger("quadrants.distributed")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags, argv = split_hydra_argv(
        argv
    )  # Hydra's flags may stand anywhere, as with quadrants.sweep
    if any(a in ("-m", "--multirun") for a in flags):
        sys.exit(
            "quadrants.distributed_main runs ONE training run over several ranks; a sweep of "
            "distributed runs is `python -m quadrants.sweep -m ... launcher=slurm_ddp`"
        )
    show = _shown_config(flags)
    overrides = name_runs_by_swept_keys(with_sweep_id(argv))
    try:
        plan = compose_run_plan(overrides)
    except ValueError as err:
        sys.exit(f"quadrants: invalid configuration, nothing was launched.\n  {err}")
    if show:  # --cfg job: print the run's composed config (resolved, as the run stores it) and stop
        print(OmegaConf.to_yaml(OmegaConf.structured(plan.cfg)), end="")
        return
    require_usable_device(plan.train.device)  # no usable GPU for train.device=cuda: stop now
    env = init_distributed(plan.distributed.backend, device=plan.train.device)
    logging.basicConfig(
        level=logging.INFO, format=f"[rank {env.rank}] %(asctime)s %(name)s: %(message)s"
    )
    from quadrants.run.loop import run_training
    from quadrants.run.run_info import run_tags
    from quadrants.tracking.setup import make_tracker, tracked

    assert plan.run_dir is not None
    run_dir = Path(plan.run_dir)
    tracker: Tracker = NullTracker()
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(plan.cfg)))
        tracker = make_tracker(plan, run_dir, run_tags(plan))
        log.info("run %s over %d rank(s)", run_dir, env.world_size)
    try:
        with tracked(tracker):
            result = run_training(plan, tracker)
    finally:
        shutdown()
    if env.is_main:
        print(f"run_dir={run_dir} run_id={result.run_id} resumed_from={result.resumed_from}")


def _shown_config(flags: list[str]) -> bool:
    """True for `--cfg job` (also `-c job`, `--cfg=job`, with or without
    `--resolve`); other flags exit.

    Only the job config exists here (no Hydra app runs, so there is no `hydra` node to show).
    """
    show, index = False, 0
    while index < len(flags):
        flag = flags[index]
        if flag in ("--cfg", "-c") and index + 1 < len(flags) and flags[index + 1] == "job":
            show, index = True, index + 2
        elif flag == "--cfg=job":
            show, index = True, index + 1
        elif flag == "--resolve":  # the printed config is resolved either way
            index += 1
        else:
            sys.exit(
                f"quadrants.distributed_main: {' '.join(flags[index : index + 2])!r} "
                "is not supported; it takes overrides, and `--cfg job` [--resolve] to "
                "print the composed config"
            )
    return show


if __name__ == "__main__":
    main()
