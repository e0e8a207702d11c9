"""The Gradio app: Compare, Replay (with live re-scoring), Analytics and Export, one small function per tab.

Session state is only run ids; everything else is read from the store. Handlers catch the project's
errors and show them in a status line, so bad input never stops the app.
"""
from __future__ import annotations

import tempfile
import threading
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from core.stats import run_metrics
from core.engine import check_prompt
from core.errors import InvalidInputError, WorkbenchError
from core.params import PARAMS
from workbench import service, views
from workbench.rescore import flips_table, rescore_run
from workbench.store import Store

SLOTS = 4  # columns in Compare
TUNABLE = ("delta", "alpha", "beta", "tau", "lam")  # the live-tuning sliders
SYMBOL = {"delta": "δ", "alpha": "α", "beta": "β", "tau": "τ", "lam": "λ", "gamma": "γ"}
FREE_TEXT = "(free text)"

try:  # ZeroGPU on Hugging Face Spaces: request a GPU per generation; a no-op elsewhere
    import spaces

    gpu = spaces.GPU
except ImportError:
    def gpu(fn):
        return fn


def _error(e: Exception) -> str:
    return f"**⚠ {e}**"


def _label(name: str) -> str:
    spec = PARAMS[name]
    bracket = "(" if spec.low_open else "["
    return f"{SYMBOL.get(name, name)} {name}: default {spec.default}, range {bracket}{spec.low}, {spec.high}]"


class RunCache:
    """Finished runs by id (they never change), so replay steps switch without reloading."""

    def __init__(self, store: Store, size: int = 16):
        self.store, self.size, self._runs, self._lock = store, size, OrderedDict(), threading.Lock()

    def get(self, run_id: int):
        run_id = int(run_id)
        with self._lock:
            if run_id in self._runs:
                self._runs.move_to_end(run_id)
                return self._runs[run_id]
        stored = self.store.load_run(run_id)
        entry = (stored, views.token_origins(stored.trace), _step_ends(stored.trace))
        if stored.trace.status != "running":
            with self._lock:
                self._runs[run_id] = entry
                while len(self._runs) > self.size:
                    self._runs.popitem(last=False)
        return entry


def _step_ends(run) -> list[int]:
    """Tokens emitted up to and including each step."""
    out, total = [], 0
    for s in run.steps:
        total += len(s.emitted)
        out.append(total)
    return out


def _metrics_md(run, run_id, greedy_tps: float | None) -> str:
    m = run_metrics(run)
    fmt = lambda v, f="{:.2f}": "–" if v is None else f.format(v)
    speed = f"{m['tps'] / greedy_tps:.2f}×" if greedy_tps and m.get("tps") else "–"
    state = "" if run.status == "complete" else f" · **{run.status}**"
    return (f"MAL **{fmt(m['mal'])}** · {fmt(m['tps'], '{:.1f}')} tok/s · speed-up {speed} · "
            f"acceptance {fmt(m['accept_rate'], '{:.0%}')} · {m['steps']} steps · {m['tokens']} tokens"
            f" · run #{run_id if run_id is not None else '–'}{state}")


def _runs_frame(store: Store, filter_text: str = "", limit: int = 200) -> pd.DataFrame:
    text = (filter_text or "").strip()
    rows = []
    for r in store.list_runs(limit=limit):
        m = r.metrics or {}
        row = {"id": r.id, "method": r.method, "model": r.model, "status": r.status, "tokens": m.get("tokens"),
               "MAL": round(m["mal"], 2) if m.get("mal") else None, "tok/s": round(m["tps"], 1) if m.get("tps") else None,
               "tags": ", ".join(r.tags), "created": r.created.strftime("%Y-%m-%d %H:%M:%S")}
        if not text or any(text.lower() in str(row[k]).lower() for k in ("method", "model", "tags", "status", "id")):
            rows.append(row)
    return pd.DataFrame(rows, columns=["id", "method", "model", "status", "tokens", "MAL", "tok/s", "tags", "created"])


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _run_ids(values) -> list[int]:
    """Run ids from a dropdown: ids, or typed text such as "12" or "#12 aasd"."""
    out = []
    for v in values or []:
        text = str(v).strip().lstrip("#").split()[0] if str(v).strip() else ""
        if not text.isdigit():
            raise InvalidInputError(f"{v!r} is not a run id: pick runs from the list or type their numbers")
        out.append(int(text))
    return out


