"""Reading back what the tracking sinks wrote (quadrants/tracking/sinks.py), as their own readers do.

- TensorBoard: tensorboard's `EventAccumulator` (tensorboard/backend/event_processing/
  event_accumulator.py), which also applies a writer's `purge_step` (its `_MaybePurgeOrphanedData`
  drops earlier events at or after the step of a restarted session).
- W&B offline runs: a `.wandb` file is a leveldb log (google/leveldb doc/log_format.md: 32 KiB
  blocks of records, each a 7-byte header crc32 u32, length u16, type u8 = FULL 1, FIRST 2,
  MIDDLE 3, LAST 4) after a 7-byte file header (`:W&B`, magic 0xBEE1, version), each record a
  `wandb_internal_pb2.Record`: wandb's reader of it (wandb/sdk/internal/datastore.py) is not shipped
  with wandb 0.31 (its Go core writes the file), so the format is read here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = 7


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every scalar in the event files under `directory`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def tensorboard_text(directory: Path, tag: str) -> str:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"tensors": 0})
    accumulator.Reload()
    (event,) = accumulator.Tensors(f"{tag}/text_summary")
    return event.tensor_proto.string_val[0].decode()


def _chunks(data: bytes) -> Iterator[bytes]:
    ident, magic, _version = struct.unpack("<4sHB", data[:_HEADER])
    assert ident == b":W&B" and magic == 0xBEE1, (ident, magic)
    position, pending = _HEADER, b""
    while position + _HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _HEADER:  # a block's trailer
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + _HEADER])
        if length == 0 and kind == 0:  # zero padding to the block's end
            position += left
            continue
        chunk = data[position + _HEADER : position + _HEADER + length]
        position += _HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk


def wandb_offline_run(run_dir: Path) -> dict[str, Any]:
    """The one offline W&B run under `run_dir/wandb`: its id, project, group and name, its config,
    its history rows (dicts with `_step`) and whether its exit record is written."""
    from wandb.proto import wandb_internal_pb2

    (path,) = (Path(run_dir) / "wandb").glob("offline-run-*/run-*.wandb")
    run: dict[str, Any] = {"config": {}, "history": [], "exited": False}
    for raw in _chunks(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(
                id=record.run.run_id,
                project=record.run.project,
                group=record.run.run_group,
                name=record.run.display_name,
            )
        elif kind == "config":
            run["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "exit":
            run["exited"] = True
        elif kind == "history":
            row = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            run["history"].append(row)
    return run
