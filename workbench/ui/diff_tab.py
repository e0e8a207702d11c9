"""The Diff tab: two stored runs' outputs aligned token by token by sequence matching (an inserted or dropped
token shows as such, the rest stays aligned), what differs highlighted and the first divergence stated (workbench.store.compare.compare_traces, which calls
core.stats.first_divergence). Only runs this session may see are offered and read."""

from __future__ import annotations

from collections.abc import Sequence

import gradio as gr

from core.errors import InvalidInputError, WorkbenchError
from core.stats import run_divergence
from core.token_text import visible_token
from core.trace import RunTrace
from workbench.store.compare import compare_traces
from workbench.ui import tokens
from workbench.ui.access import NOBODY
from workbench.ui.shared import RUN_PICKER_HELP, RunCache, asked_as, counted, error_md, parse_run_ids, run_choices


def token_texts(trace: RunTrace, origins: Sequence[tuple[str, str]], known: dict[int, str] | None = None) -> list[str]:
    """One text per output token: the step records' texts (a model's end-of-text token: tokens.END_TEXT, as Compare
    shows it); where a run kept none per token (transformers' baselines store their whole text as one span), the text
    `known` has for the id, else ⟨id⟩."""
    if len(origins) == len(trace.output_ids):  # the end-of-text token as Compare shows it, not a raw <|im_end|>
        return [tokens.END_TEXT if origin == tokens.END_ORIGIN else text for text, origin in origins]
    return [(known or {}).get(t, f"⟨{t}⟩") for t in trace.output_ids]


def _known(trace: RunTrace, origins: Sequence[tuple[str, str]]) -> dict[int, str]:
    return dict(zip(trace.output_ids, (t for t, _ in origins))) if len(origins) == len(trace.output_ids) else {}


def _show(token: int | None, texts: Sequence[str], at: int | None) -> str:
    return (
        "(its output ends here)"
        if token is None or at is None or at >= len(texts)
        else f"`'{visible_token(texts[at])}'` (id {token})"
    )


def _at(ids: Sequence[int], j: int) -> int | None:
    return ids[j] if j < len(ids) else None


def parting_words(j: int, la: str, lb: str, a: RunTrace, b: RunTrace, ta, tb, steps) -> str:
    """Both runs' tokens at position `j`, the first position where they differ (what Compare's divergence note
    names too), with the step that made each."""
    step = lambda s: "–" if s is None else s  # noqa: E731
    return (
        f"{la} {_show(_at(a.output_ids, j), ta, j)} at its step {step(steps[0])} · {lb} "
        f"{_show(_at(b.output_ids, j), tb, j)} at its step {step(steps[1])}"
    )


def alignment_words(cell, la: str, lb: str, a: RunTrace, b: RunTrace, ta, tb) -> str:
    """What the outlined cell (tokens.first_cell) shows, in words, where the alignment reads the first difference as
    a token only one run has (the other run's token there is matched further on); "" where it pairs the two."""
    kind, ia, ib = cell
    if kind == "differ":
        return ""
    j, only, other = (
        (ia, (la, a.output_ids, ta), (lb, b.output_ids, tb))
        if kind == "deleted"
        else (ib, (lb, b.output_ids, tb), (la, a.output_ids, ta))
    )
    shown = _show(only[1][j], only[2], j)
    later = (
        f", {other[0]}'s {_show(other[1][j], other[2], j)} matched further on" if _at(other[1], j) is not None else ""
    )
    return f" · the alignment below shows this as {shown} only in {only[0]}{later}"


def diff_outputs(a_id: int, a: RunTrace, a_origins, b_id: int, b: RunTrace, b_origins) -> tuple[str, str]:
    """(summary line, aligned HTML) of run #a_id against run #b_id; the sentence names the cell the HTML outlines."""
    known = {**_known(a, a_origins), **_known(b, b_origins)}  # texts of ids one run recorded, for the other
    ta, tb = token_texts(a, a_origins, known), token_texts(b, b_origins, known)
    c = compare_traces(a, b)
    la, lb = f"#{a_id} {asked_as(a.method, a.params)}", f"#{b_id} {asked_as(b.method, b.params)}"
    spans = tokens.align(a.output_ids, b.output_ids)
    counts = tokens.diff_counts(spans)
    marked = c["first_divergence"]
    if c["identical"]:
        head = f"**identical**: {la} and {lb} emitted the same {c['tokens_a']} tokens"
    elif c["stopped_before_diverging"]:  # core.stats.run_divergence: a run cut short is not a divergence
        marked = None
        (cut, run, n), other = (la, a, c["tokens_a"]), lb
        if c["tokens_b"] < c["tokens_a"]:
            (cut, run, n), other = (lb, b, c["tokens_b"]), la
        why = (
            "was stopped"
            if run.status == "cancelled"
            else "reached its token cap"
            if run.status == "complete"
            else "failed"
        )
        head = (
            f"**stopped before diverging**: {cut} {why} after {n} tokens, all equal to {other}'s first {n}"
            if n
            else f"**nothing to compare**: {cut} {why} before writing a token"
        )
    else:
        j = c["first_divergence"]
        head = (
            f"**first divergence at token {j}** ({j} equal tokens before it; outlined below): "
            f"{parting_words(j, la, lb, a, b, ta, tb, (c['step_a'], c['step_b']))}"
            f"{alignment_words(tokens.first_cell(spans), la, lb, a, b, ta, tb)} · "
            f"aligned: {counted(counts['replaced'], 'token')} replaced, {counts['deleted']} only in {la}, "
            f"{counts['inserted']} only in {lb}"
        )
    if a.prompt_ids != b.prompt_ids:
        head += " · ⚠ the two runs had different prompts"
    head += f" · {la}: {c['tokens_a']} tokens, {lb}: {c['tokens_b']} tokens"
    if c["speedup_b_over_a"] is not None:  # as Compare and Replay compute it, on the clock it names
        head += f" · {lb} at {c['speedup_b_over_a']:.2f}× the speed of {la} ({c['speedup_clock']})"
    return head, tokens.token_diff_html(ta, tb, marked, (la, lb), ids=(a.output_ids, b.output_ids))