def _run_choices(store: Store) -> list[tuple[str, int]]:
    return [(f"#{r.id} {r.method} · {r.model}", r.id) for r in store.list_runs(limit=200)]


# ---------------------------------------------------------------- Compare

def compare_tab(store: Store, pool: service.ModelPool, compare_ids: gr.State):
    tasks = {t.id: t for t in service.sample_tasks()}
    with gr.Row():
        model = gr.Dropdown(service.model_choices(), value=service.default_model(), allow_custom_value=True,
                            label="Model (preset, local folder or hub id)", scale=3)
        draft = gr.Dropdown([""] + [p for p in service.PRESETS if service.is_fetched(p)], value="", allow_custom_value=True,
                            label="Draft model (for sd / csd with a draft; optional)", scale=2)
        methods = gr.Dropdown(service.UI_METHODS, value=list(service.DEFAULT_METHODS), multiselect=True, max_choices=SLOTS, allow_custom_value=True,
                              label=f"Methods (up to {SLOTS}; greedy is the speed-up reference; variants: aasd[align_graft=1])", scale=3)
    with gr.Row():
        task = gr.Dropdown([FREE_TEXT] + list(tasks), value=next(iter(tasks)), label="Task (bundled samples)", scale=2)
        task_file = gr.File(label="…or upload a task file (.jsonl)", file_types=[".jsonl", ".json"], scale=2, height=90)
        chat = gr.Checkbox(True, label="apply the chat template", scale=1)
    uploaded = gr.State({})
    first = next(iter(tasks.values()))
    with gr.Row():
        context = gr.Textbox(first.context or "", label="Context (the draft pool; optional)", lines=6, max_lines=12, scale=3)
        prompt = gr.Textbox(first.input, label="Prompt", lines=6, max_lines=12, scale=2)
    with gr.Accordion("Parameters (every method reads the ones it takes; a changed value applies to all that take it)", open=False):
        with gr.Row():
            max_new = gr.Slider(1, 1024, value=first.max_new_tokens or 128, step=1, label="max_new_tokens")
            controls = {}
            for name in TUNABLE:
                # No min/max on the field: core.params checks ranges and says what the parameter means.
                controls[name] = gr.Number(PARAMS[name].default, label=_label(name), precision=0 if PARAMS[name].kind is int else None)
        with gr.Row():
            for name in ("key_len", "ngram", "align_m", "align_graft", "max_nodes", "gamma", "top_k", "temperature", "top_p", "seed"):
                spec = PARAMS[name]
                controls[name] = gr.Number(spec.default, label=_label(name), precision=0 if spec.kind is int else None)
    with gr.Row():
        run_btn = gr.Button("Run", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    status = gr.Markdown("", elem_id="compare-status")
    gr.HTML(views.legend_html())
    heads, bodies, stats = [], [], []
    with gr.Row(equal_height=False):
        for i in range(SLOTS):
            with gr.Column(min_width=240):
                heads.append(gr.Markdown(f"### {service.DEFAULT_METHODS[i]}" if i < 3 else "", elem_id=f"col-head-{i}"))
                stats.append(gr.Markdown("", elem_id=f"col-metrics-{i}"))
                bodies.append(gr.HTML("", elem_id=f"col-text-{i}", elem_classes=["tokens"]))
    names = list(controls)

    def pick_task(choice, extra):
        t = tasks.get(choice) or (extra or {}).get(choice)
        if t is None:
            return gr.update(), gr.update(), gr.update(), gr.update()
        text_in = t.template.format(context="{context}", input=t.input).replace("{context}", "").strip() if t.template else t.input
        return t.context or "", text_in, t.max_new_tokens or 128, t.chat

    def upload(path):
        if not path:
            return {}, gr.update(choices=[FREE_TEXT] + list(tasks)), ""
        try:
            loaded = {f"upload:{t.id}": t for t in service.sample_tasks(path)}
        except WorkbenchError as e:
            return {}, gr.update(), _error(e)
        return loaded, gr.update(choices=[FREE_TEXT] + list(tasks) + list(loaded), value=next(iter(loaded), FREE_TEXT)), \
            f"loaded {len(loaded)} task(s) from the file"

    task.change(pick_task, [task, uploaded], [context, prompt, max_new, chat], api_name=False)
    task_file.change(upload, [task_file], [uploaded, task, status], api_name=False)

    def blank(msg=""):
        return [msg, []] + [gr.update()] * (3 * SLOTS)

    @gpu
    def compare(model_name, draft_name, method_list, prompt_text, context_text, use_chat, max_new_tokens, *values):
        try:
            specs = service.check_methods(method_list or [], model_name, draft_name)
            chosen = {n: v for n, v in zip(names, values) if v is not None and v != PARAMS[n].default}
            chosen["max_new_tokens"] = int(max_new_tokens)
            per_method = [service.method_params(name, chosen, over) for name, over in specs]
            yield blank(f"loading {model_name}…")
            models = pool.load(model_name, draft_name)
            text, ids = service.build_prompt(models.target.tokenizer, prompt_text, context_text, bool(use_chat))
            check_prompt(ids, models.target.max_context)
        except WorkbenchError as e:
            yield blank(_error(e))
            return
        heads_out = [f"### {method_list[i]}" if i < len(specs) else "" for i in range(SLOTS)]
        texts, metrics, run_ids = [""] * SLOTS, [""] * SLOTS, []
        greedy_ids, greedy_tps = None, None
        order = sorted(range(len(specs)), key=lambda i: specs[i][0] != "greedy")  # greedy first: the reference
        context_value = (context_text or "").strip() or None
        for slot in order:
            name = specs[slot][0]
            with pool.slot(model_name):
                for prog in service.stream_run(name, models, ids, per_method[slot], prompt_text=text, context=context_value,
                                               store=store, tags=("workbench",)):
                    if prog.error:
                        metrics[slot] = _error(prog.error)
                    elif prog.run is not None:
                        run = prog.run
                        if prog.run_id is not None:
                            run_ids.append(prog.run_id)
                        if name == "greedy":
                            greedy_ids, greedy_tps = run.output_ids, run_metrics(run)["tps"]
                        div = views.first_divergence(greedy_ids, run.output_ids) if greedy_ids is not None and name != "greedy" else None
                        texts[slot] = views.tokens_html(views.token_origins(run), first_divergence=div)
                        metrics[slot] = _metrics_md(run, prog.run_id, greedy_tps)
                    else:
                        texts[slot] = views.tokens_html(views.step_origins(prog.steps, models.target.tokenizer))
                        metrics[slot] = f"running… {len(prog.steps)} steps"
                    yield [f"running {name}…", list(run_ids)] + heads_out + metrics + texts
        yield [f"done: runs {', '.join(f'#{r}' for r in run_ids)} stored ({store.where})", list(run_ids)] + heads_out + metrics + texts

    inputs = [model, draft, methods, prompt, context, chat, max_new] + [controls[n] for n in names]
    outputs = [status, compare_ids] + heads + stats + bodies
    event = run_btn.click(compare, inputs, outputs, api_name="compare", concurrency_id="generate")
    stop_btn.click(None, None, None, cancels=[event], api_name=False)


# ---------------------------------------------------------------- Replay and live tuning

def replay_tab(store: Store, pool: service.ModelPool, cache: RunCache, compare_ids: gr.State):
    with gr.Row():
        filt = gr.Textbox("", label="Filter runs (method, model, tag, status)", scale=3)
        refresh = gr.Button("Refresh", scale=1)
    runs = gr.Dataframe(_runs_frame(store), interactive=False, max_height=240, label="Stored runs (click a row to replay)")
    with gr.Row():
        run_id = gr.Number(None, label="Run id", precision=0, scale=1, elem_id="replay-run-id")
        load_btn = gr.Button("Load run", scale=1)
        play = gr.Button("▶ Play", scale=1)
        pause = gr.Button("Pause", scale=1)
    timer = gr.Timer(0.6, active=False)
    step = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="replay-step")
    info = gr.Markdown("", elem_id="replay-info")
    text = gr.HTML("", elem_classes=["tokens"], elem_id="replay-text")
    with gr.Row():
        tree = gr.Plot(label="Draft tree of this step")
        thresholds = gr.Plot(label="p against the threshold (and the CSD gate)")
    nodes = gr.Dataframe(interactive=False, max_height=260, label="Nodes of this step")

    gr.Markdown("### Live tuning: re-score every stored step under new thresholds (no model)")
    with gr.Row():
        sliders = {}
        for name in TUNABLE:
            spec = PARAMS[name]
            top = {"alpha": 2.0, "lam": 50}.get(name, spec.high)
            sliders[name] = gr.Slider(0.0 if not spec.low_open else (1e-4 if name == "tau" else 0.001), top, value=spec.default,
                                      step=1 if spec.kind is int else 0.001, label=_label(name), elem_id=f"tune-{name}")
    rule = gr.Dropdown(["(the run's own)"] + [n for n, m in service.METHODS.items() if m.hf_mode is None], value="(the run's own)",
                       label="Judge with the rule of (same drafts; e.g. aasd-fixed to try CASD's δ on an AASD run)",
                       elem_id="tune-rule")
    tune_md = gr.Markdown("", elem_id="tune-summary")
    flips = gr.Dataframe(interactive=False, max_height=260, label="Decisions that flip (step, node, why)", elem_id="tune-flips")
    with gr.Row():
        rerun_btn = gr.Button("Re-run with these settings")
    with gr.Row():
        orig_col = gr.HTML("", elem_classes=["tokens"])
        rerun_col = gr.HTML("", elem_classes=["tokens"])
    rerun_md = gr.Markdown("")

    def show_step(rid, k):
        if rid is None:
            return "choose a run", "", None, None, None
        try:
            stored, origins, ends = cache.get(int(rid))
        except WorkbenchError as e:
            return _error(e), "", None, None, None
        trace = stored.trace
        if not trace.steps:
            return (f"run #{rid} ({trace.method}) has no steps to replay (transformers' baselines keep none)",
                    views.tokens_html(origins), None, None, None)
        k = max(0, min(int(k or 0), len(trace.steps) - 1))
        s = trace.steps[k]
        frame = pd.DataFrame([{"node": n.node, "parent": n.parent, "depth": n.depth, "token": n.token_text, "source": n.source,
                               "p": _sig(n.p), "threshold": _sig(n.threshold), "entropy": _sig(n.entropy), "rank": n.rank,
                               "decision": n.decision, "reason": n.reason} for n in s.nodes])
        md = (f"run #{rid} · {trace.method} · step {k} of 0–{len(trace.steps) - 1} · tree {s.tree_size} nodes · "
              f"accepted {s.accepted} + bonus · {s.step_ms:.1f} ms (draft {s.draft_ms:.1f}, forward {s.forward_ms:.1f})")
        return md, views.tokens_html(origins, upto=ends[k]), views.tree_figure(s), views.threshold_figure(s), frame

    def load(rid):
        if rid is None:
            return gr.update(), "type a run id or click a row", *[gr.update()] * len(TUNABLE)
        try:
            stored, _, _ = cache.get(int(rid))
        except WorkbenchError as e:
            return gr.update(), _error(e), *[gr.update()] * len(TUNABLE)
        p = stored.trace.params
        n = max(1, len(stored.trace.steps))
        return (gr.update(maximum=n - 1, value=0), f"loaded run #{rid}",
                *[gr.update(value=p[name]) if name in p else gr.update() for name in TUNABLE])

    def pick_row(frame, evt: gr.SelectData):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        return int(frame.iloc[row]["id"])

    def tune(rid, rule_name, *values):
        if rid is None:
            return "load a run first", None
        try:
            stored, _, _ = cache.get(int(rid))
            judge = None if not rule_name or rule_name.startswith("(") else rule_name
            takes = service.get_method(judge or stored.trace.method).params
            params = {n: v for n, v in zip(TUNABLE, values) if n in takes}
            result = rescore_run(stored.trace, params, rule=judge)
        except WorkbenchError as e:
            return _error(e), None
        div = "no decision changes" if result.first_divergence is None else f"first change at step {result.first_divergence}"
        shown = ", ".join(f"{SYMBOL[n]} = {v:g}" for n, v in params.items()) or f"{result.method} takes none of δ α β τ λ"
        shown = f"{result.method}: {shown}"
        md = (f"{shown}: {div}; MAL {result.original_mal:.2f} → predicted **{result.predicted_mal:.2f}** "
              f"(until the first divergence; after it the text would differ)")
        rows = [{k: _sig(v) if k in ("p", "old_threshold", "new_threshold") else v for k, v in r.items()}
                for r in flips_table(result)]
        return md, pd.DataFrame(rows)

    def rerun(rid, rule_name, *values):
        if rid is None:
            return "", "", "load a run first"
        try:
            stored, origins, _ = cache.get(int(rid))
            trace = stored.trace
            method = trace.method if not rule_name or rule_name.startswith("(") else rule_name
            takes = service.get_method(method).params
            params = {k: v for k, v in trace.params.items() if k in takes}
            params.update({n: v for n, v in zip(TUNABLE, values) if n in takes})
            models = pool.load(trace.model, trace.draft_model)
            with pool.slot(trace.model):
                last = None
                for prog in service.stream_run(method, models, trace.prompt_ids, params, prompt_text=trace.prompt,
                                               context=trace.context, store=store, tags=("workbench", f"rerun-of-{rid}")):
                    last = prog
        except WorkbenchError as e:
            return "", "", _error(e)
        if last is None or last.error:
            return "", "", _error(last.error if last else "the run produced nothing")
        div = views.first_divergence(trace.output_ids, last.run.output_ids)
        return (views.tokens_html(origins), views.tokens_html(views.token_origins(last.run), first_divergence=div),
                f"original #{rid}: {_metrics_md(trace, rid, None)}  \nre-run #{last.run_id}: {_metrics_md(last.run, last.run_id, None)}")

    refresh.click(lambda f: _runs_frame(store, f), [filt], [runs], api_name="list_runs")
    filt.submit(lambda f: _runs_frame(store, f), [filt], [runs], api_name=False)
    runs.select(pick_row, [runs], [run_id], api_name=False).then(
        load, [run_id], [step, info, *sliders.values()], api_name=False).then(
        show_step, [run_id, step], [info, text, tree, thresholds, nodes], api_name=False)
    load_btn.click(load, [run_id], [step, info, *sliders.values()], api_name="load_run").then(
        show_step, [run_id, step], [info, text, tree, thresholds, nodes], api_name=False)
    step.change(show_step, [run_id, step], [info, text, tree, thresholds, nodes], api_name="replay_step",
                trigger_mode="always_last")
    play.click(lambda: gr.Timer(active=True), None, [timer], api_name=False)
    pause.click(lambda: gr.Timer(active=False), None, [timer], api_name=False)

    def advance(k, rid):
        if rid is None:
            return gr.update(), gr.Timer(active=False)
        stored, _, _ = cache.get(int(rid))
        nxt = int(k or 0) + 1
        if nxt >= len(stored.trace.steps):
            return gr.update(), gr.Timer(active=False)
        return nxt, gr.update()

    timer.tick(advance, [step, run_id], [step, timer], api_name=False)
    for s in sliders.values():
        s.change(tune, [run_id, rule, *sliders.values()], [tune_md, flips], api_name=False, trigger_mode="always_last")
    rule.change(tune, [run_id, rule, *sliders.values()], [tune_md, flips], api_name=False)
    gr.Button("Re-score", visible=False).click(tune, [run_id, rule, *sliders.values()], [tune_md, flips], api_name="rescore")
    rerun_btn.click(rerun, [run_id, rule, *sliders.values()], [orig_col, rerun_col, rerun_md], api_name="rerun",
                    concurrency_id="generate")
    return runs, filt


