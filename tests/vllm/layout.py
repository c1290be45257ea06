"""The Rollouts layout contract (quadrants/rollout/engine.py), checked the same way for every engine."""

from __future__ import annotations

import torch

from quadrants.rollout.engine import Rollouts

# The tiny model initialised with std 0.3 instead of 0.02: its next-token distributions are peaked
# (sampled log-probs from about -0.01 to -8 rather than all near log(1/100)), so log-prob comparisons
# are not between near-uniform values, and about half of the sampled responses reach EOS.
SHARP = {"initializer_range": 0.3}


def assert_rollouts_layout(
    rollouts: Rollouts, *, num_prompts: int, n: int, pad_id: int, eos_id: int
) -> None:
    """Shapes, dtypes, padding sides, masks and flags of one Rollouts, as engine.py documents them."""
    batch = num_prompts * n
    prompt_len, length = rollouts.prompt_ids.shape[1], rollouts.response_ids.shape[1]
    assert rollouts.prompt_ids.shape == rollouts.prompt_mask.shape == (batch, prompt_len)
    assert (
        rollouts.response_ids.shape
        == rollouts.response_mask.shape
        == rollouts.behaviour_logp.shape
        == (batch, length)
    )
    assert rollouts.group_ids.shape == rollouts.finished.shape == (batch,)
    assert len(rollouts.texts) == batch
    assert (
        rollouts.prompt_ids.dtype
        == rollouts.response_ids.dtype
        == rollouts.group_ids.dtype
        == torch.long
    )
    assert (
        rollouts.prompt_mask.dtype
        == rollouts.response_mask.dtype
        == rollouts.finished.dtype
        == torch.bool
    )
    assert rollouts.behaviour_logp.dtype == torch.float32
    # prompts left-padded: once a row's mask is on it stays on, and the last position is a real token
    prompt_mask = rollouts.prompt_mask.long()
    assert (
        torch.equal(prompt_mask.cummax(-1).values, prompt_mask)
        and rollouts.prompt_mask[:, -1].all()
    )
    assert (rollouts.prompt_ids[~rollouts.prompt_mask] == pad_id).all()
    # responses right-padded: the mask is a prefix, at least one token, pad id and log-prob 0 after it
    mask = rollouts.response_mask.long()
    assert (
        torch.equal(mask.flip(-1).cummax(-1).values.flip(-1), mask)
        and rollouts.response_mask[:, 0].all()
    )
    assert (rollouts.response_ids[~rollouts.response_mask] == pad_id).all()
    assert (rollouts.behaviour_logp[~rollouts.response_mask] == 0).all()
    assert (rollouts.behaviour_logp[rollouts.response_mask] <= 0).all()
    # finished = the last kept token is EOS; EOS appears nowhere else; T is the longest response
    last = rollouts.response_ids.gather(
        1, (rollouts.response_mask.sum(-1, keepdim=True) - 1)
    ).squeeze(1)
    assert torch.equal(rollouts.finished, last == eos_id)
    assert int((rollouts.response_ids == eos_id).sum()) == int(rollouts.finished.sum())
    assert int(rollouts.response_mask.sum(-1).max()) == length
    # the n samples of a prompt are consecutive and share its (repeated) prompt
    assert torch.equal(rollouts.group_ids, torch.arange(num_prompts).repeat_interleave(n))
    for group in range(num_prompts):
        rows = rollouts.prompt_ids[group * n : (group + 1) * n]
        assert (rows == rows[0]).all()
