"""The data sets of the data home: what each file is, where it comes from, whether a copy is whole.

The data home (`quadrants.home.default_data_dir`: ``$QUADRANTS_DATA``, else
``~/.cache/quadrants/data``) holds one sub-directory per data set in the layout the loaders read.
`CATALOGUE` records, for every benchmark (`quadrants.tasks.benchmarks`) and training set
(`quadrants.tasks.DATASET_PRESETS`) that has a file there, its path, its number of rows and the
sha256 of the reference copy (the copies the paper's numbers were measured on; their origins are
in `DataFile.origin`), or no checksum where no reference copy could be checked (AMC: only its row
count is recorded, and every complete copy is "another copy"). `check` compares a file against
that record; `import_file` copies a file a user brought, after validating it; `download` fetches
the Hugging Face Hub copy with `datasets` and writes it in the same layout. A copy that is not
the reference copy (a Hub download, an import) gets a ``<file>.origin.json`` record beside it, so
that `check` can tell it from a file changed since.

``python -m quadrants.data`` (`quadrants.launch.data`) is the command line over this module.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quadrants.home import DATA_ENV, default_data_dir
from quadrants.tasks.benchmarks import HubSource, check_row, get_spec, load_benchmark

__all__ = [
    "CATALOGUE",
    "COMMAND",
    "DataFile",
    "DataUnavailable",
    "FileStatus",
    "check",
    "download",
    "fetch_command",
    "file_for_path",
    "get_file",
    "import_file",
    "write_rows",
]

COMMAND = "python -m quadrants.data"
"""The command line over this module, as error messages name it."""

ORIGIN_SUFFIX = ".origin.json"


class DataUnavailable(RuntimeError):
    """A data set could not be fetched or imported; the message says what to run where."""


@dataclass(frozen=True)
class DataFile:
    """One file of the data home.

    Attributes:
        name: the name `python -m quadrants.data` takes (a benchmark's name, or ``<task>_train``).
        relative: path under the data home, as the loader reads it.
        rows: rows of the reference copy (non-blank JSON lines).
        sha256: checksum of the reference copy; None = none recorded (no copy could be checked
            offline): a file with the recorded rows is accepted as another copy.
        kind: ``"benchmark"`` (evaluation) or ``"training"``.
        used_by: the config that reads it (``eval.benchmarks.aime24``, ``task=gsm8k``).
        origin: where the reference copy comes from.
        hub: the Hugging Face Hub copy `download` fetches; None = not on the Hub in this form.
        required: row fields every row has (one of each tuple; the value may be empty: dsr_sub
            row 265 has an empty answer, which the task skips).
        parquet: row -> loader row, when `import_file` accepts the verl Parquet file this was
            derived from (DeepScaleR's subset); None = JSON lines only.
    """

    name: str
    relative: str
    rows: int
    sha256: str | None
    kind: str
    used_by: str
    origin: str
    hub: HubSource | None
    required: tuple[tuple[str, ...], ...]
    parquet: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


_QWEN_EVAL = "QwenLM/Qwen2.5-Math @ a45202bd, evaluation/data/{}/test.jsonl (MIT)"
# The instruction suffix of DeepScaleR's verl prompts, cut from the problem text of dsr_sub.jsonl
DSR_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."


def _dsr_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A verl row of One-Shot-RLVR's dsr_sub.parquet as the deepscaler task reads it."""
    prompt = row["prompt"][0]["content"]
    if not prompt.endswith(DSR_SUFFIX):
        raise ValueError(f"prompt without the DeepScaleR instruction suffix: {prompt[-80:]!r}")
    return {
        "problem": prompt[: -len(DSR_SUFFIX)],
        "answer": row["reward_model"]["ground_truth"],
        "index": int(row["extra_info"]["index"]),
    }


def _benchmark(name: str, rows: int, sha256: str | None, origin: str, required) -> DataFile:
    spec = get_spec(name)
    return DataFile(
        name=name,
        relative=spec.local_file,
        rows=rows,
        sha256=sha256,
        kind="benchmark",
        used_by=f"eval.benchmarks.{name}",
        origin=origin,
        hub=spec.hub,
        required=required,
    )


CATALOGUE: dict[str, DataFile] = {
    entry.name: entry
    for entry in (
        _benchmark(
            "aime24",
            30,
            "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac",
            _QWEN_EVAL.format("aime24"),
            (("problem",), ("answer",)),
        ),
        _benchmark(
            "aime25",
            30,
            "4613b7d3b5346f007625969f4380d932d6a2618fdcc9b89e5d39c7fbddc074b8",
            "ypwang61/One-Shot-RLVR @ 21ed529e, Qwen2.5-Eval/evaluation/data/aime25/test.jsonl",
            (("problem",), ("answer",)),
        ),
        _benchmark(
            "amc",
            83,  # the Hub's dataset viewer: 83 rows, split train
            None,  # no copy of the Hub's file could be checked offline: no checksum recorded
            "hub AI-MO/aimo-validation-amc, split train (Apache-2.0): AMC 2022 and 2023 problems, "
            "the paper's AMC column; `download amc` writes it",
            (("problem",), ("answer",)),
        ),
        _benchmark(
            "math500",
            500,
            "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
            "hkust-nlp/simpleRL-reason @ cf1c7858, "
            "examples/simplelr_math_eval/data/math500/test.jsonl (MIT)",
            (("problem",), ("answer",)),
        ),
        _benchmark(
            "minerva",
            272,
            "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2",
            _QWEN_EVAL.format("minerva_math"),
            (("problem", "question"), ("solution", "answer")),
        ),
        _benchmark(
            "olympiadbench",
            675,
            "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416",
            _QWEN_EVAL.format("olympiadbench"),
            (("question",), ("final_answer",)),
        ),
        _benchmark(
            "amc23",
            40,
            "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4",
            _QWEN_EVAL.format("amc23"),
            (("problem", "question"), ("answer",)),
        ),
        _benchmark(
            "gsm8k",
            1319,
            "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
            "openai/grade-school-math @ 3101c7d5, grade_school_math/data/test.jsonl (MIT)",
            (("question",), ("answer",)),
        ),
        DataFile(
            name="gsm8k_train",
            relative="gsm8k/train.jsonl",
            rows=7473,
            sha256="17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
            kind="training",
            used_by="task=gsm8k",
            origin="openai/grade-school-math @ 3101c7d5, grade_school_math/data/train.jsonl (MIT)",
            hub=HubSource("openai/gsm8k", "main", "train"),
            required=(("question",), ("answer",)),
        ),
        DataFile(
            name="dsr_sub",
            relative="dsr_sub/dsr_sub.jsonl",
            rows=1209,
            sha256="6ac8d25a93a130fbd679610801d73eea40ecf0341ff61f7d1a1c86c0e70c7636",
            kind="training",
            used_by="task=deepscaler (offline)",
            origin="derived from ypwang61/One-Shot-RLVR @ 21ed529e, "
            "data/train/one_shot_rlvr/dsr_sub.parquet (Apache-2.0): the prompt without its "
            "instruction suffix, the ground truth, the index",
            hub=None,  # a random subset of DeepScaleR; the Hub has the full 40k set only
            required=(("problem",), ("answer",)),
            parquet=_dsr_row,
        ),
    )
}
"""Every file of the data home, by name: benchmarks in the paper's order, then training sets."""


def get_file(name: str) -> DataFile:
    """The catalogue entry `name`; an unknown name lists the known ones."""
    if name not in CATALOGUE:
        raise ValueError(f"unknown data set {name!r}; known: {list(CATALOGUE)}")
    return CATALOGUE[name]


def file_for_path(relative: str) -> DataFile | None:
    """The catalogue entry whose file is `relative` (as a loader names it), or None."""
    return next((entry for entry in CATALOGUE.values() if entry.relative == relative), None)


def fetch_command(entry: DataFile) -> str:
    """What to run to put `entry` into the data home (named by missing-file errors)."""
    if entry.hub is not None:
        return (
            f"`{COMMAND} download {entry.name}` on a machine with network (then copy the data "
            f"home over, or `{COMMAND} import {entry.name} FILE` here)"
        )
    return f"`{COMMAND} import {entry.name} FILE` with a copy of it ({entry.origin})"


# --- checking a copy ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStatus:
    """What `check` found.

    Attributes:
        entry: the catalogue entry.
        path: where the file is (or would be).
        state: ``"missing"``, ``"ok"`` (the reference copy), ``"other copy"`` (all rows there,
            written by `download` or `import_file`, see `note`), ``"incomplete"`` (a row count
            other than the recorded one) or ``"changed"`` (all rows, but neither the reference
            checksum nor the one recorded when it was written).
        rows: rows found (0 when missing).
        note: for another copy, where it came from.
    """

    entry: DataFile
    path: Path
    state: str
    rows: int
    note: str = ""

    @property
    def usable(self) -> bool:
        return self.state in ("ok", "other copy")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _count_rows(path: Path) -> int:
    with path.open(encoding="utf-8") as lines:
        return sum(1 for line in lines if line.strip())


def _origin_path(path: Path) -> Path:
    return path.with_name(path.name + ORIGIN_SUFFIX)


def check(name: str, data_dir: str | Path | None = None) -> FileStatus:
    """Compare data set `name`'s file in `data_dir` (default: the data home) with its record."""
    entry = get_file(name)
    path = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    path = path / entry.relative
    if not path.is_file():
        return FileStatus(entry, path, "missing", 0)
    rows = _count_rows(path)
    if rows != entry.rows:
        return FileStatus(entry, path, "incomplete", rows, f"{entry.rows} rows expected")
    sha256 = _sha256(path)
    if sha256 == entry.sha256:
        return FileStatus(entry, path, "ok", rows)
    origin = _origin_path(path)
    if origin.is_file():
        record = json.loads(origin.read_text(encoding="utf-8"))
        if record.get("sha256") == sha256:
            return FileStatus(entry, path, "other copy", rows, str(record.get("source", "")))
    elif entry.sha256 is None:  # nothing to compare with: the row count is all that is checked
        return FileStatus(entry, path, "other copy", rows, "no reference checksum recorded")
    return FileStatus(entry, path, "changed", rows, "checksum differs from the recorded one")


# --- writing a copy -----------------------------------------------------------------------------


def _validate_rows(
    entry: DataFile,
    rows: list[dict[str, Any]],
    where: str,
    lines: Sequence[int] | None = None,
) -> None:
    """Every row has the fields the loader reads, and a benchmark's rows make its problems.
    `lines`: each row's line in the file `where` (1-based, blank lines counted), named by the
    message; without them (a Hub table, Parquet) a row is named by its 0-based index."""

    def at(index: int) -> str:
        return f"line {lines[index]} of {where}" if lines is not None else f"row {index} of {where}"

    for index, row in enumerate(rows):
        for fields in entry.required:
            if not any(row.get(field) is not None for field in fields):
                raise ValueError(
                    f"{entry.name}: {at(index)} has none of the fields {list(fields)}; "
                    f"is this the {entry.name} file ({entry.origin})?"
                )
    if entry.kind == "benchmark":  # every row must give a problem and a gold the grader reads
        for index, row in enumerate(rows):
            try:
                check_row(entry.name, index, row)
            except (ValueError, KeyError) as error:
                raise ValueError(f"{entry.name}: {at(index)} does not load: {error}") from None
        with tempfile.TemporaryDirectory() as scratch:
            target = Path(scratch) / entry.relative
            _write_jsonl(target, rows)
            try:
                load_benchmark(entry.name, data_dir=scratch)
            except (ValueError, KeyError) as error:
                raise ValueError(f"{entry.name}: {where} does not load: {error}") from None


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]], progress: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if progress:
        from quadrants.progress import Progress

        logger = logging.getLogger("quadrants.data")
        rows = Progress(rows, desc=f"writing {path.name}", unit="row", logger=logger)
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(dict(row), ensure_ascii=False, default=str) + "\n")


