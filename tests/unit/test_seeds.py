"""quadrants/seeds.py: the hash by hand, the registry of stream names, the overlaps issue 48 names
(each shown on the old linear offsets, then gone), and a long run's draws without a collision."""

from __future__ import annotations

import pytest

from quadrants import seeds

SAMPLE_SLOT = 2**seeds.SAMPLE_BITS


def vllm_samples(call_seed: int, requests: int, n: int) -> list[int]:
    """The seeds vLLM gives the samples of a call: request r seeded seeds.vllm_request, its sample j
    that plus j (vllm/v1/engine/parallel_sampling.py; quadrants/rollout/vllm.py)."""
    return [
        seeds.vllm_sample(seeds.vllm_request(call_seed, r, n), j)
        for r in range(requests)
        for j in range(n)
    ]


# --- the old arithmetic (before issue 48), only to show that each overlap test can fail ----------


def old_step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) % (2**31 - 1)


def old_vllm_samples(call_seed: int, requests: int, n: int) -> list[int]:
    return [call_seed + r * n + j for r in range(requests) for j in range(n)]


# --- the hash ----------------------------------------------------------------------------------


def test_stream_seed_by_hand():
    # blake2b(b"7/random_control/12", digest_size=8) = 0x2982df885e539749 = 2991198879318513481;
    # shifted right by one: 1495599439659256740 (the value the random control has used since it
    # landed: ops/random_control.py's draws are unchanged)
    assert seeds.stream_seed(7, "random_control", 12) == 1495599439659256740
    assert seeds.random_control(7, 12) == 1495599439659256740
    # blake2b(b"0/vllm_request/3", digest_size=8) = 0x0e99a2a77813ce42 = 1052050828125523522;
    # >> 1 = 526025414062761761; its low 20 bits cleared (>> 20 << 20): 526025414062112768
    assert seeds.vllm_request(0, 3, 8) == 526025414062112768
    # vLLM's sample j of that request: + j, inside the request's slot of 2**20 values
    assert seeds.vllm_sample(526025414062112768, 7) == 526025414062112775


def test_stream_seeds_are_not_linear_in_their_coordinates():
    # consecutive steps are not a constant apart (seed * a + step would be 1 apart)
    gaps = {seeds.update(0, s + 1) - seeds.update(0, s) for s in range(5)}
    assert len(gaps) == 5
    # another stream at the same seed and coordinates is another seed; all below 2**63
    assert seeds.update(0, 3) != seeds.shuffle(0, 3)
    assert 0 <= seeds.rollout(2**40, 10**9, 3, 7) < 2**63


def test_an_unknown_stream_is_an_error_not_a_new_stream():
    with pytest.raises(ValueError, match="unknown random stream 'rolout'"):
        seeds.stream_seed(0, "rolout", 1)


def test_a_request_reserves_its_samples_and_refuses_more_than_its_slot():
    request = seeds.vllm_request(5, 0, SAMPLE_SLOT)
    assert request % SAMPLE_SLOT == 0  # the last sample, + 2**20 - 1, stays below the next slot
    assert seeds.vllm_sample(request, SAMPLE_SLOT - 1) < 2**63  # an int64 for vLLM
    with pytest.raises(ValueError, match="samples per request"):
        seeds.vllm_request(5, 0, SAMPLE_SLOT + 1)
    with pytest.raises(ValueError, match="samples per request"):
        seeds.vllm_request(5, 0, 0)


# --- the overlaps issue 48 names ---------------------------------------------------------------


def test_consecutive_steps_no_longer_share_vllm_noise():
    # old: sample (i, j) at step s + 1 had seed S + s + 1 + i n + j, that of sample (i, j + 1) at s
    n, requests = 8, 4
    old = [set(old_vllm_samples(old_step_seed(0, s), requests, n)) for s in (3, 4)]
    assert len(old[0] & old[1]) == requests * n - 1  # 31 of 32 shared
    new = [set(vllm_samples(seeds.rollout(0, s, 0, 0), requests, n)) for s in (3, 4)]
    assert not new[0] & new[1]


def test_the_evaluation_of_a_seed_0_run_no_longer_starts_from_step_7():
    # old: the in-training evaluation was seeded cfg.seed + 7 (call 0 of benchmark 0: 7) and step 7
    # of a seed-0 run old_step_seed(0, 7) = 7: the same torch seed under the HF engine
    assert 0 + 7 == old_step_seed(0, 7)
    assert seeds.evaluation(0, 0, 0) != seeds.rollout(0, 7, 0, 0)
    evaluation = set(vllm_samples(seeds.evaluation(0, 0, 0), 16, 4))
    assert not evaluation & set(vllm_samples(seeds.rollout(0, 7, 0, 0), 4, 8))


