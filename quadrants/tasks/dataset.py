"""Training on verifiable problems from a dataset: `task=dataset` and its presets
(deepscaler, gsm8k, math).

Rows come from a local JSONL or Parquet file, a directory of them, or (``hub=``) the Hugging Face
Hub through `datasets` (imported lazily; `pip install datasets`, a machine with network). A row
gives its problem and gold answer under `problem_key` / `answer_key`; nested keys are dotted paths,
with list indices as numbers: verl-format files keep the gold under ``reward_model.ground_truth``
and the user turn under ``prompt.0.content``. The gold goes through one of the benchmark loaders'
normalisations (`benchmarks.GOLD_RULES`: plain, number, aime, gsm8k, boxed, olympiad). Rows with an
empty answer are skipped and counted.

Splits: the held-out problems are a named split (`heldout_split`, Hub), a file (`heldout_path`), or
else the last `heldout_size` problems after a shuffle seeded by `split_seed`; the rest is the
training pool. A step draws its prompts with the step-seeded `random.Random` the loop hands in
(without replacement within a step), so a resumed run draws exactly what the uninterrupted one did.

Decontamination: a row whose normalised problem text (case-folded, whitespace collapsed) equals a
problem of an evaluation benchmark is dropped before the split. `decontaminate` names the
benchmarks (None = every known benchmark whose local file is there; [] = off); the training run
adds the benchmarks it evaluates on, logs the count and tags the run `quadrants.decontaminated`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from quadrants.tasks.base import Problem
from quadrants.tasks.benchmarks import (
    DATA_ENV_VAR,
    GOLD_RULES,
    default_data_dir,
    known_benchmarks,
    load_benchmark,
    normalise_gold,
)
from quadrants.tasks.read_log import note_read

__all__ = ["DatasetTask", "lookup", "normalise_text", "problem_hash", "read_rows"]

log = logging.getLogger(__name__)

_SUFFIXES = (".jsonl", ".json", ".parquet")
_SPACES = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """The form problems are compared in for decontamination: case-folded, whitespace collapsed."""
    return _SPACES.sub(" ", text).strip().casefold()


def lookup(row: dict[str, Any], key: str) -> Any:
    """`row[a][b]...` for the dotted key ``a.b...`` (numbers index lists);
    KeyError names what exists."""
    value: Any = row
    walked: list[str] = []
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif (
            isinstance(value, (list, tuple))
            and part.lstrip("-").isdigit()
            and -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            where = ".".join(walked) or "the row"
            have = sorted(value) if isinstance(value, dict) else f"a {type(value).__name__}"
            raise KeyError(f"no key {part!r} in {where} (it has {have})")
        walked.append(part)
    return value


def problem_hash(text: str) -> str:
    """A stable id of a problem without one: `h` + the first 12 hex digits of the SHA-256 of its
    normalised text (`normalise_text`), so reordering, re-splitting or re-spacing the copy keeps
    it."""
    return "h" + hashlib.sha256(normalise_text(text).encode()).hexdigest()[:12]


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES)
        if not files:
            raise FileNotFoundError(f"no .jsonl/.json/.parquet files in {path}")
        return files
    return [path]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """All rows of a JSONL/JSON-lines or Parquet file, or of every such file in
    a directory (sorted)."""
    rows: list[dict[str, Any]] = []
    for file in _files(path):
        note_read(file)
        if file.suffix == ".parquet":
            import pandas as pd

            frame = pd.read_parquet(file)
            rows.extend(_plain(record) for record in frame.to_dict(orient="records"))
        else:
            rows.extend(row for _, row in json_rows(file))
    return rows


def json_rows(file: Path, key: str = "task.params.path") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSON-lines file, blank lines skipped; a line that is not a JSON
    object raises ValueError naming `key`, the file and the line."""
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ValueError(
                    f"{key}: {file}, line {number} is not valid JSON ({err}); a file cut short "
                    "ends in a partial line. Fix: repair or remove that line"
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{key}: {file}, line {number} is a JSON {type(row).__name__}, not an object "
                    "with the problem and answer fields. Fix: one JSON object per line"
                )
            yield number, row


_CHECKED: dict[tuple[str, int, int, tuple[str, ...]], None] = {}


def check_rows(path: Path, fields: Sequence[str], key: str = "task.params.path") -> None:
    """Compose-time check of a local dataset: every line of its JSONL files parses and has every
    (dotted) field; a Parquet file has their top-level columns. Raises ValueError naming `key`, the
    file and the line. A file checked unchanged before is not read again (a sweep's jobs share
    it)."""
    for file in _files(path):
        stat = file.stat()
        memo = (str(file.resolve()), stat.st_mtime_ns, stat.st_size, tuple(fields))
        if memo in _CHECKED:
            continue
        if file.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq  # pandas' Parquet engine, when it is pyarrow
            except ImportError:
                continue  # the rows are checked when the run reads them
            columns = pq.read_schema(file).names
            missing = [f for f in fields if f.split(".")[0] not in columns]
            if missing:
                raise ValueError(
                    f"{key}: {file} has no column {missing[0].split('.')[0]!r} (its columns: "
                    f"{columns}). Fix: set task.params.problem_key / answer_key / id_key to its "
                    "columns (dotted for nested fields)"
                )
        else:
            for number, row in json_rows(file, key):
                for field in fields:
                    try:
                        lookup(row, field)
                    except KeyError as err:
                        raise ValueError(
                            f"{key}: {file}, line {number}: {err.args[0]}. Fix: set "
                            "task.params.problem_key / answer_key / id_key to fields the rows "
                            "have (dotted for nested fields)"
                        ) from None
        _CHECKED[memo] = None


