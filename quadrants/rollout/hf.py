"""Rollouts from the Hugging Face model, colocated with the trainer (same module, same weights).

Because the engine samples from the very module being trained, `sync_weights` has nothing to copy.

Decoding (`decode`, the config key `rollout.hf_decode`):
- `auto` (default): `fast` when the model is on the CPU, `generate` on any other device (the fast
  decode and the loop were written and measured for the CPU and have not been run on a GPU).
- `fast`: for Llama-family models (Llama, Qwen2) the fused step with finished rows dropped
  (quadrants/rollout/fast_decode.py), the same per-token distributions as `loop` to float tolerance;
  any other model takes `loop`, said once in the log.
- `loop`: the engine's own loop (quadrants/rollout/decode.py), which draws for a fixed seed exactly
  the tokens `generate` draws with the processors below.
- `generate`: `model.generate` itself (the reference the loop is tested against).
`fast` and `loop` also record each step's entropy (`Rollouts.behaviour_entropy`), so the step can
skip its separate behaviour pass (train.behaviour_pass).

Behaviour log-probs: at each decoding step `SampledLogprobs` (a logits processor that runs before
the temperature and top-p warpers, which quadrants passes itself) keeps log_softmax(logits / T) of
that step, and at the next step gathers the entry of the token that was sampled; so they are the
log-probs at the sampling temperature before top-p truncation, matching the trainer's recompute,
while memory stays [B, V] for the current step plus [B, T] for the result. (`output_logits=True`
would keep every step's logits, [B, T, V]: ~120 GB for 64 x 3072 tokens with a 151,936-token
vocabulary.) Sampling settings the trainer does not model are switched off explicitly (`top_k=0`,
`repetition_penalty=1.0`) so a model's own generation config (instruct models often set top-k 20 and
a repetition penalty) cannot change the distribution behind the trainer's back.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from quadrants.device import model_device
from quadrants.models.policy import response_logprobs
from quadrants.ops.precision import stored_mixed_autocast
from quadrants.rollout.decode import HF_DECODES, sample
from quadrants.rollout.engine import Rollouts, SamplingSettings, encode_prompts
from quadrants.rollout.fast_decode import fast_decode_unsupported, sample_fast
from quadrants.rollout.weights import copy_weights

log = logging.getLogger(__name__)
SCORE_CHUNK = 256  # response positions per head chunk when scoring a probe (models/policy.py)


class SampledLogprobs(LogitsProcessor):
    """Records the log-prob, at `temperature`, of each sampled token; leaves
    the scores unchanged."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self._previous: Tensor | None = (
            None  # [B, V] log-probs of the step whose token is not yet known
        )
        self._steps: list[Tensor] = []  # [B] each

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self._previous is not None:  # input_ids now ends with the token sampled from _previous
            self._steps.append(self._previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self._previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def result(self, response_ids: Tensor) -> Tensor:
        """[B, T] log-probs of `response_ids` (the generated tokens, one per recorded step)."""
        steps = list(self._steps)
        length = response_ids.shape[1]
        if self._previous is not None and len(steps) < length:
            steps.append(
                self._previous.gather(-1, response_ids[:, len(steps) : len(steps) + 1]).squeeze(-1)
            )
        if not steps:
            return torch.zeros(response_ids.shape, device=response_ids.device)
        return torch.stack(steps[:length], dim=1)  # [B, T]


class HFEngine:
    """RolloutEngine over `model.generate`, on the model's device; the Rollouts it returns are on
    the CPU (quadrants.device: the step moves them to the training device once).

    Args:
        logprobs: record behaviour log-probs and entropy (training); False returns zero log-probs
            and no entropy (evaluation needs texts).
        decode: `auto` (default: `fast` on the CPU, `generate` elsewhere), `fast`, `loop` or
            `generate` (module docstring); `generate` records log-probs but no entropy.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        logprobs: bool = True,
        decode: str = "auto",
    ) -> None:
        if decode not in HF_DECODES:
            raise ValueError(f"rollout.hf_decode={decode!r} is unknown; choose one of {HF_DECODES}")
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer has no pad token; set tokenizer.pad_token before rollouts"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.logprobs = logprobs
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.decode = decode
        self._said_why_not_fast = False

    def sync_weights(self, model: nn.Module) -> None:
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

    def release_memory(self) -> None:
        return None  # generates with the trainer's module (or a replica it keeps): nothing to free

    @torch.no_grad()
    def score(self, sequences: Tensor, attention_mask: Tensor, response_length: int) -> Tensor:
        """Log-probs [B, T] (float32, on the CPU) of the last `response_length` tokens of
        `sequences` under the engine's weights at temperature 1 (the identity check's probe,
        rollout/identity_guard.py), computed as it samples (under `stored_mixed_autocast`)."""
        device = model_device(self.model)
        with stored_mixed_autocast(self.model, device):
            logp, _ = response_logprobs(
                self.model,
                sequences.to(device),
                attention_mask.to(device),
                response_length,
                temperature=1.0,
                chunk_size=SCORE_CHUNK,
                with_entropy=False,
                share_prompts="never",
                max_buckets=1,
            )
        return logp.float().cpu()

    def score_dtype(self) -> torch.dtype:
        """The dtype the engine's forward computes in: its narrowest floating parameter dtype."""
        dtypes = {p.dtype for p in self.model.parameters() if p.is_floating_point()}
        return min(dtypes, key=lambda d: torch.finfo(d).bits) if dtypes else torch.float32

    def close(self) -> None:
        return None

    def generate_from_ids(self, prompts: list[list[int]], sampling: SamplingSettings) -> Rollouts:
        """`generate` from token-id prefixes (RolloutEngine.generate_from_ids),
        left-padded as they are."""
        return self.generate(prompts, sampling)  # type: ignore[arg-type]  # encode_prompts takes ids too

    @torch.no_grad()
    def generate(self, prompts: list[str], sampling: SamplingSettings) -> Rollouts:
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        enc = encode_prompts(self.tokenizer, prompts)  # texts, or token ids (generate_from_ids)
        prompt_ids = enc["input_ids"].repeat_interleave(sampling.n, dim=0)  # [B, P]
        prompt_mask = enc["attention_mask"].repeat_interleave(sampling.n, dim=0).bool()
        was_training = self.model.training
        self.model.eval()
        device = model_device(self.model)
        with stored_mixed_autocast(self.model, device):
            response_ids, logp, entropy = self._decode(prompt_ids, prompt_mask, sampling, device)
        self.model.train(was_training)
        logp = torch.zeros(response_ids.shape) if logp is None else logp.cpu()
        entropy = None if entropy is None else entropy.cpu()
        response_ids = response_ids.cpu()
        response_mask, finished = _mask_after_eos(response_ids, self.stop_ids)
        response_ids = response_ids.masked_fill(~response_mask, self.tokenizer.pad_token_id)
        texts = self.tokenizer.batch_decode(response_ids, skip_special_tokens=True)
        group_ids = torch.arange(len(prompts)).repeat_interleave(sampling.n)
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            behaviour_logp=logp * response_mask,
            texts=texts,
            group_ids=group_ids,
            finished=finished,
            behaviour_entropy=None if entropy is None else entropy * response_mask,
        )

    def _decode(
        self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingSettings, device
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """(response ids [B, T], log-probs [B, T] or None, entropy [B, T] or None), on `device`."""
        if self.decode_on(device) != "generate":
            decoded = self._sampler()(
                self.model,
                prompt_ids.to(device),
                prompt_mask.to(device),
                max_new_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                stop_ids=self.stop_ids,
                pad_id=self.tokenizer.pad_token_id,
                record=self.logprobs,
            )
            return decoded.tokens, decoded.logp, decoded.entropy
        response_ids, logp = self._generate(prompt_ids.to(device), prompt_mask.to(device), sampling)
        return response_ids, logp, None

    def decode_on(self, device: torch.device) -> str:
        """The decode path for a model on `device`: `decode`, with `auto` resolved."""
        if self.decode != "auto":
            return self.decode
        return "fast" if device.type == "cpu" else "generate"

    def _sampler(self):
        """`sample_fast` when the decode is fast and the model takes it, else `decode.sample`."""
        if self.decode_on(model_device(self.model)) != "fast":
            return sample
        why_not = fast_decode_unsupported(self.model)
        if why_not is None:
            return sample_fast
        if not self._said_why_not_fast:
            log.info("rollout.hf_decode=fast falls back to the loop: %s", why_not)
            self._said_why_not_fast = True
        return sample

    def _generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingSettings
    ) -> tuple[Tensor, Tensor | None]:
        """`model.generate` with the recorder: (response ids [B, T], log-probs [B, T] or None)."""
        greedy = sampling.temperature == 0
        recorder = (
            SampledLogprobs(1.0 if greedy else sampling.temperature) if self.logprobs else None
        )
        processors = LogitsProcessorList([recorder] if recorder is not None else [])
        if not greedy:  # after the recorder, in generate's own order: temperature, then top-p
            processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1.0:
                processors.append(TopPLogitsWarper(sampling.top_p))
        # temperature and top-p are applied by `processors`; neutral values
        # override the model's defaults
        sampling_flags = {} if greedy else dict(temperature=1.0, top_p=1.0, top_k=0)
        sequences = self.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=not greedy,
            repetition_penalty=1.0,
            logits_processor=processors,
            **sampling_flags,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        response_ids = sequences[:, prompt_ids.shape[1] :]  # [B, T], on the model's device
        return response_ids, None if recorder is None else recorder.result(response_ids)


