"""Token highlighting: which tokens a run emitted and where each came from, as HTML (no Plotly, no Gradio).

The Compare columns, the replay's text, the re-run panel and the Diff tab draw tokens with these functions;
every string from a trace is escaped before it reaches the page."""

from __future__ import annotations

import difflib
import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.token_text import visible_token
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.ui.reasons import readable_reason

# Background colours of emitted tokens by where they came from (light, so dark text stays readable).
ORIGIN_COLORS: dict[str, str] = {
    "context": "#cfe3ff",
    "alignment": "#e4d7ff",
    "draft": "#c9f0e1",
    "generated": "#fff0b3",
    "recycled": "#d9f2c2",
    "history": "#fad4e4",
    "rescued": "#ffd2a8",
    "model": "#ececec",
}


ORIGIN_DESCRIPTIONS: dict[str, str] = {
    "context": "copied from the prompt / context and accepted",
    "alignment": "an alignment-sampling sibling, accepted",
    "draft": "draft-model token, accepted",
    "generated": "from the pool's generated tokens, accepted",
    "recycled": "from Token Recycling's table (the target's own past top-k), accepted",
    "history": "from the model's previous outputs (suffix speculation's corpus), accepted",
    "rescued": "rejected by the target, rescued by CSD",
    "model": "the target model's own token (bonus or plain decoding)",
}


DIVERGENCE_COLOR = "#d62728"
END_ORIGIN = "end"  # the end-of-text token a run stopped on: drawn as a marker, not as its literal text (<|im_end|>)
END_STYLE = "background:#f4f4f5;color:#555;border:1px solid #d4d4d8;border-radius:3px;padding:0 4px;font-size:0.85em"


def show_token(text: str, limit: int = 14) -> str:
    """A token as a short visible label: its whitespace visible (core.token_text.visible_token), HTML-escaped for
    Plotly."""
    shown = visible_token(text)
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown)


def _origin(node: NodeTrace) -> str:
    if node.decision == "bonus":
        return "model"
    if node.decision == "rescued":
        return "rescued"
    return node.source


def emitted_nodes(step: StepTrace) -> list[NodeTrace]:
    """The records of the tokens the step emitted, before any stop cut: the accepted path in depth
    order (root excluded), then the bonus. Empty when the step has no node records."""
    bonus = next((n for n in step.nodes if n.decision == "bonus"), None)
    if bonus is None:
        return []
    # Walk up from the bonus's parent rather than collecting "accepted" nodes, so the path is the one
    # the verifier chose whatever else a rule marked.
    by_index = {n.node: n for n in step.nodes}
    path, node = [bonus], by_index.get(bonus.parent)
    while node is not None and node.parent != -1 and len(path) <= len(by_index):
        path.append(node)
        node = by_index.get(node.parent)
    return path[::-1]


def _step_origins(step: StepTrace, decode: Callable[[int], str] | None) -> list[tuple[str, str]]:
    """(text, origin) of the step's accepted path then its bonus token, before the stop cut."""
    path = emitted_nodes(step)
    if not path:  # stored without node records: the origin is unknown, the text may be too
        return [(decode(t) if decode else f"⟨{t}⟩", "model") for t in step.emitted]
    return [(n.token_text, _origin(n)) for n in path]


def _decoder(decode: Any) -> Callable[[int], str] | None:
    """A token id -> text function from a callable or a tokenizer."""
    if decode is None or not hasattr(decode, "decode"):
        return decode
    return lambda t: decode.decode([t])


def step_origins(steps: Iterable[StepTrace], decode: Any = None) -> list[tuple[str, str]]:
    """(token_text, origin) for the tokens a sequence of steps emitted (e.g. a run still streaming).
    `decode` (a tokenizer or id -> text) is only needed for steps without node records."""
    decode = _decoder(decode)
    out: list[tuple[str, str]] = []
    for step in steps:
        out.extend(_step_origins(step, decode)[: len(step.emitted)])  # emitted may be cut at a stop
    return out


def token_origins(run: RunTrace, decode: Any = None) -> list[tuple[str, str]]:
    """(token_text, origin) for every emitted token in order, from the step records.

    Runs without steps (transformers' generate baselines) are all "model"; their per-token text
    needs `decode` (a tokenizer or id -> text), else the whole output comes back as one span.
    """
    if run.steps:
        origins = step_origins(run.steps, decode)
    else:
        decode = _decoder(decode)
        if decode is not None:
            origins = [(decode(t), "model") for t in run.output_ids]
        else:
            return [(run.output_text, "model")] if run.output_text else []
    if run.stop_reason == "eos" and origins and len(origins) == len(run.output_ids):
        origins[-1] = (origins[-1][0], END_ORIGIN)
    return origins