# ---------------------------------------------------------------- Analytics and export

def analytics_tab(store: Store, cache: RunCache, compare_ids: gr.State):
    with gr.Row():
        chosen = gr.Dropdown(_run_choices(store), multiselect=True, allow_custom_value=True,
                             label="Runs (empty: the last comparison)", scale=4)
        refresh = gr.Button("Refresh list", scale=1)
        draw = gr.Button("Draw", variant="primary", scale=1)
    with gr.Row():
        hist, by_depth = gr.Plot(label="Tokens per step"), gr.Plot(label="Acceptance by depth")
    with gr.Row():
        by_source, bars = gr.Plot(label="Acceptance by source"), gr.Plot(label="MAL and tokens/s")
    with gr.Row():
        sweep_param = gr.Dropdown(list(TUNABLE), value="delta", label="Sweep parameter", scale=1)
        sweep = gr.Plot(label="MAL against the parameter, per method (the chosen runs, e.g. a stored bench sweep)", scale=4)

    def figures(ids, last, param):
        try:
            ids = _run_ids(ids or last)
        except WorkbenchError as e:
            gr.Warning(str(e))
            ids = []
        runs = []
        for i in ids:
            try:
                runs.append(cache.get(i)[0])
            except WorkbenchError as e:
                gr.Warning(str(e))
        traces = [s.trace for s in runs]
        labels = [f"#{s.id} {s.trace.method}" for s in runs]
        rows = [{"label": lab, "mal": run_metrics(t)["mal"], "tps": run_metrics(t)["tps"]} for lab, t in zip(labels, traces)]
        pairs = list(zip(labels, traces))
        return (views.accept_hist_figure(pairs), views.accept_by_depth_figure(pairs), views.accept_by_source_figure(pairs),
                views.runs_bar_figure(rows), views.sweep_figure(pairs, param))

    refresh.click(lambda: gr.Dropdown(choices=_run_choices(store)), None, [chosen], api_name=False)
    draw.click(figures, [chosen, compare_ids, sweep_param], [hist, by_depth, by_source, bars, sweep], api_name="analytics")
    return chosen


