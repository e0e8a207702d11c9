"""Draft trees: a root (the pending token) and draft nodes, each with a parent, a depth and a source.

Pure data and pure functions: building a trie from candidate sequences under a node budget, the 4D
additive attention mask and the position ids of one verification forward pass.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from core.types import Source


@dataclass
class DraftTree:
    """Node 0 is the root. Parents always come before their children (parents[i] < i)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    sources: list[Source]
    draft_probs: list[float | None] = field(default_factory=list)
    # The drafter's own estimate that a node is accepted once its parent was (None: it gives none); the sizer
    # prices such nodes with it (core.acceptance_prior). Empty: no node has one.
    confidence: list[float | None] = field(default_factory=list)
    _child_index: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    @classmethod
    def root_only(cls, root_token: int) -> "DraftTree":
        return cls([int(root_token)], [-1], [0], ["root"], [None])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_draft(self) -> int:
        return len(self.tokens) - 1

    def add(
        self, parent: int, token: int, source: Source, draft_p: float | None = None, confidence: float | None = None
    ) -> int:
        """Add `token` under `parent`; if that child exists already, return it unchanged."""
        key = (parent, int(token))
        existing = self._child_index.get(key)
        if existing is not None:
            return existing
        if not 0 <= parent < len(self.tokens):
            raise IndexError(f"parent {parent} is not a node of this tree")
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.sources.append(source)
        self.draft_probs.append(draft_p)
        if confidence is not None or self.confidence:
            self.confidence.extend([None] * (len(self.tokens) - 1 - len(self.confidence)))
            self.confidence.append(confidence)
        self._child_index[key] = len(self.tokens) - 1
        return len(self.tokens) - 1

    def confidence_of(self, node: int) -> float | None:
        """The drafter's confidence in `node` (None: none given)."""
        return self.confidence[node] if node < len(self.confidence) else None

    def child(self, parent: int, token: int) -> int | None:
        return self._child_index.get((parent, int(token)))

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            kids[self.parents[i]].append(i)
        return kids

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root to `node`, both included."""
        path = []
        while node != -1:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def _copy_node(self, out: "DraftTree", new_index: dict[int, int], i: int) -> int:
        """Node i added to `out` under the copy of its parent (`new_index`: this tree's ids -> out's)."""
        return out.add(
            new_index[self.parents[i]], self.tokens[i], self.sources[i], self.draft_probs[i], self.confidence_of(i)
        )

    def pruned(self, max_depth: int, stop_tokens: Collection[int] = ()) -> "DraftTree":
        """A copy without the nodes deeper than `max_depth` (the root has depth 0), and without any
        draft node whose token is in `stop_tokens` or that lies below one."""
        stops = set(stop_tokens)
        if max(self.depths) <= max_depth and not stops.intersection(self.tokens[1:]):
            return self
        out = DraftTree.root_only(self.tokens[0])
        new_index = {0: 0}
        for i in range(1, len(self.tokens)):
            # Parents come before children, so a dropped parent drops its whole subtree.
            if self.depths[i] <= max_depth and self.tokens[i] not in stops and self.parents[i] in new_index:
                new_index[i] = self._copy_node(out, new_index, i)
        return out

    def subset(self, keep: Collection[int]) -> "DraftTree":
        """A copy with the root and the draft nodes in `keep` (which must hold every kept node's parent)."""
        keep = set(keep)
        if len(keep) == self.num_draft:
            return self
        out = DraftTree.root_only(self.tokens[0])
        new_index = {0: 0}
        for i in range(1, len(self.tokens)):
            if i in keep:
                if self.parents[i] not in new_index:
                    raise ValueError(f"node {i} is kept without its parent {self.parents[i]}")
                new_index[i] = self._copy_node(out, new_index, i)
        return out

    def add_chain(
        self, parent: int, tokens: Sequence[int], sources: Sequence[Source] | Source, budget: int | None = None
    ) -> int:
        """Add a chain below `parent`, sharing existing prefixes; stop when the tree has `budget` draft nodes."""
        node = parent
        for i, tok in enumerate(tokens):
            src = sources if isinstance(sources, str) else sources[i]
            existing = self.child(node, tok)
            if existing is None and budget is not None and self.num_draft >= budget:
                break
            node = existing if existing is not None else self.add(node, tok, src)
        return node


Candidate = tuple[Sequence[int], Sequence[Source] | Source]  # a continuation of the root and its source(s)


def _prefix_stats(candidates: Sequence[Candidate]):
    """How many candidates start with each prefix, and for each its (first-seen order, source). The
    source is the first candidate's, except that `context` wins (docs/ALGORITHMS.md): a continuation the
    context holds is verified as context even when generated text holds it too."""
    counts: dict[tuple[int, ...], int] = {}
    first_seen: dict[tuple[int, ...], tuple[int, Source]] = {}
    for tokens, sources in candidates:
        prefix: tuple[int, ...] = ()
        for i, tok in enumerate(tokens):
            prefix = prefix + (int(tok),)
            counts[prefix] = counts.get(prefix, 0) + 1
            source = sources if isinstance(sources, str) else sources[i]
            if prefix not in first_seen:
                first_seen[prefix] = (len(first_seen), source)
            elif source == "context" and first_seen[prefix][1] != "context":
                first_seen[prefix] = (first_seen[prefix][0], "context")
    return counts, first_seen


def add_ranked(tree: DraftTree, candidates: Sequence[Candidate], budget: int) -> DraftTree:
    """Merge candidate continuations of the root into `tree`, adding at most `budget` new nodes: the
    prefixes most frequent among *these* candidates (ties: shallower, then earlier), each only under a
    parent the tree holds or gains. Prefixes the tree holds already cost nothing and keep their node."""
    counts, first_seen = _prefix_stats(candidates)
    node_of: dict[tuple[int, ...], int] = {(): 0}
    chosen: set[tuple[int, ...]] = set()
    for pre in sorted(counts, key=lambda pre: (-counts[pre], len(pre), first_seen[pre][0])):
        parent = node_of.get(pre[:-1])
        existing = tree.child(parent, pre[-1]) if parent is not None else None
        if existing is not None:
            node_of[pre] = existing
        elif len(chosen) < budget and (parent is not None or pre[:-1] in chosen):
            chosen.add(pre)
    for pre in sorted(chosen, key=lambda pre: (len(pre), first_seen[pre][0])):  # parents first
        node_of[pre] = tree.add(node_of[pre[:-1]], pre[-1], first_seen[pre][1])
    return tree


def merge_sequences(
    root_token: int,
    candidates: Sequence[Candidate],
    max_nodes: int,
) -> DraftTree:
    """Merge candidate continuations into one trie, keeping the `max_nodes` most frequent prefixes.

    A prefix's frequency is the number of candidates that start with it, so a kept node's parent is
    always kept too. Ties go to the shallower prefix, then to the earlier candidate (callers order
    candidates by preference). Each node takes the source of the first candidate that reached it, or
    `context` when any candidate from the context reached it.
    """
    return add_ranked(DraftTree.root_only(root_token), candidates, max(0, max_nodes))


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """Boolean (Q, Q): entry [i, j] is True when j is i itself or one of its ancestors."""
    q = len(parents)
    anc = torch.eye(q, dtype=torch.bool)
    for i in range(1, q):
        anc[i] |= anc[parents[i]]
    return anc


def tree_attention_mask(
    parents: Sequence[int], past_len: int, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The 4D additive mask (1, 1, Q, P + Q): 0 where a node may attend, finfo.min where it may not.

    Every node sees the whole committed prefix, its ancestors and itself, so no row is ever fully
    masked (SDPA would return NaN for such a row).
    """
    q = len(parents)
    blocked = torch.finfo(dtype).min
    mask = torch.zeros((1, 1, q, past_len + q), dtype=dtype, device=device)
    tree_part = torch.full((q, q), blocked, dtype=dtype, device=device)
    tree_part.masked_fill_(ancestor_matrix(parents).to(device), 0.0)
    mask[0, 0, :, past_len:] = tree_part
    return mask


def position_ids(depths: Sequence[int], past_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(1, Q) positions: a node at depth d sits at P + d; siblings share a position."""
    return torch.tensor([[past_len + d for d in depths]], dtype=torch.long, device=device)


def is_chain(parents: Sequence[int]) -> bool:
    """True when node i's parent is i - 1 for every node: plain causal attention is then exact."""
    return all(parents[i] == i - 1 for i in range(1, len(parents)))
