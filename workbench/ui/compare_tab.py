"""The Compare tab: up to four methods on one prompt, side by side, streamed as they decode and stored;
optionally repeated N times (interleaved), with the mean tokens/s and speed-up and their 95 % intervals."""
from __future__ import annotations

import threading

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from core.step import check_prompt
from core.errors import InvalidInputError, WorkbenchError
from workbench.methods import get_method, parse_method_spec
from core.params import PARAMS
from core.stats import first_divergence, run_metrics
from workbench import service, views
from workbench.evaluation.bench import spread
from workbench.evaluation.fidelity import flip_report
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task, fill_template
from workbench.store import Store
from workbench.ui.shared import TUNABLE, check_model_source, error_md, gpu, metrics_md, param_label, run_colors

SLOTS = service.MAX_METHODS  # columns
FREE_TEXT = "(free text)"
FITTED_VARIANTS = ("aasd[auto]", "casd[auto]")  # verify with the thresholds fitted to the model (core.thresholds)
FLIP_CLASS = "tok-flip"  # a lossless method's first token that is not greedy's
UPLOAD_HINT = ("JSON Lines, one task a line: `{\"id\": \"q1\", \"task\": \"qa\", \"input\": \"the question\", "
               "\"context\": \"the document (optional)\", \"answers\": [\"a reference\"]}`; optional `template` "
               "(with `{context}` / `{input}`) and `max_new_tokens`. Spec-Bench's question.jsonl and LongBench rows load as they are.")
MORE_PARAMS = ("key_len", "ngram", "align_m", "align_graft", "max_nodes", "gamma", "top_k", "temperature", "top_p", "seed")
MAX_REPEATS = 10  # a comparison repeated more often belongs to `bench --repeats`
SPEED_COLUMNS = ["method", "runs", "tok/s", "speed-up", "MAL"]  # tok/s, speed-up: mean ± 95 % interval


def task_fields(t: Task) -> tuple[str, str, int, bool]:
    """(context, prompt, max_new_tokens, chat) a task fills in; a template shows with its context left out
    (the context box holds it), substituted by name like every template. The token cap is the task's, but at
    least the default (128): a task's cap is sized for benchmarks, and the tab shows whole answers (the first
    sample's 48 cut its answer 5 tokens short)."""
    text_in = fill_template(t.template, context="", input=t.input, where=f"task {t.id}").strip() if t.template else t.input
    return t.context or "", text_in, max(t.max_new_tokens or 0, PARAMS["max_new_tokens"].default), t.chat


def free_text_fields() -> tuple[str, str, int, bool]:
    """What "(free text)" starts from: empty boxes and the default token cap, not the last sample's."""
    return "", "", PARAMS["max_new_tokens"].default, True


def _number(name: str, active: bool) -> gr.Number:
    # No min/max on the field: core.params checks ranges and says what the parameter means.
    spec = PARAMS[name]
    return gr.Number(spec.default, label=param_label(name), precision=0 if spec.kind is int else None, elem_id=f"param-{name}",
                     interactive=active)


def params_taken(method_list) -> set[str]:
    """The parameters any of the chosen methods reads (unknown names take none: they fail at Run with a reason)."""
    taken = set()
    for spec in method_list or []:
        try:
            taken |= set(get_method(parse_method_spec(spec)[0]).params)
        except WorkbenchError:
            continue
    return taken


def check_repeats(value) -> int:
    try:
        n = int(value if value not in (None, "") else 1)
    except (TypeError, ValueError):
        raise InvalidInputError(f"repeats must be a whole number from 1 to {MAX_REPEATS}, got {value!r}") from None
    if not 1 <= n <= MAX_REPEATS or n != float(value if value not in (None, "") else 1):
        raise InvalidInputError(f"repeats must be a whole number from 1 to {MAX_REPEATS}, got {value!r} "
                                f"(for more, use `python -m workbench bench --repeats N`)")
    return n


