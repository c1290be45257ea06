"""Entry point: `python -m quadrants.probe TARGET [overrides...]` — measure
hindsight credit by branching.

    # the newest checkpoint of a run
    python -m quadrants.probe outputs/quadrants/s1a2b3c4/quadrant=PHR
    # one checkpoint
    python -m quadrants.probe outputs/.../quadrant=PHR/checkpoints/step_0000040
    # the embedded policy
    python -m quadrants.probe tiny probe.positions=16 probe.continuations=16
    # print the config, run nothing
    python -m quadrants.probe tiny --cfg

TARGET is resolved as `python -m quadrants.evaluate` resolves it (quadrants.eval.target); overrides
are those of the training tree (`probe.*`, `rollout.*`, `tracking=server`, `seed=`).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m quadrants.probe",
        description="Measure the hindsight credit I(o_t; r | s_t) of response tokens by "
        "branching rollouts; logs an MLflow run (quadrants.role=probe), credit.csv and "
        "figures. See docs/probe.md.",
    )
    parser.add_argument("target", help="run dir | checkpoint dir | model dir | tiny | hub id")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides, e.g. probe.positions=16 probe.continuations=8",
    )
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from quadrants.launch.evaluate import prepare

    try:
        cfg, target = prepare(args.target, list(args.overrides))
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors too; shown trimmed, like a sweep's
        message = str(err).split("\nConfig search path:")[0].strip()
        sys.exit(f"quadrants: invalid probe, nothing was generated.\n  {message}")
    if args.cfg:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(OmegaConf.structured(cfg.probe)))
        return
    from quadrants.probe.runner import run_probe

    run_probe(cfg, target)


if __name__ == "__main__":
    main()
