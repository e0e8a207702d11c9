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


def size_line(state: dict) -> str:
    """ "2 requests, 130 of at most 1,000,000 tokens, hash `…`" from SuffixCorpus.state()."""
    n = state["requests"]
    return (
        f"{n:,} request{'' if n == 1 else 's'}, {state['tokens']:,} of at most {state['max_tokens']:,} tokens, "
        f"hash `{state['hash']}`"
    )


def corpus_markdown(
    corpus: SuffixCorpus, decode: Callable[[Sequence[int]], str], length: int = 8, top: int = 10
) -> str:
    """Size, state and the most reused continuations of a corpus, as Markdown."""
    st = corpus.state()
    head = f"**Suffix corpus** ({st['mode']}): {size_line(st)}"
    rows = most_reused(corpus, length, top)
    if not rows:
        return head + f"\n\nNo {length}-token string occurs in two requests yet."
    lines = [head, "", f"| most reused {length}-token continuations | occurrences | requests |", "|---|---|---|"]
    for tokens, n, reqs in rows:
        text = decode(list(tokens)).replace("|", "\\|").replace("\n", "↵").replace("`", "'")
        lines.append(f"| `{text}` | {n} | {reqs} |")
    return "\n".join(lines)


def corpus_models(store, viewer=None, limit: int = 200) -> list[str]:
    """The target models of the newest `limit` runs `viewer` may see, newest first, once each: the corpora there are
    to look at (one per model)."""
    runs = store.list_runs(limit=limit, any_tag=viewer.visible_tags if viewer is not None else None)
    return list(dict.fromkeys(r.model for r in runs))


def corpus_view(store, model: str | None, viewer=None, decode_for: Callable[[str], Callable] | None = None) -> str:
    """The suffix corpus of `model` (default: that of the newest run `viewer` may see) as Markdown, or a one-line
    reason there is none. The corpus is the one suffix runs of that model draft from (workbench.suffix_corpus:
    opened from the store on first use). Its most reused continuations are other requests' outputs: they are listed
    only where every run is everyone's (single-user mode); a shared app shows the corpus's size and state."""
    from workbench.suffix_corpus import corpus_for

    models = corpus_models(store, viewer)
    model = (model or "").strip() or (models[0] if models else "")
    if not model:
        return "**⚠ no runs yet: run a comparison (e.g. with suffix), then show the corpus of its model**"
    if model not in models:
        return f"**⚠ no run of model {model[:80]!r} here: pick one of the models listed**"
    runs = store.list_runs(model=model, limit=1, any_tag=viewer.visible_tags if viewer is not None else None)
    fingerprint = store.load_run(runs[0].id, nodes=False).trace.model_fingerprint
    if not fingerprint:
        return f"**⚠ the runs of {model} record no model fingerprint, so no corpus is kept for them**"
    corpus = corpus_for(store, fingerprint)
    everyone = viewer is None or viewer.owner is None
    if not everyone:
        st = corpus.state()
        return (
            f"**Suffix corpus of {model}** ({st['mode']}): {size_line(st)} (its continuations are other sessions' "
            "outputs: listed in single-user mode only)"
        )
    decode = decode_for(model) if decode_for is not None else None
    shown = corpus_markdown(corpus, decode or (lambda ids: " ".join(f"⟨{i}⟩" for i in ids)))
    return shown.replace("**Suffix corpus**", f"**Suffix corpus of {model}**", 1)