# U+25A0, in DejaVu Sans and Liberation (Debian's default fonts): ⏹ (U+23F9) drew as a tofu box in Debian's Chromium
END_TEXT = "■ end of text"


def _span(text: str, origin: str, marked: bool, marker_title: str, marker_class: str | None = None) -> str:
    style = f"background:{ORIGIN_COLORS.get(origin, '#ffffff')};color:#111;border-radius:2px"
    title, classes = origin, f"tok tok-{html.escape(origin)}"
    if origin == END_ORIGIN:  # one span like any token (the replay cuts the text by counting them)
        style, title = END_STYLE, f"the model's end-of-text token {text!r}: it chose to stop here"
        text = END_TEXT
    if marked:
        style += f";border-left:3px solid {DIVERGENCE_COLOR}"
        title = f"{marker_title} ({origin})"
        if marker_class:
            classes += f" {html.escape(marker_class)}"
            style += f";outline:2px dashed {DIVERGENCE_COLOR}"
    return f'<span class="{classes}" style="{style}" title="{html.escape(title)}">{html.escape(text)}</span>'


def tokens_html(
    origins: Sequence[tuple[str, str]],
    first_divergence: int | None = None,
    upto: int | None = None,
    marker_title: str = "first divergence from greedy",
    marker_class: str | None = None,
    ending: str = "",
) -> str:
    """Tokens as spans coloured by origin, whitespace kept; a red left border marks the token at
    `first_divergence` (with the CSS class `marker_class` too, when given: the compare tab's lossless
    flips); `upto` shows only the first `upto` tokens (replay)."""
    shown = origins[:upto] if upto is not None else origins
    parts = [
        _span(text, origin, i == first_divergence, marker_title, marker_class) for i, (text, origin) in enumerate(shown)
    ]
    # The shorter of two runs diverges at its own end: mark the end so the reader still sees it.
    if first_divergence is not None and first_divergence == len(origins) and len(shown) == len(origins):
        extra = f" {html.escape(marker_class)}" if marker_class else ""
        parts.append(
            f'<span class="tok-divergence{extra}" style="border-left:3px solid {DIVERGENCE_COLOR}" '
            f'title="{html.escape(marker_title)} (output ends here)">&#8203;</span>'
        )
    return (
        '<div class="tokens" style="white-space:pre-wrap;font-family:ui-monospace,monospace;'
        f'line-height:1.6">{"".join(parts)}{ending}</div>'
    )


def ending_html(run: RunTrace) -> str:
    """A marker after a run's last token saying why it ended when that was not its own choice: the token limit
    (its answer may be cut), or Stop. "" for a run that ended on its end-of-text token or a stop string."""
    if run.stop_reason == "max_new_tokens":
        cap = run.params.get("max_new_tokens", len(run.output_ids))
        return (
            # one chip: the ✂ and its words did not part across two lines (the twenty-first newcomer pass)
            f'<span class="tok-cut" style="{END_STYLE};white-space:nowrap;color:#9a3412;border-color:#fdba74" title="the run wrote '
            f'max_new_tokens = {cap} tokens and was cut there; raise max_new_tokens (Parameters) for the rest">'
            f"✂ cut at max_new_tokens ({cap})</span>"
        )
    if run.stop_reason in ("cancelled", "context_full"):
        why = "stopped (Stop)" if run.stop_reason == "cancelled" else "the model's context is full"
        return f'<span class="tok-cut" style="{END_STYLE};white-space:nowrap" title="{html.escape(why)}">■ {html.escape(why)}</span>'
    return ""


def run_html(run: RunTrace, decode: Any = None, **marks: Any) -> str:
    """A finished run's tokens (tokens_html, with `marks` such as first_divergence) and its ending marker."""
    return tokens_html(token_origins(run, decode), ending=ending_html(run), **marks)


SERVE_FLOAT32 = "python -m workbench serve --dtype float32"  # how to rerun the app where fewer ties round


def tie_words(report: Mapping[str, Any]) -> str:
    """What a divergence's logit gap is: "an exact tie" when it shows as 0 (the displayed 3 significant digits),
    "a near-tie" within the dtype's rounding (fidelity.NEAR_TIE), else "not a near-tie"."""
    if float(f"{abs(report['gap']):.3g}") == 0:
        return "an exact tie"
    return "a near-tie" if report.get("near_tie") else "not a near-tie"