class ReplicaHFEngine(HFEngine):
    """The HF engine over a per-rank full copy of a policy sharded over ranks; `sync_weights` copies
    the sharded policy into it one gathered tensor at a time (a collective: every rank calls it at
    the same point of the step)."""

    def sync_weights(self, model: nn.Module) -> None:
        copy_weights(self.model, model)


def stop_token_ids(model: nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS, the model's generation-config EOS ids (a
    chat model often lists its end-of-turn token there), and ``<|im_end|>`` when the vocabulary has
    it (chat-format prompts such as qwen_math end the assistant turn with it
    even on base models)."""
    ids: list[int] = []
    config = getattr(model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None) if config is not None else None
    for value in (tokenizer.eos_token_id, configured):
        ids.extend(
            value if isinstance(value, (list, tuple)) else [value] if value is not None else []
        )
    im_end = (
        tokenizer.convert_tokens_to_ids("<|im_end|>")
        if "<|im_end|>" in tokenizer.get_vocab()
        else None
    )
    if im_end is not None:
        ids.append(im_end)
    return sorted({int(i) for i in ids})


def _mask_after_eos(
    response_ids: torch.Tensor, eos_ids: int | list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Response mask keeping tokens up to and including the first stop token. Returns
    ([B, T] bool, [B] bool)."""
    stops = torch.tensor(
        [eos_ids] if isinstance(eos_ids, int) else list(eos_ids), dtype=response_ids.dtype
    )
    is_eos = torch.isin(response_ids, stops)  # [B, T]
    eos_before = is_eos.long().cumsum(-1) - is_eos.long()  # EOS tokens strictly before t
    return eos_before == 0, is_eos.any(-1)