def test_update_draws_no_longer_replay_the_shuffle_two_steps_later():
    # old: the update's torch generators at step s were seeded step seed + 2, the shuffle's at step
    # s + 2 its step seed: equal
    assert all(old_step_seed(1, s) + 2 == old_step_seed(1, s + 2) for s in range(100))
    updates = {seeds.update(1, s) for s in range(100)}
    assert not updates & {seeds.shuffle(1, s) for s in range(102)}


# --- a long run --------------------------------------------------------------------------------


def long_run_draws() -> list[int]:
    """Every seed two runs (seeds 0 and 1) hand a generator: 300 steps x 3 refill rounds x 4 blocks
    of 4 prompts x G = 8 under vLLM (each sample its own seed, the j offsets included, and each
    block's call seed for the HF engine), each round's prompt and random-reward draws, each step's
    shuffle, update, telemetry and random control; 20 evaluations' worth of calls (4 benchmarks x 16 calls of 4 prompts x 16
    samples, the same at every evaluation step: common random numbers) and 8 held-out chunks of
    4 prompts x 4; the task split; 5 probe seeds, each with its prompts, positions, 8 x 8 sampled
    responses and 50 branching calls of 16 continuations."""
    draws: list[int] = []
    for run in (0, 1):
        for step in range(300):
            for round_index in range(3):
                draws.append(seeds.prompts(run, step, round_index))
                draws.append(seeds.reward(run, step, round_index))
                for block in range(4):
                    call = seeds.rollout(run, step, round_index, block)
                    draws.append(call)
                    draws.extend(vllm_samples(call, 4, 8))
            draws += [
                seeds.shuffle(run, step),
                seeds.update(run, step),
                seeds.telemetry(run, step),
                seeds.random_control(run, step),
            ]
        for benchmark in range(4):
            for index in range(16):
                call = seeds.evaluation(run, benchmark, index)
                draws.append(call)
                draws.extend(vllm_samples(call, 4, 16))
        for chunk in range(8):
            call = seeds.heldout(run, chunk)
            draws.append(call)
            draws.extend(vllm_samples(call, 4, 4))
        draws.append(seeds.task_split(run, 1))
    for probe in range(5):
        rollout = seeds.probe_rollout(probe)
        draws += [seeds.probe_prompts(probe), seeds.probe_positions(probe), rollout]
        draws.extend(vllm_samples(rollout, 8, 8))
        for index in range(50):
            call = seeds.probe_branch(probe, index)
            draws.append(call)
            draws.extend(vllm_samples(call, 16, 1))
    return draws


@pytest.mark.slow
def test_a_long_run_draws_no_seed_twice():
    draws = long_run_draws()
    # per run: 300 x (3 x (2 + 4 x (1 + 32)) + 4) = 300 x 406 = 121,800 training draws,
    # 4 x 16 x (1 + 64) = 4,160 evaluation, 8 x (1 + 16) = 136 held-out, 1 task split: 126,097;
    # two runs 252,194; probes 5 x (3 + 64 + 50 x (1 + 16)) = 5 x 917 = 4,585: 256,779 in all
    assert len(draws) == 256_779
    assert len(set(draws)) == len(draws)
    assert all(0 <= d < 2**63 for d in draws)


@pytest.mark.slow
def test_the_counterfactual_streams_draw_none_of_a_long_runs_seeds():
    """The counterfactual's batches (8 batches at each of 30 checkpoints, and each batch's training
    streams of its base) and held-out chunks (8 per checkpoint) take seeds of their own."""
    draws = set(long_run_draws())
    extra: list[int] = []
    for run in (0, 1):
        for step in range(0, 300, 10):
            for batch in range(8):
                base = seeds.counterfactual_batch(run, step, batch)
                extra += [base, seeds.prompts(base, step, 0), seeds.rollout(base, step, 0, 0)]
                extra += [seeds.shuffle(base, step), seeds.update(base, step)]
                extra.append(seeds.random_control(base, step))
            extra += [seeds.counterfactual_heldout(run, step, chunk) for chunk in range(8)]
    # 2 runs x 30 checkpoints x (8 x 6 + 8) = 3,360, all distinct and none a long run's
    assert len(set(extra)) == len(extra) == 3_360
    assert not draws & set(extra)