def _install(entry: DataFile, source: Path, data_dir: Path, origin: str | None) -> FileStatus:
    """Move the validated file `source` into place and record where it came from."""
    target = data_dir / entry.relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), target)
    record = _origin_path(target)
    sha256 = _sha256(target)
    if sha256 == entry.sha256:
        record.unlink(missing_ok=True)
    else:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        record.write_text(
            json.dumps({"source": origin, "sha256": sha256, "written": stamp}, indent=1) + "\n",
            encoding="utf-8",
        )
    return check(entry.name, data_dir)


def write_rows(
    name: str,
    rows: Iterable[Mapping[str, Any]],
    data_dir: str | Path | None = None,
    *,
    origin: str,
    where: str | None = None,
    progress: bool = False,
) -> FileStatus:
    """Write `rows` (a `datasets.Dataset`, or any mappings) as data set `name`'s file, validated.

    The rows are written as JSON lines (one object per line, UTF-8) to a scratch file, checked
    (the recorded row count, the fields the loader reads, and for a benchmark that it loads), then
    moved into the data home; `origin` is recorded beside a file that is not the reference copy.

    Raises:
        ValueError: an unknown name, a row count other than the recorded one, or rows the loader
            cannot read (the message names the data set and the problem).
    """
    entry = get_file(name)
    root = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    plain = [dict(row) for row in rows]
    where = where or origin
    if len(plain) != entry.rows:
        raise ValueError(
            f"{name}: {where} has {len(plain)} rows; the {name} file has {entry.rows}. "
            "Nothing was written."
        )
    _validate_rows(entry, plain, where)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        source = Path(scratch) / Path(entry.relative).name
        _write_jsonl(source, plain, progress=progress)
        return _install(entry, source, root, origin)


