"""Trees sized to the hardware (`max_nodes=auto`, docs/ALGORITHMS.md "Tree size from cost").

Each step the drafter proposes a large candidate tree; `TreeSizer.choose` keeps the prefix-closed subset
that maximises expected tokens per second of verification:

- `CostCurve`: t(n), the measured time of one verification forward with n draft nodes (core.timing
  measures and caches it per model, device and dtype), interpolated between measured sizes.
- `AcceptanceRates`: running per-source, per-depth estimates a(source, depth) = accepted ÷ verified
  within the request (a node is verified when its parent was accepted), from a prior of 0.5.
- `choose_nodes` (pure): each node's path product Π a(u) over its path is the chance it is accepted;
  add nodes in order of that product (a parent never after its child) and keep the prefix of that order
  that maximises E(S) / t(|S|), with E(S) = 1 + Σ_{v ∈ S} Π a(u).

The prior is 0.5 in every request, not the previous request's rates: a run's tree then depends on its
own prompt alone, so a relaxed run gives the same output however many runs came before it (a resumed
benchmark equals an uninterrupted one).
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from core.stats import AcceptanceCounts
from core.tree import DraftTree
from core.types import Decision

AUTO_CANDIDATES = 64  # draft nodes a drafter proposes under max_nodes=auto, for the sizer to choose from
PRIOR, PRIOR_WEIGHT = 0.5, 2.0  # a(source, depth) starts at 0.5, as if from two verified nodes
MAX_DEPTH = 16  # deeper nodes share the estimate of this depth


@dataclass(frozen=True)
class CostCurve:
    """t(n) in seconds for n draft nodes (plus the root), measured at `sizes` (ascending, starting at 0)."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        if len(self.sizes) < 2 or len(self.sizes) != len(self.seconds) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError("a cost curve needs ≥ 2 distinct ascending sizes, one time each")
        if any(not t > 0 for t in self.seconds):
            raise ValueError("a cost curve's times must be positive")

    def __call__(self, n: int) -> float:
        """Linear between measured sizes, extended along the last segment's slope beyond them."""
        s, t = self.sizes, self.seconds
        i = min(max(bisect.bisect_right(s, n) - 1, 0), len(s) - 2)
        slope = (t[i + 1] - t[i]) / (s[i + 1] - s[i])
        return max(t[i] + slope * (n - s[i]), t[0])


class AcceptanceRates(AcceptanceCounts):
    """Per (source, depth): draft nodes verified and accepted in one request (core.stats.AcceptanceCounts),
    and the rate estimated from them and the prior."""

    def rate(self, source: str, depth: int) -> float:
        key = (source, min(depth, MAX_DEPTH))
        return (self.accepted[key] + PRIOR * PRIOR_WEIGHT) / (self.verified[key] + PRIOR_WEIGHT)

    def observe(self, tree: DraftTree, decisions: Sequence[Decision | str]) -> None:
        """Count one step's verdict (its decision per node, the root first)."""
        for i in range(1, len(tree)):
            self.add((tree.sources[i], min(tree.depths[i], MAX_DEPTH)), decisions[i])


def path_products(tree: DraftTree, rates: Sequence[float]) -> list[float]:
    """Π a(u) over each node's path from the root (the root: 1)."""
    out = [1.0] * len(tree)
    for i in range(1, len(tree)):  # parents come before children
        out[i] = out[tree.parents[i]] * rates[i]
    return out


def ranked_nodes(tree: DraftTree, rates: Sequence[float]) -> tuple[list[int], list[float]]:
    """Draft nodes by descending path product (ties: shallower, then earlier), and every node's product:
    any prefix of that order is prefix-closed, since a ≤ 1 puts a parent before its children."""
    products = path_products(tree, rates)
    return sorted(range(1, len(tree)), key=lambda i: (-products[i], tree.depths[i], i)), products


def common_size(rows: Sequence[tuple[Sequence[int], Sequence[float]]], cost: CostCurve,
                context_lens: Sequence[int] | None = None) -> int:
    """One tree size k for every row of a batch (rows pad to the widest tree, so a node one row adds costs
    every row a slot): the k with the most expected tokens over all rows per second of t(B·(k + 1) − 1),
    each row keeping the first k nodes of its `ranked_nodes` order. `context_lens`: the tokens each row has
    in the cache (the cost curve does not read them yet). Pure."""
    b = len(rows)
    longest = max((len(order) for order, _ in rows), default=0)
    expected = [1.0] * b
    best_k, best_rate = 0, b / cost(b - 1)
    for k in range(1, longest + 1):
        for r, (order, products) in enumerate(rows):
            if k <= len(order):
                expected[r] += products[order[k - 1]]
        rate = sum(expected) / cost(b * (k + 1) - 1)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


def choose_nodes(tree: DraftTree, rates: Sequence[float], cost: CostCurve, max_nodes: int | None = None) -> tuple[list[int], float]:
    """The draft nodes to keep (ids in tree order) and their expected tokens E(S).

    Nodes are added by descending path product (ties: shallower, then earlier), which keeps every
    parent before its children since a ≤ 1; of the prefixes of that order (at most `max_nodes` long)
    the one with the most expected tokens per second of t(|S|) wins."""
    order, products = ranked_nodes(tree, rates)
    if max_nodes is not None:
        order = order[:max_nodes]
    best_k, best_rate, expected = 0, 1.0 / cost(0), 1.0
    for k, node in enumerate(order, start=1):
        expected += products[node]
        rate = expected / cost(k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    kept = sorted(order[:best_k])
    return kept, 1.0 + sum(products[i] for i in kept)


class TreeSizer:
    """`max_nodes=auto` for one request: cuts each proposed tree to its best size and learns from each verdict."""

    def __init__(self, cost: CostCurve):
        self.cost = cost
        self.rates = AcceptanceRates()

    def choose(self, tree: DraftTree, context_len: int) -> DraftTree:
        """`tree` cut to the size that pays most; `context_len` is the tokens in the cache (the root's position),
        which the cost of a forward grows with (the cost curve does not read it yet)."""
        if tree.num_draft == 0:
            return tree
        kept, _ = choose_nodes(tree, self.node_rates(tree), self.cost)
        return tree.subset(kept)

    def ranked(self, tree: DraftTree) -> tuple[list[int], list[float]]:
        """This request's ranking of `tree`'s nodes (for a batch's common size: common_size)."""
        return ranked_nodes(tree, self.node_rates(tree))

    def node_rates(self, tree: DraftTree) -> list[float]:
        """Each node's estimated acceptance given its parent's (the root: 1)."""
        return [1.0] + [self.rates.rate(tree.sources[i], tree.depths[i]) for i in range(1, len(tree))]

    def observe(self, tree: DraftTree, decisions: Sequence[Decision | str]) -> None:
        """Learn from one step's verdict (its decision per node)."""
        self.rates.observe(tree, decisions)
