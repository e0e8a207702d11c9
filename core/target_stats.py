"""What one verification forward says about every node of a draft tree: per-row argmax, entropy,
max p and p(eos), and each draft node's `NodeStats` under its parent's distribution (the numbers the
rules in core.rules read and the trace records keep). Also transformers' sampling warpers, so our
sampling matches `generate(do_sample=True)`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from core.rules import NodeStats
from core.tree import DraftTree


@dataclass
class StepStats:
    """Per-row results of one verification forward, converted to Python once per step."""

    row_argmax: list[int]
    row_entropy: list[float]
    row_max_p: list[float]
    row_p_eos: list[float]
    nodes: list[NodeStats | None]  # None for the root
    logp: list[float]  # log p of each node's token (0 for the root)
    logits: torch.Tensor = field(repr=False, default=None)  # (Q, V) float32, for the bonus token's record
    log_norm: torch.Tensor = field(repr=False, default=None)  # (Q,) log Σ exp(logits) per row

    def logprob(self, row: int, token: int) -> float:
        return float(self.logits[row, token] - self.log_norm[row])

    def rank(self, row: int, token: int) -> int:
        return token_rank(self.logits[row], token)


def token_rank(row: torch.Tensor, token: int) -> int:
    """Tokens ranked ahead of `token` in one row of logits: a higher logit, or an equal one at a lower
    id (argmax's tie-break; bf16 logits tie often). One pass over the row, no full-size temporary."""
    value = row[token]
    if row.device.type == "cpu":  # numpy counts ~1.5x faster than torch's bool -> int64 sum
        r, v = row.numpy(), value.item()
        return int(np.count_nonzero(r[:token] >= v) + np.count_nonzero(r[token + 1 :] > v))
    return int((row[:token] >= value).sum() + (row[token + 1 :] > value).sum())


def _row_argmax(x: torch.Tensor) -> list[int]:
    # On CPU, numpy's argmax over 49k-wide rows is ~10x faster than torch's (0.02 vs 0.3 ms for 11 rows).
    # Both return the first maximum.
    return x.numpy().argmax(-1).tolist() if x.device.type == "cpu" else x.argmax(-1).tolist()


def step_stats(logits: torch.Tensor, tree: DraftTree, eos_ids: Sequence[int]) -> StepStats:
    """Statistics of every node's token under its parent's distribution, from (Q, V) logits.

    Runs every step on every node, so it makes as few passes over the vocabulary and as few
    full-size temporaries as it can: one softmax, no log-softmax tensor, ranks counted row by row.
    With Z = Σ exp(z - max z), max p = 1/Z, so log Z = -log max p and the entropy is
    log Z - Σ p·z + max z.
    """
    logits = logits.float()
    top_logit = logits.amax(-1)
    row_argmax = _row_argmax(logits)
    probs = torch.softmax(logits, dim=-1)
    max_p = probs.gather(1, torch.tensor(row_argmax, device=logits.device)[:, None])[:, 0]
    log_z = -max_p.log()
    mean_logit = torch.linalg.vecdot(probs, logits)
    if bool(mean_logit.isnan().any()):  # a -inf logit: 0·(-inf); p = 0 adds nothing
        mean_logit = torch.linalg.vecdot(probs, logits.clamp_min(-1e30))
    entropy = (log_z - mean_logit + top_logit).clamp_min(0.0)
    p_eos = probs[:, list(eos_ids)].max(-1).values if eos_ids else torch.zeros_like(max_p)
    log_norm = top_logit + log_z
    row_entropy, row_max_p, row_p_eos = entropy.tolist(), max_p.tolist(), p_eos.tolist()
    nodes: list[NodeStats | None] = [None]
    logp = [0.0]
    if len(tree) > 1:
        parents = torch.tensor(tree.parents[1:], device=logits.device)
        toks = torch.tensor(tree.tokens[1:], device=logits.device)
        tok_logit = logits[parents, toks]
        gap = (top_logit[parents] - tok_logit).tolist()
        tok_logp = (tok_logit - log_norm[parents]).tolist()
        for i, (lp, g) in enumerate(zip(tok_logp, gap), start=1):
            parent = tree.parents[i]
            rank = token_rank(logits[parent], tree.tokens[i])
            nodes.append(NodeStats(math.exp(lp), row_entropy[parent], row_max_p[parent], row_p_eos[parent], rank, g))
            logp.append(lp)
    return StepStats(row_argmax, row_entropy, row_max_p, row_p_eos, nodes, logp, logits, log_norm)


def sampling_processors(temperature: float, top_k: int = 0, top_p: float = 1.0) -> LogitsProcessorList:
    """transformers' own warpers, so our sampling matches `generate(do_sample=True)`."""
    procs = LogitsProcessorList()
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k and top_k > 0:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    return procs
