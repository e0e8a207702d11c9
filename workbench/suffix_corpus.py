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
from workbench.store.corpus import load_corpus, run_id_of, run_key, store_id, stored_outputs

log = logging.getLogger(__name__)
# fingerprint -> the installed corpus, its file and the id of the store it holds the outputs of (one store at a
# time per model: opening another store's corpus replaces it, so one store's runs never join another's corpus)
_OPENED: dict[str, tuple[SuffixCorpus, Path, str]] = {}


def corpus_file(fingerprint: str, store) -> Path:
    """Where the corpus of `fingerprint` built from `store` is saved: one file per model and store
    (`<workbench home>/suffix/<fingerprint>.<store id>.corpus`), so switching --db never reads another
    database's outputs under its run ids."""
    base = corpus_path(fingerprint)
    return base.with_name(f"{base.stem}.{store_id(store)}{base.suffix}")


_LOCK = threading.Lock()


def open_corpus(
    store, fingerprint: str, max_tokens: int = DEFAULT_MAX_TOKENS, path: Path | None = None
) -> tuple[SuffixCorpus, list[str]]:
    """The model's online corpus (not installed) and what was noticed opening it: the file at `path`
    (default corpus_file(fingerprint, store)) plus the store's runs newer than its newest, or, with no usable
    file, the store's newest runs up to `max_tokens`. The result is saved back to `path`. Keys are
    `run_key(store, run id)`; a file holding another store's keys is refused and rebuilt."""
    path = Path(path) if path is not None else corpus_file(fingerprint, store)
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
            foreign = [k for k in corpus.keys() if run_id_of(k, store) is None and not str(k).startswith("local-")]
            if foreign:
                raise CorruptCorpusError(
                    f"the suffix corpus {path} holds {len(foreign)} outputs that are not runs of {store.where} "
                    f"(e.g. key {foreign[0]!r}: run ids are only unique within one store)"
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
        newest = max((r for k in corpus.keys() if (r := run_id_of(k, store)) is not None), default=None)
        for run_id, ids in reversed(stored_outputs(store, fingerprint, max_tokens, after_run=newest)):
            corpus.add(ids, key=run_key(store, run_id), dedupe=True)
    corpus.save(path)
    return corpus, notes


def corpus_for(store, fingerprint: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> SuffixCorpus:
    """The installed corpus of `fingerprint` for `store`, opened from it on first use (messages go to the log).
    A corpus installed from another store is saved and replaced: each store's runs draft only for that store."""
    sid = store_id(store)
    with _LOCK:
        held = _OPENED.get(fingerprint)
        if held is not None:
            if held[2] == sid:
                return held[0]
            _save(held[0], held[1])
        corpus, notes = open_corpus(store, fingerprint, max_tokens)
        for note in notes:
            log.warning(note)
        _OPENED[fingerprint] = (install_shared(corpus), corpus_file(fingerprint, store), sid)
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


def confidence_priors(store, fingerprint: str, specs: Sequence[str], params: Mapping[str, Any]) -> dict[str, Any]:
    """{method spec: the acceptance prior its sizer starts from} for the specs that draft from a suffix corpus and
    whose method's stored runs on this model hold nodes with a drafter confidence: a prior holding only the store's
    calibration of that confidence (workbench.store.priors.stored_calibration), so the first trees are priced by what
    verification did with each confidence level before rather than by the bare confidence."""
    from core.acceptance_prior import AcceptancePrior
    from workbench.methods import parse_method_spec
    from workbench.store.priors import stored_calibration

    out = {}
    for spec, _ in corpus_users(specs, params):
        name = parse_method_spec(spec)[0]
        calibration = stored_calibration(store, name, fingerprint)
        if calibration:
            source = f"store:{name} model={fingerprint} confidence calibration"
            out[spec] = AcceptancePrior(calibration=calibration, source=source)
    return out


def joins_corpus(params) -> bool:
    """Whether a completed run's output joins the model's corpus: not when it asked for a frozen or a cold one."""
    return not params.get("corpus_mode", 0) and not params.get("cold", 0)


def record_output(run, run_id: int | None, store) -> bool:
    """Add a completed run, stored in `store` as `run_id`, to its model's installed corpus when that corpus is
    `store`'s (keyed `run_key(store, run_id)`); True when it joined."""
    held = _OPENED.get(run.model_fingerprint or "")
    if held is None or run_id is None or held[2] != store_id(store):
        return False
    if run.status != "complete" or not run.output_ids or not joins_corpus(run.params):
        return False
    held[0].add(run.output_ids, key=run_key(store, run_id), dedupe=True)
    return True


def _save(corpus: SuffixCorpus, path: Path) -> None:
    try:
        corpus.save(path)
    except OSError as e:  # at exit or on a switch of store: say so, never raise
        log.warning("could not save the suffix corpus %s: %s", path, e)


@atexit.register
def _save_opened() -> None:
    for corpus, path, _ in list(_OPENED.values()):
        _save(corpus, path)
