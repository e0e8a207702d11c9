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
from pathlib import Path

from core.suffix import DEFAULT_MAX_TOKENS, CorruptCorpusError, SuffixCorpus, corpus_path, install_shared
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
