"""Reference baselines through transformers' own `generate`, so every comparison with the tools
people use today happens in the same run, on the same tokens, with the same clock."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StopStringCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer


class StepClock(BaseStreamer):
    """Timestamps every chunk of tokens `generate` emits; the first `put` is the prompt."""

    def __init__(self):
        self.events: list[tuple[float, int]] = []
        self.seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.events.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass


@dataclass
class HFResult:
    output_ids: list[int]
    accept_lengths: list[int] | None  # tokens per forward step where the streamer could see them
    prefill_seconds: float
    decode_seconds: float


def _generation_kwargs(mode: str, params: dict[str, Any], draft_model) -> dict[str, Any]:
    if mode == "hf-generate":
        return {"do_sample": False}
    if mode == "hf-prompt-lookup":
        # transformers' default n-gram size is 2; Saxena's PLD and our `pld` use 3.
        return {"do_sample": False, "prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 3}
    if mode == "hf-assisted":
        return {"do_sample": False, "assistant_model": draft_model}
    if mode == "beam":
        return {"do_sample": False, "num_beams": int(params["num_beams"]), "early_stopping": True}
    raise ValueError(f"not a transformers baseline: {mode}")


@torch.inference_mode()
def run_hf(mode: str, model, tokenizer, eos_ids: list[int], prompt_ids: list[int], params: dict[str, Any], stop_strings=(), draft_model=None) -> HFResult:
    kwargs = _generation_kwargs(mode, params, draft_model)
    streaming = mode != "beam"  # transformers' streamers do not support beam search
    clock = StepClock() if streaming else None
    input_ids = torch.tensor([prompt_ids], device=model.device)
    extra: dict[str, Any] = {}
    if stop_strings:
        # As a stopping criterion, not `stop_strings=`: assisted generation hands its generation config,
        # stop strings included, to the assistant's own `generate`, which then fails for want of a tokenizer.
        extra = {"stopping_criteria": StoppingCriteriaList([StopStringCriteria(tokenizer, list(stop_strings))])}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    t0 = time.perf_counter()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=int(params["max_new_tokens"]),
        eos_token_id=list(eos_ids),
        pad_token_id=pad,
        temperature=None, top_p=None, top_k=None,
        streamer=clock,
        **kwargs,
        **extra,
    )
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    t_end = time.perf_counter()
    output = out[0, len(prompt_ids) :].tolist()
    # Trim the padding generate adds after EOS (batch of one: only when stopped by a stop string).
    for j, tok in enumerate(output):
        if tok in eos_ids:
            output = output[: j + 1]
            break
    if clock is None or not clock.events:
        return HFResult(output, None, 0.0, t_end - t0)
    # The first chunk comes out of the pass over the prompt: time it as prefill, like our engine's
    # prompt pass, and count the steps after it (for assisted modes that pass also verified drafts).
    t_first = clock.events[0][0]
    lengths = [n for _, n in clock.events[1:]]
    return HFResult(output, lengths or None, t_first - t0, t_end - t_first)
