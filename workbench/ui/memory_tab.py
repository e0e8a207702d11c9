"""The CSD memory tab: the correction memory a CSD run read (core/memory.py), its file and content hash, mode and
entries (draft token → the target's correction, with counts), and how often each pair rescued a token in
the chosen runs (the steps' `rescued` decisions, core.memory.rescues)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from core.errors import InvalidInputError, WorkbenchError
from core.memory import (
    CorrectionMemory,
    calibrated_path,
    pair_fingerprint,
    rescues,
    shared_memory,
    shipped_memory,
    shipped_memory_path,
)
from core.params import SHIPPED_MEMORY
from core.rules import KEY_ORDERS, fired_key
from core.token_text import visible_token
from core.trace import RunTrace
from workbench.methods import get_method
from workbench.ui.access import NOBODY
from workbench.ui.corpus_view import corpus_models, corpus_view
from workbench.ui.shared import (
    RUN_CHOICES,
    RUN_PICKER_HELP,
    RunCache,
    counted,
    decoder_for,
    error_md,
    parse_run_ids,
    picker_order,
)

ENTRY_COLUMNS = [
    "draft token",
    "draft id",
    "correction",
    "correction id",
    "count",
    "rescued in the runs",
    "rescued by key",
]
KEY_COLUMN = ENTRY_COLUMNS[-1]
SHOWN_ENTRIES = 300  # the most frequent pairs; pairs that rescued in the chosen runs are always listed
MODES = {
    0: "online (every rejection adds to it)",
    1: "frozen (read only)",
    SHIPPED_MEMORY: "shipped (the package's table, read only)",
}


def reads_memory(trace: RunTrace) -> bool:
    """A run that read a correction memory records which (core.methods: memory_sha)."""
    return "memory_sha" in trace.params


def memory_now(trace: RunTrace) -> CorrectionMemory:
    """The table the run's model pair reads in this process now: the shared one later CSD runs read (loaded from the
    home copy, else the shipped table, with this process's unsaved updates). shared_memory reads only the models'
    names and fingerprints, which the run recorded."""
    target = SimpleNamespace(name=trace.model, fingerprint=trace.model_fingerprint)
    draft = (
        SimpleNamespace(name=trace.draft_model, fingerprint=trace.draft_fingerprint)
        if trace.draft_fingerprint
        else None
    )
    if int(trace.params.get("memory_mode", 0) or 0) == SHIPPED_MEMORY:
        return shipped_memory(target, draft)
    return shared_memory(target, draft)


def rescue_counts(traces: Sequence[RunTrace]) -> Counter:
    """(draft token, correction token) -> how many tokens that pair rescued in the runs."""
    return Counter((draft, correction) for t in traces for _, draft, correction, _, _ in rescues(t.steps))


def rescue_keys(traces: Sequence[RunTrace]) -> dict[tuple[int, int], Counter]:
    """(draft token, correction token) -> the memory key kinds that rescued it in the runs (csd[keys=...])."""
    out: dict[tuple[int, int], Counter] = {}
    for t in traces:
        for s in t.steps:
            for n in s.nodes:
                if n.decision == "rescued" and n.correction_id is not None:
                    out.setdefault((n.token_id, n.correction_id), Counter())[fired_key(n.reason or "")] += 1
    return out


def token_texts(traces: Sequence[RunTrace], decode=None):
    """A function id -> text: the tokenizer when given, else the texts the runs' node records carry, else ⟨id⟩."""
    known = {n.token_id: n.token_text for t in traces for s in t.steps for n in s.nodes}

    def text(token_id: int) -> str:
        if decode is not None:
            try:
                return decode([token_id])
            except Exception:  # noqa: BLE001 - an id outside the vocabulary: shown by id
                pass
        return known.get(token_id, f"⟨{token_id}⟩")

    return text


