"""The drafter protocol: what the engine asks of every drafting strategy, and nothing more.

A drafter proposes a draft tree rooted at the pending token and learns from what was committed, as
transformers' candidate generators do. What it needs from the target's forwards it declares up front
(`prefill_topk`, `generated_topk`); the engine hands those predictions over, so no caller ever probes
a drafter for optional attributes. A drafter that learns from every row of every verified tree (Token
Recycling) says so by subclassing `TreeObserver`, which declares `tree_topk` and `observe_tree`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from core.tree import DraftTree
from core.types import Source


@dataclass
class TopK:
    """The target's top-k next-token ids at every prompt position i (predicting token i + 1)."""

    ids: np.ndarray  # (n, k) int32, best first


@dataclass
class TreeTopK:
    """One verification forward as a TreeObserver sees it: the tree's tokens, the target's top-k ids at
    every row (row i = the distribution after node i), and the accepted path (node ids, root first)."""

    tokens: np.ndarray  # (Q,) int32: the fed tokens, node 0 the root
    ids: np.ndarray  # (Q, k) int32, best first
    path: list[int]


@dataclass
class Proposal:
    """One step's draft: the tree (each node with its source and, for draft models, its draft
    probability) and, where a sampling verifier needs them, the draft's distributions."""

    tree: DraftTree
    q_rows: torch.Tensor | None = (
        None  # (depth, V): the draft model's sampling distribution at each chain depth (T > 0)
    )


@dataclass(frozen=True)
class DraftEnv:
    """What a drafter may be built from besides the method's parameters."""

    target: Any = None  # core.models.LoadedModel
    draft: Any = None  # a LoadedModel sharing the target's tokenizer, for draft-model drafters
    context_ids: list[int] | None = None  # a separate document for the pool (CASD's full context); None = the prompt
    generator: torch.Generator | None = None  # the run's one random stream, shared with the sampling verifier
    table: Any = None  # core.drafters.recycle.RecycleTable: the model's recycled top-k table (recycle, fallback=1)
    corpus: Any = None  # core.suffix.SuffixCorpus: previous outputs of the model (suffix, fallback=suffix)


class Drafter(Protocol):
    prefill_topk: int  # target predictions per prompt position that `begin` wants (0 = none)
    generated_topk: int  # target predictions per committed token that `commit` wants (0 = none)
    # Whether commit(a, None) then commit(b, None) leaves the drafter as commit(a + b, None) does: then a step that did
    # not ask it (core.sizing's pause) may hand its tokens over later, with the next step's (core.step.emit).
    joins_commits: bool
    # Every source its nodes can carry, and whether they carry confidences (DraftTree.confidence): what
    # core.sizing prices a step by before the drafter has proposed anything (a first step no tree can pay for
    # is then not drafted).
    node_sources: frozenset[Source]
    scores_nodes: bool

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        """Start a request: `prefill` holds `prefill_topk` predictions per prompt position (None when 0)."""

    def propose(self, sequence: list[int]) -> Proposal:
        """A draft tree rooted at `sequence[-1]`, the pending token."""

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        """The tokens this step committed; `predictions[j]` are the target's top `generated_topk` ids at
        the position of new_tokens[j] (None when `generated_topk` is 0)."""


class TreeObserver(ABC):
    """The declared need of drafters that learn from whole forwards: after each step the engine computes
    the top `tree_topk` ids of every tree row (one topk, one transfer) and calls `observe_tree` before
    `commit`. Declared by subclassing, so the engine asks `isinstance`, never probes attributes."""

    tree_topk: int

    @abstractmethod
    def observe_tree(self, forward: TreeTopK) -> None:
        """What the step's forward predicted at every node of the tree it verified."""


class NoDraft:
    """Root-only trees: plain autoregressive decoding through the same engine."""

    prefill_topk = 0
    generated_topk = 0
    joins_commits = True
    node_sources: frozenset[Source] = frozenset()
    scores_nodes = False

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "NoDraft":
        return cls()

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        pass

    def propose(self, sequence: list[int]) -> Proposal:
        return Proposal(DraftTree.root_only(sequence[-1]))

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        pass
