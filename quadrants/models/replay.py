"""Decode replay: the update's forward takes its projection outputs from the decode that sampled the
batch, instead of multiplying again.

In an on-policy step the first optimizer step runs on the very weights the rollout has just sampled
with, over the very tokens the decode fed: every projection of that forward (q, k, v, o, gate, up,
down in every layer) was already computed once, one position per sequence at a time, by the fast
decode (quadrants/rollout/fast_decode.py). The decode records those outputs (`LinearOutputs`, laid
out as the batch's [prompt, response] columns) and the update's forward replays them: inside
`projections_replayed`, each projection returns its recorded output and back-propagates as the
linear map it is (ops/replayed_linear.py: input gradient g·W, weight gradient gᵀx, bias Σg, from the
input that the forward recomputes). Everything between the projections is computed as usual (norms,
rotary, attention, the SwiGLU product, the LM head and its log-prob/entropy reduction), so the graph
is the plain forward's with the projection outputs swapped for the decode's. Those agree with the
recomputed ones to float rounding (the decode multiplies one row per sequence, the forward all rows
at once), so the loss and gradient are the plain update's to float tolerance
(tests/unit/models/test_replay.py). What it saves is the forward's matrix multiplies of the model
body: about a third of the update's (docs/performance.md).

When it applies is decided by the step (quadrants/train/replay.py): the fast decode recorded the
batch with the trainer's own weights, and it is the first optimizer step after that rollout. Here
only what the module must be: every layer's projections plain `nn.Linear`s, no dropout, no
activation checkpointing (`replay_unsupported`).

Shape legend: **B** recorded sequences · **C** recorded columns (P prompt + the decode's token
limit) · **n** rows of one forward call · **L** columns of that call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from quadrants.models.linears import PLAIN_LINEARS
from quadrants.ops.replayed_linear import replayed_linear

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def projections(model: nn.Module) -> list[dict[str, nn.Module]]:
    """Per decoder layer, its projections by name (q_proj ... down_proj)."""
    return [
        {
            **{name: getattr(layer.self_attn, name) for name in ATTENTION},
            **{name: getattr(layer.mlp, name) for name in MLP},
        }
        for layer in model.model.layers
    ]


def replay_unsupported(model: nn.Module) -> str | None:
    """Why the update's forward of `model` cannot replay recorded projections (None: it can)."""
    body = getattr(model, "model", None)
    if body is None or not hasattr(body, "layers"):
        return "the model has no decoder layers at model.layers"
    try:
        layers = projections(model)
    except AttributeError as error:
        return f"a decoder layer lacks a projection ({error})"
    for index, layer in enumerate(layers):
        for name, module in layer.items():
            if type(module) not in PLAIN_LINEARS or type(module.weight) is not nn.Parameter:
                return f"layer {index} {name} is not a plain nn.Linear"
    if float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return "the attention has dropout (the update's forward would differ from the decode's)"
    if any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
        return "the model has dropout (the update's forward would differ from the decode's)"
    if checkpoints_activations(model):
        return "the model checkpoints activations (its backward recomputes the forward)"
    return None


def checkpoints_activations(model: nn.Module) -> bool:
    """transformers' activation checkpointing flag (`is_gradient_checkpointing` before v5)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(model)):
            return bool(getattr(model, name))
    return False


COLUMN_STEP = 32  # storage columns are allocated in multiples of this, so that it can be reused


def features(model: nn.Module) -> tuple[int, int, int, int, int]:
    """(q, k, v, hidden, intermediate) output features of a layer's projections."""
    first = projections(model)[0]
    return (
        first["q_proj"].out_features,
        first["k_proj"].out_features,
        first["v_proj"].out_features,
        first["o_proj"].out_features,
        first["gate_proj"].out_features,
    )