def entries_frame(
    memory: CorrectionMemory,
    rescued: Counter,
    text,
    limit: int = SHOWN_ENTRIES,
    by_key: dict[tuple[int, int], Counter] | None = None,
    keyed: bool = True,
) -> pd.DataFrame:
    """Every pair that rescued in the runs (most rescues first), then the memory's pairs by count (ties by id), with
    the key kinds that rescued it (`by_key`, rescue_keys: a text or prefix key rescues pairs whose own count is below λ).
    Without `keyed` (runs that looked up exact pairs only, where every rescue is by its exact pair) that column is left
    out rather than shown empty."""
    counts = memory.snapshot()
    top = sorted(counts, key=lambda k: (-counts[k], k))[:limit]
    pairs = top + sorted(set(rescued) - set(top), key=lambda k: (-counts.get(k, 0), k))
    keys = by_key or {}
    rows = [
        {
            "draft token": visible_token(text(d)),
            "draft id": d,
            "correction": visible_token(text(c)),
            "correction id": c,
            "count": counts.get((d, c), 0),
            "rescued in the runs": rescued.get((d, c), 0),
            "rescued by key": ", ".join(f"{k} {n}" for k, n in sorted(keys.get((d, c), {}).items())),
        }
        for d, c in pairs
    ]
    frame = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
    if not keyed:
        frame = frame.drop(columns=[KEY_COLUMN])
    # The pairs that rescued in the chosen runs first (what the user asked to see: a shipped table's hundreds of
    # entries would otherwise push a rescue at a low count below what the page draws), then by count.
    return frame.sort_values(["rescued in the runs", "count"], ascending=False, kind="stable").reset_index(drop=True)


def key_kinds(traces: Sequence[RunTrace]) -> tuple[str, ...]:
    """The memory key kinds the runs looked rescues up by (csd[keys=...]; exact alone for the paper's CSD and for runs
    recorded before keys existed), in lookup order."""
    read = {kind for t in traces for kind in KEY_ORDERS.get(int(t.params.get("keys", 0) or 0), ("exact",))}
    return tuple(kind for kind in ("exact", "text", "prefix") if kind in read)


def keys_md(kinds: Sequence[str]) -> str:
    """The summary's line on the keys the runs read: why the entries have, or have no, "rescued by key" column."""
    if tuple(kinds) == ("exact",):
        return (
            '- **keys**: exact (draft, correction) pairs only, so every rescue is by its own pair (no "rescued by key" '
            "column); `csd[keys=all]` also looks a rejection up by the tokens' text or a prefix"
        )
    return (
        f"- **keys**: {', '.join(kinds)}; **rescued by key** says which key kind rescued each pair (a text or prefix "
        "key rescues pairs whose own count is below λ; empty: the pair rescued nothing in these runs)"
    )


def summary_md(
    run_labels: list[str],
    trace: RunTrace,
    memory: CorrectionMemory,
    source: str,
    rescued: Counter,
    file: str | None = None,
    kinds: Sequence[str] = ("exact",),
) -> str:
    """The memory's identity and size, the runs' mode, the table they started from, and their rescues. Two ids, each
    named for what it is: the table's file (named by the model pair's id, as Compare names it) and the hash of its
    content (what runs record as the table they started from)."""
    p = trace.params
    fingerprint = memory.fingerprint()
    pair = pair_fingerprint(trace.model_fingerprint, trace.draft_fingerprint)
    where = (
        f"**file** `{file}` (named by the model pair's id, `{pair}`)"
        if file
        else f"**no file** (model pair id `{pair}`)"
    )
    started = p.get("memory_sha")
    start = (
        "the same table as now"
        if started == fingerprint
        else (
            f"`{started}`, {p.get('memory_pairs')} entries, {p.get('memory_observations')} observations "
            "(the table has changed since: online runs add every rejection)"
        )
    )
    mode = MODES.get(int(p.get("memory_mode", 0) or 0), str(p.get("memory_mode")))
    runs = ", ".join(run_labels)
    return "\n".join(
        [
            f"- {where}, read from {source} · **{len(memory)} entries** · {memory.total} observations",
            f"- **content hash** `{fingerprint}`: of the table's entries and counts, so it changes as online runs add to "
            "it (two tables with one hash rescue alike); a run records the hash of the table it started from",
            f"- **model pair** {trace.model} + {trace.draft_model or 'context drafts (no draft model)'}",
            f"- **mode** of run {runs}: {mode}",
            f"- **at the start of run {run_labels[0]}**: {start}",
            f"- **rescued in run {runs}**: {counted(sum(rescued.values()), 'token')} by {counted(len(rescued), 'pair')} (λ = {p.get('lam')}: "
            "a pair rescues a rejected draft token once its count reaches λ and the logit gate passes)",
            keys_md(kinds),
        ]
    )