class StopFlags:
    """Stop, per browser session: the comparison ends at its running method's next step, that run is stored as
    cancelled and the status says so (Gradio's own `cancels` shows "Error" on every output and no status).

    Each stream_run gets an event of its own (stream_run sets its event when it ends), so a session keeps two:
    "stop requested" for the whole comparison and the event of the run going on now."""

    def __init__(self):
        self._requested: dict[str, threading.Event] = {}
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(request) -> str:
        return getattr(request, "session_hash", None) or "-"

    def begin(self, request) -> threading.Event:
        """A comparison starts: its "stop requested" flag."""
        with self._lock:
            flag = self._requested[self._key(request)] = threading.Event()
            return flag

    def end(self, request) -> None:
        with self._lock:
            self._requested.pop(self._key(request), None)
            self._running.pop(self._key(request), None)

    def for_run(self, request) -> threading.Event:
        """The stop event of one method's run (already set when Stop came first)."""
        key = self._key(request)
        with self._lock:
            event = self._running[key] = threading.Event()
            if self._requested.get(key) is not None and self._requested[key].is_set():
                event.set()
            return event

    def stop(self, request) -> bool:
        """Stop the session's comparison; False when none is running."""
        key = self._key(request)
        with self._lock:
            for flags in (self._requested, self._running):
                if key in flags:
                    flags[key].set()
            return key in self._requested


def _plus_minus(s: dict, fmt: str) -> str:
    if s["mean"] is None:
        return "–"
    return fmt.format(s["mean"]) + (f" ± {fmt.format(s['ci95'])}" if s["ci95"] is not None else "")


def speed_summary(names: list[str], tps: list[list[float]], speedups: list[list[float]], mals: list[list[float]]):
    """Per method, the spread (workbench.evaluation.bench.spread, as `bench --repeats` computes it) of
    its tokens/s and speed-up over the passes: a list of (name, tps spread, speed-up spread, mean MAL)."""
    return [(n, spread(t), spread(s), spread(m)["mean"]) for n, t, s, m in zip(names, tps, speedups, mals)]


class Speeds:
    """Each column's finished runs over the passes: tokens/s, speed-up against its pass's greedy run, MAL."""

    def __init__(self, names: list[str]):
        self.names = names
        self.tps, self.speedups, self.mals = ([[] for _ in names] for _ in range(3))

    def add(self, slot: int, run, greedy_tps: float | None) -> None:
        if run.status != "complete":  # a cancelled or failed run measured nothing
            return
        m = run_metrics(run)
        self.tps[slot].append(m["tps"])
        self.mals[slot].append(m["mal"])
        if greedy_tps and m["tps"]:
            self.speedups[slot].append(m["tps"] / greedy_tps)

    def summary(self):
        return speed_summary(self.names, self.tps, self.speedups, self.mals)


def speed_frame(summary) -> pd.DataFrame:
    rows = [{"method": n, "runs": t["n"], SPEED_COLUMNS[2]: _plus_minus(t, "{:.1f}"), SPEED_COLUMNS[3]: _plus_minus(s, "{:.2f}×"),
             "MAL": None if mal is None else round(mal, 2)} for n, t, s, mal in summary]
    return pd.DataFrame(rows, columns=SPEED_COLUMNS)


