"""The workbench's suffix corpus: per model, loaded when a run of that model first starts (the saved
corpus file brought up to date with the trace store, or built from the store) and installed as the
model's shared corpus (core.suffix.shared_corpus); every completed run the workbench stores then joins
it, whatever its method (the store is the corpus), except runs that asked to leave it alone
(corpus_mode=frozen, cold=1). Installed corpora are saved at exit.

Bad input: a saved corpus over the bound keeps its most recent requests and says so; a corrupt or
foreign one is refused with its reason and rebuilt from the store (`open_corpus` returns the messages).
"""

from __future__ import annotations

import atexit
import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.suffix import (
    DEFAULT_MAX_TOKENS,
    CorruptCorpusError,
    SuffixCorpus,
    corpus_path,
    install_shared,
    shared_corpus,
)
from workbench.store.corpus import load_corpus, stored_outputs

log = logging.getLogger(__name__)
_OPENED: dict[str, tuple[SuffixCorpus, Path]] = {}  # fingerprint -> the installed corpus and its file
_LOCK = threading.Lock()


def open_corpus(
    store, fingerprint: str, max_tokens: int = DEFAULT_MAX_TOKENS, path: Path | None = None
) -> tuple[SuffixCorpus, list[str]]:
    """The model's online corpus (not installed) and what was noticed opening it: the file at `path`
    (default corpus_path(fingerprint)) plus the store's runs newer than its newest, or, with no usable
    file, the store's newest runs up to `max_tokens`. The result is saved back to `path`."""
    path = Path(path) if path is not None else corpus_path(fingerprint)
    notes: list[str] = []
    corpus = None
    if path.is_file():
        try:
            with warnings.catch_warnings():  # over the bound: the corpus's notices say it, returned below
                warnings.simplefilter("ignore")
                corpus = SuffixCorpus.load(path, max_tokens=max_tokens, frozen=False)
            if corpus.fingerprint != fingerprint:
                raise CorruptCorpusError(
                    f"the suffix corpus {path} belongs to model {corpus.fingerprint}, not {fingerprint}"
                )
            notes += corpus.notices
        except CorruptCorpusError as e:
            notes.append(f"refused the saved suffix corpus: {e}; rebuilt it from the trace store")
            corpus = None
    if corpus is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            corpus = load_corpus(store, fingerprint, max_tokens, frozen=False)
        notes += corpus.notices
    else:
        newest = max((k for k in corpus.keys() if isinstance(k, int)), default=None)
        for run_id, ids in reversed(stored_outputs(store, fingerprint, max_tokens, after_run=newest)):
            corpus.add(ids, key=run_id, dedupe=True)
    corpus.save(path)
    return corpus, notes


def corpus_for(store, fingerprint: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> SuffixCorpus:
    """The installed corpus of `fingerprint`, opened from `store` on first use (messages go to the log)."""
    with _LOCK:
        held = _OPENED.get(fingerprint)
        if held is not None:
            return held[0]
        corpus, notes = open_corpus(store, fingerprint, max_tokens)
        for note in notes:
            log.warning(note)
        _OPENED[fingerprint] = (install_shared(corpus), corpus_path(fingerprint))
        return corpus


def corpus_users(specs: Sequence[str], params: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The method specs (with their resolved params, `params` applied where the method takes them) that draft
    from a suffix corpus."""
    from core.methods.build import uses_corpus
    from workbench.methods import get_method, parse_method_spec, resolve_params

    out = []
    for spec in specs:
        name, overrides = parse_method_spec(spec)
        method = get_method(name)
        resolved = resolve_params(name, {k: v for k, v in params.items() if k in method.params} | overrides)
        if uses_corpus(method, resolved):
            out.append((spec, resolved))
    return out


def install_for_bench(
    store, fingerprint: str, specs: Sequence[str], params: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any] | None]:
    """For the CLI's bench and report: when a benchmarked method drafts from a suffix corpus, the store's corpus
    installed as the model's shared one (as the app does on a model's first run), and (one line saying which
    corpus those runs start from, or that it is cold; its state). (None, None) when no method uses a corpus.
    Unlike the app, the other methods' outputs do not join it during the run, so greedy's answer to an item
    never reaches a suffix run of the same item; the suffix methods' own online runs do join it."""
    users = corpus_users(specs, params)
    if not users:
        return None, None
    warm = [spec for spec, p in users if not p.get("cold", 0)]
    if not warm:
        return f"suffix corpus: cold: {', '.join(s for s, _ in users)} run with cold=1 (an empty corpus each)", None
    if store is None:
        state = shared_corpus(fingerprint).state()
        return (
            f"suffix corpus: cold: no trace store (--no-store), so {', '.join(warm)} start from an empty corpus "
            f"that only their own outputs fill",
            state,
        )
    state = corpus_for(store, fingerprint).state()
    if not state["requests"]:
        return f"suffix corpus: cold: {store.where} holds no output of this model yet ({', '.join(warm)})", state
    return (
        f"suffix corpus: {state['requests']} stored outputs of this model ({state['tokens']} tokens, hash "
        f"{state['hash']}) from {store.where}, for {', '.join(warm)}: they draft from earlier runs' outputs, these "
        f"items' included if they ran before (cold=1: an empty corpus)",
        state,
    )


def joins_corpus(params) -> bool:
    """Whether a completed run's output joins the model's corpus: not when it asked for a frozen or a cold one."""
    return not params.get("corpus_mode", 0) and not params.get("cold", 0)


def record_output(run, run_id: int | None) -> bool:
    """Add a completed, stored run's output to its model's installed corpus; True when it joined."""
    held = _OPENED.get(run.model_fingerprint or "")
    if held is None or run.status != "complete" or not run.output_ids or not joins_corpus(run.params):
        return False
    held[0].add(run.output_ids, key=run_id, dedupe=True)
    return True


@atexit.register
def _save_opened() -> None:
    for corpus, path in list(_OPENED.values()):
        try:
            corpus.save(path)
        except OSError as e:  # at exit: say so, never raise
            log.warning("could not save the suffix corpus %s: %s", path, e)