def memory_view(cache: RunCache, choice, last_comparison, viewer=None, decode_for=None) -> tuple[str, pd.DataFrame]:
    """(summary, entries) for the chosen CSD runs (by default the last comparison's); errors come back as the summary."""
    empty = pd.DataFrame(columns=ENTRY_COLUMNS)
    try:
        ids = parse_run_ids(choice or last_comparison)
        stored = [cache.get(i, viewer)[0] for i in ids]
    except WorkbenchError as e:
        return error_md(e), empty
    csd = [s for s in stored if reads_memory(s.trace)]
    if not csd:
        return error_md(
            InvalidInputError(
                "choose a CSD run (csd, sd-memory-only, …): the runs chosen read no correction memory"
                if stored
                else "choose CSD runs (or run a comparison with csd first)"
            )
        ), empty
    first = csd[0].trace
    key = pair_fingerprint(first.model_fingerprint, first.draft_fingerprint)
    same_pair = [s for s in csd if pair_fingerprint(s.trace.model_fingerprint, s.trace.draft_fingerprint) == key]
    traces = [s.trace for s in same_pair]
    memory = memory_now(first)
    path, origin = calibrated_path(key)
    source = {"home": "your home copy", "shipped": "the table shipped with the package", "none": "an empty table"}[
        origin
    ]
    if int(first.params.get("memory_mode", 0) or 0) == SHIPPED_MEMORY:  # the package's table, whatever the home holds
        path = shipped_memory_path(key)
        source = (
            "the table shipped with the package"
            if path is not None
            else "none: no table is shipped for this model pair"
        )
    rescued = rescue_counts(traces)
    decode = decode_for(first) if decode_for is not None else None
    kinds = key_kinds(traces)
    md = summary_md([f"#{s.id}" for s in same_pair], first, memory, source, rescued, path.name if path else None, kinds)
    if len(same_pair) < len(csd):
        md += f"  \n⚠ {len(csd) - len(same_pair)} chosen run(s) used another model pair's memory and are left out."
    frame = entries_frame(
        memory, rescued, token_texts(traces, decode), by_key=rescue_keys(traces), keyed=kinds != ("exact",)
    )
    return md, frame


def _reads_memory_method(name: str) -> bool:
    try:
        return get_method(name).reads_memory
    except WorkbenchError:
        return False


def csd_choices(store, viewer) -> list[tuple[str, int]]:
    """(label, id) of the latest runs `viewer` may see whose method reads a correction memory."""
    runs = store.list_runs(limit=RUN_CHOICES, any_tag=viewer.visible_tags if viewer is not None else None)
    return picker_order([(f"#{r.id} {r.method} · {r.model}", r.id) for r in runs if _reads_memory_method(r.method)])


def memory_tab(store, cache: RunCache, compare_ids: gr.State, who) -> tuple[gr.Dropdown, gr.Dropdown]:
    """Build the tab (the correction memory, then the suffix corpus); returns its run picker and the corpus's model
    picker (both refreshed when the tab opens)."""
    gr.Markdown(
        "The correction memory a CSD run read: (draft token, the target's correction) pairs with how often the "
        "target made that correction, and how often each pair rescued a token in the chosen runs."
    )
    with gr.Row():
        chosen = gr.Dropdown(
            csd_choices(store, NOBODY),
            multiselect=True,
            allow_custom_value=True,
            scale=4,
            label="CSD runs (empty: the last comparison's)",
            info=RUN_PICKER_HELP,
            elem_id="memory-runs",
        )
        show = gr.Button("Show memory", variant="primary", scale=1, elem_id="memory-show")
    summary = gr.Markdown("", elem_id="memory-summary")
    entries = gr.Dataframe(
        pd.DataFrame(columns=ENTRY_COLUMNS),
        headers=ENTRY_COLUMNS,
        interactive=False,
        max_height=420,
        label="Entries, most frequent first",
        elem_id="memory-entries",
    )

    def view(request: gr.Request, choice, last):
        return memory_view(cache, choice, last, who(request), lambda trace: decoder_for(trace.model))

    show.click(view, [chosen, compare_ids], [summary, entries], api_name="memory")
    corpus_model = suffix_corpus_panel(store, who)
    return chosen, corpus_model


def suffix_corpus_panel(store, who) -> gr.Dropdown:
    """The suffix corpus beside the correction memory: the other store of past outputs a method drafts from (suffix
    runs). Returns its model picker (refreshed when the tab opens)."""
    gr.Markdown(
        "### Suffix corpus\nThe previous outputs of a model that `suffix` runs draft from (every completed run of the "
        "model joins it): its size, and the continuations it holds most often."
    )
    with gr.Row():
        model = gr.Dropdown(
            corpus_models(store, NOBODY),
            value=None,
            allow_custom_value=True,
            scale=4,
            label="Model (empty: the newest run's)",
            elem_id="corpus-model",
        )
        show = gr.Button("Show corpus", scale=1, elem_id="corpus-show")
    summary = gr.Markdown("", elem_id="corpus-summary")

    def view(request: gr.Request, chosen):
        return corpus_view(store, chosen, who(request), decode_for=decoder_for)

    show.click(view, [model], [summary], api_name="suffix_corpus")
    return model
