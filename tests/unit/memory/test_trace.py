"""The traced figures against hand arithmetic, on the embedded tiny architecture.

The tiny Qwen2 (models/tiny.py): vocabulary 100, hidden 128, 4 heads of 32 (4 key-value heads),
MLP 512, tied embeddings. Its parameters, counted by hand:

    embedding (tied with the head)     100 x 128                 = 12,800
    per layer: q, k, v  3 x (128 x 128 + 128 bias)              = 49,536
               o        128 x 128                                = 16,384
               MLP      3 x 128 x 512                            = 196,608
               2 RMSNorms  2 x 128                               = 256
               layer total                                       = 262,784
    final norm                                                   = 128

so one layer: P1 = 12,800 + 262,784 + 128 = 275,712 elements in 14 tensors (embedding, q/k/v weight
and bias, o, gate, up, down, 2 norms, final norm).

What only a GPU can show: the CUDA caching allocator's rounding and kernels' workspaces
(benchmarks/gpu_acceptance.py measures the plan against torch.cuda.max_memory_allocated).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import asdict

import pytest

from quadrants.memory.architecture import model_config
from quadrants.memory.trace import (
    LoraSpec,
    TraceSpec,
    fed_tokens,
    micro_batch_rows,
    trace_step,
    traced_chunks,
)
from quadrants.ops import fused_head

P1 = 12_800 + 262_784 + 128  # elements of the 1-layer tiny model (module docstring)
TENSORS = 14


@pytest.fixture(scope="module")
def tiny():
    return model_config("tiny-random")


def spec(config, **kw) -> TraceSpec:
    base = dict(
        layers=1,
        seq_len=48,
        response_tokens=32,
        update_rows=2,
        forward_rows=2,
        chunk_size=16,
        precision="bf16-mixed",
    )
    return TraceSpec(config, **{**base, **kw})


@pytest.mark.slow
def test_one_process_holds_fp32_parameters_gradients_and_two_adamw_moments(tiny):
    trace = trace_step(spec(tiny, sharded=False))
    assert trace.parameters == P1 == 275_712
    # fp32 parameters: 4 bytes each
    assert trace.resident.parameters == 4 * P1
    # AdamW (fused): exp_avg and exp_avg_sq in fp32 (8 bytes a parameter) and one float32 step
    # counter per tensor: 8 x 275,712 + 4 x 14 = 2,205,752
    assert trace.resident.optimizer == 8 * P1 + 4 * TENSORS == 2_205_752
    # between steps the gradients are released (zero_grad(set_to_none=True))
    assert trace.resident.gradients == 0
    # during the update, accumulated fp32 gradients, one per parameter
    assert trace.update.gradients == 4 * P1


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_shards_parameters_and_states_by_the_world_size(tiny, world):
    trace = trace_step(spec(tiny, sharded=True, world_size=world))
    # every sharded dimension (100, 128, 512) divides by 2 and 4: no padding, each rank holds
    # exactly 1/world of every tensor
    assert trace.resident.parameters == 4 * P1 // world
    # the moments shard the same way; the step counters are one scalar per tensor on every rank
    assert trace.resident.optimizer == 8 * P1 // world + 4 * TENSORS
    # gradients after reduce-scatter: the rank's fp32 shards (plus transient unsharded ones)
    assert trace.update.gradients >= 4 * P1 // world


@pytest.mark.slow
def test_the_sharded_optimizer_step_is_not_inflated_by_dtensor_propagation(tiny):
    """The tracker once reported ~10x the moments (DTensor's global-shape fake tensors counted
    during the step, memory/trace.py). The step's peak: the states, plus foreach AdamW's
    temporaries, which are at most a few copies of the shards."""
    world = 2
    trace = trace_step(spec(tiny, sharded=True, world_size=world))
    shard_bytes = 4 * P1 // world
    assert trace.optimizer.optimizer <= 2 * shard_bytes + 2 * shard_bytes + 4 * TENSORS
    assert trace.optimizer.optimizer >= 2 * shard_bytes


@pytest.mark.slow
def test_pure_bf16_halves_parameters_and_states(tiny):
    trace = trace_step(spec(tiny, sharded=False, precision="bf16"))
    assert trace.resident.parameters == 2 * P1
    # fused AdamW keeps the moments in the parameters' dtype: 2 x 2 bytes, float32 step counters
    assert trace.resident.optimizer == 4 * P1 + 4 * TENSORS


@pytest.mark.slow
def test_attention_activations_grow_linearly_in_the_sequence_not_quadratically(tiny):
    """The CPU trace takes SDPA's flash kernel (O(T) saved per head, as CUDA's flash and
    memory-efficient kernels): doubling the row length doubles the saved activations' growth,
    it does not quadruple it. Without checkpointing, one layer, one row per micro-batch."""
    held = {}
    for length in (64, 128, 256):
        trace = trace_step(
            spec(
                tiny,
                sharded=False,
                seq_len=length,
                response_tokens=length // 2,
                update_rows=1,
                micro_batches=1,
            )
        )
        held[length] = trace.held.activations
    first, second = held[128] - held[64], held[256] - held[128]
    # linear: the second step (128 more tokens) adds twice the first (64 more tokens)
    assert second == pytest.approx(2 * first, rel=0.1)


@pytest.mark.slow
def test_checkpointing_keeps_less_than_the_plain_update(tiny):
    plain = trace_step(spec(tiny, sharded=False, layers=2, seq_len=96, response_tokens=64))
    kept = trace_step(
        spec(tiny, sharded=False, layers=2, seq_len=96, response_tokens=64, checkpointing=True)
    )
    assert kept.held.activations < plain.held.activations


@pytest.mark.slow
def test_the_packed_update_is_traced_with_its_block_diagonal_mask(tiny):
    """train.attention_layout=packed: the 4 rows of 96 tokens go forward as one sequence of
    N = 4 x 95 = 380 tokens (each row's last token is a target only). The same tokens pass the same
    layers, so the activations kept for backward are the padded trace's plus the [1, 1, N, N]
    boolean block-diagonal mask SDPA reads (N^2 = 144,400 bytes) and the mask's construction
    temporaries: more than N^2 and less than 2 N^2 above the padded trace's."""
    shape = dict(sharded=False, seq_len=96, response_tokens=64, update_rows=4, micro_batches=1)
    padded = trace_step(spec(tiny, **shape))
    packed = trace_step(spec(tiny, packed=True, **shape))
    extra = packed.held.activations - padded.held.activations
    assert 380**2 <= extra <= 2 * 380**2
    assert packed.parameters == padded.parameters
    assert packed.held.gradients == padded.held.gradients


@pytest.mark.slow
def test_a_flash_kernel_is_traced_without_the_mask(tiny):
    """model.attention=flash_attention_2 (`varlen`): flash-attn keeps no N x N mask for the packed
    rows (memory/trace.py's docstring), so the packed trace holds what the SDPA one holds less at
    least the N^2 = 380^2 = 144,400 bytes of the mask, and no more than the padded trace, whose 4
    rows of 96 (384 tokens, 4 more than the packed 380) carry a [4, 1, 96, 96] mask besides, which
    padded rows under the flash kernel do not hold either. And
    without the mask nothing in it grows quadratically: doubling the packed rows (N = 380, 760,
    1,520) doubles the growth of the activations kept for backward."""
    shape = dict(sharded=False, seq_len=96, response_tokens=64, update_rows=4, micro_batches=1)
    padded = trace_step(spec(tiny, **shape))
    sdpa = trace_step(spec(tiny, packed=True, **shape))
    flash = trace_step(spec(tiny, packed=True, varlen=True, **shape))
    assert sdpa.held.activations - flash.held.activations >= 380**2
    assert flash.held.activations <= padded.held.activations
    # padded rows under a flash kernel trace too (on fake tensors: no question asked of the
    # padding mask's values), without the [4, 1, 96, 96] mask: 36,864 bytes less at least
    padded_flash = trace_step(spec(tiny, varlen=True, **shape))
    assert padded.held.activations - padded_flash.held.activations >= 4 * 96 * 96
    held = {}
    for rows in (4, 8, 16):
        rows_shape = {**shape, "update_rows": rows}
        held[rows] = trace_step(spec(tiny, packed=True, varlen=True, **rows_shape)).held.activations
    first, second = held[8] - held[4], held[16] - held[8]
    # linear: 8 more rows add twice what 4 more rows add (quadratic would be four times)
    assert second == pytest.approx(2 * first, rel=0.1)


# rows of unequal length (TraceSpec.rows): seq_len 48, response_tokens 32 -> P = 16 prompt columns
FULL = ((16, 32), (16, 32))  # two full rows: 2 x 48 = 96 columns, all real
# three rows with the same real tokens once packed: N = 42 + 26 + 26 = 94 fed tokens (p + r - 1
# each) and M = 32 + 16 + 16 = 64 targets, as FULL's 47 + 47 and 32 + 32; padded, 3 x 48 = 144
UNEQUAL = ((11, 32), (11, 16), (11, 16))


def test_micro_batch_rows_count_their_padding(tiny):
    rows = ((10, 20), (4, 12))
    ids, mask = micro_batch_rows(rows, spec(tiny, seq_len=48, response_tokens=32), 100, "cpu")
    # cut after the longest response: 16 + 20 = 36 columns; real 10 + 20 + 4 + 12 = 46 of 72,
    # padding 72 - 46 = 26 = (16 - 10) + (20 - 20) + (16 - 4) + (20 - 12)
    assert ids.shape == mask.shape == (2, 36)
    assert int(mask.sum()) == 46
    assert mask[1].int().tolist() == [0] * 12 + [1] * 16 + [0] * 8
    # what each layout feeds: padded rows x width = 2 x 36 = 72; packed the real tokens, 46
    assert fed_tokens(rows, spec(tiny, seq_len=48, response_tokens=32)) == 72
    assert fed_tokens(rows, spec(tiny, seq_len=48, response_tokens=32, packed=True)) == 46
    with pytest.raises(ValueError, match="outside"):  # a prompt wider than P = 16
        micro_batch_rows(((17, 4),), spec(tiny, seq_len=48, response_tokens=32), 100, "cpu")


@pytest.mark.slow
def test_unequal_rows_trace_their_padding_padded_and_only_real_tokens_packed(tiny):
    """One micro-batch of FULL against one of UNEQUAL (module constants), one layer, one process.
    Packed, both feed the same N = 94 tokens and M = 64 targets: the held activations differ only
    by UNEQUAL's third row of inputs, its ids (48 x 8 bytes) and mask (48 x 1 byte), 432 bytes.
    Padded, UNEQUAL computes 144 positions against 96: its padding is traced, far more held."""
    shape = dict(sharded=False, seq_len=48, response_tokens=32, micro_batches=1)
    packed = {n: trace_step(spec(tiny, packed=True, rows=(r,), **shape)) for n, r in
              (("full", FULL), ("unequal", UNEQUAL))}  # fmt: skip
    assert packed["unequal"].held.activations - packed["full"].held.activations == 48 * 8 + 48
    padded = {n: trace_step(spec(tiny, rows=(r,), **shape)) for n, r in
              (("full", FULL), ("unequal", UNEQUAL))}  # fmt: skip
    # 48 more positions through the layer: over 100 kB more here, not a few hundred bytes
    assert padded["unequal"].held.activations - padded["full"].held.activations > 100_000
    # full rows as `rows` trace the equal-row spec's update (the loss's [2, 32] float32 mask,
    # 256 bytes, and its count, 4 bytes, are held for backward besides)
    equal = trace_step(spec(tiny, **shape))
    assert padded["full"].update.total == equal.update.total
    assert padded["full"].held.activations - equal.held.activations == 2 * 32 * 4 + 4


def test_traced_chunks_are_the_first_two_and_the_last_two():
    # 72 rows in chunks of 5: 15 chunks (the last of 2 rows), starting at 0, 5, ..., 70
    assert traced_chunks(72, 5) == [0, 5, 65, 70]
    assert traced_chunks(20, 5) == [0, 5, 10, 15]  # 4 chunks: all of them
    assert traced_chunks(3, 5) == [0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        dict(sharded=False),
        dict(sharded=False, precision="fp32", packed=True),
        dict(sharded=False, lora=LoraSpec(rank=4, alpha=8.0, target_modules="all-linear")),
        dict(world_size=2, checkpointing=True),
        dict(sharded=False, rows=(((16, 24), (3, 9), (10, 1)), ((1, 17), (16, 24)))),
    ],
    ids=["one process", "fp32 packed", "lora", "fsdp2 checkpointing", "unequal rows"],
)
def test_the_shortcuts_trace_the_same_bytes_as_torchs_trackers_over_every_chunk(tiny, case):
    """`trace_step`'s shortcuts (the trackers' tracker-wide figures only, the fused head's middle
    chunks elided) against torch's trackers as they are over every chunk: every figure the same to
    the byte. Two layers; a vocabulary of 4,096 (the head's [5, 4096] float32 buffers, 80 kB each,
    and its outputs weigh in the peaks); chunks of 5 rows: an update micro-batch's 3 x 24 response
    rows are 15 chunks (the last of 2 rows), of which the shortcut runs 4 (traced_chunks(72, 5)),
    and the no-grad forward's 5 rows x 24 are 24 chunks, of which it runs 4. The chunks the head
    computed are counted, so that the test fails if the shortcut stops eliding."""
    config = copy.deepcopy(tiny)
    config.vocab_size = 4096
    shape = dict(layers=2, seq_len=40, response_tokens=24, update_rows=3, forward_rows=5)
    traced = spec(config, **{**shape, "chunk_size": 5, **case})
    computed = {}
    for shortcuts in (False, True):
        with _counting_head_chunks() as count:
            figures = asdict(trace_step(traced, shortcuts=shortcuts))
        computed[shortcuts] = (figures, count[0])
    assert computed[True][0] == computed[False][0]
    assert computed[True][1] < computed[False][1] / 2, (computed[True][1], computed[False][1])


@contextmanager
def _counting_head_chunks():
    """The number of [chunk, V] log-probs the fused head computed while inside (a list of one)."""
    count = [0]
    compute = fused_head._chunk_log_probs

    def counted(*args, **kwargs):
        count[0] += 1
        return compute(*args, **kwargs)

    fused_head._chunk_log_probs = counted
    try:
        yield count
    finally:
        fused_head._chunk_log_probs = compute