def speed_figure(summary) -> go.Figure:
    """Mean tokens/s per method, with its 95 % interval as an error bar when there were repeats."""
    shown = [(n, t, s) for n, t, s, _ in summary if t["mean"] is not None]
    if not shown:
        return views.empty_figure("no finished runs")
    colors = run_colors([n for n, _, _ in shown])
    runs = max(t["n"] for _, t, _ in shown)
    fig = go.Figure(go.Bar(
        x=[n for n, _, _ in shown], y=[t["mean"] for _, t, _ in shown], marker_color=[colors[n] for n, _, _ in shown],
        error_y={"type": "data", "array": [t["ci95"] or 0 for _, t, _ in shown], "visible": runs > 1, "thickness": 2},
        # the numbers at the bars' feet: the error bars rise from the tops
        text=[_plus_minus(t, "{:.1f}") for _, t, _ in shown], textposition="inside", insidetextanchor="start",
        customdata=[[_plus_minus(s, "{:.2f}×"), t["n"]] for _, t, s in shown],
        hovertemplate="%{x}: %{text} tok/s · speed-up %{customdata[0]} (%{customdata[1]} runs)<extra></extra>"))
    title = (f"tokens/s: mean of {runs} interleaved runs per method, error bars the 95 % interval" if runs > 1
             else "tokens/s (one run per method; set Repeats for error bars)")
    top = max(t["mean"] + (t["ci95"] or 0) for _, t, _ in shown)
    fig.update_layout(template="plotly_white", title={"text": title, "font": {"size": 14}}, height=300, showlegend=False,
                      margin={"l": 50, "r": 20, "t": 50, "b": 40}, yaxis={"title": "tokens / s", "range": [0, top * 1.25]})
    return fig