class OutputStorage:
    """Buffers that recorded outputs live in, in the model's dtype and on its device, zeroed once
    when allocated: [capacity, B, features] per layer and kind, column-major, so that a decode
    step's multiply writes one column of all the rows still decoding as one contiguous block; and
    `slots` [capacity, B] long, the row of a column's block that holds each sequence (the decode
    drops finished sequences, so later blocks hold fewer rows, in the decode's order).

    An engine keeps one and lends it to each rollout (`lend`): a rollout's outputs stay valid until
    the next one is lent, so that pages are not allocated and zeroed again at every step."""

    def __init__(self, model: nn.Module, rows: int, columns: int) -> None:
        q, k, v, hidden, intermediate = features(model)
        weight = next(model.parameters())
        capacity = -(-columns // COLUMN_STEP) * COLUMN_STEP
        self.rows, self.capacity, self.widths = rows, capacity, (q, k, v)
        self.dtype, self.device = weight.dtype, weight.device
        self.layers, self.features = len(model.model.layers), features(model)

        def buffers(width: int) -> list[Tensor]:
            return [
                torch.zeros(capacity, rows, width, dtype=self.dtype, device=self.device)
                for _ in range(self.layers)
            ]

        self.qkv, self.o = buffers(q + k + v), buffers(hidden)
        self.gate_up, self.down = buffers(2 * intermediate), buffers(hidden)
        self.slots = torch.empty(capacity, rows, dtype=torch.long, device=self.device)
        self.lent = 0  # how many rollouts it has been lent to

    @staticmethod
    def nbytes(model: nn.Module, rows: int, columns: int) -> int:
        """Bytes that the outputs of `rows` x `columns` positions of `model` take (the slots,
        8 bytes a position, not counted)."""
        q, k, v, hidden, intermediate = features(model)
        per_position = q + k + v + 2 * hidden + 2 * intermediate
        element = next(model.parameters()).element_size()
        capacity = -(-columns // COLUMN_STEP) * COLUMN_STEP
        return rows * capacity * per_position * element * len(model.model.layers)

    def fits(self, model: nn.Module, rows: int, columns: int) -> bool:
        """Whether a rollout of `rows` x `columns` positions of `model` can record here."""
        weight = next(model.parameters())
        return (
            self.rows == rows
            and self.capacity >= columns
            and (self.dtype, self.device) == (weight.dtype, weight.device)
            and self.layers == len(model.model.layers)
            and self.features == features(model)
        )

    def lend(self, prompt_ids: Tensor, columns: int) -> LinearOutputs:
        """The first `columns` columns, for the rollout of `prompt_ids` [B, P]; every earlier
        loan stops being valid. Every sequence starts in its own row of every column (slots =
        0..B−1); a position the new rollout does not write keeps finite values of no meaning (zeros,
        or an earlier output): only padding reads them."""
        self.lent += 1
        self.slots[:columns] = torch.arange(self.rows, device=self.device)

        def cut(buffers: list[Tensor]) -> list[Tensor]:
            return [buffer[:columns] for buffer in buffers]

        return LinearOutputs(
            qkv=cut(self.qkv),
            o=cut(self.o),
            gate_up=cut(self.gate_up),
            down=cut(self.down),
            slots=self.slots[:columns],
            prompt_ids=prompt_ids,
            widths=self.widths,
            storage=self,
            loan=self.lent,
        )


@dataclass(frozen=True)
class LinearOutputs:
    """What the decode's projections computed, per layer: the fused q-k-v output, o, the fused
    gate-up output and down, each [C, B, features] (views of an `OutputStorage`, column-major);
    column c is position c of the [left-padded prompt, response] layout (the update's), and
    sequence b's output at column c is in row `slots[c, b]` of that column. Positions the decode
    never fed (after a sequence stopped, its last token) hold finite values of no meaning.

    Attributes:
        slots: [C, B] long.
        prompt_ids: [B, P] long, the prompts they were recorded for (checked before a replay).
        widths: the q, k and v output features.
        storage, loan: where they live, and which loan of it they are (`current`).
    """

    qkv: list[Tensor]
    o: list[Tensor]
    gate_up: list[Tensor]
    down: list[Tensor]
    slots: Tensor
    prompt_ids: Tensor
    widths: tuple[int, int, int]
    storage: OutputStorage
    loan: int

    @property
    def columns(self) -> int:
        return self.qkv[0].shape[0]

    @property
    def current(self) -> bool:
        """False once the storage has been lent to a later rollout (these values are gone)."""
        return self.storage.lent == self.loan

    def slot(self, layer: int, name: str) -> tuple[Tensor, int, int]:
        """(buffer, first feature, end feature) holding projection `name` of `layer`."""
        q, k, v = self.widths
        intermediate = self.gate_up[layer].shape[-1] // 2
        return {
            "q_proj": (self.qkv[layer], 0, q),
            "k_proj": (self.qkv[layer], q, q + k),
            "v_proj": (self.qkv[layer], q + k, q + k + v),
            "o_proj": (self.o[layer], 0, self.o[layer].shape[-1]),
            "gate_proj": (self.gate_up[layer], 0, intermediate),
            "up_proj": (self.gate_up[layer], intermediate, 2 * intermediate),
            "down_proj": (self.down[layer], 0, self.down[layer].shape[-1]),
        }[name]

    def positions(self, rows: Tensor, start: int, stop: int) -> Tensor:
        """Where sequences `rows` [n] at columns [start, stop) are in a buffer flattened to
        [C·B, features]: [n, stop − start] long."""
        columns = torch.arange(start, stop, device=self.slots.device)  # [L]
        slots = self.slots[start:stop].index_select(1, rows.to(self.slots.device))  # [L, n]
        return (columns[:, None] * self.slots.shape[1] + slots).t()

    def read(self, layer: int, name: str, positions: Tensor) -> Tensor:
        """Projection `name` of `layer` at `positions` [n, L] (from `positions`): [n, L, out]."""
        buffer, first, end = self.slot(layer, name)
        flat = buffer.view(-1, buffer.shape[-1])[:, first:end]  # [C·B, out]
        return flat.index_select(0, positions.reshape(-1)).view(*positions.shape, end - first)

    def matches(self, prompt_ids: Tensor, columns: int) -> bool:
        """Whether these outputs are still held and were recorded for `prompt_ids` [B, P], over
        at least `columns`."""
        return (
            self.current
            and self.prompt_ids.shape == prompt_ids.shape
            and self.columns >= columns
            and bool(torch.equal(self.prompt_ids, prompt_ids.to(self.prompt_ids.device)))
        )


@contextmanager
def recording_prompts(model: nn.Module, outputs: LinearOutputs, copies: Tensor) -> Iterator[None]:
    """While inside, a forward of `model` over U distinct prompts [U, P] writes its projections'
    outputs into columns [0, P) of `outputs`, sequence b taking distinct prompt `copies[b]` (in its
    own row: the slots of a prompt column are 0..B−1)."""
    handles = []
    for index, layer in enumerate(projections(model)):
        for name, module in layer.items():
            buffer, first, end = outputs.slot(index, name)

            def hook(_module, _inputs, output, buffer=buffer, first=first, end=end) -> None:
                # [U, P, out] -> [P, B, out]
                buffer[: output.shape[1], :, first:end] = output.transpose(0, 1).index_select(
                    1, copies
                )

            handles.append(module.register_forward_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class Replay:
    """Recorded outputs and, for each row of the batch being computed, its recorded row."""

    outputs: LinearOutputs
    rows: Tensor  # [n] long

    def select(self, index: Tensor) -> Replay:
        """The replay of rows `index` of this one."""
        return Replay(self.outputs, self.rows[index.to(self.rows.device)])


@contextmanager
def projections_replayed(
    model: nn.Module, replay: Replay | None, start: int, stop: int
) -> Iterator[None]:
    """While inside, a forward of `model` over `replay.rows` x columns [start, stop) takes every
    projection's output from `replay` (None: the plain forward). A call of any other shape fails in
    its first projection."""
    if replay is None:
        yield
        return
    outputs = replay.outputs
    positions = outputs.positions(replay.rows, start, stop)  # [n, L], one gather index for all
    modules = []
    for index, layer in enumerate(projections(model)):
        for name, module in layer.items():

            def forward(x: Tensor, module=module, index=index, name=name) -> Tensor:
                output = outputs.read(index, name, positions)
                return replayed_linear(x, module.weight, module.bias, output)

            module.forward = forward  # type: ignore[method-assign]
            modules.append(module)
    try:
        yield
    finally:
        for module in modules:
            del module.forward
