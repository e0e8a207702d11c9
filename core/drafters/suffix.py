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
from core.suffix.draft import CONTEXT, HISTORY
from core.types import Source


class SuffixDrafter:
    """Each step: the speculator's best-first tree over the match's continuations, at most
    min(max_nodes, spec_factor * match length) nodes (max_nodes=auto: up to AUTO_CANDIDATES, cut by
    core.sizing from the measured cost of a forward)."""

    prefill_topk = 0
    generated_topk = 0
    joins_commits = True  # the speculator appends token by token
    node_sources: frozenset[Source] = frozenset({CONTEXT, HISTORY})
    scores_nodes = True  # each node's continuation frequency and match length (core.suffix.draft)

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


# The default `fallback_margin` (core.params): the corpus drafts wherever its match is at least as long as the pool's
# key. Fitted on FIT_ITEMS (benchmarks/fit_suffix_fallback.py: of 0-8, 0 had the highest MAL over aasd on both first
# sight and repeats); 1 (only where it is longer) was the first rule. docs/SUFFIX.md has the numbers.
FALLBACK_MARGIN = 0
# The requests of the repeated workload (benchmarks/repeated_workload.py, seed 1: each issued twice) that the suffix
# settings were fitted on: MATCH_HALF (benchmarks/fit_suffix_confidence.py) and the fallback margin
# (benchmarks/fit_suffix_fallback.py). A benchmark reporting on any of them is not clean: bench_suffix.py warns.
FIT_ITEMS = (
    "math-111",
    "reasoning-101",
    "extraction-131",
    "stem-141",
    "humanities-151",
    "roleplay-91",
    "translation-161",
    "code-textwrap.indent",
    "code-calendar.leapdays",
    "code-string.capwords",
    "code-statistics.median",
    "code-html.escape",
)


def corpus_drafts(corpus_match: int, pool_key: int, margin: int = FALLBACK_MARGIN) -> bool:
    """Whether fallback=suffix drafts from the corpus rather than the context pool: where the corpus's match
    is at least `margin` tokens longer than the pool's key (a longer match is stronger evidence that the text
    repeats; the pool matches down to one token, so "where the pool has no match" alone would almost never
    hand over). No corpus match never drafts from the corpus."""
    return corpus_match > 0 and corpus_match - pool_key >= margin


def corpus_fallback(corpus: SuffixCorpus, max_nodes: int) -> SuffixSpeculator:
    """What a context drafter with fallback=suffix drafts from where its pool has no match: the corpus
    alone (the pool already covers the request's own text), every node `history`."""
    return SuffixSpeculator(corpus, max_nodes=max_nodes, use_context=False)