def flip_title(position: int, report: Mapping[str, Any] | None = None) -> str:
    """The hover text of a lossless method's first token that is not greedy's: the position, and, when
    workbench.evaluation.fidelity.flip_report measured it, the target's logit gap there and whether
    that is a tie (a lossless method may flip only where rounding can)."""
    text = f"a lossless method left greedy's tokens at position {position}"
    if report:
        text += f": logit gap {report['gap']:.3g} ({report.get('dtype', '?')}), {tie_words(report)}"
    return text


def emitting_node(steps: Sequence[StepTrace], position: int) -> NodeTrace | None:
    """The node record of the step that emitted output token `position` (its accepted path or its bonus); None
    when the run has no node records there (a stored run without steps, a step cut at a stop)."""
    start = 0
    for step in steps:
        if position < start + len(step.emitted):
            path = emitted_nodes(step)
            return path[position - start] if position - start < len(path) else None
        start += len(step.emitted)
    return None


def _rule_chose(node: NodeTrace | None) -> bool:
    """Whether the method's own rule, not the target's argmax, put this token in the output: CSD rescued it after
    verification rejected it, or a relaxed rule accepted a draft token the target did not rank first."""
    if node is None:
        return False
    if node.decision == "rescued":
        return True
    return node.decision == "accepted" and node.rank is not None and node.rank > 0


def divergence_note(
    report: Mapping[str, Any] | None, lossless: bool, decode: Any = None, run: RunTrace | None = None
) -> str:
    """A column's line under its metrics for a run that left greedy's tokens at T = 0, from
    fidelity.flip_report and, when `run` is given, the node record of the step that emitted the divergent token.
    The one home of this explanation (Compare, Diff). Where the method's rule chose the token (CSD rescued it, or a
    relaxed rule accepted a token the target ranked below first in the method's own step), the note says the rule
    did; only where the method's step took the target's argmax is a tie or near-tie called rounding. Two gaps can
    be stated and each says its logits: the report's is greedy's token minus this token in a one-token forward on
    greedy's text; the node table's is the top logit minus this token in the method's own verification forward.
    "" when nothing was measured."""
    if not report:
        return ""
    show = (lambda t: f"`{visible_token(decode([t]))}`") if decode is not None else (lambda t: f"id {t}")
    dtype = report["dtype"]
    node = emitting_node(run.steps, report["position"]) if run is not None else None
    where = (
        f"parts from greedy at token {report['position']}: greedy's {show(report['greedy_token'])}, "
        f"here {show(report['token'])}, {abs(report['gap']):.3g} apart in the model's logits on greedy's text "
        f"(a one-token forward, {dtype})"
    )
    if node is not None and node.logit_gap is not None:
        where += f"; {node.logit_gap:.3g} below the top logit in this run's own step {node.step} (its node table)"
    if _rule_chose(node):
        assert node is not None
        rank = (
            # 0-based, as the node table and the rule's own reason count (the note said "ranked it 7" beside the
            # reason's "rank 6": the fourteenth pass)
            f"its rank in the target's order is {node.rank}, not 0 (the top token)"
            if node.rank is not None
            else "not the target's argmax"
        )
        why = readable_reason(node.reason, lambda t: decode([t]) if decode is not None else f"⟨{t}⟩")
        if node.decision == "rescued":
            rule = f"verification rejected it ({rank}) and CSD's rule rescued it ({why})"
        else:
            rule = f"the method's relaxed rule accepted it though {rank} ({why})"
        return f"\n\n{where}. The method's rule chose this token: {rule}. The text differs from here on because of it."
    tie = tie_words(report)
    if tie != "not a near-tie":
        how = (
            "the model scores both tokens the same, so the rounding inside each forward picks one"
            if tie == "an exact tie"
            else "the model all but equally prefers both, and rounding decides"
        )
        if node is not None and node.rank == 0:
            how += " (this run's own step took the target's top token there)"
        advice = (
            f" To see whether float32 tells them apart, start the app with `{SERVE_FLOAT32}` (slower; it removes "
            "most of these)."
            if dtype != "float32"
            else ""
        )
        in_dtype = f" in {dtype}" if tie == "an exact tie" else ""
        return (
            f"\n\n≈ {where}, {tie}{in_dtype}: {how}. The text differs from here on, but not because of the "
            f"method's rule.{advice}"
        )
    if lossless:
        return f"\n\n⚠ {where}, not a near-tie: a lossless method should not do this"
    return f"\n\n{where}: the method's rule kept a token the model ranks lower"


