"""The Compare tab: up to four methods on one prompt, side by side, streamed as they decode and stored."""
from __future__ import annotations

import gradio as gr

from core.engine import check_prompt
from core.errors import WorkbenchError
from core.methods import get_method
from core.params import PARAMS
from core.stats import first_divergence, run_metrics
from workbench import service, views
from workbench.evaluation.fidelity import flip_report
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task, fill_template
from workbench.store import Store
from workbench.ui.shared import TUNABLE, error_md, gpu, metrics_md, param_label

SLOTS = service.MAX_METHODS  # columns
FREE_TEXT = "(free text)"
FITTED_VARIANTS = ("aasd[auto]", "casd[auto]")  # verify with the thresholds fitted to the model (core.thresholds)
FLIP_CLASS = "tok-flip"  # a lossless method's first token that is not greedy's
UPLOAD_HINT = ("JSON Lines, one task a line: `{\"id\": \"q1\", \"task\": \"qa\", \"input\": \"the question\", "
               "\"context\": \"the document (optional)\", \"answers\": [\"a reference\"]}`; optional `template` "
               "(with `{context}` / `{input}`) and `max_new_tokens`. Spec-Bench's question.jsonl and LongBench rows load as they are.")
MORE_PARAMS = ("key_len", "ngram", "align_m", "align_graft", "max_nodes", "gamma", "top_k", "temperature", "top_p", "seed")


def task_fields(t: Task) -> tuple[str, str, int, bool]:
    """(context, prompt, max_new_tokens, chat) a task fills in; a template shows with its context left out
    (the context box holds it), substituted by name like every template."""
    text_in = fill_template(t.template, context="", input=t.input, where=f"task {t.id}").strip() if t.template else t.input
    return t.context or "", text_in, t.max_new_tokens or 128, t.chat


def _number(name: str) -> gr.Number:
    # No min/max on the field: core.params checks ranges and says what the parameter means.
    spec = PARAMS[name]
    return gr.Number(spec.default, label=param_label(name), precision=0 if spec.kind is int else None, elem_id=f"param-{name}")


