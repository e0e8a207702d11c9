"""Growing a speculation tree from a suffix match: the best-first tree over the continuations of the
matched string, scored by empirical probability (SuffixDecoding, arXiv 2411.04975).

The statistics are the union of two kinds of occurrences of a string s: ranges of corpus suffix
arrays (previous outputs) and end positions in the current request's text. count(s) is the number of
occurrences of s in both; a child s + t has the conditional probability count(s + t) / count(s)
(occurrences that end right after s, at a sequence's end, count in the denominator only), and a
node's probability is the product of the conditionals from the matched string down to it. The tree
takes nodes in decreasing probability, so every prefix of the growth is the most probable subtree of
its size, until `budget` nodes or until no remaining candidate reaches `min_prob`. A node's source is
`context` when the current request's text holds its string too, else `history`.

Ties in probability go to the node pushed first (children are pushed in ascending token order, when
their parent is taken): the growth depends on the occurrences only, never on how they are stored.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from core.suffix.array import SORT_DEPTH, SuffixArray
from core.tree import DraftTree
from core.types import Source

CONTEXT: Source = "context"  # the current request's text holds the node's string
HISTORY: Source = "history"  # only the corpus of previous outputs does

_SMALL_GROUP = 24  # context occurrence sets up to this size are grouped in Python
# The matched length at which a continuation every occurrence shares counts as even odds (node_confidence).
# Fitted on held-out requests (benchmarks/fit_suffix_confidence.py; docs/SUFFIX.md, "Pricing each node").
MATCH_HALF = 1.0


@dataclass
class SuffixDraft:
    """One speculation: node i has token tokens[i] under parents[i] (an index into these lists, or -1
    for the root, i.e. the pending token). Parents come before their children."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # product of the conditionals from the root
    counts: list[int] = field(default_factory=list)  # occurrences of the node's string, corpus + context
    context_counts: list[int] = field(default_factory=list)  # of which in the current request's text
    sources: list[Source] = field(default_factory=list)
    match_len: int = 0  # tokens of the matched suffix (0: no match, no draft)
    match_count: int = 0  # occurrences of the matched suffix
    budget: int = 0  # the node budget this speculation had

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, prob: float, count: int, context_count: int) -> int:
        """Append a node; returns its index."""
        self.tokens.append(token)
        self.parents.append(parent)
        self.probs.append(prob)
        self.counts.append(count)
        self.context_counts.append(context_count)
        self.sources.append(CONTEXT if context_count else HISTORY)
        return len(self.tokens) - 1

    @property
    def score(self) -> float:
        """Expected accepted tokens if each node is accepted with its probability (sum of probs)."""
        return float(sum(self.probs))

    def accepted_by(self, continuation) -> int:
        """How many of `continuation`'s tokens this draft holds as a path from the root: what strict
        verification accepts when the target's output goes on with them (for simulations)."""
        node, n = -1, 0
        while n < len(continuation):
            nxt = next(
                (i for i, (p, t) in enumerate(zip(self.parents, self.tokens)) if p == node and t == continuation[n]),
                None,
            )
            if nxt is None:
                break
            node, n = nxt, n + 1
        return n

    def conditionals(self) -> list[float]:
        """Each node's empirical probability given its parent's string: count(u + t) / count(u)."""
        return [p / (self.probs[parent] if parent >= 0 else 1.0) for p, parent in zip(self.probs, self.parents)]

    def depths(self) -> list[int]:
        out: list[int] = []
        for parent in self.parents:
            out.append(out[parent] + 1 if parent >= 0 else 1)
        return out

    def confidences(self, half: float = MATCH_HALF) -> list[float]:
        """node_confidence of every node (its string above it: the match and its ancestors)."""
        return [node_confidence(q, self.match_len + d - 1, half) for q, d in zip(self.conditionals(), self.depths())]

    def as_tree(self, root_token: int, with_probs: bool = True, half: float | None = MATCH_HALF) -> DraftTree:
        """The draft as a DraftTree rooted at `root_token`; `with_probs` puts each node's probability
        in `draft_probs` (recorded in traces as draft_p); each node carries its `confidences(half)` for
        the tree sizer (half None: none)."""
        tree = DraftTree.root_only(root_token)
        conf = self.confidences(half) if half is not None else [None] * len(self)
        for tok, parent, src, p, c in zip(self.tokens, self.parents, self.sources, self.probs, conf):
            tree.add(parent + 1, tok, src, p if with_probs else None, c)
        return tree


