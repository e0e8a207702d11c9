"""PLD (Saxena 2023), as transformers' prompt lookup does it."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.drafters.base import DraftEnv, Proposal, TopK
from core.pool import DraftPool
from core.tree import DraftTree
from core.types import Source


class PromptLookupDrafter:
    """The longest matching n-gram of the last `max_ngram` tokens (earliest occurrence, left to right)
    proposes one chain of `num_tokens`. The search runs over the prompt and the generated text,
    indexed incrementally by the draft pool."""

    prefill_topk = 0
    generated_topk = 0
    joins_commits = True  # the pool appends token by token
    node_sources: frozenset[Source] = frozenset({"context", "generated"})
    scores_nodes = False

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10):
        self.max_ngram, self.num_tokens = max_ngram, num_tokens
        self.pool: DraftPool | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "PromptLookupDrafter":
        return cls(max_ngram=3, num_tokens=10)  # transformers' prompt_lookup_num_tokens=10, max n-gram 3

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        self.pool = DraftPool(prompt_ids, key_len=self.max_ngram, ngram=self.num_tokens)

    def propose(self, sequence: list[int]) -> Proposal:
        tree = DraftTree.root_only(sequence[-1])
        _, hits = self.pool.lookup(sequence[-self.max_ngram :], max_hits=1, order="earliest")
        if hits:
            tree.add_chain(0, hits[0].tokens.tolist(), hits[0].sources)
        return Proposal(tree)

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        self.pool.extend(new_tokens)