def export_tab(store: Store, compare_ids: gr.State):
    with gr.Row():
        chosen = gr.Dropdown(_run_choices(store), multiselect=True, allow_custom_value=True,
                             label="Runs to export (empty: the last comparison)", scale=4)
        refresh = gr.Button("Refresh list", scale=1)
        export_btn = gr.Button("Export CSV (zip)", variant="primary", scale=1)
    file = gr.File(label="runs.csv, steps.csv and nodes.csv", elem_id="export-file")
    note = gr.Markdown("")

    def export(ids, last):
        try:
            ids = _run_ids(ids or last)
        except WorkbenchError as e:
            return None, _error(e)
        if not ids:
            return None, "**⚠ choose runs to export (or run a comparison first)**"
        out = Path(tempfile.mkdtemp(prefix="workbench-export-"))
        try:
            files = store.export_csv(ids, out)
        except WorkbenchError as e:
            return None, _error(e)
        zpath = out / f"runs-{'-'.join(map(str, ids[:8]))}.zip"
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files.values():
                z.write(f, f.name)
        return str(zpath), f"exported {len(ids)} run(s): {', '.join(f.name for f in files.values())}"

    refresh.click(lambda: gr.Dropdown(choices=_run_choices(store)), None, [chosen], api_name=False)
    export_btn.click(export, [chosen, compare_ids], [file, note], api_name="export")
    return chosen


