"""One request's suffix speculation over a corpus: begin, then propose / commit per step, then
end_request. This is what a drafter calls; it holds the per-request state (the context index and
the previous step's match lengths, which bound the next step's search).

Per step: the match is the longest suffix (at most `max_match` tokens) of the request's text that
occurs in the corpus (previous outputs) or earlier in the request itself; the tree grows from its
occurrences in both (core.suffix.draft.grow_tree) up to min(max_nodes, alpha * match length) nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.suffix.array import SORT_DEPTH
from core.suffix.context import ContextIndex
from core.suffix.corpus import SuffixCorpus
from core.suffix.draft import ContextOccurrences, SuffixDraft, grow_tree, node_budget

MAX_MATCH = 64  # the longest suffix searched (tokens)


class SuffixSpeculator:
    """`corpus` None (or empty) drafts from the request's own text only; `use_context=False` drafts
    from the corpus only (every node `history`)."""

    def __init__(
        self,
        corpus: SuffixCorpus | None = None,
        *,
        alpha: float = 4.0,
        max_nodes: int = 64,
        max_match: int = MAX_MATCH,
        min_prob: float = 0.1,
        max_depth: int = 64,
        use_context: bool = True,
    ):
        if not 1 <= int(max_match) <= MAX_MATCH:
            raise ValueError(f"max_match must lie in 1..{MAX_MATCH} (got {max_match})")
        if alpha < 0 or max_nodes < 0 or not 0.0 <= min_prob <= 1.0 or max_depth < 1:
            raise ValueError(
                f"need alpha >= 0, max_nodes >= 0, 0 <= min_prob <= 1, max_depth >= 1 "
                f"(got {alpha}, {max_nodes}, {min_prob}, {max_depth})"
            )
        self.corpus = corpus
        self.alpha, self.max_nodes, self.max_match = float(alpha), int(max_nodes), int(max_match)
        self.min_prob, self.max_depth, self.use_context = float(min_prob), min(int(max_depth), SORT_DEPTH), use_context
        self.context: ContextIndex | None = None
        self._tail = np.zeros(0, dtype=np.int64)  # the last max_match tokens when there is no context index
        self._reset_hints()

    def _reset_hints(self) -> None:
        self._prev_corpus: list[int] | None = None  # last step's match length per corpus array
        self._prev_context: int | None = None
        self._since = 0  # tokens committed since the last propose
        self._corpus_version = -1

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Start a request: index its prompt."""
        ids = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
        self.context = ContextIndex(ids) if self.use_context else None
        self._tail = ids[-self.max_match :].copy()
        self._reset_hints()

    def commit(self, new_tokens: Sequence[int]) -> None:
        """The tokens a step committed (accepted drafts and the bonus token), in order."""
        ids = np.asarray(new_tokens, dtype=np.int64).reshape(-1)
        if self.context is not None:
            self.context.extend(ids)
        self._tail = np.concatenate((self._tail, ids))[-self.max_match :]
        self._since += len(ids)

    def propose(self, tail: Sequence[int] | None = None, max_nodes: int | None = None) -> SuffixDraft:
        """The speculation below the request's current text. `tail`, when given, must be the text's
        last tokens (the engine's sequence); only its last token is checked."""
        if tail is not None and len(tail) and self._tail.size and int(tail[-1]) != int(self._tail[-1]):
            raise ValueError(
                "propose() got a sequence that does not end with the committed tokens: "
                "call begin(prompt) and commit(new tokens) for every step"
            )
        pattern = self._tail
        if not pattern.size:
            return SuffixDraft()
        budget_cap = self.max_nodes if max_nodes is None else min(int(max_nodes), self.max_nodes)
        pattern_bytes = pattern.astype(">u4").tobytes()

        arrays = self.corpus.arrays() if self.corpus is not None else ()
        version = self.corpus.version if self.corpus is not None else 0
        if version != self._corpus_version or self._prev_corpus is None or len(self._prev_corpus) != len(arrays):
            corpus_upper = [self.max_match] * len(arrays)
        else:
            corpus_upper = [min(self.max_match, k + self._since) for k in self._prev_corpus]
        matches = [arr.longest_match(pattern_bytes, up) for arr, up in zip(arrays, corpus_upper)]

        ctx_k, ctx_ends = 0, None
        if self.context is not None:
            upper = None if self._prev_context is None else min(self.max_match, self._prev_context + self._since)
            ctx_k, ctx_ends = self.context.longest_match(self.max_match, upper)

        self._prev_corpus = [m[0] for m in matches]
        self._prev_context = ctx_k if self.context is not None else None
        self._since = 0
        self._corpus_version = version

        k = max([ctx_k] + [m[0] for m in matches])
        if k == 0:
            return SuffixDraft()
        parts = [(arr, lo, hi) for arr, (mk, lo, hi) in zip(arrays, matches) if mk == k]
        occ = None
        if ctx_k == k and self.context is not None and ctx_ends is not None:  # k > 0: the context matched
            occ = ContextOccurrences(self.context.tokens, ctx_ends)
        budget = node_budget(k, self.alpha, budget_cap)
        return grow_tree(k, parts, occ, budget, self.min_prob, self.max_depth)

    def end_request(self, output_ids: Sequence[int] | None = None, key: str | int | None = None):
        """Finish the request: an online corpus takes `output_ids` (the generated tokens) as a new
        request; a frozen one is left as it is. Returns the corpus key it was stored under, or None."""
        stored = None
        if self.corpus is not None and not self.corpus.frozen and output_ids is not None and len(output_ids):
            stored = self.corpus.add(output_ids, key=key)
        self.context = None
        self._tail = np.zeros(0, dtype=np.int64)
        self._reset_hints()
        return stored