def _json_lines(name: str, given: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of the JSON-lines file `given` and the line each is on (1-based, blank lines
    skipped but counted, as an editor numbers them); ValueError naming the line that is not
    UTF-8, not JSON, or not an object. json's own position is within that one line, so its
    "line 1 column 13" is turned into the file's line and that column."""
    rows: list[dict[str, Any]] = []
    numbers: list[int] = []
    with given.open("rb") as raw:
        for number, data in enumerate(raw, 1):
            bad = f"{name}: {given} is not a JSON-lines file: line {number}"
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{bad} is not UTF-8 text ({error.reason} at byte {error.start} of the line). "
                    "Nothing was imported."
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{bad}, column {error.colno} is not valid JSON ({error.msg}); a file cut "
                    "short ends in a partial line. Fix: repair or remove that line. Nothing was "
                    "imported."
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{bad} is a JSON {type(row).__name__}, not an object with the problem and "
                    "answer fields. Fix: one JSON object per line. Nothing was imported."
                )
            rows.append(row)
            numbers.append(number)
    return rows, numbers


def import_file(
    name: str, path: str | Path, data_dir: str | Path | None = None, *, progress: bool = False
) -> FileStatus:
    """Copy a file a user brought into the data home as data set `name`, after validating it.

    A JSON-lines file is copied byte for byte (so the reference copy keeps its checksum); for a
    data set with a `DataFile.parquet` conversion, a Parquet file is converted row by row.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: it is not a file of data set `name` (row count, fields, or it does not load).
    """
    entry = get_file(name)
    given = Path(path).expanduser()
    if not given.is_file():
        raise FileNotFoundError(f"{COMMAND} import {name}: no file at {given}")
    root = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    if given.suffix == ".parquet":
        if entry.parquet is None:
            raise ValueError(f"{name}: give the JSON-lines file ({entry.relative}), not Parquet")
        import pandas as pd  # a dependency of quadrants; reads Parquet through pyarrow

        table = pd.read_parquet(given)
        rows = [entry.parquet(row) for row in table.to_dict(orient="records")]
        return write_rows(
            name, rows, root, origin=f"imported from {given}", where=str(given), progress=progress
        )
    rows, lines = _json_lines(name, given)
    if len(rows) != entry.rows:
        raise ValueError(
            f"{name}: {given} has {len(rows)} rows; the {name} file has {entry.rows}. "
            "Nothing was imported."
        )
    _validate_rows(entry, rows, str(given), lines)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        copy = Path(scratch) / given.name
        shutil.copyfile(given, copy)
        return _install(entry, copy, root, f"imported from {given}")


