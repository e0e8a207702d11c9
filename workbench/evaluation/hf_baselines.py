"""Reference baselines through transformers' own `generate`, so every comparison with the tools
people use today happens in the same run, on the same tokens, with the same clock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from core.methods import COMMON, Method, param_defaults
from core.step import stop_string_end


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


class StopStringAnywhere(StoppingCriteria):
    """Stops when a stop string appears anywhere in the tokens added since the last call (batch of one).

    transformers' StopStringCriteria matches only at the end of the sequence, so assisted generation
    and prompt lookup, which add several tokens per step, ran past a stop string inside their chunk
    (to the token limit, on HumanEval). This applies our engine's rule instead."""

    def __init__(self, tokenizer, prompt_len: int, stop_strings):
        self.tokenizer, self.prompt_len, self.stop_strings = tokenizer, prompt_len, list(stop_strings)
        self.checked = 0  # generated tokens already scanned

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        generated = input_ids[0, self.prompt_len :].tolist()
        hit = stop_string_end(self.tokenizer, generated, self.stop_strings, start=self.checked)
        self.checked = len(generated)
        return torch.tensor([hit is not None], dtype=torch.bool, device=input_ids.device)


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
def run_hf(
    mode: str,
    model,
    tokenizer,
    eos_ids: list[int],
    prompt_ids: list[int],
    params: dict[str, Any],
    stop_strings=(),
    draft_model=None,
) -> HFResult:
    kwargs = _generation_kwargs(mode, params, draft_model)
    streaming = mode != "beam"  # transformers' streamers do not support beam search
    clock = StepClock() if streaming else None
    input_ids = torch.tensor([prompt_ids], device=model.device)
    extra: dict[str, Any] = {}
    if stop_strings:
        # As a stopping criterion, not `stop_strings=`: assisted generation hands its generation config,
        # stop strings included, to the assistant's own `generate`, which then fails for want of a tokenizer.
        extra = {
            "stopping_criteria": StoppingCriteriaList([StopStringAnywhere(tokenizer, len(prompt_ids), stop_strings)])
        }
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    t0 = time.perf_counter()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=int(params["max_new_tokens"]),
        eos_token_id=list(eos_ids),
        pad_token_id=pad,
        temperature=None,
        top_p=None,
        top_k=None,
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
    # A multi-token step may run past the stop string; keep what our engine keeps.
    end = stop_string_end(tokenizer, output, stop_strings) if stop_strings else None
    if end is not None:
        output = output[:end]
    if clock is None or not clock.events:
        return HFResult(output, None, 0.0, t_end - t0)
    # The first chunk comes out of the pass over the prompt: time it as prefill, like our engine's
    # prompt pass, and count the steps after it (for assisted modes that pass also verified drafts).
    t_first = clock.events[0][0]
    lengths = [n for _, n in clock.events[1:]]
    return HFResult(output, lengths or None, t_first - t0, t_end - t_first)


def _runner(mode: str):
    """An external runner for core.methods: transformers' generate in `mode` on the loaded models."""

    def run(target, draft, prompt_ids: list[int], params: dict[str, Any], stop_strings=()) -> HFResult:
        return run_hf(
            mode,
            target.model,
            target.tokenizer,
            target.eos_ids,
            prompt_ids,
            params,
            stop_strings,
            draft.model if draft is not None else None,
        )

    return run


def register_methods(register) -> None:
    """Register the reference baselines with `register` (core.methods.register; workbench.methods calls it), so
    `bench` and the UI run them beside ours under the same names everywhere."""
    for name, summary, params, lossless, needs_draft in [
        ("beam", "beam search through transformers (width 10)", param_defaults(*COMMON, "num_beams"), False, False),
        ("hf-generate", "transformers generate(), greedy", param_defaults(*COMMON), True, False),
        (
            "hf-prompt-lookup",
            "transformers prompt lookup (10 tokens, n-gram ≤ 3)",
            param_defaults(*COMMON),
            True,
            False,
        ),
        ("hf-assisted", "transformers assisted generation with the draft model", param_defaults(*COMMON), True, True),
    ]:
        register(Method(name, summary, params, lossless, needs_draft=needs_draft, external=_runner(name)))