def node_confidence(conditional: float, matched: int, half: float = MATCH_HALF) -> float:
    """The chance a node is accepted once its parent was, from the suffix structure's evidence alone: the
    empirical conditional probability of its token after the string above it (SuffixDecoding's node score),
    discounted by how much text that string is: `matched` tokens (the match plus the node's ancestors), at
    `half` tokens an even bet, ~1 for a long exact repeat. A continuation seen after one or two tokens says
    little (short strings recur everywhere and go on in many ways); one seen after forty says the text is
    repeating. Pure."""
    if matched <= 0:
        return 0.0
    return float(conditional) * matched / (matched + half)


@dataclass
class ContextOccurrences:
    """Where the matched string ends in the current request's text (`text` = its n tokens)."""

    text: np.ndarray
    ends: np.ndarray  # int64, each <= n - 2


def node_budget(match_len: int, alpha: float, max_nodes: int) -> int:
    """min(max_nodes, floor(alpha * match_len)): longer matches earn bigger trees."""
    return max(0, min(int(max_nodes), int(math.floor(alpha * match_len + 1e-9))))


def _group_context(text: np.ndarray, ends: np.ndarray) -> dict[int, np.ndarray]:
    """The occurrences continued by each next token: token -> the continued ends (advanced by one)."""
    nxt = ends + 1
    nxt = nxt[nxt < len(text)]
    if not nxt.size:
        return {}
    tokens = text[nxt]
    if nxt.size <= _SMALL_GROUP:
        groups: dict[int, list[int]] = {}
        for pos, tok in zip(nxt.tolist(), tokens.tolist()):
            groups.setdefault(tok, []).append(pos)
        return {tok: np.asarray(pos, dtype=np.int64) for tok, pos in groups.items()}
    order = np.argsort(tokens, kind="stable")
    tokens, nxt = tokens[order], nxt[order]
    cut = np.flatnonzero(tokens[1:] != tokens[:-1]) + 1
    return {int(tokens[a]): nxt[a:b] for a, b in zip(np.concatenate(([0], cut)), np.concatenate((cut, [len(nxt)])))}


def _children(parts, occ, offset: int, total: int, threshold: float):
    """The children of one node whose count reaches `threshold` (= min_prob * total / node prob):
    token -> (count, context count, child parts, child context ends), ascending by token.

    A qualifying child has count >= threshold in the union, so in at least one part it has at least
    the same share of that part's count (if each part held less, so would the sum): each part is
    asked only for children above its own share, then every candidate is counted in every part."""
    found: dict[int, dict[int, tuple]] = {}  # token -> {part index: (array, lo, hi, count)}
    share = threshold / total if total else 1.0
    complete = []  # parts asked for every child: a token they did not return has count 0 there
    for pi, (arr, lo, hi, cnt) in enumerate(parts):
        min_count = max(1, math.ceil(share * cnt - 1e-9))
        complete.append(min_count == 1)
        for tok, a, b, c in arr.children(lo, hi, offset, min_count):
            found.setdefault(tok, {})[pi] = (arr, a, b, c)
    groups = _group_context(occ.text, occ.ends) if occ is not None and occ.ends.size else {}
    if groups:
        ctx_min = max(1, math.ceil(share * occ.ends.size - 1e-9))
        for tok, ends in groups.items():
            if ends.size >= ctx_min and tok not in found:
                found[tok] = {}
    out = []
    for tok in sorted(found):
        child_parts = found[tok]
        count = sum(p[3] for p in child_parts.values())
        for pi, (arr, lo, hi, cnt) in enumerate(parts):
            if pi not in child_parts and not complete[pi]:
                a, b = arr.child_range(lo, hi, offset, tok)
                c = arr.count(a, b) if b > a else 0
                if c:
                    child_parts[pi] = (arr, a, b, c)
                    count += c
        tok_ends = groups.get(tok)
        ctx = 0 if tok_ends is None else int(tok_ends.size)
        count += ctx
        if count >= threshold - 1e-9 * max(1.0, threshold):
            out.append(
                (
                    tok,
                    count,
                    ctx,
                    [child_parts[pi] for pi in sorted(child_parts)],
                    ContextOccurrences(occ.text, tok_ends) if ctx and tok_ends is not None else None,
                )
            )
    return out