CSS = """
.tokens { font-family: ui-monospace, monospace; font-size: 0.9em; line-height: 1.6; white-space: pre-wrap; }
"""


def build_app(db: str | None = None, pool: service.ModelPool | None = None, queue_size: int = 32) -> gr.Blocks:
    store = Store(db)
    pool = pool or service.ModelPool()
    cache = RunCache(store)
    with gr.Blocks(title="Speculative decoding workbench") as demo:
        gr.Markdown("## Speculative decoding workbench\nGreedy, AASD, CSD and friends side by side; every step kept, "
                    "replayable and re-scorable. Runs are stored in " + f"`{store.where}`.")
        compare_ids = gr.State([])
        with gr.Tabs():
            with gr.Tab("Compare"):
                compare_tab(store, pool, compare_ids)
            with gr.Tab("Replay & tune") as replay:
                runs, filt = replay_tab(store, pool, cache, compare_ids)
            with gr.Tab("Analytics") as analytics:
                analytics_pick = analytics_tab(store, cache, compare_ids)
            with gr.Tab("Export") as export:
                export_pick = export_tab(store, compare_ids)
        # Lists of stored runs are read when their tab opens, so they include the runs made since.
        replay.select(lambda f: _runs_frame(store, f), [filt], [runs], api_name=False)
        for tab, pick in ((analytics, analytics_pick), (export, export_pick)):
            tab.select(lambda: gr.Dropdown(choices=_run_choices(store)), None, [pick], api_name=False)
    # One generation per loaded model at a time (ModelPool's semaphores); other events stay responsive.
    demo.queue(max_size=queue_size, default_concurrency_limit=4)
    demo.store = store
    return demo


def launch(demo: gr.Blocks, **kwargs: Any):
    return demo.launch(css=CSS, **kwargs)