def compare_tab(store: Store, pool: service.ModelPool, compare_ids: gr.State, who=lambda request: None):
    tasks = {t.id: t for t in service.sample_tasks()}
    first = next(iter(tasks.values()))
    taken = params_taken(service.DEFAULT_METHODS)
    with gr.Row():
        model = gr.Dropdown(service.model_choices(), value=service.default_model(), allow_custom_value=True,
                            label="Model (preset, local folder or hub id)", scale=3, elem_id="compare-model")
        draft = gr.Dropdown([""] + [p for p in service.PRESETS if service.is_fetched(p)], value="", allow_custom_value=True,
                            label="Draft model (for sd / csd with a draft; optional)", scale=2)
        methods = gr.Dropdown(service.UI_METHODS + list(FITTED_VARIANTS), value=list(service.DEFAULT_METHODS), multiselect=True,
                              max_choices=SLOTS, allow_custom_value=True,
                              label=f"Methods (up to {SLOTS}; greedy: the speed-up reference; variants: aasd[align_graft=1], "
                                    "aasd[auto] = fitted thresholds)", scale=3,
                              elem_id="compare-methods")
    with gr.Row():
        task = gr.Dropdown([FREE_TEXT] + list(tasks), value=first.id, label="Task (bundled samples)", scale=2,
                           elem_id="compare-task")
        with gr.Column(scale=2):  # collapsed beside the task: the page keeps its height until a file is wanted
            with gr.Accordion("…or upload a task file (JSON Lines, one task a line)", open=False, elem_id="upload-box"):
                task_file = gr.File(label="task file (.jsonl or .json)", file_types=[".jsonl", ".json"], elem_id="task-file")
                gr.Markdown(UPLOAD_HINT, elem_id="upload-hint")
        chat = gr.Checkbox(first.chat, label="apply the chat template", scale=1)
        repeats = gr.Number(1, precision=0, minimum=1, maximum=MAX_REPEATS, scale=1, elem_id="compare-repeats",
                            label=f"Repeats (1–{MAX_REPEATS}; interleaved; error bars)")
    uploaded = gr.State({})
    with gr.Row():
        context = gr.Textbox(first.context or "", label="Context (the draft pool; optional)", lines=4, max_lines=12, scale=3,
                             elem_id="compare-context")
        prompt = gr.Textbox(task_fields(first)[1], label="Prompt", lines=4, max_lines=12, scale=2, elem_id="compare-prompt")
    with gr.Accordion("Parameters (every method reads the ones it takes; the fields the chosen methods ignore are greyed out)",
                      open=False):
        with gr.Row():
            max_new = gr.Slider(1, 1024, value=task_fields(first)[2], step=1, elem_id="compare-max-new",
                                label="max_new_tokens: the task's cap, at least 128; range [1, 1024] here")
            controls = {name: _number(name, name in taken) for name in TUNABLE}
        with gr.Row():
            controls.update({name: _number(name, name in taken) for name in MORE_PARAMS})
        with gr.Row():
            compress_rate = gr.Number(1.0, label="compress: the fraction of the context's tokens the model reads (0 < rate ≤ 1; "
                                                 "1 = off). casd / aasd still draft from the full context (method[pool=compressed]: not)")
            compressor = gr.Dropdown(["selfinfo", "selfinfo[layers=8]", "selfinfo[unit=sentence]", "llmlingua", "llmlingua2"],
                                     value="selfinfo",
                                     label="compressor (selfinfo: built in, offline; [layers=8]: scored by the first 8 "
                                           "layers, cheaper; [unit=sentence]: keeps whole sentences; llmlingua: the "
                                           "llmlingua package, needs network once; llmlingua2: LLMLingua-2's token classifier, "
                                           "needs network once (tiktoken's BPE file, the classifier from the hub) or a local "
                                           "classifier folder in WORKBENCH_LLMLINGUA2_MODEL)")
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
    with gr.Row(equal_height=False):
        speed_plot = gr.Plot(show_label=False, elem_id="compare-speed", scale=1)
        speed_table = gr.Dataframe(speed_frame([]), headers=SPEED_COLUMNS, interactive=False, elem_id="compare-speed-table",
                                   label="Speed per method: tok/s and speed-up as mean ± 95 % interval over the repeats", scale=1)
    names = list(controls)
    stops = StopFlags()

    def pick_task(choice, extra):
        if choice == FREE_TEXT:
            return free_text_fields()
        t = tasks.get(choice) or (extra or {}).get(choice)
        return task_fields(t) if t is not None else (gr.update(),) * 4

    def upload(path):
        if not path:
            return {}, gr.update(choices=[FREE_TEXT] + list(tasks)), ""
        try:
            loaded = {f"upload:{t.id}": t for t in service.sample_tasks(path)}
        except WorkbenchError as e:
            return {}, gr.update(), error_md(e)
        return loaded, gr.update(choices=[FREE_TEXT] + list(tasks) + list(loaded), value=next(iter(loaded), FREE_TEXT)), \
            f"loaded {len(loaded)} task(s) from the file"

    def active_fields(method_list):
        taken = params_taken(method_list)
        return [gr.update(interactive=n in taken) for n in names]

    task.change(pick_task, [task, uploaded], [context, prompt, max_new, chat], api_name=False)
    task_file.change(upload, [task_file], [uploaded, task, status], api_name=False)
    methods.change(active_fields, [methods], [controls[n] for n in names], api_name=False)

    def blank(msg="", heads_too=False):
        """The status line alone: the last comparison's columns are cleared, so a message (an error, or
        "loading…") never stands above results it does not belong to."""
        return ([msg, []] + ([""] * SLOTS if heads_too else [gr.update()] * SLOTS) + [""] * (2 * SLOTS)
                + [views.empty_figure(""), speed_frame([])])

    def wait_note(model_name) -> str | None:
        """"waiting…" when another generation holds the model now (one per model at a time), else None."""
        try:
            with pool.slot(model_name, should_stop=lambda: True, poll=0.01):
                return None
        except service.Cancelled:
            return (f"waiting for {model_name}: another comparison is using it (one generation per model at a time); "
                    "yours starts when it is done")

    @gpu
    def compare(request: gr.Request, model_name, draft_name, method_list, prompt_text, context_text, use_chat,
                max_new_tokens, *rest):
        stop = stops.begin(request)
        try:
            yield from comparison(stop, request, model_name, draft_name, method_list, prompt_text, context_text, use_chat,
                                  max_new_tokens, *rest)
        finally:  # done, failed, or its client went away: Stop has nothing to stop any more
            stops.end(request)

    def comparison(stop, request, model_name, draft_name, method_list, prompt_text, context_text, use_chat,
                   max_new_tokens, *rest):
        # the parameters, then the task inputs, then the compression inputs, then repeats (added last: the API's numbering stays)
        values = rest[:len(names)]
        task_choice, extra, compress_value, compressor_name, repeat_value = (list(rest[len(names):]) + [None] * 5)[:5]
        # The chosen task's references score every output, as bench scores them; free text, or a task whose
        # prompt or context was edited, has none that apply.
        chosen_task = tasks.get(task_choice) or (extra or {}).get(task_choice)
        if chosen_task is not None and task_fields(chosen_task)[:2] != ((context_text or ""), (prompt_text or "")):
            chosen_task = None
        viewer = who(request)
        owner_tags = viewer.run_tags if viewer is not None else ()
        try:
            n_repeats = check_repeats(repeat_value)
            specs = service.check_methods(method_list or [], model_name, draft_name)
            chosen = {n: v for n, v in zip(names, values) if v is not None and v != PARAMS[n].default}
            chosen["max_new_tokens"] = int(max_new_tokens)
            per_method = [service.method_params(name, chosen, over) for name, over in specs]
            check_model_source(model_name, draft_name)
            yield blank(f"loading {model_name}…")
            models = pool.load(model_name, draft_name)
            text, ids = service.build_prompt(models.target.tokenizer, prompt_text, context_text, bool(use_chat))
            compression, full_ids = None, None
            if compress_value is not None and compress_value != 1:  # compressed once, before any run starts or is stored
                yield blank(f"compressing the context to {compress_value:g} of its tokens…")
                with pool.slot(model_name):
                    text, ids, compression, full_ids = service.compress_context(
                        models.target, prompt_text, context_text, compress_value, compressor_name, bool(use_chat))
            check_prompt(ids, models.target.max_context)
        except WorkbenchError as e:
            yield blank(error_md(e), heads_too=True)
            return
        heads_out = [f"### {method_list[i]}" if i < len(specs) else "" for i in range(SLOTS)]
        texts, metrics, run_ids = [""] * SLOTS, [""] * SLOTS, []
        speeds = Speeds([method_list[i] for i in range(len(specs))])
        figure, table = views.empty_figure(""), speed_frame([])
        order = sorted(range(len(specs)), key=lambda i: specs[i][0] != "greedy")  # greedy first: the reference
        context_value = (context_text or "").strip() or None
        note = wait_note(model_name)
        if note:
            yield [note, list(run_ids)] + heads_out + metrics + texts + [figure, table]
        stopped = False
        for rep in range(n_repeats):
            greedy_ids, greedy_tps = None, None  # each pass's speed-ups are against its own greedy run
            for slot in order:
                name = specs[slot][0]
                flip, div, run = False, None, None
                doing = f"running {name}…" if n_repeats == 1 else f"pass {rep + 1} of {n_repeats}: running {name}…"
                # The worker holds the model's slot, so a client that goes away gives it back (service.stream_run)
                for prog in service.stream_run(name, models, ids, per_method[slot], prompt_text=text, context=context_value,
                                               store=store, tags=("workbench", *owner_tags), idle_cancel=pool.idle_cancel,
                                               compression=compression, uncompressed_ids=full_ids, stop=stops.for_run(request),
                                               slot=lambda should_stop: pool.slot(model_name, should_stop)):
                    if prog.error:
                        metrics[slot] = error_md(prog.error)
                    elif prog.run is not None:
                        run = prog.run
                        if prog.run_id is not None:
                            run_ids.append(prog.run_id)
                        if name == "greedy":
                            greedy_ids, greedy_tps = run.output_ids, run_metrics(run)["tps"]
                        speeds.add(slot, run, greedy_tps)
                        div = first_divergence(greedy_ids, run.output_ids) if greedy_ids is not None and name != "greedy" else None
                        flip = flip_applies(name, per_method[slot], div)
                        texts[slot] = views.tokens_html(views.token_origins(run), first_divergence=div,
                                                        **flip_mark(div, None) if flip else {})
                        score = score_task(chosen_task, run.output_text) if chosen_task is not None else None
                        metrics[slot] = metrics_md(run, prog.run_id, greedy_tps, score)
                    else:
                        texts[slot] = views.tokens_html(views.step_origins(prog.steps, models.target.tokenizer))
                        metrics[slot] = f"running… {len(prog.steps)} steps"
                    yield [doing, list(run_ids)] + heads_out + metrics + texts + [figure, table]
                if stop.is_set():
                    stopped = True
                    break
                if flip and div is not None and div < min(len(greedy_ids), len(run.output_ids)):
                    texts[slot] = flip_texts(pool, model_name, models, ids, greedy_ids, run, div)
                figure, table = speed_figure(speeds.summary()), speed_frame(speeds.summary())
            if stopped:
                break
        where = store.where if viewer is None or viewer.owner is None else "yours until you share them"
        yield [closing_status(run_ids, where, stopped, compression), list(run_ids)] + heads_out + metrics + texts + [figure, table]

    def stop_now(request: gr.Request):
        # The comparison itself writes "stopped" in the status line (it ends within a step); a toast says the click
        # was heard. Writing the status here too would race the comparison's last update and could win.
        if stops.stop(request):
            gr.Info("Stopping: the method running now ends at its next step and is stored as cancelled.")

    inputs = [model, draft, methods, prompt, context, chat, max_new] + [controls[n] for n in names] + [task, uploaded,
                                                                                                     compress_rate, compressor,
                                                                                                     repeats]
    outputs = [status, compare_ids] + heads + stats + bodies + [speed_plot, speed_table]
    run_btn.click(compare, inputs, outputs, api_name="compare", concurrency_id="generate")
    # Queued (so the request carries the session that Run came from) but never waiting behind the generations.
    stop_btn.click(stop_now, None, None, api_name=False, concurrency_limit=None)


