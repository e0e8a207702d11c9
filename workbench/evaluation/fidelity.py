"""Fidelity beside speed: how much of greedy's output a method reproduces, and for lossless methods
that diverge, whether the divergence is a near-tie in the target's logits (batched tree verification
and one-token steps round differently: transformers#39421, vLLM#54928 report the same in bf16).

`flip_report` re-reads the target at the first divergence (one forward over the prompt and greedy's
tokens before it) and returns the top-1 / top-2 logit margin there, the two tokens and the dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from core.stats import first_divergence

NEAR_TIE = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}  # logit margins rounding can flip, per dtype


@torch.inference_mode()
def flip_report(
    target, prompt_ids: Sequence[int], greedy_ids: Sequence[int], ids: Sequence[int]
) -> dict[str, Any] | None:
    """Where `ids` first leaves greedy's `greedy_ids`: position, both tokens, the target's top-1 / top-2
    logit margin and the gap between the two tokens there, the dtype, and whether that is a near-tie.
    None when identical or when one output merely stops earlier."""
    j = first_divergence(greedy_ids, ids)
    if j is None or j >= min(len(greedy_ids), len(ids)):
        return None
    context = torch.tensor([list(prompt_ids) + list(greedy_ids[:j])], device=target.device)
    logits = target.model(input_ids=context, logits_to_keep=1).logits[0, -1].float()
    top2 = logits.topk(2).values
    dtype = str(target.dtype).replace("torch.", "")
    gap = float(logits[greedy_ids[j]] - logits[ids[j]])
    return {
        "position": j,
        "greedy_token": int(greedy_ids[j]),
        "token": int(ids[j]),
        "margin": float(top2[0] - top2[1]),
        "gap": gap,
        "dtype": dtype,
        "near_tie": abs(gap) <= NEAR_TIE.get(dtype, 1e-3),
    }


def flip_summary(reports: Sequence[Mapping[str, Any] | None]) -> str | None:
    """One line for the bench output: how many lossless runs diverged and whether at near-ties."""
    flips = [r for r in reports if r]
    if not flips:
        return None
    ties = sum(r["near_tie"] for r in flips)
    worst = max(abs(r["gap"]) for r in flips)
    return (
        f"{len(flips)} lossless run(s) left greedy's tokens, {ties} at a near-tie "
        f"(largest logit gap at the divergence {worst:.3g}, {flips[0]['dtype']})"
    )