@dataclass(frozen=True)
class Span:
    """One stretch of an alignment of run A's tokens against run B's: A's [a0, a1) against B's [b0, b1), tagged
    equal, replace (both have tokens there, different ones), delete (only A has tokens) or insert (only B has)."""

    tag: str
    a0: int
    a1: int
    b0: int
    b1: int


def align(a: Sequence[Any], b: Sequence[Any]) -> list[Span]:
    """A's tokens aligned with B's by difflib's sequence matching, after their common prefix: one token dropped
    or added shows as one deletion or insertion, not as every later position differing. The prefix is kept
    whole, so the first span that is not `equal` starts exactly at core.stats.first_divergence."""
    a, b = list(a), list(b)
    j = 0
    while j < len(a) and j < len(b) and a[j] == b[j]:
        j += 1
    spans = [Span("equal", 0, j, 0, j)] if j else []
    matcher = difflib.SequenceMatcher(None, a[j:], b[j:], autojunk=False)
    spans += [Span(tag, a0 + j, a1 + j, b0 + j, b1 + j) for tag, a0, a1, b0, b1 in matcher.get_opcodes()]
    return spans


def first_cell(spans: Sequence[Span]) -> tuple[str, int | None, int | None] | None:
    """The aligned cell where two outputs first part, as token_diff_html draws it: (kind, A's position, B's
    position), kind "differ" (both have a token there), "deleted" (only A has one) or "inserted" (only B has);
    None when they are equal. The one home of "the first divergence" for the Diff tab's sentence and its outline."""
    for s in spans:
        if s.tag == "equal":
            continue
        if s.tag == "delete":
            return "deleted", s.a0, None
        if s.tag == "insert":
            return "inserted", None, s.b0
        return "differ", s.a0, s.b0
    return None


def diff_counts(spans: Sequence[Span]) -> dict[str, int]:
    """Tokens of A replaced by other tokens, tokens only A has (deleted in B), tokens only B has (inserted)."""
    out = {"replaced": 0, "deleted": 0, "inserted": 0}
    for s in spans:
        if s.tag == "replace":  # paired up as token_diff_html draws them; the longer side's rest counts as its own
            paired = min(s.a1 - s.a0, s.b1 - s.b0)
            out["replaced"] += paired
            out["deleted"] += s.a1 - s.a0 - paired
            out["inserted"] += s.b1 - s.b0 - paired
        elif s.tag == "delete":
            out["deleted"] += s.a1 - s.a0
        elif s.tag == "insert":
            out["inserted"] += s.b1 - s.b0
    return out


DIFF_STYLE = {"same": "#ffffff", "differ": "#ffd6d6", "deleted": "#ffe4c7", "inserted": "#d9f7e3"}
NO_TOKEN = "·"  # a diff cell's side where its run has no token (the other run's was inserted there)
NO_TOKEN_MEANING = "this run has no token here"


