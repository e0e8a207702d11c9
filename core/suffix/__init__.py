"""Suffix speculation (SuffixDecoding, arXiv 2411.04975): drafts from the longest suffix of the
request's text that occurred before, in the request itself or in a corpus of previous outputs.

- array.py: the suffix array over token sequences (numpy build, bisect search)
- context.py: the current request's text, sealed prefix + short direct-searched stretch
- corpus.py: the bounded, LRU-evicted corpus of previous outputs; state, hash, files
- draft.py: the best-first tree over the match's continuations (SuffixDraft)
- speculator.py: one request's begin / propose / commit / end_request
"""

from core.suffix.array import SEPARATOR, SORT_DEPTH, SuffixArray
from core.suffix.context import ContextIndex
from core.suffix.corpus import (
    DEFAULT_MAX_TOKENS,
    CorruptCorpusError,
    FrozenCorpusError,
    SuffixCorpus,
    corpus_path,
    install_shared,
    shared_corpus,
)
from core.suffix.draft import CONTEXT, HISTORY, ContextOccurrences, SuffixDraft, grow_tree, node_budget
from core.suffix.speculator import MAX_MATCH, SuffixSpeculator

__all__ = [
    "SEPARATOR",
    "SORT_DEPTH",
    "SuffixArray",
    "ContextIndex",
    "DEFAULT_MAX_TOKENS",
    "CorruptCorpusError",
    "FrozenCorpusError",
    "SuffixCorpus",
    "corpus_path",
    "install_shared",
    "shared_corpus",
    "CONTEXT",
    "HISTORY",
    "ContextOccurrences",
    "SuffixDraft",
    "grow_tree",
    "node_budget",
    "MAX_MATCH",
    "SuffixSpeculator",
]
