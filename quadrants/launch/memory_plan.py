"""`python -m quadrants.plan <the sweep's overrides>`: the memory plan of every distinct run of the
command, per GPU and per phase, against `cluster.gpu_memory_gib`.

    python -m quadrants.plan experiment=paper_quadrants_qwen7b launcher=slurm_ddp \
        hydra.launcher.tasks_per_node=8

Ranks per run come from the launcher as the sweep would use it (`nodes x tasks_per_node` for
launcher=slurm_ddp; one process otherwise), whether or not `-m` is given. Jobs that differ only in
what does not change memory (seed, objective, quadrant) share one plan. Nothing is loaded but the
model's config.json (shipped for the presets' models), no data files, no network. Exit status 1
when a plan does not fit (the same refusal `quadrants.sweep` and `quadrants.submit` give).
"""

from __future__ import annotations

import sys

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from quadrants.launch.hydra_setup import (
    CONFIG_DIR,
    _checked,
    _compose_job,
    _overrides,
    check_host_memory,
    check_removed_keys,
    expand_jobs,
    hydra_argv,
    launcher_ranks,
    launcher_ranks_per_node,
    register,
    to_run_plan,
)
from quadrants.launch.slurm_host import SLURM_LAUNCHER
from quadrants.memory.check import plan_inputs, refusal
from quadrants.memory.peaks import HOST_MARGIN, GiB, Plan, fits, format_plan, make_plan
from quadrants.run_plan import RunPlan


def plan_command(argv: list[str]) -> tuple[str, bool]:
    """(the report, whether every plan fits)."""
    check_removed_keys(argv)  # cluster.gpu_memory_gb -> cluster.gpu_memory_gib, as the sweep says
    register()
    everything = _overrides(hydra_argv(argv))
    overrides = [o for o in everything if not o.startswith(("hydra.", "hydra/"))]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        fixed = [o for o in everything if "," not in o.split("=", 1)[-1]]
        base = _checked(
            fixed, lambda: compose(config_name="config", overrides=fixed, return_hydra_config=True)
        )
        sweeper_params = base.hydra.sweeper.get("params")
        params = OmegaConf.to_container(sweeper_params, resolve=False) if sweeper_params else {}
        jobs = _checked(overrides, lambda: expand_jobs(overrides, params))
        ranks = launcher_ranks(base.hydra.launcher)
        per_node = launcher_ranks_per_node(base.hydra.launcher)
        groups: dict[str, tuple[list[list[str]], RunPlan]] = {}
        for job in jobs:
            run = _checked(job, lambda job=job: to_run_plan(_compose_job(job), files=False))
            inputs = plan_inputs(run, ranks, per_node)
            key = repr(
                (
                    inputs.trace_key(),
                    inputs.engine,
                    inputs.rollout,
                    inputs.device_bytes,
                    inputs.allocator_headroom,
                    inputs.gpus_per_node,
                    inputs.reference_dtype_bytes,
                    inputs.load_dtype_bytes,
                    run.cluster.gpu_memory_gib,
                )
            )
            groups.setdefault(key, ([], run))[0].append(job)
    out, ok = [], True
    for members, run in groups.values():
        plan = make_plan(plan_inputs(run, ranks, per_node))
        budget = run.cluster.gpu_memory_gib
        first = " ".join(members[0]) or "(defaults)"
        others = f" and {len(members) - 1} more with the same plan" if len(members) > 1 else ""
        out.append(f"job: {first}{others}")
        out.append(format_plan(plan, checked=budget is not None))
        request = memory_request_line(plan, base.hydra.launcher)
        out.append(request)
        ok = ok and not request.startswith("REFUSED")
        if budget is not None and not fits(plan):
            ok = False
            out.append("REFUSED: " + refusal(run, plan))
        out.append("")
    return "\n".join(out).rstrip(), ok


def memory_request_line(plan: Plan, launcher: DictConfig) -> str:
    """Whether the SLURM profile's memory request covers the plan's host peak with its margin (the
    check `quadrants.sweep` makes: launch/hydra_setup.py `check_host_memory`)."""
    mem_gb = launcher.get("mem_gb")
    if mem_gb is None or str(launcher.get("_target_", "")) != SLURM_LAUNCHER:
        return "(no SLURM memory request: launcher is not a SLURM profile)"
    try:
        check_host_memory(plan, launcher)
    except ValueError as err:
        return f"REFUSED: {err}"
    limit = float(mem_gb) * GiB
    needed = plan.host_per_node * (1 + HOST_MARGIN)
    return (
        f"hydra.launcher.mem_gb={mem_gb} (sbatch --mem, {limit / 1e9:.1f} GB a node) covers the "
        f"host peak + {HOST_MARGIN:.0%} ({needed / 1e9:.1f} GB), {limit / needed - 1:.0%} to spare"
    )


def main(argv: list[str] | None = None) -> None:
    try:
        report, ok = plan_command(list(sys.argv[1:] if argv is None else argv))
    except ValueError as err:
        sys.exit(f"quadrants.plan: invalid configuration.\n  {err}")
    print(report)
    sys.exit(0 if ok else 1)