def grow_tree(
    match_len: int,
    parts: list[tuple[SuffixArray, int, int]],
    occ: ContextOccurrences | None,
    budget: int,
    min_prob: float = 0.1,
    max_depth: int = 64,
) -> SuffixDraft:
    """The best-first speculation tree below a match of `match_len` tokens that occurs in the corpus
    ranges `parts` (array, lo, hi) and/or at the context ends `occ`; see the module docstring.
    `max_depth` bounds the tree's depth (and the corpus ranges' exact depth bounds it too)."""
    counted = [(arr, lo, hi, arr.count(lo, hi)) for arr, lo, hi in parts]
    counted = [p for p in counted if p[3] > 0]
    if occ is not None and not occ.ends.size:
        occ = None
    ctx_count = 0 if occ is None else int(occ.ends.size)
    total = sum(p[3] for p in counted) + ctx_count
    draft = SuffixDraft(match_len=match_len, match_count=total, budget=budget)
    if budget <= 0 or total == 0 or match_len <= 0:
        return draft
    depth_limit = min(int(max_depth), SORT_DEPTH - match_len)
    min_prob = float(min_prob)
    heap: list = []
    pushed = 0

    def expand(node: int, depth: int, prob: float, node_parts, node_occ, node_total: int) -> None:
        nonlocal pushed
        if depth >= depth_limit:
            return
        threshold = max(min_prob, 0.0) * node_total / prob
        for tok, count, ctx, child_parts, child_occ in _children(
            node_parts, node_occ, match_len + depth, node_total, threshold
        ):
            p = prob * (count / node_total)
            if p >= min_prob:
                heapq.heappush(heap, (-p, pushed, node, tok, depth + 1, count, ctx, child_parts, child_occ, None))
                pushed += 1

    expand(-1, 0, 1.0, counted, occ, total)
    while heap and len(draft.tokens) < budget:
        neg_p, _, parent, tok, depth, count, ctx, child_parts, child_occ, chain = heapq.heappop(heap)
        node = draft.add(tok, parent, -neg_p, count, ctx)
        if len(draft.tokens) >= budget:
            break
        if chain is None:  # (a chain's rest never reaches deeper than the depth limit it was read under)
            limit = min(budget - len(draft.tokens), depth_limit - depth)
            chain = _common_continuation(child_parts, child_occ, match_len + depth, limit) if limit > 0 else []
        # Where every occurrence continues alike, each next token has conditional probability 1: it
        # is taken at once unless a waiting candidate is at least as probable (ties: earlier push);
        # then it waits in the heap with the rest of the common continuation.
        for i, t in enumerate(chain):
            depth += 1
            child_occ = None if child_occ is None else ContextOccurrences(child_occ.text, child_occ.ends + 1)
            if heap and heap[0][0] <= neg_p:
                heapq.heappush(
                    heap, (neg_p, pushed, node, t, depth, count, ctx, child_parts, child_occ, chain[i + 1 :])
                )
                pushed += 1
                break
            node = draft.add(t, node, -neg_p, count, ctx)
            if len(draft.tokens) >= budget:
                break
        else:
            if len(draft.tokens) < budget:
                expand(node, depth, -neg_p, child_parts, child_occ, count)
    return draft


def _common_continuation(parts, occ, offset: int, limit: int) -> list[int]:
    """The next tokens (at most `limit`) that every occurrence of a node's string continues with, when
    they all lie in one corpus range without dropped entries or all in the context; else []."""
    if occ is not None:
        if parts:
            return []
        ends, text = occ.ends, occ.text
        room = min(limit, len(text) - 1 - int(ends.max()))
        if room <= 0:
            return []
        rows = text[ends[:, None] + np.arange(1, room + 1)] if ends.size > 1 else None
        first = text[int(ends[0]) + 1 : int(ends[0]) + 1 + room]
        if rows is None:
            return first.tolist()
        same = (rows == first).all(axis=0)
        return first[: int(np.argmin(same)) if not same.all() else room].tolist()
    if len(parts) != 1:
        return []
    arr, lo, hi, count = parts[0]
    if hi - lo != count:
        return []
    return arr.common_continuation(lo, hi, offset, limit)
