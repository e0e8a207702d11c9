"""`beam` is transformers' beam search: the same tokens as `generate(num_beams=k)` called directly, and not
greedy's (so the width reaches `generate`)."""

from __future__ import annotations

import random

import pytest
import torch

from core.methods import run_method


def reference(loaded, prompt: list[int], max_new_tokens: int, num_beams: int) -> list[int]:
    """transformers' own beam search on the prompt, cut after the first EOS as a batch of one is."""
    ids = torch.tensor([prompt], device=loaded.model.device)
    out = loaded.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        num_beams=num_beams,
        do_sample=False,
        early_stopping=True,
        eos_token_id=list(loaded.eos_ids),
        pad_token_id=loaded.tokenizer.pad_token_id,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    tokens = out[0, len(prompt) :].tolist()
    for j, tok in enumerate(tokens):
        if tok in loaded.eos_ids:
            return tokens[: j + 1]
    return tokens


def test_beam_is_generate_with_num_beams_on_the_tiny_model(tiny):
    differs_from_greedy = 0
    for seed in range(6):
        rng = random.Random(seed)
        prompt = [rng.randrange(2, 96) for _ in range(10)]
        for width in (2, 4):
            run = run_method("beam", tiny, prompt, {"max_new_tokens": 12, "num_beams": width})
            assert run.output_ids == reference(tiny, prompt, 12, width), (seed, width)
        greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 12}).output_ids
        differs_from_greedy += run.output_ids != greedy
    assert differs_from_greedy > 0, "beam search gave greedy's tokens on every prompt: is num_beams passed on?"


@pytest.mark.real_model
def test_beam_is_generate_with_num_beams_on_smollm2(smollm2):
    from core.models import encode_prompt

    prompt = encode_prompt(smollm2.tokenizer, "List three colours of the rainbow.")  # beam search is slow on a CPU
    run = run_method("beam", smollm2, prompt, {"max_new_tokens": 8, "num_beams": 2})
    assert run.output_ids == reference(smollm2, prompt, 8, 2) and len(run.output_ids) == 8
