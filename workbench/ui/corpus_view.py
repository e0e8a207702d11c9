"""The suffix corpus at a glance (issue 35): its size and state, and the continuations it holds most often,
as plain data and Markdown (pure: no Gradio here; a tab shows `corpus_markdown`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.suffix import SuffixCorpus


def most_reused(corpus: SuffixCorpus, length: int = 8, top: int = 10) -> list[tuple[tuple[int, ...], int, int]]:
    """The `top` token strings of `length` tokens that occur most often in the corpus, seen in at least two
    requests: (tokens, occurrences, requests holding them), most occurrences first (ties: token order)."""
    windows, owners = [], []
    for i, key in enumerate(corpus.keys()):
        seq = corpus.sequence(key)
        if len(seq) >= length:
            windows.append(np.lib.stride_tricks.sliding_window_view(seq, length))
            owners.append(np.full(len(seq) - length + 1, i, dtype=np.int64))
    if not windows:
        return []
    grams, owner = np.concatenate(windows), np.concatenate(owners)
    uniq, inverse, counts = np.unique(grams, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    pairs = np.unique(np.stack([inverse, owner], axis=1), axis=0)  # (gram, request) once each
    requests = np.bincount(pairs[:, 0], minlength=len(uniq))
    keep = np.flatnonzero(requests >= 2)
    order = keep[np.lexsort((keep, -counts[keep]))][:top]
    return [(tuple(int(t) for t in uniq[j]), int(counts[j]), int(requests[j])) for j in order]


def corpus_markdown(
    corpus: SuffixCorpus, decode: Callable[[Sequence[int]], str], length: int = 8, top: int = 10
) -> str:
    """Size, state and the most reused continuations of a corpus, as Markdown."""
    st = corpus.state()
    head = (
        f"**Suffix corpus** ({st['mode']}): {st['requests']:,} requests, {st['tokens']:,} of at most "
        f"{st['max_tokens']:,} tokens, hash `{st['hash']}`"
    )
    rows = most_reused(corpus, length, top)
    if not rows:
        return head + f"\n\nNo {length}-token string occurs in two requests yet."
    lines = [head, "", f"| most reused {length}-token continuations | occurrences | requests |", "|---|---|---|"]
    for tokens, n, reqs in rows:
        text = decode(list(tokens)).replace("|", "\\|").replace("\n", "↵").replace("`", "'")
        lines.append(f"| `{text}` | {n} | {reqs} |")
    return "\n".join(lines)
