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
    logits: torch.Tensor = field(repr=False)  # (Q, V) float32, for the bonus token's record
    log_norm: torch.Tensor = field(repr=False)  # (Q,) log Σ exp(logits) per row
    topk: np.ndarray | None = field(repr=False, default=None)  # (Q, k) int32: each row's top-k ids, when asked for

    def logprob(self, row: int, token: int) -> float:
        return float(self.logits[row, token] - self.log_norm[row])

    def rank(self, row: int, token: int) -> int:
        return token_rank(self.logits[row], token)

    def token_numbers(self, row: int, token: int) -> tuple[float, int, float]:
        """p, rank and logit gap (log max p − log p) of `token` in row `row`. The row's argmax (the bonus token at
        T = 0) has them already: max p, rank 0, gap 0, so its record reads nothing more from the device."""
        if token == self.row_argmax[row]:
            return self.row_max_p[row], 0, 0.0
        logp = self.logprob(row, token)
        return math.exp(logp), self.rank(row, token), math.log(self.row_max_p[row]) - logp


def token_rank(row: torch.Tensor, token: int) -> int:
    """Tokens ranked ahead of `token` in one row of logits: a higher logit, or an equal one at a lower
    id (argmax's tie-break; bf16 logits tie often). One pass over the row, no full-size temporary."""
    value = row[token]
    if row.device.type == "cpu":  # numpy counts ~1.5x faster than torch's bool -> int64 sum
        r, v = row.numpy(), value.item()
        return int(np.count_nonzero(r[:token] >= v) + np.count_nonzero(r[token + 1 :] > v))
    return int((row[:token] >= value).sum() + (row[token + 1 :] > value).sum())


def _row_argmax(x: torch.Tensor) -> torch.Tensor:
    # On CPU, numpy's argmax over 49k-wide rows is ~10x faster than torch's (0.02 vs 0.3 ms for 11 rows).
    # Both return the first maximum.
    return torch.from_numpy(x.numpy().argmax(-1)) if x.device.type == "cpu" else x.argmax(-1)


