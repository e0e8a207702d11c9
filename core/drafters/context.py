"""Context-aware drafting (CASD, AASD): continuations retrieved from the n-gram draft pool, merged into a
trie under a node budget, with AASD's alignment siblings; where the pool has no match, optionally a tree
from Token Recycling's table (fallback=1) or from the model's corpus of previous outputs (fallback=2, suffix)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from core.drafters.base import DraftEnv, Proposal, TopK, TreeObserver, TreeTopK
from core.drafters.recycle import SOURCE, TEMPLATE, RecycleTable, expand
from core.drafters.suffix import FALLBACK_MARGIN, corpus_drafts, corpus_fallback
from core.params import auto_or
from core.pool import DraftPool
from core.sizing import AUTO_CANDIDATES
from core.suffix.draft import CONTEXT, HISTORY
from core.tree import Candidate, add_ranked, merge_sequences
from core.types import Source

ALIGN_SHARE = 0.25  # of the node budget kept for alignment siblings (when they need it); the rest for retrieved hits


class ContextDrafter(TreeObserver):
    """Context-aware drafting (CASD, AASD): retrieve continuations of the longest matching key from
    the draft pool, merge them into a trie under the node budget, and, with alignment sampling, add
    the target's own top prefill predictions as siblings of copied tokens it would not have chosen.

    The pool holds the prompt (default) or a separate document (`context_ids`, CASD's full-document
    pool beside a shortened prompt); generated tokens join it as they are committed. With a recycle
    `table`, a step whose key has no hit drafts Token Recycling's tree instead of none (source
    `recycled`, verified strictly under AASD's split), and the table learns from every forward. With a
    suffix `corpus`, previous outputs draft instead (source `history`, also strict) wherever they match
    more of the text's end than the pool's key does.
    """

    joins_commits = True  # the pool, the suffix speculator and the generated predictions append token by token

    def __init__(
        self,
        key_len: int = 6,
        ngram: int = 6,
        max_nodes: int = 16,
        align_m: int = 0,
        graft: bool = False,
        max_hits: int = 16,
        context_ids: list[int] | None = None,
        align_generated: bool = False,
        table: RecycleTable | None = None,
        corpus=None,
        fallback_margin: int = FALLBACK_MARGIN,
    ):
        self.key_len, self.ngram = key_len, ngram
        self.max_nodes = auto_or(
            max_nodes, AUTO_CANDIDATES
        )  # max_nodes=auto: candidates for core.sizing to choose from
        self.align_m, self.graft, self.max_hits = align_m, graft, max_hits
        self.context_ids = context_ids
        self.align_generated = bool(align_generated and align_m)
        self.pool: DraftPool | None = None
        self.predictions = None  # (positions, k) top prefill ids for the token at each pool position
        self.generated_predictions: list = []  # per generated token: the target's top ids at its position

        # Alignment needs the target's top align_m + 1 predictions per prompt position (and per generated
        # token with the align-generated extension): one for the aligned test, align_m alternatives.
        self.prefill_topk = align_m + 1 if align_m else 0
        self.generated_topk = self.prefill_topk if self.align_generated else 0
        self.table = table
        self.suffix = corpus_fallback(corpus, self.max_nodes) if corpus is not None else None  # fallback=suffix
        self.fallback_margin = fallback_margin
        self.tree_topk = table.k if table is not None else 0
        sources: set[Source] = {"context", "generated"} | ({"alignment"} if align_m else set())
        self.node_sources = frozenset(
            sources | ({SOURCE} if table is not None else set()) | ({CONTEXT, HISTORY} if corpus is not None else set())
        )
        self.scores_nodes = corpus is not None  # the suffix fallback's nodes carry confidences
        if table is not None:  # the table learns from the prompt too; alignment reads the first align_m + 1
            self.prefill_topk = max(self.prefill_topk, table.k)

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "ContextDrafter":
        return cls(
            params["key_len"],
            params["ngram"],
            params["max_nodes"],
            params.get("align_m", 0),
            graft=bool(params.get("align_graft", 0)),
            context_ids=env.context_ids,
            align_generated=bool(params.get("align_generated", 0)),
            table=env.table if params.get("fallback", 0) == 1 else None,
            corpus=env.corpus if params.get("fallback", 0) == 2 else None,
            fallback_margin=params.get("fallback_margin", FALLBACK_MARGIN),
        )

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        self.pool = DraftPool(
            self.context_ids if self.context_ids is not None else prompt_ids, key_len=self.key_len, ngram=self.ngram
        )
        self.predictions = None
        self.generated_predictions = []
        if self.suffix is not None:
            self.suffix.begin(prompt_ids)
        if self.table is not None and prefill is not None and len(prefill.ids):
            self.table.write(np.asarray(prompt_ids[: len(prefill.ids)]), prefill.ids)
        # Prefill row i predicts prompt token i + 1, which is pool position i + 1 when the pool is the prompt.
        if self.align_m and prefill is not None:
            if self.context_ids is None:
                self.predictions = prefill.ids
            else:  # a compressed prompt beside its full context (CASD): the rows of the tokens both hold
                self.predictions = pool_predictions(prompt_ids, self.context_ids, prefill.ids)

    def _alternatives(self, position: int, token: int) -> list[int]:
        generated = position - self.pool.context_len
        if generated >= 0:
            if generated >= len(self.generated_predictions):
                return []
            top = self.generated_predictions[generated]
        else:
            row = position - 1
            if self.predictions is None or not 0 <= row < len(self.predictions):
                return []
            top = self.predictions[row]
        if int(top[0]) < 0:  # no prediction for this position (a full-context token the compressed prompt dropped)
            return []
        if int(top[0]) == token:  # aligned: the target would have copied this token itself
            return []
        return [int(t) for t in top if int(t) != token][: self.align_m]

    def propose(self, sequence: list[int]) -> Proposal:
        key, hits = self.pool.lookup(sequence[-self.key_len :], max_hits=self.max_hits, order="recent")
        if not hits and self.table is not None:
            return Proposal(expand(TEMPLATE, self.table.ids, sequence[-1], self.max_nodes))
        if self.suffix is not None:
            corpus = self.suffix.propose(sequence)
            if len(corpus) and corpus_drafts(corpus.match_len, key, self.fallback_margin):
                return Proposal(corpus.as_tree(sequence[-1]))
        candidates: list[Candidate] = []
        aligned: list[Candidate] = []
        for hit in hits:
            tokens, sources = hit.tokens.tolist(), list(hit.sources)
            candidates.append((tokens, sources))
            for t, token in enumerate(tokens):
                if sources[t] != "context" and not (self.align_generated and sources[t] == "generated"):
                    continue
                for alt in self._alternatives(hit.position + t, token):
                    tail_tokens = tokens[t + 1 :] if self.graft else []
                    aligned.append(
                        (
                            tokens[:t] + [alt] + tail_tokens,
                            sources[:t] + ["alignment"] + sources[t + 1 : t + 1 + len(tail_tokens)],
                        )
                    )
        # Alignment siblings have their own share of the budget and are ranked among themselves, so frequent
        # misaligned hits cannot push out the alternatives AASD adds (docs/ALGORITHMS.md, "Alignment sampling"); a share they do not use
        # goes to the retrieved hits.
        share = min(_new_prefixes(aligned, candidates), math.ceil(self.max_nodes * ALIGN_SHARE)) if aligned else 0
        tree = merge_sequences(sequence[-1], candidates, self.max_nodes - share)
        return Proposal(add_ranked(tree, aligned, self.max_nodes - tree.num_draft))

    def observe_tree(self, forward: TreeTopK) -> None:
        self.table.write(forward.tokens, forward.ids, forward.path)

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        self.pool.extend(new_tokens)
        if self.suffix is not None:
            self.suffix.commit(new_tokens)
        if predictions is not None:
            self.generated_predictions.extend(predictions)


ALIGN_LOOKAHEAD = 64  # pool tokens searched ahead for the next prompt token (compression drops runs of tokens)
ALIGN_MIN_SHARE = 0.5  # of the prompt that must find its place in the pool before its predictions are used


def align_positions(prompt_ids: list[int], pool_ids: list[int], lookahead: int = ALIGN_LOOKAHEAD) -> list[int]:
    """For each prompt token, the pool position it is taken to come from (-1 for none): a greedy left-to-right
    match within `lookahead` pool tokens of the last match. A prompt compressed by dropping tokens from a
    context is (nearly) a subsequence of the full prompt; re-tokenised joins simply find no place."""
    out, j = [], 0
    for t in prompt_ids:
        found = -1
        for k in range(j, min(j + lookahead, len(pool_ids))):
            if pool_ids[k] == t:
                found = k
                break
        out.append(found)
        if found >= 0:
            j = found + 1
    return out


def pool_predictions(prompt_ids: list[int], pool_ids: list[int], prefill_ids: np.ndarray) -> np.ndarray | None:
    """The prefill's top predictions re-indexed by pool position: row j - 1 holds the prediction for pool
    token j where the prompt token at position i came from pool position j (prefill row i - 1), and -1
    elsewhere. None when less than ALIGN_MIN_SHARE of the prompt finds its place (an unrelated document)."""
    where = align_positions(prompt_ids, pool_ids)
    if not prompt_ids or sum(w >= 0 for w in where) < ALIGN_MIN_SHARE * len(prompt_ids):
        return None
    out = np.full((len(pool_ids), prefill_ids.shape[1]), -1, dtype=prefill_ids.dtype)
    for i, j in enumerate(where):
        if i >= 1 and j >= 1 and i - 1 < len(prefill_ids):
            out[j - 1] = prefill_ids[i - 1]
    return out


def _new_prefixes(aligned: list[Candidate], retrieved: list[Candidate]) -> int:
    """Prefixes of the alignment candidates that no retrieved candidate has: the nodes alignment adds."""
    have = {tuple(tokens[:i]) for tokens, _ in retrieved for i in range(1, len(tokens) + 1)}
    return len({tuple(tokens[:i]) for tokens, _ in aligned for i in range(1, len(tokens) + 1)} - have)
