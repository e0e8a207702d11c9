"""What the Replay & tune tab shows, as pure functions of a stored run (no Gradio, no events):
the step header and node table, the run's step data the browser draws steps from, the tuning sliders'
ranges and values, the re-scoring summary and the re-run's comparison. replay_tab.py wires them to components."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from core.errors import InvalidInputError, WorkbenchError
from core.params import PARAMS
from core.rules import EOS_EXEMPT
from core.stats import clock_phrase, run_divergence, speedup
from core.thresholds import describe_values
from core.token_text import visible_token
from core.trace import RunTrace, StepTrace
from core.walk import PASSED_NOT_TAKEN
from workbench.methods import METHODS, get_method, resolve_params
from workbench.rescore import VERIFY_PARAMS, RunRescore, flips_table
from workbench.ui import tokens
from workbench.ui.figures import replay as figures
from workbench.ui.figures.common import DECISION_COLORS, SOURCE_SYMBOLS
from workbench.ui.reasons import TokenText, known_texts, readable_reason
from workbench.ui.shared import SYMBOL, TUNABLE, asked_as, fitted_md, metrics_md, rescue_rule, sig, step_of

OWN_RULE = "(the run's own)"
NOT_TAKEN = "not taken"  # a node that passed its test but lost to a longer or likelier path (core.walk)
FLIPS_SHOWN = 200  # rows of the flips table: a lenient threshold flips thousands, and the browser draws each row
NODE_COLUMNS = ("node", "parent", "depth", "token", "source", "p", "threshold", "entropy", "rank", "decision", "reason")
FLIP_COLUMNS = (
    "step",
    "node",
    "token",
    "source",
    "p",
    "old threshold",
    "new threshold",
    "old decision",
    "new decision",
    "reason",
)  # workbench.rescore.flips_table's keys with spaces: a header wraps at its space, so the reason gets the width


def gated(trace: RunTrace) -> bool:
    """Whether the run's method has CSD's rescue gate (only then is a rejection's logit gap against −ln τ drawn).
    Judged with the method's defaults under the run's own values (shared.rescue_rule)."""
    return rescue_rule(trace) is not None


# ---------------------------------------------------------------- one step


def clamp_step(trace: RunTrace, k: Any) -> int:
    """A step index the run has (the slider may hold one from another run)."""
    return max(0, min(step_of(k), len(trace.steps) - 1))


def step_label(k: int, steps: int) -> str:
    """Step k of a run of `steps` steps as the slider counts them, from 0: "step 10 (of 0–26)" for a 27-step run
    ("step 10 of 26" read as one step short)."""
    return f"step {k} (its only step)" if steps == 1 else f"step {k} (of 0–{steps - 1})"


def step_info(run_id: int, trace: RunTrace, k: int) -> str:
    """The header above the replay: where we are and what the step cost."""
    if not trace.steps:
        label = asked_as(trace.method, trace.params)
        if trace.status in ("cancelled", "failed") and not trace.output_ids:  # stopped in the prompt's read (prefill)
            return f"run #{run_id} ({label}) was {trace.status} before it wrote a token: nothing to replay"
        why = (
            "it was stopped before its first step"
            if trace.status in ("cancelled", "failed")
            else "transformers' baselines keep none"
        )
        return f"run #{run_id} ({label}) has no steps to replay ({why})"
    s = trace.steps[k]
    # "kept" with the rescued among them, as the tree's title says ("1 of 1 drafted kept (1 rescued)"): the header
    # read "accepted 1" for a token verification rejected and CSD rescued (the fourteenth pass)
    rescued = sum(n.decision == "rescued" for n in getattr(s, "nodes", None) or ())
    kept = f"kept {s.accepted} ({rescued} rescued)" if rescued else f"accepted {s.accepted}"
    return (
        f"run #{run_id} · {asked_as(trace.method, trace.params)} · {step_label(k, len(trace.steps))} · "
        f"tree {s.tree_size} node{'' if s.tree_size == 1 else 's'} · {kept} + bonus · {s.step_ms:.1f} ms "
        f"(draft {s.draft_ms:.1f}, forward {s.forward_ms:.1f})" + fitted_md(trace.params) + still_running(trace)
    )


def still_running(trace: RunTrace) -> str:
    """The header's warning for a run opened while it was being written (the seventeenth fresh pass read a
    half-written run as a finished one): the view holds the steps stored so far, and the tab opens the run again,
    whole, once it finishes (replay_tab's follow timer)."""
    if trace.status != "running":
        return ""
    return (
        f" · **⚠ still being written: {len(trace.steps)} steps so far; this view is drawn again when the run finishes**"
    )


def nodes_frame(step: StepTrace, text_of: TokenText | None = None) -> pd.DataFrame:
    """One row per node record: what the rule saw and what it decided."""
    return pd.DataFrame(
        [
            {
                "node": n.node,
                "parent": n.parent,
                "depth": n.depth,
                "token": visible_token(n.token_text),
                "source": n.source,
                "p": sig(n.p),
                "threshold": sig(n.threshold),
                "entropy": sig(n.entropy),
                "rank": n.rank,
                "decision": n.decision,
                "reason": readable_reason(n.reason, text_of),
            }
            for n in step.nodes
        ],
        columns=NODE_COLUMNS,
    )


def nodes_frame_empty() -> pd.DataFrame:
    """The node table before a run is loaded: its headers, no rows."""
    return pd.DataFrame(columns=NODE_COLUMNS)


def nodes_html_empty() -> str:
    """The browser's node table (replay_js draws it per step) before a run is loaded: its headers, no rows."""
    heads = "".join(f'<th style="text-align:left;padding:2px 6px">{c}</th>' for c in NODE_COLUMNS)
    return (
        f'<div class="replay-nodes-table"><table style="border-collapse:collapse;font-size:0.85em;width:100%">'
        f"<thead><tr>{heads}</tr></thead><tbody></tbody></table></div>"
    )


def slot_html(height: int, inner: str = "") -> str:
    """A box the browser draws a step's figure or table into (replay_js.STEP_JS): fixed height, scrolling past
    it, so a new step's content is laid out inside it and not the page around it."""
    return f'<div class="replay-slot" style="height:{height}px;overflow:auto;contain:strict">{inner}</div>'


def step_outputs(run_id: int, trace: RunTrace, origins: Sequence[tuple[str, str]], ends: Sequence[int], k: Any):
    """(header, text so far, tree figure, threshold figure, node table) of step `k`; a run without
    steps shows its whole text and no figures."""
    if not trace.steps:
        return step_info(run_id, trace, 0), tokens.tokens_html(origins), None, None, nodes_frame_empty()
    k = clamp_step(trace, k)
    s = trace.steps[k]
    text_of = known_texts(trace)
    return (
        step_info(run_id, trace, k),
        tokens.tokens_html(origins, upto=ends[k]),
        figures.tree_figure(s, text_of),
        figures.threshold_figure(s, gate=gated(trace), text_of=text_of),
        nodes_frame(s, text_of),
    )


# The fields of one node in step_data, in order (the browser's drawing, replay_js.STEP_JS, reads them by name):
# the node table's columns, then what the figures need besides: y in the tree layout, on the emitted path,
# judged by CSD's gate, and the rest of figures.node_hover's numbers.
NODE_FIELDS = NODE_COLUMNS + (
    "y",
    "path",
    "gate",
    "logit_gap",
    "max_p",
    "p_eos",
    "token_id",
    "draft_p",
    "mem_count",
    "correction_id",
)


def node_row(n, y: float, path: bool, gate: bool = True, text_of: TokenText | None = None) -> list:
    """One node of step_data: NODE_FIELDS' values, numbers to four significant digits; `gate`: whether the run's
    method has CSD's gate (figures.is_gate_node then says which nodes it judged)."""
    return [
        n.node,
        n.parent,
        n.depth,
        visible_token(n.token_text),  # the node table shows it as every view does (a newline is not a blank cell)
        n.source,
        sig(n.p),
        sig(n.threshold),
        sig(n.entropy),
        n.rank,
        n.decision,
        readable_reason(n.reason, text_of),
        y,
        int(path),
        int(gate and figures.is_gate_node(n)),
        sig(n.logit_gap),
        sig(n.max_p),
        sig(n.p_eos),
        n.token_id,
        sig(n.draft_p),
        n.mem_count,
        n.correction_id,
    ]


def step_data(run_id: int, trace: RunTrace, ends: Sequence[int], text_of: TokenText | None = None) -> dict[str, Any]:
    """Every step of a run as the browser draws it without asking the server again (replay_js.STEP_JS):
    per step the header, the tree's title and one row of NODE_FIELDS per node, the tree layout done here
    (figures.tree_layout); `ends` cuts the run's text (sent once) at each step. A 1,000-step run of small trees
    is ~1 MB of JSON, sent once when the run loads; switching steps then costs no round trip. `heights` are the
    tallest tree and threshold figure of the run (px): the browser sizes its figure boxes to them, so no step's
    figure is cut. `text_of` names correction tokens in the reasons (known_texts)."""
    steps, gate, text_of = [], gated(trace), text_of or known_texts(trace)
    tallest_tree = tallest_thresholds = 0
    for k, s in enumerate(trace.steps):
        pos = figures.tree_layout(s.nodes)
        path = {n.node for n in tokens.emitted_nodes(s)} | {n.node for n in s.nodes if n.parent == -1}
        rows = [node_row(n, pos[n.node][1] if n.node in pos else None, n.node in path, gate, text_of) for n in s.nodes]
        steps.append(
            {"info": step_info(run_id, trace, k), "title": figures.tree_title(s), "index": s.index, "nodes": rows}
        )
        tallest_tree = max(tallest_tree, figures.tree_height(len({y for _, y in pos.values()})))
        tallest_thresholds = max(
            tallest_thresholds, figures.threshold_height(any(r[NODE_FIELDS.index("gate")] for r in rows))
        )
    return {
        "run": run_id,
        "fields": list(NODE_FIELDS),
        "ends": list(ends),
        "steps": steps,
        "info": step_info(run_id, trace, 0),
        "colors": DECISION_COLORS,
        "symbols": SOURCE_SYMBOLS,
        "heights": {"tree": tallest_tree, "thresholds": tallest_thresholds},
    }


def next_step(trace: RunTrace, k: Any) -> int | None:
    """The step after `k` while playing; None at the last one (the player stops)."""
    nxt = step_of(k) + 1
    return nxt if nxt < len(trace.steps) else None


# ---------------------------------------------------------------- live tuning


def slider_range(name: str) -> tuple[float, float, float]:
    """(low, high, step) of a tuning slider: the parameter's range, kept to where it is worth sliding."""
    spec = PARAMS[name]
    low = 0.0 if not spec.low_open else (1e-4 if name == "tau" else 0.001)
    high = {"alpha": 2.0, "lam": 50}.get(name, spec.high)
    return low, high, 1 if spec.kind is int else 0.001


def slider_label(
    name: str, params: dict[str, Any] | None = None, method: str | None = None, judge: str | None = None
) -> str:
    """A tuning slider's label, stating the slider's own range (slider_range: the one source of both), e.g.
    "λ lam: slider 0–50, default 6" (the parameter's whole range may be wider: the CLI and the API take it).
    Given a run's parameters, α's and β's labels say when its alignment nodes keep their own value (an AASD fit
    per source): the sliders then move the context nodes' thresholds only. Given the run's `method` and a
    parameter it does not record, the label says the run did not use it. Given a `judge` (another method's rule
    judging the run's drafts, as the rule dropdown chooses), the label follows that rule instead: a parameter the
    rule reads has no note (the slider drives the re-score), one it does not read says so, and the alignment
    nodes keep the run's own α, β only where the rule reads them (workbench.rescore keeps only what it takes)."""
    low, high, _ = slider_range(name)
    shown = f"{SYMBOL[name]} {name}" if name in SYMBOL else name
    takes = get_method(judge).params if judge else None
    own = (params or {}).get(f"{name}_alignment") if name in ("alpha", "beta") else None
    if takes is not None and f"{name}_alignment" not in takes:
        own = None
    scope = f" (context nodes; alignment nodes keep the run's {SYMBOL[name]} {own:g})" if own is not None else ""
    if takes is not None:
        unused = "" if name in takes else f" (not read by {judge}'s rule)"
    else:
        unused = f" (not used by {method}: shows the default)" if method and name not in (params or {}) else ""
    return f"{shown}{scope}{unused}: slider {low:g}–{high:g}, default {PARAMS[name].default:g}"


def slider_labels(trace: RunTrace, judge: str | None = None) -> list[str]:
    """The tuning sliders' labels (TUNABLE order) for the rule that judges: the run's own, or `judge`'s."""
    return [slider_label(name, trace.params, trace.method, judge) for name in TUNABLE]


def rule_choices() -> list[str]:
    """The rule dropdown: the run's own, or any method of our engine that can re-score (same drafts, another
    rule). Sampling methods (top-k, nucleus: default temperature > 0) verify by random draws, not thresholds,
    so workbench.rescore refuses them: they are not offered."""
    return [OWN_RULE] + [
        name for name, m in METHODS.items() if m.in_engine and not (m.params.get("temperature") or 0) > 0
    ]


def tuning_active(method: str) -> list[bool]:
    """Which tuning sliders (TUNABLE order) the judging method reads; the others are greyed out."""
    takes = get_method(method).params
    return [name in takes for name in TUNABLE]


def judge_of(rule_choice: str | None) -> str | None:
    """The method whose rule judges the drafts; None for the run's own."""
    if rule_choice is not None and not isinstance(rule_choice, str):
        raise InvalidInputError(f"the rule must be a method's name, got {str(rule_choice)[:40]!r}")
    return None if not rule_choice or rule_choice.startswith("(") else rule_choice


def tuning_values(trace: RunTrace) -> list[Any]:
    """The run's own value of each tuning slider; where its method takes no such parameter, the parameter's default
    (the slider is greyed out, and says so: a value left from another run would read as this run's)."""
    return [PARAMS[name].default if trace.params.get(name) is None else trace.params[name] for name in TUNABLE]


def tuned_params(method: str, values: Sequence[Any]) -> dict[str, Any]:
    """The sliders' values of the parameters `method` takes (in TUNABLE order)."""
    takes = get_method(method).params
    return {name: v for name, v in zip(TUNABLE, values) if name in takes and v is not None}


def rerun_params(trace: RunTrace, method: str, values: Sequence[Any]) -> dict[str, Any]:
    """The run's parameters that `method` takes, with the sliders' values over them. A run with fitted
    thresholds re-runs with the values it recorded (given, not read from the fit again: the sliders move them)."""
    takes, defaults = get_method(method).params, resolve_params(method)
    # A value equal to the method's default is left to the default: some defaults lie outside what a user may give
    # (greedy's top_k = 0, "no top-k sampling") and would be refused if passed back as given
    recorded = {k: v for k, v in trace.params.items() if k in takes and v != defaults.get(k)}
    params = {**recorded, **tuned_params(method, values)}
    if params.get("fitted"):
        params["fitted"] = 0
    return params


def rescore_summary(result: RunRescore, params: Mapping[str, Any]) -> str:
    """One line: the rule and values tried, the first changed step, and the MAL they predict up to it (after it the
    steps would split differently, so nothing is predicted there), beside the whole run's MAL."""
    used = {n: getattr(result, "params", {}).get(n, v) for n, v in params.items()}  # what was re-scored with
    shown = (
        ", ".join(f"{SYMBOL[n]} = {v:g}" for n, v in used.items() if isinstance(v, (int, float)))
        or f"{result.method} takes none of δ α β τ λ"
    )
    shown += _alignment_kept(getattr(result, "params", {}))
    bound = "at least " if result.predicted_is_lower_bound else ""
    if result.first_divergence is None:
        return (
            f"{result.method}: {shown}: no decision changes{_why_unchanged(result)}; predicted MAL = the run's MAL, "
            f"{result.run_mal:.2f} over all {len(result.steps)} steps"
        )
    last = result.steps[result.window - 1].step
    flips = sum(getattr(result, "flip_counts", {}).values())
    table = f"; {flips:,} decision{' flips' if flips == 1 else 's flip'}" + (
        f" (the table lists the first {FLIPS_SHOWN})" if flips > FLIPS_SHOWN else ""
    )
    return (
        f"{result.method}: {shown}: first change at step {result.first_divergence}; MAL up to step {last}: "
        f"{result.original_mal:.2f} → predicted **{bound}{result.predicted_mal:.2f}** (after step {last} the steps "
        f"would split differently (and a relaxed rule's text may change), so the rest is not predicted; the whole run's MAL: {result.run_mal:.2f}){table}"
    )


def _alignment_kept(params: Mapping[str, Any]) -> str:
    """Where alignment nodes have their own α, β (aasd[auto]'s fit), that the sliders' α, β judge only the context
    nodes, and the values the alignment nodes keep."""
    a, b = params.get("alpha_alignment"), params.get("beta_alignment")
    if a is None and b is None:
        return ""
    a, b = params.get("alpha") if a is None else a, params.get("beta") if b is None else b
    return f" (context nodes; alignment nodes keep their own α {a:g}, β {b:g})"


def _why_unchanged(result: RunRescore) -> str:
    """Why nothing flipped, where it is because every node the rule judged was the target's own top token."""
    judged = [
        n
        for s in result.steps
        for n in getattr(s, "nodes", ())
        if n.parent >= 0 and n.old_decision in ("accepted", "rejected")
    ]
    if judged and all(getattr(n, "rank", None) == 0 for n in judged):
        return (
            f": all {len(judged)} judged nodes were the target's own top token (the argmax), which passes any "
            "threshold ≤ max p"
        )
    return _why_no_rescue(result)


def _why_no_rescue(result: RunRescore) -> str:
    """For a rescue rule with a memory condition (csd's λ): how many still-rejected draft tokens had a pair count
    that reached λ, and how many of those the τ gate (or rescue_eos=no) refused, read from the rule's reasons
    (core.rules.rescue_decision writes "count c ≥ λ l" and "… < log τ …"). λ = 1 with "no decision changes" and no
    reason left the user to guess, though Compare had shown a count of 1."""
    lam = getattr(result, "params", {}).get("lam")
    if not isinstance(lam, (int, float)):
        return ""
    rejected = [n for s in result.steps for n in s.nodes if n.parent >= 0 and n.decision == "rejected"]
    reached = [n for n in rejected if " ≥ λ " in n.reason]
    if not reached:
        return f": no rejected draft token's pair count reached λ = {lam:g}" if rejected else ""
    exempt = sum(EOS_EXEMPT in n.reason for n in reached)
    gated = sum(" < log τ " in n.reason and EOS_EXEMPT not in n.reason for n in reached)
    rest = len(reached) - gated - exempt
    refused = [f"the τ gate refused {gated}"] if gated else []
    refused += [f"rescue_eos=no kept {exempt} (t* was an end of sequence)"] if exempt else []
    refused += [f"{rest} lost to a sibling taken first"] if rest else []
    return f": {len(reached)} rejected draft tokens' pair counts reached λ = {lam:g}; " + ", ".join(refused)


def flips_frame(result: RunRescore | None, text_of: TokenText | None = None) -> pd.DataFrame:
    """The first FLIPS_SHOWN decisions that flip (the summary gives their number), probabilities and thresholds to
    four significant digits, reasons in words (readable_reason); headers and no rows when nothing flips or nothing
    was re-scored yet."""
    rounded = ("p", "old_threshold", "new_threshold")
    rows = flips_table(result)[:FLIPS_SHOWN] if result is not None else []
    return pd.DataFrame(
        [
            {
                k.replace("_", " "): sig(v)
                if k in rounded
                else readable_reason(v, text_of)
                if k == "reason"
                else visible_token(v)
                if k == "token"
                else NOT_TAKEN
                if k == "new_decision" and v == "rejected" and PASSED_NOT_TAKEN in row["reason"]
                else v
                for k, v in row.items()
            }
            for row in rows
        ],
        columns=FLIP_COLUMNS,
    )


def _headed(title: str, body: str) -> str:
    """A text with its heading: the original and the re-run sit side by side, and without one neither said which it was."""
    return f'<div class="rerun-head" style="font-weight:600;margin-bottom:4px">{html.escape(title)}</div>{body}'


def rerun_outputs(
    run_id: int, trace: RunTrace, new: RunTrace, new_id: int | None, greedy: tuple[int, RunTrace] | None = None
):
    """(original text, re-run text with its first divergence marked, both runs' metrics). `greedy` is a stored
    greedy run of the same workload (same_workload; ReplayHandlers.greedy_of finds it): both speed-ups are against
    it (core.stats.speedup, as Compare computes them: the same figure for the same pair), and the line says which it
    is and on which clock; without one the line says why there is no speed-up."""
    div = run_divergence(trace, new)  # a re-run stopped while still equal to the original is no divergence
    original, rerun = (speedup(r, greedy[1]) if greedy is not None else (None, "") for r in (trace, new))
    clocks = {clock for _, clock in (original, rerun) if clock}
    return (
        _headed(f"original #{run_id}", tokens.run_html(trace)),
        _headed(f"re-run #{new_id if new_id is not None else '–'}", tokens.run_html(new, first_divergence=div)),
        f"original #{run_id}: {metrics_md(trace, run_id, None, speedup=original[0])}  \nre-run #{new_id} "
        f"({rerun_settings(new)}): {metrics_md(new, new_id, None, speedup=rerun[0])}  \n"
        f"{speedup_source(trace, run_id, greedy, clocks)}",
    )


def same_workload(run: RunTrace, other: RunTrace) -> bool:
    """Whether `other` decoded what `run` decoded, where a speed-up between them means something: the same model
    (and weights, when both recorded them), dtype, device, prompt tokens and token cap."""
    fingerprints = (run.model_fingerprint, other.model_fingerprint)
    return (
        run.model == other.model
        and (None in fingerprints or fingerprints[0] == fingerprints[1])
        and (run.dtype, run.device) == (other.dtype, other.device)
        and list(run.prompt_ids) == list(other.prompt_ids)
        and run.params.get("max_new_tokens") == other.params.get("max_new_tokens")
    )


def greedy_candidates(run_id: int, ids: Sequence[int]) -> list[int]:
    """Stored greedy runs' ids in the order to try them as `run_id`'s reference: the nearest before it first (a
    comparison runs greedy first, so that is the comparison the run came from), then the nearest after it."""
    before = sorted((i for i in ids if i < run_id), reverse=True)
    return before + sorted(i for i in ids if i > run_id)


def speedup_source(
    trace: RunTrace, run_id: int, greedy: tuple[int, RunTrace] | None, clocks: set[str] = frozenset()
) -> str:
    """The line under the re-run's metrics: which greedy run the speed-ups are against and on which clock (`clocks`,
    core.stats.speedup's, said in core.stats.clock_phrase's words as Compare says them), or why there are none."""
    clock = f"; {clock_phrase(clocks)}" if clocks else ""
    if greedy is not None:
        gid = greedy[0]
        if gid == run_id:
            return f"speed-ups against #{run_id} itself (it is the greedy run){clock}"
        return (
            f"speed-ups against greedy run #{gid} (the same prompt, model, {trace.dtype} and token cap; measured "
            f"when it ran: the machine's load may have changed since){clock}"
        )
    if trace.status != "complete":
        return f"no speed-up: #{run_id} is {trace.status}, so its speed measured part of a run"
    return (
        f"no speed-up: no complete greedy run of this prompt on {trace.model} ({trace.dtype}, "
        f"max_new_tokens {trace.params.get('max_new_tokens', '–')}) is stored to measure it against; run greedy "
        "beside it in Compare, then re-run"
    )


def rerun_settings(new: RunTrace) -> str:
    """The verification settings a re-run ran with, e.g. "aasd, context α 0, β 0.001 · alignment α 0.1, β 0.3": only
    those its method reads (a run's record may carry others, e.g. rescue_eos), and top-k only when it sampled."""
    try:
        takes = get_method(new.method).params
    except WorkbenchError:  # a method this server does not know: what the run recorded
        takes = new.params
    sampled = (new.params.get("temperature") or 0) > 0
    used = {
        k: v
        for k, v in new.params.items()
        if k in VERIFY_PARAMS and k in takes and isinstance(v, (int, float)) and (k != "top_k" or sampled)
    }
    if {"alpha", "beta"} <= used.keys() and new.method.startswith("aasd"):
        return f"{new.method}, {describe_values(used)}"
    shown = ", ".join(f"{SYMBOL.get(k, k)} {v:g}" for k, v in used.items())
    return f"{new.method}, {shown}" if shown else new.method