def _ranks(logits: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`token_rank` of every draft node (token `tokens[i]`, logit `values[i]`) in its parent's row."""
    if logits.device.type == "cpu":
        return torch.from_numpy(_ranks_numpy(logits.numpy(), parents.numpy(), tokens.numpy(), values.numpy()))
    return _ranks_torch(logits, parents, tokens, values)


def _ranks_torch(
    logits: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """`_ranks` for all nodes at once: the parents' rows gathered, compared and counted as (N, V) booleans."""
    rows, value = logits[parents], values[:, None]
    lower_id = torch.arange(logits.shape[-1], device=logits.device) < tokens[:, None]
    return (rows > value).logical_or_((rows == value).logical_and_(lower_id)).sum(-1)


_CPU_BLOCK = 8192  # vocabulary columns per pass of `_ranks_numpy`: its temporaries stay in the cache


def _ranks_numpy(logits: np.ndarray, parents: np.ndarray, tokens: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`_ranks` on CPU, where numpy compares several times faster than torch, a block of columns at a time.

    Left of a node's token an equal logit ranks ahead (z >= v); from the token on only a higher one,
    z > v, that is z >= nextafter(v, +inf) (NaN for v = +inf: nothing is higher). So each row is one
    comparison per block, plus, in the block holding the token, the ties on its left. Sorted by token,
    the nodes whose token is in a block are a slice.
    """
    vocab = logits.shape[1]
    width = min(max(_CPU_BLOCK, -(-vocab // 255)), vocab)  # at most 255 blocks: counts fit in uint8
    order = np.argsort(tokens, kind="stable")
    parents, tokens, values = parents[order], tokens[order], values[order]
    bounds = np.searchsorted(tokens, np.arange(0, vocab + width, width)).tolist()
    higher = np.where(values == np.inf, np.nan, np.nextafter(values, np.float32(np.inf)))
    threshold = values[:, None].copy()  # z >= v, up to the token's block
    offset = (tokens % width).astype(np.int32)[:, None]  # the token's column in its block
    columns = np.arange(width, dtype=np.int32)
    counts = np.zeros((len(parents), width), dtype=np.uint8)  # per node and column, at most 1 per block
    for block, start in enumerate(range(0, vocab, width)):
        lo, hi = bounds[block], bounds[block + 1]  # the nodes whose token is in this block
        threshold[lo:hi, 0] = higher[lo:hi]
        rows = logits[parents, start : start + width]
        w = rows.shape[1]
        counts[:, :w] += (rows >= threshold).view(np.uint8)
        ties = rows[lo:hi] == values[lo:hi, None]
        ties &= columns[:w] < offset[lo:hi]
        counts[lo:hi, :w] += ties.view(np.uint8)
    ranks = np.empty(len(parents), dtype=np.int64)
    ranks[order] = counts.sum(1, dtype=np.int64)
    return ranks


def step_stats(logits: torch.Tensor, tree: DraftTree, eos_ids: Sequence[int], topk: int = 0) -> StepStats:
    """Statistics of every node's token under its parent's distribution, from (Q, V) logits; with `topk`, also
    every row's top-k ids (what a drafter learns from: they ride in the same transfer).

    One host synchronisation per step: on a GPU every `.item()` or `.tolist()` waits for the device, so
    all per-row and per-node numbers are computed as tensors where the logits are, stacked into one
    float64 vector (argmax and ranks are small integers, exact in float64) and converted once. The
    indices go the other way in one copy that does not wait either.

    Runs every step on every node, so it makes few passes over the vocabulary and few full-size
    temporaries: one softmax (reused in place for Σ p·z), no log-softmax tensor. With
    Z = Σ exp(z - max z), max p = 1/Z, so log Z = -log max p and the entropy is log Z - Σ p·z + max z.
    """
    logits = logits.float()
    q, n = logits.shape[0], len(tree) - 1
    on_cuda = logits.device.type == "cuda"  # pinned host memory: the copy is queued, not waited for
    index = torch.tensor([*tree.parents[1:], *tree.tokens[1:], *eos_ids], dtype=torch.long, pin_memory=on_cuda)
    parents, tokens, eos = index.to(logits.device, non_blocking=True).split([n, n, len(eos_ids)])
    argmax = _row_argmax(logits)
    top_logit = logits.gather(1, argmax[:, None])[:, 0]
    tok_logit = logits[parents, tokens]
    rank = _ranks(logits, parents, tokens, tok_logit)
    probs = torch.softmax(logits, dim=-1)
    max_p = probs.gather(1, argmax[:, None])[:, 0]
    p_eos = probs[:, eos].max(-1).values if len(eos_ids) else torch.zeros_like(max_p)
    # Σ p·z, in place of probs. A -inf logit has p = 0 and adds nothing: nansum skips 0·(-inf) = NaN.
    mean_logit = probs.mul_(logits).nansum(-1)
    log_z = -max_p.log()
    entropy = (log_z - mean_logit + top_logit).clamp_min(0.0)
    log_norm = top_logit + log_z
    gap = top_logit[parents] - tok_logit
    tok_logp = tok_logit - log_norm[parents]
    parts = [argmax, entropy, max_p, p_eos, gap, tok_logp, rank]
    if topk:  # ids < 2**53 are exact in float64
        parts.append(logits.topk(min(topk, logits.shape[-1]), dim=-1).indices.flatten())
    host = torch.cat([t.double() for t in parts]).tolist()
    row_argmax = [int(a) for a in host[:q]]
    row_entropy, row_max_p, row_p_eos = host[q : 2 * q], host[2 * q : 3 * q], host[3 * q : 4 * q]
    gaps, logp, ranks = host[4 * q : 4 * q + n], host[4 * q + n : 4 * q + 2 * n], host[4 * q + 2 * n : 4 * q + 3 * n]
    top = np.asarray(host[4 * q + 3 * n :], dtype=np.int32).reshape(q, -1) if topk else None
    nodes: list[NodeStats | None] = [None]
    for i, parent in enumerate(tree.parents[1:]):
        nodes.append(
            NodeStats(
                math.exp(logp[i]), row_entropy[parent], row_max_p[parent], row_p_eos[parent], int(ranks[i]), gaps[i]
            )
        )
    return StepStats(row_argmax, row_entropy, row_max_p, row_p_eos, nodes, [0.0, *logp], logits, log_norm, top)


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
