"""Entry point: `python -m quadrants.data` — the data home's benchmark and training files.

    python -m quadrants.data list                       # what is there, complete or not
    python -m quadrants.data download aime24 math500    # from the Hub (network, the `hub` extra)
    python -m quadrants.data download --all             # every data set that has a Hub copy
    python -m quadrants.data import dsr_sub FILE        # a file brought by hand, validated

The data home is ``$QUADRANTS_DATA``, else ``~/.cache/quadrants/data`` (`quadrants.home`);
``--data-dir DIR`` names another. On an offline cluster: download on a machine with network, copy
the file (or the whole data home) over, then ``import`` it there (or point ``$QUADRANTS_DATA`` at
the copy). The module `quadrants.tasks.data_files` holds the records the files are checked against.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from quadrants.home import DATA_ENV, default_data_dir
from quadrants.tasks.data_files import (
    CATALOGUE,
    COMMAND,
    DataUnavailable,
    FileStatus,
    check,
    download,
    import_file,
)

__all__ = ["main", "status_table"]

_STATE_TEXT = {
    "ok": "ok",
    "other copy": "ok, not the reference copy",
    "missing": "MISSING",
    "incomplete": "INCOMPLETE",
    "changed": "CHANGED",
}


def status_table(statuses: list[FileStatus]) -> str:
    """One line per data set: name, kind, rows found / recorded, state, file, and where from."""
    lines = [f"{'name':<14} {'kind':<10} {'rows':>11}  {'state':<27} file"]
    for status in statuses:
        entry = status.entry
        rows = f"{status.rows}/{entry.rows}"
        state = _STATE_TEXT[status.state]
        lines.append(f"{entry.name:<14} {entry.kind:<10} {rows:>11}  {state:<27} {status.path}")
        if status.note:
            lines.append(f"{'':<14} {'':<10} {'':>11}  {status.note}")
    return "\n".join(lines)


def _list(data_dir: Path, given: bool) -> int:
    if given:
        where = ""
    elif os.environ.get(DATA_ENV):
        where = f" (${DATA_ENV})"
    else:
        where = f" (the default; ${DATA_ENV} names another)"
    print(f"data home: {data_dir}{where}\n")
    statuses = [check(name, data_dir) for name in CATALOGUE]
    print(status_table(statuses))
    print("\nwhere each comes from:")
    for entry in CATALOGUE.values():
        hub = "not on the Hub in this form"
        if entry.hub is not None:
            config = f" ({entry.hub.config})" if entry.hub.config else ""
            hub = f"Hub {entry.hub.path}{config}, split {entry.hub.split}"
        print(f"  {entry.name:<14} for {entry.used_by}; {hub}\n  {'':<14} {entry.origin}")
    missing = [s.entry.name for s in statuses if not s.usable]
    if missing:
        names = " ".join(n for n in missing if CATALOGUE[n].hub is not None)
        print(f"\nnot usable: {', '.join(missing)}.")
        if names:
            print(f"  fetch: {COMMAND} download {names}   (on a machine with network)")
        for name in missing:
            if CATALOGUE[name].hub is None:
                print(f"  {name}: {COMMAND} import {name} FILE   ({CATALOGUE[name].origin})")
        return 1
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line checked (the data set names included), nothing read or fetched
    (`main`; tests/unit/test_docs_commands.py parses every documented command with it)."""
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description="The benchmark and training files of the data home ($QUADRANTS_DATA, else "
        "~/.cache/quadrants/data): list them, download them from the Hugging Face Hub, or import "
        "a copy brought by hand. See docs/data.md.",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="another data home (default: $QUADRANTS_DATA)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="each data set, where it comes from, present and complete?")
    fetch = commands.add_parser("download", help="fetch from the Hugging Face Hub (network)")
    fetch.add_argument("names", nargs="*", metavar="NAME", help=f"of {list(CATALOGUE)}")
    fetch.add_argument("--all", action="store_true", help="every data set with a Hub copy")
    bring = commands.add_parser("import", help="copy a file brought by hand, validating it")
    bring.add_argument("name", metavar="NAME", help=f"one of {list(CATALOGUE)}")
    bring.add_argument("path", metavar="PATH", type=Path)
    args = parser.parse_args(argv)
    if args.command == "download":
        args.names = (
            [n for n, e in CATALOGUE.items() if e.hub is not None] if args.all else args.names
        )
        if not args.names:
            parser.error("download: name data sets (see `list`) or give --all")
        unknown = [n for n in args.names if n not in CATALOGUE]
        if unknown:
            parser.error(f"unknown data set(s) {unknown}; known: {list(CATALOGUE)}")
    if args.command == "import" and args.name not in CATALOGUE:
        parser.error(f"unknown data set {args.name!r}; known: {list(CATALOGUE)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    data_dir = (args.data_dir or default_data_dir()).expanduser()

    if args.command == "list":
        sys.exit(_list(data_dir, given=args.data_dir is not None))
    if args.command == "download":
        for name in args.names:
            try:
                status = download(name, data_dir, progress=True)
            except (DataUnavailable, ValueError) as error:
                sys.exit(f"quadrants.data: {error}")
            print(f"{name}: {_STATE_TEXT[status.state]}, {status.rows} rows -> {status.path}")
        return
    try:
        status = import_file(args.name, args.path, data_dir, progress=True)
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"quadrants.data: {error}")
    print(f"{args.name}: {_STATE_TEXT[status.state]}, {status.rows} rows -> {status.path}")
    if status.note:
        print(f"  {status.note}")


if __name__ == "__main__":
    main()