# --- downloading from the Hub -------------------------------------------------------------------


def _offline_message(entry: DataFile, data_dir: Path, why: str) -> str:
    return (
        f"{entry.name}: could not download {entry.hub.path if entry.hub else entry.name} from "
        f"the Hugging Face Hub ({why}). On a machine with network, run `{COMMAND} download "
        f"{entry.name}` (it writes {entry.relative} under its data home, ${DATA_ENV} or "
        f"~/.cache/quadrants/data), then copy that file here and run `{COMMAND} import "
        f"{entry.name} FILE` (this machine's data home: {data_dir})."
    )


def download(
    name: str,
    data_dir: str | Path | None = None,
    *,
    load_dataset: Callable[..., Any] | None = None,
    progress: bool = False,
) -> FileStatus:
    """Fetch data set `name` from the Hugging Face Hub into the data home, in the loader's layout.

    Args:
        name: a catalogue name with a Hub copy (`DataFile.hub`).
        data_dir: the data home; default `quadrants.home.default_data_dir()`.
        load_dataset: ``datasets.load_dataset`` (the default; needs the ``hub`` extra and network).
        progress: show progress bars (the Hub download shows its own).

    Raises:
        DataUnavailable: no Hub copy, no `datasets`, or the download failed (offline); the message
            says which command to run where.
        ValueError: the Hub rows are not what the loader reads (see `write_rows`).
    """
    entry = get_file(name)
    root = Path(data_dir if data_dir is not None else default_data_dir()).expanduser()
    if entry.hub is None:
        raise DataUnavailable(
            f"{name} is not on the Hugging Face Hub in this form; get {entry.origin} and run "
            f"`{COMMAND} import {name} FILE`."
        )
    if load_dataset is None:
        try:
            from datasets import load_dataset  # the `hub` extra: pip install 'quadrants[hub]'
        except ImportError:
            raise DataUnavailable(
                f"{COMMAND} download needs the `datasets` package: pip install -e '.[hub]' (or "
                f"pip install 'datasets>=3.0'); or, on a machine that has it, run `{COMMAND} "
                f"download {name}` and `{COMMAND} import {name} FILE` here."
            ) from None
    hub = entry.hub
    try:
        table = load_dataset(hub.path, hub.config, split=hub.split)
    except Exception as error:  # noqa: BLE001 - offline, gated, moved: one message says what to do
        why = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
        raise DataUnavailable(_offline_message(entry, root, why)) from error
    source = f"hub {hub.path}" + (f" ({hub.config})" if hub.config else "") + f", split {hub.split}"
    return write_rows(name, table, root, origin=source, progress=progress)