def tie_note(pool, a: RunTrace, b: RunTrace) -> str:
    """For a greedy run against another run of the same model and prompt at T = 0, the Compare tab's explanation of
    their divergence (tokens.divergence_note: the rule where it chose the token, else a tie is rounding) when this server has
    the model loaded (the measurement is one forward; nothing is loaded for it); "" otherwise."""
    from workbench.ui.compare_tab import _lossless, measured_at_t0, measured_divergence

    if a.method != "greedy" and b.method == "greedy":
        a, b = b, a
    div = run_divergence(a, b)
    if (
        pool is None
        or a.method != "greedy"
        or a.model != b.model
        or list(a.prompt_ids) != list(b.prompt_ids)
        or not all(measured_at_t0(run.params, div) for run in (a, b))
        or div >= min(len(a.output_ids), len(b.output_ids))
    ):
        return ""
    models = pool.loaded(a.model)
    if models is None:
        return ""
    report = measured_divergence(pool, a.model, models, a.prompt_ids, a.output_ids, b)
    return tokens.divergence_note(report, _lossless(b.method), models.target.tokenizer.decode, b)


def diff_runs(cache: RunCache, a, b, viewer=None, pool=None) -> tuple[str, str]:
    """The summary and HTML of two chosen runs (by id or dropdown label); errors come back as the summary. With
    `pool`, a divergence at T = 0 from a greedy run is explained as Compare explains it (tie_note)."""
    if a in (None, "") or b in (None, ""):
        return "choose two runs", ""
    try:
        (ia,), (ib,) = parse_run_ids([a]), parse_run_ids([b])
        sa, oa, _ = cache.get(ia, viewer)
        sb, ob, _ = cache.get(ib, viewer)
    except (WorkbenchError, ValueError) as e:
        return error_md(e if isinstance(e, WorkbenchError) else InvalidInputError(str(e))), ""
    head, body = diff_outputs(ia, sa.trace, oa, ib, sb.trace, ob)
    return head + tie_note(pool, sa.trace, sb.trace), body


def last_pair(compare_ids) -> tuple[int, int] | None:
    """The runs the Diff tab offers first: the last comparison's first two (its greedy run and the method beside it,
    e.g. greedy against aasd); None before a comparison has stored two."""
    ids = list(compare_ids or [])
    return (ids[0], ids[1]) if len(ids) >= 2 else None


def picks_for(choices, compare_ids, a_now=None, b_now=None, follow: bool = False) -> tuple[dict, dict]:
    """The two pickers with `choices`: on the last comparison's first two runs when `follow` (a new comparison) or
    when nothing is chosen yet, else as the user left them."""
    pair = last_pair(compare_ids)
    if pair is not None and (follow or a_now in (None, "") or b_now in (None, "")):
        return gr.update(choices=choices, value=pair[0]), gr.update(choices=choices, value=pair[1])
    return gr.update(choices=choices), gr.update(choices=choices)


def diff_tab(
    store, cache: RunCache, who, compare_ids: gr.State | None = None, pool=None
) -> tuple[gr.Dropdown, gr.Dropdown]:
    """Build the tab; returns its two run pickers (refreshed when the tab opens). With `compare_ids` (the session's
    last comparison) the pickers start on its first two runs and follow each new comparison; with `pool` (the
    server's models) a divergence from greedy at T = 0 is explained (tie_note)."""
    gr.Markdown(
        "Two stored runs' outputs aligned token by token (sequence matching: a token one run adds or drops "
        "shows as an insertion or deletion): where they part and what each emitted there (e.g. greedy against "
        "a relaxed method on the same prompt)."
    )
    with gr.Row():
        # No value until there is a pair to show: Gradio's default, the first choice, put one run in both pickers.
        a, b = (
            gr.Dropdown(
                run_choices(store, NOBODY),
                value=None,
                allow_custom_value=True,
                # labels of one length, the picker's help below each: A's longer label wrapped and set it lower
                label=f"Run {which}",
                info=RUN_PICKER_HELP,
                elem_id=f"diff-{which.lower()[0]}",
                scale=3,
            )
            for which in ("A (e.g. greedy)", "B (e.g. aasd)")
        )
        go = gr.Button("Diff", variant="primary", scale=1, elem_id="diff-go")
    summary = gr.Markdown("", elem_id="diff-summary")
    tokens = gr.HTML("", elem_id="diff-tokens")

    def run(request: gr.Request, x, y):
        return diff_runs(cache, x, y, who(request), pool)

    go.click(run, [a, b], [summary, tokens], api_name="diff")
    if compare_ids is not None:

        def follow(request: gr.Request, ids):
            if last_pair(ids) is None:
                return gr.update(), gr.update()
            return picks_for(run_choices(store, who(request)), ids, follow=True)

        compare_ids.change(follow, [compare_ids], [a, b], api_name=False, show_progress="hidden")
    return a, b
