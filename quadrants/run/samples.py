"""Sample completions of a step as a JSON artifact: prompt, response, reward, and per token its
text, behaviour entropy and quadrant, so a reader can see where the forks were and which tokens got
credit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quadrants.ops.quadrants import Quadrant
from quadrants.train.step import StepOutput


def sample_records(output: StepOutput, tokenizer: Any, max_groups: int = 2) -> list[dict[str, Any]]:
    """Every rollout of the first `max_groups` prompts of the step, one dict per response."""
    batch, rollouts = output.batch, output.collected.rollouts
    prompt_length = rollouts.prompt_ids.shape[1]
    records = []
    for b in range(batch.batch_size):
        group = int(batch.group_ids[b])
        if group >= max_groups:
            continue
        length = int(batch.response_mask[b].sum())
        ids = batch.sequences[b, prompt_length : prompt_length + length].tolist()
        tokens = []
        for t, token_id in enumerate(ids):
            quadrant = next((q.value for q in Quadrant if bool(batch.quadrants[q][b, t])), None)
            tokens.append(
                {
                    "text": tokenizer.decode([token_id]),
                    "entropy": round(float(batch.entropy[b, t]), 4),
                    "quadrant": quadrant,
                }
            )
        prompt_ids = rollouts.prompt_ids[b][rollouts.prompt_mask[b]].tolist()
        records.append(
            {
                "group": group,
                "prompt": tokenizer.decode(prompt_ids),
                "response": rollouts.texts[b],
                "reward": float(batch.rewards[b]),
                "outcome": output.collected.outcomes[b].value,
                "advantage": round(float(batch.advantages[b]), 4),
                "entropy_threshold": round(float(batch.quadrants.threshold[b]), 4),
                "tokens": tokens,
            }
        )
    return records


def write_samples(path: Path, output: StepOutput, tokenizer: Any, step: int) -> Path:
    """Write the step's sample records to `path` (JSON) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"step": step, "samples": sample_records(output, tokenizer)}, indent=1)
    )
    return path
