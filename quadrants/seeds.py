"""Every random stream of a run, by name: the one place a seed is derived.

A stream's seed is a stable hash of the run seed, the stream's name and its integer coordinates
(`stream_seed`): the first 8 bytes of BLAKE2b over ``"seed/stream/c1/c2/..."``, shifted to a value
below 2**63. The hash is the same in every process and Python version (not the salted `hash()`),
and there are no linear offsets: two (stream, coordinates) pairs share a seed only by a hash
collision (about n**2 / 2**64 for n draws), and tests/unit/test_seeds.py enumerates the draws of a
long run and finds none. The linear offsets this replaces (issue 48) overlapped: vLLM's sample
(i, j) at step s + 1 had the seed of sample (i, j + 1) at step s, the in-training evaluation of
a `seed=0` run started from step 7's seed, and step s's update draws replayed step s + 2's shuffle.

The streams (`STREAMS`; a name not in it is an error, not a new stream), with their coordinates:

- training step `step`, refill round `round` (train/refill.py; 0 = the step's ordinary batch),
  generation block `block` (train/blocks.py): `prompts(seed, step, round)` draws the round's
  prompts, `rollout(seed, step, round, block)` seeds the block's generate call;
- the update (train/update.py): `shuffle(seed, step)` orders the mini-batches, `update(seed, step)`
  seeds the generator of the objective's own draws (Clip-Cov's subset), handed down to the loss;
  `telemetry(seed, step)` draws the rows of the |Δ log-prob| pass; `random_control(seed, step)`
  the matched random-token control (ops/random_control.py); `reward(seed, step, round)` the
  `reward=random` confound's rewards of refill round `round` (rewards/confound.py);
- evaluation: `evaluation(seed, benchmark, call)` seeds generate call `call` of the `benchmark`-th
  configured benchmark, `heldout(seed, chunk)` chunk `chunk` of the task's held-out split; the same
  at every evaluation step (common random numbers across steps);
- the probe (quadrants/probe): `probe_prompts`, `probe_rollout` and `probe_positions` of the probe
  seed, `probe_branch(seed, call)` its branching generate calls;
- the paired one-step counterfactuals (quadrants/run/one_step_arms.py) at checkpoint `step`:
  `counterfactual_batch(seed, step, batch)` is the base seed of rollout batch `batch`, whose
  prompts, rollouts, shuffle, update and control draws are the training streams above of that base
  at `step` (so a batch is drawn exactly as a training step draws its own, and every arm on it
  sees the same draws); `counterfactual_heldout(seed, step, chunk)` seeds held-out chunk `chunk`,
  the same before and after every arm (common random numbers);
- task splits: `task_split(seed, split)`, e.g. reasoning-gym's held-out generator (split 1);
- vLLM requests: `vllm_request(call_seed, request, n)` (below).

vLLM's sample offset: with n > 1 and a seed, vLLM gives the j-th sample of a request the seed
``request seed + j`` itself (vllm/v1/engine/parallel_sampling.py,
`ParentRequest._get_child_sampling_params`: ``seed + index``), and a seeded request's noise is a
function of its seed alone (rollout/vllm.py). So a request's seed reserves n consecutive values:
`vllm_request` clears the low `SAMPLE_BITS` bits of the request's hash, and its samples
`vllm_sample(request seed, j)`, j < n <= 2**SAMPLE_BITS, stay in its own slot of 2**SAMPLE_BITS
values; two requests' samples share a seed only when their slots (the top 63 - SAMPLE_BITS bits
of two hashes) collide. The HF engine seeds torch once per call
with the call's seed (rollout/hf.py).
"""

from __future__ import annotations

import hashlib

STREAMS: frozenset[str] = frozenset(
    {
        "prompts",
        "rollout",
        "shuffle",
        "update",
        "telemetry",
        "random_control",
        "reward",
        "evaluation",
        "heldout",
        "probe_prompts",
        "probe_rollout",
        "probe_positions",
        "probe_branch",
        "counterfactual_batch",
        "counterfactual_heldout",
        "task_split",
        "vllm_request",
    }
)

# a vLLM request's seed is a multiple of 2**SAMPLE_BITS; its n samples take the next n values
SAMPLE_BITS = 20
_SEED_BITS = 63  # below 2**63: an int64 in vLLM, torch.manual_seed and numpy alike


