"""Suffix speculation (SuffixDecoding): drafts from the longest suffix of the request's text that
occurred before, in the request itself or in a corpus of previous outputs (core.suffix). Nodes the
request's text holds are `context`; those only previous outputs hold are `history`."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.drafters.base import DraftEnv, Proposal, TopK
from core.params import auto_or
from core.sizing import AUTO_CANDIDATES
from core.suffix import SuffixCorpus, SuffixSpeculator


class SuffixDrafter:
    """Each step: the speculator's best-first tree over the match's continuations, at most
    min(max_nodes, spec_factor * match length) nodes (max_nodes=auto: up to AUTO_CANDIDATES, cut by
    core.sizing from the measured cost of a forward)."""

    prefill_topk = 0
    generated_topk = 0

    def __init__(
        self, corpus: SuffixCorpus | None, max_nodes: int = 0, spec_factor: float = 4.0, min_prob: float = 0.1
    ):
        self.speculator = SuffixSpeculator(
            corpus, alpha=spec_factor, max_nodes=auto_or(max_nodes, AUTO_CANDIDATES), min_prob=min_prob
        )

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "SuffixDrafter":
        if env.corpus is None:
            raise ValueError("the suffix drafter needs a corpus (core.methods.build gives the model's shared one)")
        return cls(env.corpus, params["max_nodes"], params["spec_factor"], params["min_token_prob"])

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        self.speculator.begin(prompt_ids)

    def propose(self, sequence: list[int]) -> Proposal:
        return Proposal(self.speculator.propose(sequence).as_tree(sequence[-1]))

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        self.speculator.commit(new_tokens)


def corpus_fallback(corpus: SuffixCorpus, max_nodes: int) -> SuffixSpeculator:
    """What a context drafter with fallback=suffix drafts from where its pool has no match: the corpus
    alone (the pool already covers the request's own text), every node `history`."""
    return SuffixSpeculator(corpus, max_nodes=max_nodes, use_context=False)