def closing_status(run_ids, where: str, stopped: bool, compression) -> str:
    stored = ", ".join(f"#{r}" for r in run_ids) or "none"
    head = (f"**stopped**: the run in progress is stored as cancelled; runs {stored} stored ({where})" if stopped
            else f"done: runs {stored} stored ({where})")
    if compression is None:
        return head
    return head + (f"; context compressed by {compression.compressor} to {compression.reached:.2f} "
                   f"({compression.tokens_kept}/{compression.tokens_in} tokens) in {compression.seconds:.1f} s")


def flip_texts(pool, model_name, models, ids, greedy_ids, run, div) -> str:
    """The column's tokens with the flip mark measured: one forward of the target (the run is over, its slot given
    back) finds the target's logit gap there; the mark stands on the position alone when that fails."""
    try:
        with pool.slot(model_name):
            report = flip_report(models.target, ids, greedy_ids, run.output_ids)
    except Exception:  # noqa: BLE001 - the mark stands on the position alone
        report = None
    return views.tokens_html(views.token_origins(run), first_divergence=div, **flip_mark(div, report))


def _lossless(name: str) -> bool:
    try:
        return get_method(name).lossless
    except WorkbenchError:
        return False


def flip_applies(name: str, params, div: int | None) -> bool:
    """A lossless method at T = 0 that left greedy's tokens (it should not, except at near-ties)."""
    return div is not None and not (params.get("temperature") or 0) > 0 and _lossless(name)


def flip_mark(div: int, report) -> dict:
    """tokens_html's marker for such a flip: the class FLIP_CLASS and a title with the position (and the
    target's logit gap there when fidelity.flip_report measured it)."""
    return {"marker_title": views.flip_title(div, report), "marker_class": FLIP_CLASS}