def stream_seed(seed: int, stream: str, *coordinates: int) -> int:
    """The seed of the named `stream` at integer `coordinates`: the first 8 bytes of BLAKE2b over
    ``"seed/stream/c1/c2/..."`` (big-endian), shifted right by one: an int in [0, 2**63)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; the streams are {sorted(STREAMS)}")
    text = "/".join([str(int(seed)), stream, *(str(int(c)) for c in coordinates)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _SEED_BITS)


# --- the training step ------------------------------------------------------------------------


def prompts(seed: int, step: int, round_index: int) -> int:
    """The prompt draw of refill round `round_index` (0: the step's batch) at `step`."""
    return stream_seed(seed, "prompts", step, round_index)


def rollout(seed: int, step: int, round_index: int, block: int) -> int:
    """The generate call of generation block `block` of round `round_index` at `step`."""
    return stream_seed(seed, "rollout", step, round_index, block)


def shuffle(seed: int, step: int) -> int:
    """The mini-batch order of the update at `step`."""
    return stream_seed(seed, "shuffle", step)


def update(seed: int, step: int) -> int:
    """The objective's own draws in the update at `step` (Clip-Cov's random subset; the generator
    train/update.py `objective_generator` hands down to the loss)."""
    return stream_seed(seed, "update", step)


def telemetry(seed: int, step: int) -> int:
    """The rows of the telemetry's |Δ log-prob| pass at `step`."""
    return stream_seed(seed, "telemetry", step)


def random_control(seed: int, step: int) -> int:
    """The matched random-token control's draw at `step`."""
    return stream_seed(seed, "random_control", step)


def reward(seed: int, step: int, round_index: int) -> int:
    """The `reward=random` confound's draw of refill round `round_index` (0: the step's batch)."""
    return stream_seed(seed, "reward", step, round_index)


# --- evaluation -------------------------------------------------------------------------------


def evaluation(seed: int, benchmark: int, call: int) -> int:
    """Generate call `call` of the `benchmark`-th configured benchmark (eval/runner.py)."""
    return stream_seed(seed, "evaluation", benchmark, call)


def heldout(seed: int, chunk: int) -> int:
    """Chunk `chunk` of the task's held-out split (eval/heldout.py)."""
    return stream_seed(seed, "heldout", chunk)


# --- the probe --------------------------------------------------------------------------------


def probe_prompts(seed: int) -> int:
    """The probe's problems."""
    return stream_seed(seed, "probe_prompts")


def probe_rollout(seed: int) -> int:
    """The probe's G responses per problem."""
    return stream_seed(seed, "probe_rollout")


def probe_positions(seed: int) -> int:
    """The probe's choice of branching positions."""
    return stream_seed(seed, "probe_positions")


def probe_branch(seed: int, call: int) -> int:
    """The probe's branching generate call `call`."""
    return stream_seed(seed, "probe_branch", call)


# --- the paired one-step counterfactuals ----------------------------------------------------


def counterfactual_batch(seed: int, step: int, batch: int) -> int:
    """The base seed of counterfactual rollout batch `batch` at checkpoint `step`: the batch's
    prompts, rollouts and update draws are the training streams of this base at `step`."""
    return stream_seed(seed, "counterfactual_batch", step, batch)


def counterfactual_heldout(seed: int, step: int, chunk: int) -> int:
    """Held-out chunk `chunk` of the counterfactual at checkpoint `step`: the same seed before the
    update and after every arm's (common random numbers)."""
    return stream_seed(seed, "counterfactual_heldout", step, chunk)


# --- tasks ------------------------------------------------------------------------------------


def task_split(seed: int, split: int) -> int:
    """A task's generator of split `split` (reasoning-gym's held-out problems: split 1)."""
    return stream_seed(seed, "task_split", split)


# --- engines ----------------------------------------------------------------------------------


def vllm_request(call_seed: int, request: int, n: int) -> int:
    """The seed of request `request` of a vLLM generate call seeded `call_seed`, whose `n` samples
    vLLM seeds `vllm_sample(seed, j)`, j < n: a multiple of 2**SAMPLE_BITS (module docstring)."""
    if not 1 <= n <= 2**SAMPLE_BITS:
        raise ValueError(f"{n} samples per request: a request's seed reserves 1..2**{SAMPLE_BITS}")
    slot = stream_seed(call_seed, "vllm_request", request) >> SAMPLE_BITS
    return slot << SAMPLE_BITS


def vllm_sample(request_seed: int, j: int) -> int:
    """The seed vLLM gives sample `j` of a request seeded `request_seed`
    (vllm/v1/engine/parallel_sampling.py): request seed + j."""
    return request_seed + j