def compare_tab(store: Store, pool: service.ModelPool, compare_ids: gr.State, who=lambda request: None):
    tasks = {t.id: t for t in service.sample_tasks()}
    with gr.Row():
        model = gr.Dropdown(service.model_choices(), value=service.default_model(), allow_custom_value=True,
                            label="Model (preset, local folder or hub id)", scale=3)
        draft = gr.Dropdown([""] + [p for p in service.PRESETS if service.is_fetched(p)], value="", allow_custom_value=True,
                            label="Draft model (for sd / csd with a draft; optional)", scale=2)
        methods = gr.Dropdown(service.UI_METHODS + list(FITTED_VARIANTS), value=list(service.DEFAULT_METHODS), multiselect=True,
                              max_choices=SLOTS, allow_custom_value=True,
                              label=f"Methods (up to {SLOTS}; greedy is the speed-up reference; variants: aasd[align_graft=1]; "
                                    "aasd[auto]: the thresholds `calibrate --thresholds` fitted to the model)", scale=3)
    with gr.Row():
        task = gr.Dropdown([FREE_TEXT] + list(tasks), value=next(iter(tasks)), label="Task (bundled samples)", scale=2)
        with gr.Column(scale=2):
            task_file = gr.File(label="…or upload a task file (.jsonl, one JSON task a line)", file_types=[".jsonl", ".json"],
                                height=90, elem_id="task-file")
            gr.Markdown(UPLOAD_HINT, elem_id="upload-hint")
        chat = gr.Checkbox(True, label="apply the chat template", scale=1)
    uploaded = gr.State({})
    first = next(iter(tasks.values()))
    with gr.Row():
        context = gr.Textbox(first.context or "", label="Context (the draft pool; optional)", lines=6, max_lines=12, scale=3)
        prompt = gr.Textbox(first.input, label="Prompt", lines=6, max_lines=12, scale=2, elem_id="compare-prompt")
    with gr.Accordion("Parameters (every method reads the ones it takes; a changed value applies to all that take it)", open=False):
        with gr.Row():
            max_new = gr.Slider(1, 1024, value=first.max_new_tokens or 128, step=1, label="max_new_tokens",
                                elem_id="compare-max-new")
            controls = {name: _number(name) for name in TUNABLE}
        with gr.Row():
            controls.update({name: _number(name) for name in MORE_PARAMS})
        with gr.Row():
            compress_rate = gr.Number(1.0, label="compress: the fraction of the context's tokens the model reads (0 < rate ≤ 1; "
                                                 "1 = off). casd / aasd still draft from the full context (method[pool=compressed]: not)")
            compressor = gr.Dropdown(["selfinfo", "llmlingua"], value="selfinfo",
                                     label="compressor (selfinfo: built in, offline; llmlingua: the llmlingua package, needs network once)")
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

    task.change(pick_task, [task, uploaded], [context, prompt, max_new, chat], api_name=False)
    task_file.change(upload, [task_file], [uploaded, task, status], api_name=False)

    def blank(msg="", heads_too=False):
        """The status line alone: the last comparison's columns are cleared, so a message (an error, or
        "loading…") never stands above results it does not belong to."""
        return [msg, []] + ([""] * SLOTS if heads_too else [gr.update()] * SLOTS) + [""] * (2 * SLOTS)

    @gpu
    def compare(request: gr.Request, model_name, draft_name, method_list, prompt_text, context_text, use_chat,
                max_new_tokens, *rest):
        # the parameters, then the task inputs, then the compression inputs (added last: the API's numbering stays)
        values = rest[:len(names)]
        task_choice, extra, compress_value, compressor_name = (list(rest[len(names):]) + [None] * 4)[:4]
        # The chosen task's references score every output, as bench scores them; free text, or a task whose
        # prompt or context was edited, has none that apply.
        chosen_task = tasks.get(task_choice) or (extra or {}).get(task_choice)
        if chosen_task is not None and task_fields(chosen_task)[:2] != ((context_text or ""), (prompt_text or "")):
            chosen_task = None
        viewer = who(request)
        owner_tags = viewer.run_tags if viewer is not None else ()
        try:
            specs = service.check_methods(method_list or [], model_name, draft_name)
            chosen = {n: v for n, v in zip(names, values) if v is not None and v != PARAMS[n].default}
            chosen["max_new_tokens"] = int(max_new_tokens)
            per_method = [service.method_params(name, chosen, over) for name, over in specs]
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
        greedy_ids, greedy_tps = None, None
        order = sorted(range(len(specs)), key=lambda i: specs[i][0] != "greedy")  # greedy first: the reference
        context_value = (context_text or "").strip() or None
        for slot in order:
            name = specs[slot][0]
            flip, div, run = False, None, None
            # The worker holds the model's slot, so a client that goes away gives it back (service.stream_run)
            for prog in service.stream_run(name, models, ids, per_method[slot], prompt_text=text, context=context_value,
                                           store=store, tags=("workbench", *owner_tags), idle_cancel=pool.idle_cancel,
                                           compression=compression, uncompressed_ids=full_ids,
                                           slot=lambda should_stop: pool.slot(model_name, should_stop)):
                if prog.error:
                    metrics[slot] = error_md(prog.error)
                elif prog.run is not None:
                    run = prog.run
                    if prog.run_id is not None:
                        run_ids.append(prog.run_id)
                    if name == "greedy":
                        greedy_ids, greedy_tps = run.output_ids, run_metrics(run)["tps"]
                    div = first_divergence(greedy_ids, run.output_ids) if greedy_ids is not None and name != "greedy" else None
                    flip = flip_applies(name, per_method[slot], div)
                    texts[slot] = views.tokens_html(views.token_origins(run), first_divergence=div,
                                                    **flip_mark(div, None) if flip else {})
                    score = score_task(chosen_task, run.output_text) if chosen_task is not None else None
                    metrics[slot] = metrics_md(run, prog.run_id, greedy_tps, score)
                else:
                    texts[slot] = views.tokens_html(views.step_origins(prog.steps, models.target.tokenizer))
                    metrics[slot] = f"running… {len(prog.steps)} steps"
                yield [f"running {name}…", list(run_ids)] + heads_out + metrics + texts
            if flip and div is not None and div < min(len(greedy_ids), len(run.output_ids)):
                # The run is over (its slot given back): one forward of the target measures the flip
                try:
                    with pool.slot(model_name):
                        report = flip_report(models.target, ids, greedy_ids, run.output_ids)
                except Exception:  # noqa: BLE001 - the mark stands on the position alone
                    report = None
                if report is not None:
                    texts[slot] = views.tokens_html(views.token_origins(run), first_divergence=div, **flip_mark(div, report))
        where = store.where if viewer is None or viewer.owner is None else "yours until you share them"
        note = "" if compression is None else (f"; context compressed by {compression.compressor} to {compression.reached:.2f} "
                                              f"({compression.tokens_kept}/{compression.tokens_in} tokens) in {compression.seconds:.1f} s")
        yield [f"done: runs {', '.join(f'#{r}' for r in run_ids)} stored ({where}){note}", list(run_ids)] + heads_out + metrics + texts

    inputs = [model, draft, methods, prompt, context, chat, max_new] + [controls[n] for n in names] + [task, uploaded,
                                                                                                     compress_rate, compressor]
    outputs = [status, compare_ids] + heads + stats + bodies
    event = run_btn.click(compare, inputs, outputs, api_name="compare", concurrency_id="generate")
    stop_btn.click(None, None, None, cancels=[event], api_name=False)


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