def _plain(value: Any) -> Any:
    """Parquet nests as numpy arrays; make them lists so keys and golds read like JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def resolve_path(path: str, data_dir: str | None = None) -> Path:
    """`path` as given if it exists, else relative to the data directory ($QUADRANTS_DATA)."""
    given = Path(path).expanduser()
    if given.exists():
        return given
    root = Path(data_dir).expanduser() if data_dir else default_data_dir()
    candidate = root / path
    if candidate.exists():
        return candidate
    from quadrants.tasks.data_files import fetch_command, file_for_path

    entry = file_for_path(path)
    fetch = f" Run {fetch_command(entry)}; or set" if entry else " Set"
    raise FileNotFoundError(
        f"task.params.path: no dataset file or directory at {given}"
        + ("" if given.is_absolute() else f" nor at {candidate}")
        + f".{fetch} task.params.path to a JSONL/Parquet file (or a directory of them), or set "
        f"${DATA_ENV_VAR} (or task.params.data_dir) to the directory it is relative to; on a "
        "machine with network, task.params.hub=<dataset id> reads it from the Hugging Face Hub."
    )


def _hub_rows(hub: str, config: str | None, split: str) -> list[dict[str, Any]]:
    try:
        import datasets  # optional: only the Hub path needs it
    except ImportError as error:
        raise ImportError(
            f"task.params.hub={hub!r} needs the `datasets` package (pip install datasets) and "
            "network; or point task.params.path at a local copy"
        ) from error
    return [dict(row) for row in datasets.load_dataset(hub, config, split=split)]


class DatasetTask:
    """Verifiable problems from a dataset (see the module docstring).

    Args:
        heldout_size: held-out problems carved from the shuffled rows (ignored
            with heldout_split/_path).
        path: local file or directory (absolute, or relative to `data_dir` / $QUADRANTS_DATA).
        hub, hub_config, split: the Hub dataset and its training split (when `path` is None).
        problem_key, answer_key: dotted keys of the problem text and the gold answer.
        id_key: dotted key of a stable row id; None = the row's index in the file. A row
            without it (the Hub's DeepScaleR-Preview carries only problem, answer and solution,
            while our offline subset has `index`) gets `h<12 hex digits>`, a hash of its
            normalised problem text: stable under any reordering or re-split of the copy, and
            never equal to a numeric index.
        gold: the gold normalisation, one of `benchmarks.GOLD_RULES`.
        strip_suffix: text removed from the end of every problem (e.g. an
            instruction the file carries).
        heldout_split: Hub split to hold out. heldout_path: a local file to hold out.
        split_seed: seed of the shuffle that carves the held-out problems.
        decontaminate: benchmarks whose problems are dropped; None = all with a
            local file; [] = off.
        data_dir: directory relative paths are read from; None = $QUADRANTS_DATA.
        name: the task's name in metric keys and logs.
    """

    def __init__(
        self,
        heldout_size: int,
        *,
        path: str | None = None,
        hub: str | None = None,
        hub_config: str | None = None,
        split: str = "train",
        problem_key: str = "problem",
        answer_key: str = "answer",
        id_key: str | None = None,
        gold: str = "plain",
        strip_suffix: str | None = None,
        heldout_split: str | None = None,
        heldout_path: str | None = None,
        split_seed: int = 0,
        decontaminate: Sequence[str] | None = None,
        data_dir: str | None = None,
        name: str = "dataset",
    ) -> None:
        if gold not in GOLD_RULES:
            raise ValueError(
                f"task.params.gold={gold!r} is unknown; choose one of {list(GOLD_RULES)}"
            )
        if (path is None) == (hub is None):
            raise ValueError(
                "task.params: give exactly one of path (a local file or directory) "
                "or hub (a dataset id)"
            )
        if heldout_split is not None and hub is None:
            raise ValueError(
                "task.params.heldout_split names a Hub split; with a local path use heldout_path"
            )
        self.name = name
        self.prompt_format = None  # `prompt=auto` renders it with the model's chat template
        self._keys = dict(problem_key=problem_key, answer_key=answer_key, id_key=id_key)
        self._gold = gold
        self._strip_suffix = strip_suffix
        self.skipped_empty = 0
        if path is not None:
            source = resolve_path(path, data_dir)
            rows = self._problems(read_rows(source), str(source))
        else:
            rows = self._problems(_hub_rows(hub, hub_config, split), f"{hub}:{split}")
        held: list[Problem] | None = None
        if heldout_path is not None:
            held_source = resolve_path(heldout_path, data_dir)
            held = self._problems(read_rows(held_source), str(held_source))
        elif heldout_split is not None:
            held = self._problems(
                _hub_rows(hub, hub_config, heldout_split), f"{hub}:{heldout_split}"
            )
        banned = _benchmark_texts(decontaminate, data_dir)
        self.decontaminated = sum(normalise_text(p.prompt) in banned for p in rows)
        rows = [p for p in rows if normalise_text(p.prompt) not in banned]
        if held is None:
            order = list(range(len(rows)))
            random.Random(split_seed).shuffle(order)
            if not 0 <= heldout_size < len(order):
                raise ValueError(
                    f"task.heldout_size={heldout_size} leaves no training problems: the dataset "
                    f"has {len(order)} usable rows"
                )
            cut = len(order) - heldout_size
            self._train = [rows[i] for i in order[:cut]]
            self._heldout = [rows[i] for i in order[cut:]]
        else:
            held_texts = {normalise_text(p.prompt) for p in held}
            self._train = [p for p in rows if normalise_text(p.prompt) not in held_texts]
            self._heldout = held
        if not self._train:
            raise ValueError(f"task {name}: no training problems left")
        log.info(
            "task %s: %d training and %d held-out problems; %d rows without an answer skipped, "
            "%d dropped as benchmark problems (decontamination)",
            name,
            len(self._train),
            len(self._heldout),
            self.skipped_empty,
            self.decontaminated,
        )

    def _problems(self, rows: Iterable[dict[str, Any]], where: str) -> list[Problem]:
        """Every row as a Problem: the one row reader of local files and Hub splits alike."""
        problems = []
        hashed = 0
        id_key = self._keys["id_key"]
        for index, row in enumerate(rows):
            try:
                text = lookup(row, self._keys["problem_key"])
                answer = lookup(row, self._keys["answer_key"])
                key: Any = index
                if id_key is not None:
                    try:
                        key = lookup(row, id_key)
                    except KeyError:
                        key, hashed = problem_hash(str(text)), hashed + 1
            except KeyError as error:
                raise KeyError(
                    f"{where}, row {index}: {error.args[0]}; set task.params.problem_key / "
                    "answer_key / id_key to keys the rows have"
                ) from None
            gold = normalise_gold(answer, self._gold)
            if not gold:
                self.skipped_empty += 1
                continue
            text = str(text).strip()
            if self._strip_suffix and text.endswith(self._strip_suffix.strip()):
                text = text[: -len(self._strip_suffix.strip())].rstrip()
            problems.append(Problem(id=f"{self.name}/{key}", prompt=text, answer=gold))
        if hashed:
            log.info(
                "%s: %d rows without %r (task.params.id_key): their ids are hashes of their "
                "problem text",
                where,
                hashed,
                id_key,
            )
        return problems

    def __len__(self) -> int:
        return len(self._train)

    def keep_only(self, keep: Callable[[Problem], bool]) -> tuple[int, int]:
        """Drop the training and held-out problems `keep` refuses (the prompt-length limit,
        tasks/prompt_length.py); returns how many of each were dropped."""
        train = [problem for problem in self._train if keep(problem)]
        heldout = [problem for problem in self._heldout if keep(problem)]
        dropped = (len(self._train) - len(train), len(self._heldout) - len(heldout))
        if not train:
            raise ValueError(f"task {self.name}: no training problems left")
        self._train, self._heldout = train, heldout
        return dropped

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """`n` distinct training problems drawn with `rng` (the loop seeds it per step)."""
        if n > len(self._train):
            raise ValueError(
                f"train.prompts_per_step={n} exceeds the {len(self._train)} training problems of "
                f"task {self.name}"
            )
        return rng.sample(self._train, n)

    def heldout(self, n: int | None = None) -> list[Problem]:
        """The first `n` held-out problems (all when None), the same on every call."""
        return list(self._heldout if n is None else self._heldout[:n])


def _benchmark_texts(names: Sequence[str] | None, data_dir: str | None) -> set[str]:
    """Normalised problem texts of the named benchmarks (None = every one with a local file)."""
    explicit = names is not None
    texts: set[str] = set()
    for name in known_benchmarks() if names is None else names:
        if name not in known_benchmarks():
            raise ValueError(
                f"task.params.decontaminate: unknown benchmark {name!r}; known: "
                f"{known_benchmarks()}"
            )
        try:
            benchmark = load_benchmark(name, data_dir=data_dir)
        except FileNotFoundError:
            if explicit:
                raise
            log.warning("decontamination: no local copy of %s, not checked against it", name)
            continue
        texts.update(normalise_text(item.question) for item in benchmark.items)
    return texts