def token_diff_html(
    a: Sequence[str],
    b: Sequence[str],
    first: Any = None,
    labels: tuple[str, str] = ("A", "B"),
    ids: tuple[Sequence[int], Sequence[int]] | None = None,
) -> str:
    """Two outputs aligned by sequence matching (align; by id when `ids` are given, else by text): one cell per
    aligned pair with run A's token above run B's. Equal cells are white (class `same`); a token replaced by
    another is red (`differ`); a token only A has shows over a gap (`deleted`, orange) and one only B has under a
    gap (`inserted`, green). The cell where they first part (first_cell, the cell the Diff tab's sentence names)
    is outlined (`first`) unless `first` is None; each cell's title names its positions in A and in B."""
    la, lb = (html.escape(x) for x in labels)
    key_a, key_b = ids if ids is not None else (a, b)
    cells = []
    spans = align(key_a, key_b)
    outlined = first_cell(spans) if first is not None else None

    def cell(ia: int | None, ib: int | None, kind: str) -> str:
        ta = a[ia] if ia is not None and ia < len(a) else None
        tb = b[ib] if ib is not None and ib < len(b) else None
        is_first = outlined is not None and outlined == (kind, ia, ib)
        where = " · ".join(
            p for p in (f"{la} token {ia}" if ia is not None else "", f"{lb} token {ib}" if ib is not None else "") if p
        )
        what = {
            "same": "",
            "differ": f": {la} {ta!r} · {lb} {tb!r}",
            "deleted": f": only {la} has {ta!r}",
            "inserted": f": only {lb} has {tb!r}",
        }[kind]
        title = where + what + (" (first divergence)" if is_first else "")
        border = f"2px solid {DIVERGENCE_COLOR}" if is_first else "1px solid #e3e3e3"
        cls = f"pair {kind}" + (" first" if is_first else "")

        def side(t: str | None, who: str) -> str:
            if t is None:  # grey, so it is not read as a token "·"
                return (
                    f'<span class="side {who}" data-no-token="1" style="display:block;color:#999" '
                    f'title="{NO_TOKEN_MEANING}">{NO_TOKEN}</span>'
                )
            if t == END_TEXT:  # a marker, not token text: its spaces are not drawn as ␣ (Compare's own mark)
                return f'<span class="side {who}" data-end="1" style="display:block;{END_STYLE}">{END_TEXT}</span>'
            return f'<span class="side {who}" style="display:block">{show_token(t, 24)}</span>'

        return (
            f'<span class="{cls}" title="{html.escape(title)}" style="display:inline-block;vertical-align:top;'
            f'margin:1px;padding:0 2px;background:{DIFF_STYLE[kind]};border:{border};border-radius:3px">'
            f"{side(ta, 'a')}{side(tb, 'b')}</span>"
        )

    for s in spans:
        if s.tag == "equal":
            cells += [cell(s.a0 + k, s.b0 + k, "same") for k in range(s.a1 - s.a0)]
        elif s.tag == "delete":
            cells += [cell(i, None, "deleted") for i in range(s.a0, s.a1)]
        elif s.tag == "insert":
            cells += [cell(None, i, "inserted") for i in range(s.b0, s.b1)]
        else:  # replace: pair them up, the longer side's rest as deletions or insertions
            n_a, n_b = s.a1 - s.a0, s.b1 - s.b0
            for k in range(max(n_a, n_b)):
                if k < n_a and k < n_b:
                    cells.append(cell(s.a0 + k, s.b0 + k, "differ"))
                elif k < n_a:
                    cells.append(cell(s.a0 + k, None, "deleted"))
                else:
                    cells.append(cell(None, s.b0 + k, "inserted"))
    head = (
        f'<div class="tokdiff-key" style="font-size:0.85em;color:#555;margin-bottom:4px">each cell: top {la}, '
        f'bottom {lb}, aligned by sequence matching; <span style="background:{DIFF_STYLE["differ"]}">red</span>: '
        f'a token replaced by another; <span style="background:{DIFF_STYLE["deleted"]}">orange</span>: only {la} '
        f'has it; <span style="background:{DIFF_STYLE["inserted"]}">green</span>: only {lb} has it; outlined: the '
        f'first divergence; ␣ a space, ↵ a newline, <span style="color:#999">{NO_TOKEN}</span> {NO_TOKEN_MEANING} '
        "(the other run has one the alignment put here)</div>"
    )
    return (
        '<div class="tokdiff" style="font-family:ui-monospace,monospace;font-size:0.9em;line-height:1.4">'
        + head
        + "".join(cells)
        + "</div>"
    )


CHIP = "display:inline-block;white-space:nowrap;line-height:1.5;padding:0 6px;border-radius:3px;margin:2px 6px 2px 0"


def legend_html() -> str:
    """A one-line key to the origin colours (chips that wrap as a whole and draw their marks inside their own box)."""
    items = [
        f'<span class="legend-chip" style="{CHIP};background:{color};color:#111" '
        f'title="{html.escape(ORIGIN_DESCRIPTIONS[origin])}">{origin}</span>'
        for origin, color in ORIGIN_COLORS.items()
    ]
    items.append(
        f'<span class="legend-chip" style="{CHIP};border-left:3px solid {DIVERGENCE_COLOR}">first divergence</span>'
    )
    items.append(
        f'<span class="legend-chip" style="{CHIP};border:2px dashed {DIVERGENCE_COLOR};border-left:3px solid '
        f'{DIVERGENCE_COLOR}" title="a lossless method should emit greedy\'s tokens; hover the marked token for the '
        f"position and the target's logit gap there\">lossless method left greedy</span>"
    )
    items.append(
        f'<span class="legend-chip" style="{CHIP};{END_STYLE}" title="the model\'s end-of-text token">{END_TEXT}</span>'
    )
    return f'<div class="token-legend" style="font-size:0.9em;display:flex;flex-wrap:wrap;align-items:center">{"".join(items)}</div>'
