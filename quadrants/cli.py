"""`quadrants VERB [ARGS...]`: the console script (pyproject.toml `[project.scripts]`), one verb per
command, and `quadrants --help` lists them.

    quadrants sweep -m quadrant=PHR,NHR,PLR,NLR        # = python -m quadrants.sweep -m ...
    quadrants evaluate outputs/quadrants/s1a2b3c4/quadrant=PHR eval=paper
    quadrants sweep --help                             # the command's own help

A verb runs the `main` of its command line in launch/, the one its `python -m` alias runs, with
the process's arguments as that alias would see them: `sys.argv` is `["quadrants VERB", ARGS...]`,
so every command (Hydra's `-m`, `--cfg job`, `--help` and overrides included) reads ARGS exactly as
it reads them after `python -m quadrants.VERB`. The `python -m` forms keep working (docs/cli.md).
Nothing but the chosen command is imported: `quadrants --help` starts no torch.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

PROG = "quadrants"


@dataclass(frozen=True)
class Verb:
    """A command: the launch module whose `main` runs it, the `python -m` modules that run the
    same `main` (the first is the one the docs use), and one line of what it does."""

    module: str
    aliases: tuple[str, ...]
    summary: str


VERBS: dict[str, Verb] = {
    "sweep": Verb(
        "quadrants.launch.sweep",
        ("quadrants.sweep",),
        "one run, or a Hydra multirun with -m (locally or on SLURM)",
    ),
    "submit": Verb(
        "quadrants.launch.submit",
        ("quadrants.submit",),
        "submit a sweep to SLURM as one job array and return at once",
    ),
    "status": Verb(
        "quadrants.launch.status",
        ("quadrants.status",),
        "a submitted sweep's SLURM states and latest metrics",
    ),
    "plan": Verb(
        "quadrants.launch.memory_plan",
        ("quadrants.plan",),
        "the memory plan of a sweep's runs, per GPU and per phase",
    ),
    "distributed": Verb(
        "quadrants.launch.distributed_main",
        ("quadrants.distributed_main",),
        "one run over several ranks (started by torchrun or srun)",
    ),
    "evaluate": Verb(
        "quadrants.launch.evaluate",
        ("quadrants.evaluate",),
        "a run, checkpoint, model directory, tiny or hub id on benchmarks",
    ),
    "probe": Verb(
        "quadrants.launch.probe",
        ("quadrants.probe",),
        "measure the hindsight credit of response tokens by branching rollouts",
    ),
    "counterfactual": Verb(
        "quadrants.launch.counterfactual",
        ("quadrants.counterfactual",),
        "paired one-step counterfactuals of a run's checkpoint, one update per arm",
    ),
    "analysis": Verb(
        "quadrants.launch.analysis_command",
        ("analysis", "quadrants.analysis"),
        "a study's tables, figures and report from MLflow; also power, export",
    ),
    "export": Verb(
        "quadrants.launch.export",
        ("quadrants.export",),
        "a run's checkpoint as a save_pretrained model folder",
    ),
    "data": Verb(
        "quadrants.launch.data",
        ("quadrants.data",),
        "list, download or import the benchmark and training data files",
    ),
    "tracking": Verb(
        "quadrants.launch.tracking",
        ("quadrants.tracking",),
        "deliver RUN_DIR: send a run's undelivered records to its MLflow store",
    ),
}


def usage() -> str:
    """`quadrants --help`: the verbs, one line each."""
    width = max(map(len, VERBS))
    lines = [
        f"usage: {PROG} VERB [ARGS...]   ({PROG} VERB --help: the command's own help)",
        "",
        "Token-level credit assignment in RLVR. The verbs (each also runs as `python -m MODULE`):",
        "",
    ]
    lines += [f"  {name:<{width}}  {verb.summary}" for name, verb in VERBS.items()]
    lines += ["", "See docs/cli.md."]
    return "\n".join(lines)


def refusal(name: str) -> str:
    """The message for a verb that is not one."""
    close = difflib.get_close_matches(name, VERBS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"{PROG}: unknown command {name!r}{hint}; the commands are {', '.join(VERBS)}. "
        f"`{PROG} --help` says what each does"
    )


def main(argv: list[str] | None = None) -> int | None:
    """Run the verb `argv[0]` (default: the process's arguments) with the rest of `argv` as the
    command's arguments; its `main`'s return value (an exit status, or None) is returned."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    verb = VERBS.get(name)
    if verb is None:
        print(refusal(name), file=sys.stderr)
        return 2
    # the command reads sys.argv[1:] as it does after `python -m <alias>`; argv[0] names the verb
    # in its usage lines (argparse's prog, Hydra's shell-completion help)
    sys.argv = [f"{PROG} {name}", *rest]
    return importlib.import_module(verb.module).main()


if __name__ == "__main__":
    sys.exit(main())
