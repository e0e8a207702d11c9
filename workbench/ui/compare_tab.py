"""The Compare tab: up to four methods on one prompt, side by side, streamed as they decode and stored;
optionally repeated N times (interleaved), with the mean tokens/s and speed-up and their intervals.

The components are one CompareForm; the handlers are the methods of CompareHandlers (named parameters, the
API's too); a comparison is a Comparison, which checks its inputs (`prepare`), runs the passes and yields one
ColumnsView per update. Pure helpers (task fields, repeats, speeds, the status lines) are plain functions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from core.errors import InvalidInputError, WorkbenchError
from core.memory import memory_path, pair_fingerprint, shipped_memory, shipped_memory_path
from core.methods.build import sizes_trees
from core.params import MEMORY_MODES, PARAMS, SHIPPED_MEMORY
from core.spec import to_number
from core.stats import (
    CLOCK_PHRASES,
    clock_phrase,
    cut_short,
    run_divergence,
    run_metrics,
    wall_clock_note,
)
from core.stats import speedup as stats_speedup
from core.step import check_prompt
from core.thresholds import FITTED_PARAMS, fit_origin
from core.timing import cost_model
from core.trace import RunTrace
from workbench import service
from workbench.evaluation.bench import spread
from workbench.evaluation.fidelity import flip_report
from workbench.evaluation.scores import KIND_METRIC, score_task
from workbench.evaluation.tasks import Task, fill_template
from workbench.methods import get_method, parse_method_spec, resolve_params
from workbench.store import Store
from workbench.ui import tokens
from workbench.ui.components import lenient
from workbench.ui.figures.common import empty_figure
from workbench.ui.figures.compare import INTERVAL_WORDS, plus_minus, repeat_interval, speed_figure
from workbench.ui.shared import (
    TUNABLE,
    check_model_source,
    error_md,
    fit_source_md,
    gpu,
    method_colors,
    metrics_md,
    param_label,
    public_message,
    rescued_md,
)

SLOTS = service.MAX_METHODS  # columns
FREE_TEXT = "(free text)"
# What the task picker shows once the user has typed over a task's prompt or context: the boxes are theirs now (no
# task's references score them), and picking it changes nothing (FREE_TEXT keeps typed text too, and resets the cap).
OWN_TEXT = "(your own text)"
FITTED_VARIANTS = ("aasd[auto]", "casd[auto]")  # verify with the thresholds fitted to the model (core.thresholds)
ONLINE_VARIANTS = ("csd[memory_mode=online]",)  # the paper's CSD: its memory learns (plain csd reads the shipped one)
FLIP_CLASS = "tok-flip"  # a lossless method's first token that is not greedy's
UPLOAD_FORMAT = '{"id": "q1", "task": "qa", "input": "the question"}'
UPLOAD_HINT = (
    'JSON Lines, one task a line: `{"id": "q1", "task": "qa", "input": "the question", '
    '"context": "the document (optional)", "answers": ["a reference"]}`; optional `template` '
    "(with `{context}` / `{input}`) and `max_new_tokens`. Spec-Bench's question.jsonl and LongBench rows load as they are."
)
MORE_PARAMS = (
    "key_len",
    "ngram",
    "align_m",
    "align_graft",
    "max_nodes",
    "gamma",
    "top_k",
    "temperature",
    "top_p",
    "seed",
)
PARAM_FIELDS = TUNABLE + MORE_PARAMS  # the parameter fields, in the order of the API's parameters
# Fields whose methods disagree on the default (top_k: 0 = no top-k for the sampling methods, 5 for the top-k rules,
# 50 for top-k sampling), so core.params' one default in the field misstated most of them (it said 5 while greedy
# sampled with no top-k). They start at OWN_DEFAULT, "each method's own" (outside the parameter's range, and not None:
# the API keeps the field optional); any other number is used as typed, even core.params' default (the other fields'
# default means "untouched", Comparison.check).
OWN_DEFAULT_FIELDS, OWN_DEFAULT = ("top_k",), 0
DEFAULT_WORDS = {("top_k", 0): "0 (no top-k)"}
MAX_REPEATS = 10  # a comparison repeated more often belongs to `bench --repeats`
SPEED_COLUMNS = ["method", "runs", "tok/s", "speed-up", "MAL"]  # tok/s, speed-up: mean (interval)
OTHER_TEXT_MARK = "†"  # beside a speed-up measured on text other than greedy's (other_text_note says where)
TASK_LABEL = "Task (bundled samples)"
MAX_NEW_TOKENS_HERE = 1024  # the tab's field ends here: longer generations belong to `bench`
MAX_NEW_LABEL = (
    "max_new_tokens: the most tokens each method writes (1–1024); a task fills in its cap until you set yours "
    "(a bundled sample at least 128, so its answer ends)"
)
METRIC_NAMES = {"qa_f1": "F1", "rouge_l": "ROUGE-L", "code_sim": "code similarity", "gsm8k": "answer accuracy"}
COMPRESSORS = ["selfinfo", "selfinfo[layers=8]", "selfinfo[unit=sentence]", "llmlingua", "llmlingua2"]


# ---------------------------------------------------------------- tasks and inputs


def task_fields(t: Task, bundled: bool = True) -> tuple[str, str, int, bool]:
    """(context, prompt, max_new_tokens, chat) a task fills in; a template shows with its context left out
    (the context box holds it), substituted by name like every template. The token cap is the task's (the
    default when it has none, at most the field's 1024). A bundled sample's is at least the default (128): its
    cap is sized for benchmarks, and the tab shows whole answers (the first sample's 48 cut its answer 5 tokens
    short); an uploaded task's cap is its author's choice and is used as written."""
    text_in = (
        fill_template(t.template, context="", input=t.input, where=f"task {t.id}").strip() if t.template else t.input
    )
    default = PARAMS["max_new_tokens"].default
    cap = max(t.max_new_tokens or 0, default) if bundled else t.max_new_tokens or default
    return t.context or "", text_in, min(cap, MAX_NEW_TOKENS_HERE), t.chat


EMPTY_PROMPT = "the prompt is empty: type a question or instruction (and optionally a context)"


def check_prompt_box(prompt: str | None, task: Task | None) -> None:
    """Refuse an empty Prompt box, whatever the Context box holds: the context is the draft pool and what the question
    is about, and read alone every method just continues the document. The exception is a chosen task whose own prompt
    is empty (a task file's row that asks inside its context): that task supplies the prompt."""
    if (prompt or "").strip() or (task is not None and not task_fields(task)[1].strip()):
        return
    raise InvalidInputError(EMPTY_PROMPT)


def picked_task(choice, tasks: Mapping[str, Task], uploaded) -> Task | None:
    """The task chosen under Task (bundled or uploaded), edited or not; None for free text."""
    return tasks.get(choice) or (uploaded or {}).get(choice) if isinstance(choice, str) else None


def check_inputs(upload_error: str, prompt: str | None, task: Task | None, methods, model: str, draft: str | None):
    """The methods' specs, or the refusal Run gives on the task file, the Prompt box and the methods alone, before
    anything loads (Comparison.check starts with it; input_warning re-checks it as those inputs change)."""
    if upload_error:
        raise InvalidInputError(upload_refusal(upload_error))
    check_prompt_box(prompt, task)
    return service.check_methods(methods or [], model, draft)


def input_warning(status: str | None, upload_error: str, prompt, task: Task | None, methods, model, draft):
    """The status line once an input changed. A refusal it shows ("**⚠ …**", error_md) answered the inputs of the last
    Run: it is replaced by check_inputs' refusal now, or cleared when none applies (kept until the next Run, "the
    prompt is empty" stood under a prompt the user had typed; a refusal found after loading, a too-long prompt, is
    said again by the next Run, and the prompt's length by the line above). Any other status is left alone."""
    if not (status or "").startswith("**⚠"):
        return gr.update()
    try:
        check_inputs(upload_error, prompt, task, methods, model, draft)
    except WorkbenchError as e:
        return error_md(e)
    return ""


COMPARE_PROGRESS = "hidden"  # Gradio's progress overlay on the comparison's outputs (see compare_tab's wiring)
CLEARED_OUTPUTS = 3 * SLOTS + 4  # task_change_cleared's: the columns' heads, metrics and texts, the speeds, the status


def task_change_cleared(last_runs) -> list:
    """What a task change does to the last comparison's results (in CompareForm.cleared_outputs' order): each column's
    head, metrics and text, the speed chart, table and note emptied, since they answered the previous prompt (a head
    left standing named a method of the cleared comparison over an empty column); the status
    says where its runs still are (nothing is said, and an upload's "loaded" line stays, when none were run)."""
    ids = [int(i) for i in (last_runs or [])]
    status = (
        gr.update()
        if not ids
        else f"new task: the previous prompt's results were cleared; its runs ({', '.join(f'#{i}' for i in ids)}) "
        "stay stored: Replay & tune and Diff open them"
    )
    return [""] * SLOTS + [""] * SLOTS + [""] * SLOTS + [empty_figure(""), speed_frame([]), "", status]


def uploaded_label(count: int) -> str:
    """The Task dropdown's label while it holds an uploaded file's tasks beside the samples."""
    return f"Task (bundled samples, and your file's {count} task{'s' if count != 1 else ''}: upload:…)"


def upload_refusal(reason: str) -> str:
    """Why nothing runs while a task file that could not be read is uploaded: what is wrong, and what to do."""
    return (
        f"the uploaded task file could not be read ({reason}): nothing runs until you fix it and upload it again, "
        "or remove it (✕) to run the bundled samples"
    )


def binary_upload(path: str) -> str | None:
    """Why an uploaded file is not a task file at all, where it is binary (a NUL byte in its first 4 KiB: an image, an
    archive): "pic.png is not UTF-8 text … save it as UTF-8" pointed at an encoding, not at the wrong kind of file.
    None for a text file (the task reader judges it)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None  # the task reader says what is wrong with a path it cannot open
    if b"\x00" not in head:
        return None
    return (
        f"{Path(path).name} is not a text file (it holds binary data, e.g. an image): a task file is JSON Lines text, "
        "one task a line"
    )


def upload_error_md(reason: str) -> str:
    return error_md(upload_refusal(reason))


def free_text_fields() -> tuple[str, str, int, bool]:
    """What "(free text)" starts from: empty boxes and the default token cap, not the last sample's (text the user
    typed stays: CompareHandlers.pick_task)."""
    return "", "", PARAMS["max_new_tokens"].default, True


def typed_by_user(context, prompt, tasks: Iterable[Task]) -> bool:
    """Whether the boxes hold text of the user's own: something, and not what one of `tasks` fills in. "(free text)"
    empties a task's text but keeps this (it wiped a prompt a newcomer had typed)."""
    held = (context or "", prompt or "")
    return any(held) and all(task_fields(t)[:2] != held for t in tasks)


def score_label(task: Task) -> str:
    """What a task's score is: "F1 against the reference answers, 0–100"."""
    name = task.metric or KIND_METRIC.get(task.task) or "score"
    return f"{METRIC_NAMES.get(name, name)} against the task's reference answers, 0–100"


def params_taken(method_list) -> set[str]:
    """The parameters any of the chosen methods reads (unknown names take none: they fail at Run with a reason). A
    method with fitted thresholds (`aasd[auto]`) reads its fit, not the fields: giving them is refused at Run."""
    taken = set()
    for spec in method_list or []:
        try:
            name, overrides = parse_method_spec(spec)
        except WorkbenchError:
            continue
        params = set(get_method(name).params)
        if overrides.get("fitted", "0") not in ("0", 0):
            params -= set(FITTED_PARAMS.get(name, ()))
        taken |= params
    return taken


def method_defaults(name: str, method_list) -> dict[str, Any]:
    """The default of parameter `name` of each chosen method that reads it (a method spec's own override counts),
    by the spec as the user wrote it."""
    out = {}
    for spec in method_list or []:
        try:
            method, overrides = parse_method_spec(spec)
            params = get_method(method).params
        except WorkbenchError:
            continue
        if (
            name in params
            and name not in overrides
            and not (overrides.get("fitted", "0") not in ("0", 0) and name in FITTED_PARAMS.get(method, ()))
        ):
            out[spec] = params[name]
    return out


def own_default_note(name: str, method_list) -> str:
    """What the field left untouched gives each chosen method, when they do not all use the field's value: e.g.
    ". At 0: greedy, csd use 0 (no top-k); aasd-topk uses 5" (top_k, whose field starts at OWN_DEFAULT), or
    ". At 0: greedy uses 0; nucleus uses 1 (nucleus[temperature=0] sets it)" (temperature: a value equal to the field's
    default counts as untouched, so the method's spec is the way to give it that value)."""
    untouched = OWN_DEFAULT if name in OWN_DEFAULT_FIELDS else PARAMS[name].default
    by_value: dict[Any, list[str]] = {}
    for spec, v in method_defaults(name, method_list).items():
        by_value.setdefault(v, []).append(spec)
    if name not in OWN_DEFAULT_FIELDS and set(by_value) <= {untouched}:
        return ""  # every chosen method uses what the field shows
    parts = [
        f"{', '.join(specs)} {'use' if len(specs) > 1 else 'uses'} {DEFAULT_WORDS.get((name, v), f'{v:g}')}"
        for v, specs in by_value.items()
    ]
    differ = [spec for v, specs in by_value.items() if v != untouched for spec in specs]
    how = (
        f" ({differ[0]}[{name}={untouched:g}] sets it)"
        if name not in OWN_DEFAULT_FIELDS and differ and "[" not in differ[0]
        else ""
    )
    return f". At {untouched:g}: {'; '.join(parts)}{how}" if parts else ""


def field_label(name: str) -> str:
    """A parameter field's label (shared.param_label); an OWN_DEFAULT_FIELDS field's says OWN_DEFAULT is each
    method's own default."""
    label = param_label(name)
    if name in OWN_DEFAULT_FIELDS:
        label = label.replace(f"default {PARAMS[name].default}", f"{OWN_DEFAULT} = each method's own default")
        # the field's range includes that 0 (the nineteenth pass read "0 = …, range [1, 1000000]" as a contradiction)
        label = label.replace(f"range [{PARAMS[name].low},", f"range {OWN_DEFAULT} or [{PARAMS[name].low},")
    return label


def no_temperature(method_list) -> str:
    """The chosen methods that take no temperature, which the temperature field (not greyed: another chosen method
    reads it) leaves decoding deterministically: the twentieth pass read aasd[auto]'s column as sampled."""
    specs = []
    for spec in method_list or []:
        try:
            if "temperature" not in get_method(parse_method_spec(spec)[0]).params:
                specs.append(spec)
        except WorkbenchError:
            continue
    if not specs:
        return ""
    one = len(specs) == 1
    return (
        f". {', '.join(specs)} take{'s' if one else ''} no temperature: {'it decodes' if one else 'they decode'} at 0"
    )


def field_info(name: str, method_list) -> str:
    """A parameter field's info line: what the parameter is, what the field's OWN_DEFAULT leaves the chosen methods with
    (OWN_DEFAULT_FIELDS), and, where it is greyed because a chosen method reads its fitted value instead (`aasd[auto]`),
    why and how to set it."""
    info = PARAMS[name].help
    if name in params_taken(method_list):
        return (
            info + own_default_note(name, method_list) + (no_temperature(method_list) if name == "temperature" else "")
        )
    for spec in method_list or []:
        try:
            method, overrides = parse_method_spec(spec)
        except WorkbenchError:
            continue
        if overrides.get("fitted", "0") not in ("0", 0) and name in FITTED_PARAMS.get(method, ()):
            return f"{info}. Greyed: {spec} reads it from its fit; add `{method}` to the methods to set it here"
    return info


def check_repeats(value) -> int:
    try:
        n = int(value if value not in (None, "") else 1)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(f"repeats must be a whole number from 1 to {MAX_REPEATS}, got {value!r}") from None
    if not 1 <= n <= MAX_REPEATS or n != float(value if value not in (None, "") else 1):
        raise InvalidInputError(
            f"repeats must be a whole number from 1 to {MAX_REPEATS}, got {value!r} "
            f"(for more, use `python -m workbench bench --repeats N`)"
        )
    return n


def check_max_new_tokens(value, task_cap: int) -> int:
    """The token cap the user typed, refused out of the field's range [1, 1024] or as a fraction (in core.spec's
    words, as every other parameter); a blank field is the task's cap (`task_cap`)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return task_cap
    spec = PARAMS["max_new_tokens"]
    try:  # the hint is for a cap above the field's: 0 or −3 was told "longer generations take the bench command"
        too_long = float(value) > MAX_NEW_TOKENS_HERE
    except (TypeError, ValueError):
        too_long = False
    return int(
        to_number(
            value,
            int,
            "max_new_tokens",
            spec.low,
            MAX_NEW_TOKENS_HERE,
            meaning="longer generations take the `bench` command" if too_long else "",
        )
    )


PREFILL_SPREAD = 1.25  # a prefill estimate's high end over its low end beyond which the line gives both


def prompt_note(
    n_tokens: int,
    estimate: tuple[float, str] | None,
    methods: int,
    max_context: int,
    counted: str = "prompt",
    idle: float | None = None,
    compressed: tuple[int, float] | None = None,
) -> str:
    """The line under the prompt: its length in tokens and how long reading it will take, before Run. `counted` says
    what the tokens are when it is not the prompt's text (an emptied prompt: the context and the chat template).
    `idle` (PrefillClock.idle_estimate): the time with the core to itself; when the estimate is well above it (recent
    reads shared the core with other work: a page being drawn) the line gives the range, which holds either way.
    `compressed` (tokens, rate): what the model reads once the context is compressed (Parameters' compress), which
    the estimate is for (the eighteenth pass saw the uncompressed prompt's time beside compress 0.3)."""
    if n_tokens >= max_context:
        return (
            f"**⚠ the prompt is {n_tokens:,} tokens; the model reads at most {max_context:,}**: shorten the context "
            "(or compress it, under Parameters)"
        )
    text = f"{counted}: **{n_tokens:,} tokens**"
    if compressed is not None:
        text += f", ≈ **{compressed[0]:,}** read once the context is compressed to {compressed[1]:g}"
    if estimate is None:
        return text + " · the time to read it is estimated after the first run on this server"
    seconds, source = estimate
    if idle is not None and seconds > idle * PREFILL_SPREAD:
        text += (
            f" · reading it (prefill) takes ≈ **{_duration(idle)} to {_duration(seconds)}** per method: the first on an "
            f"idle core (this server's fastest read so far), the second at the load its recent reads met (from {source})"
        )
    else:
        text += f" · reading it (prefill) takes ≈ **{_duration(seconds)}** per method (from {source})"
    if seconds * max(methods, 1) > 60:
        text += f" · **⚠ long: ≈ {_duration(seconds * max(methods, 1))} before the last method starts writing**"
    return text


def compressed_length(prompt_tokens: int, context_tokens: int, rate: float) -> int:
    """The prompt's length once its context is compressed to `rate` of its tokens (the prompt and the chat template
    stay whole): what the model reads, and what the prefill estimate is for."""
    return max(1, prompt_tokens - round(context_tokens * (1 - rate)))


def precision_note(dtype: str) -> str:
    """A line under Run when the models do not run in float32 (`serve --dtype`): there near-ties in the target's
    logits round either way, so even strict methods part from greedy's text now and then, and a newcomer should know
    that before reading the columns (the twelfth fresh pass: csd and aasd-strict left greedy at token 8 in bfloat16
    and looped, with the reason in small print under each column)."""
    if dtype == "float32":
        return ""
    return (
        f"**⚠ the models run in {dtype} on this server**: near-ties in the logits round either way there, so even "
        "strict methods can part from greedy's text (each column says where, and whether it was a tie). To compare "
        f"token for token, start the app with `{tokens.SERVE_FLOAT32}`."
    )


def own_text_choice(choice, tasks: Mapping[str, Task], uploaded, context, prompt):
    """The task picker's update after the user typed: OWN_TEXT once the boxes no longer hold the chosen task's
    prompt and context (the picker showed the task's name as if it were still what would run), else unchanged."""
    t = picked_task(choice, tasks, uploaded)
    if t is None or task_fields(t)[:2] == ((context or ""), (prompt or "")):
        return gr.update()
    return gr.update(value=OWN_TEXT, choices=[FREE_TEXT, OWN_TEXT, *tasks, *(uploaded or {})])


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def loading_words(model: str, draft: str | None, loaded) -> str:
    """The status while models load: the one actually loading (the draft, once the target is loaded: the status said
    "loading smollm2-135m…" for the 11 s a qwen draft took)."""
    draft = (draft or "").strip() or None
    target_ready = loaded is not None
    if draft and target_ready and loaded.draft is not None and getattr(loaded.draft, "name", None) == draft:
        return f"loading {model} and its draft {draft}…"  # both cached: a moment
    if draft and target_ready:
        return f"loading the draft model {draft} (the target {model} is loaded)…"
    if draft:
        return f"loading {model} and the draft model {draft}…"
    return f"loading {model}…"


def running_status(
    name: str, position: int, count: int, rep: int, repeats: int, prog: service.Progress, max_new_tokens: int
) -> str:
    """The status line while a method runs: which one, and how far it is (reading the prompt, or tokens written)."""
    where = f"method {position} of {count}" + (f", pass {rep} of {repeats}" if repeats > 1 else "")
    if prog.stopping:
        at = "prompt chunk" if not prog.steps else "step"
        return f"stopping **{name}** ({where}): it ends at its next {at} and is stored as cancelled…"
    if prog.waiting:
        return (
            f"waiting for the model: another generation (a re-run, or a run whose page went away) is using it; "
            f"**{name}** ({where}) starts when it is done…"
        )
    if not prog.steps and prog.prefill is not None:
        done, total = prog.prefill
        read = f"{done:,} of {total:,} prompt tokens read" if done else f"reading the prompt ({total:,} tokens)"
        return f"running **{name}** ({where}): {read}…"
    steps = len(prog.steps)
    return (
        f"running **{name}** ({where}): {prog.tokens} of {max_new_tokens} tokens written in {steps} "
        f"step{'' if steps == 1 else 's'}…"
    )


NOT_RUN = "*not run (stopped before it started)*"
RUN_LABEL, RUNNING_LABEL = "Run", "Running…"  # the Run button idle, and while its comparison runs (greyed out)


def not_started(order: Sequence[int], started: set[int]) -> list[int]:
    """The columns Stop came before: in the comparison's order, never started in any pass."""
    return [slot for slot in order if slot not in started]


def running_metrics(prog: service.Progress, max_new_tokens: int) -> str:
    """The running column's line: the prompt tokens read so far, then the tokens written."""
    if prog.stopping:
        return "stopping…"
    if prog.waiting:
        return "waiting for the model…"
    if prog.steps:
        return f"running… {prog.tokens} of {max_new_tokens} tokens, {len(prog.steps)} steps"
    done, total = prog.prefill or (0, 0)
    return f"running… reading the prompt: {done:,} of {total:,} tokens" if done else "running… reading the prompt"


def closing_status(run_ids, where: str, stopped: bool, compression) -> str:
    stored = ", ".join(f"#{r}" for r in run_ids) or "none"
    runs = "run" if len(run_ids) == 1 else "runs"
    head = (
        f"**stopped**: the run in progress is stored as cancelled; {runs} {stored} stored ({where})"
        if stopped
        else f"done: {runs} {stored} stored ({where})"
    )
    if compression is None:
        return head
    return head + (
        f"; context compressed by {compression.compressor} to {compression.reached:.2f} "
        f"({compression.tokens_kept}/{compression.tokens_in} tokens) in {compression.seconds:.1f} s"
    )


# ---------------------------------------------------------------- speeds over repeats


def column_title(method: str) -> str:
    """A column's head on the page: the method alone, so the output texts under the heads start level and can be
    read across (the notes, whose lengths differ from column to column, go under the text: column_notes)."""
    return f"### {method}"


def column_notes(method: str, draft_name: str | None, shipped: str | None = "") -> str:
    """What a column says under its output text and metrics ("" for a method that needs none): for a method
    that falls back to another drafter without a draft model (csd drafts from the context then) a line that says so,
    since its paper's version drafts with a model; a method that reads CSD's correction memory says which memory
    (memory_head; `shipped`: shipped_table's words)."""
    name, overrides = parse_method_spec(method)
    m = get_method(name)
    notes = []
    if not (draft_name or "").strip() and m.drafter_without_draft is not None:
        notes.append("*no draft model: drafts from the prompt's context and its own output so far (as AASD does)*")
    if m.reads_memory:
        notes.append(memory_head(app_memory_mode(name, overrides), shipped))
    return "  \n".join(notes)  # "  \n": a Markdown line break between notes


def app_memory_mode(name: str, overrides: Mapping[str, Any]) -> int:
    """The memory_mode a run of the app reads: the one the spec names (`csd[memory_mode=online]`), else `shipped`:
    the package's table read only, so the default comparison gives the same answer every time (an online memory
    grows with every rejection, and after a few runs a pair's count reaches λ and changes the answer)."""
    given = overrides.get("memory_mode")
    return SHIPPED_MEMORY if given is None else resolve_params(name, {"memory_mode": given})["memory_mode"]


def shipped_table(target, draft=None) -> str | None:
    """Which table the package ships for this model pair, in a few words (None: it ships none)."""
    pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    path = shipped_memory_path(pair)
    if path is None:
        return None
    models = f"{target.name} + {draft.name}" if draft is not None else f"{target.name}, context drafts"
    return f"the table shipped for {models} ({shipped_memory(target, draft).total:,} observations, `{path.name}`)"


def memory_head(mode: int, shipped: str | None = "") -> str:
    """The column's line on the memory it reads; `shipped` names the pair's shipped table (shipped_table), None when
    the package ships none for the pair, "" when the models are not known yet."""
    if mode == SHIPPED_MEMORY and shipped is None:
        return (
            "*memory: none: the package ships no table for this model pair, so it is empty and rescues nothing "
            "(csd then keeps only what strict verification accepts); `csd[memory_mode=online]` learns from its "
            "rejections*"
        )
    if mode == SHIPPED_MEMORY:
        table = shipped or "the shipped table"
        return f"*memory: {table}, read only (the same answer every run; `csd[memory_mode=online]` learns)*"
    if mode == MEMORY_MODES["online"]:
        return "*memory: online: every rejection adds to it, so its answers change as it grows*"
    return "*memory: this server's table, read only (online runs grow it)*"


def memory_note(params: Mapping[str, Any], shipped_total: int, shipped_sha: str, home_file: str) -> str:
    """For a run that read a memory other than the shipped table (online or frozen), what it read beside the shipped
    one: " · ⚠ memory: 1,234 observations added since the shipped table …" with how to go back; for a run that read
    the shipped table, "" (or, when the package ships none for the pair, that its memory was empty); "" for a run
    that read no memory."""
    if "memory_sha" not in params:
        return ""
    if int(params.get("memory_mode", 0) or 0) == SHIPPED_MEMORY:
        if shipped_total:
            return ""
        return (
            " · memory: no table is shipped for this model pair, so it was empty (a rejected token is rescued only "
            "at λ = 0); `csd[memory_mode=online]` learns from its rejections"
        )
    if params["memory_sha"] == shipped_sha:
        return " · memory: the shipped table as shipped (nothing added yet)"
    added = int(params.get("memory_observations") or 0) - shipped_total
    grown = (
        f"**{added:,} observation{'' if added == 1 else 's'} added since the shipped table**"
        if added > 0
        else f"**not the shipped table** ({int(params.get('memory_observations') or 0):,} observations)"
    )
    return (
        f" · ⚠ memory: {grown} (online runs here), so this answer can differ from a fresh install's; plain `csd` "
        f"reads the shipped table; to reset, stop the app and delete `memory/{home_file}` in the workbench home "
        "(WORKBENCH_HOME, default ~/.cache/spec-workbench)"
    )


def speed_summary(names: list[str], tps: list[list[float]], speedups: list[list[float]], mals: list[list[float]]):
    """Per method, the spread (workbench.evaluation.bench.spread, as `bench --repeats` computes it) of its tokens/s
    and speed-up over the passes, with the interval shown (figures.compare.repeat_interval): a list of (name, tps
    spread, speed-up spread, mean MAL)."""
    return [
        (n, repeat_interval(t), repeat_interval(s), spread(m)["mean"]) for n, t, s, m in zip(names, tps, speedups, mals)
    ]


class Speeds:
    """Each column's finished runs over the passes: tokens/s, speed-up against its pass's greedy run, MAL, and the
    mean draft-tree size (what a step's forward costs, core.timing)."""

    def __init__(self, names: list[str]):
        self.names = names
        self.tps, self.speedups, self.mals, self.trees = ([[] for _ in names] for _ in range(4))
        self.clocks: set[str] = set()  # the clocks the speed-ups were measured by (speedup)
        # per column, (token, of tokens) where a run with a speed-up first wrote other text than its pass's greedy
        self.parted: list[list[tuple[int, int]]] = [[] for _ in names]

    def clock_note(self) -> str:
        """Which clock the speed-ups are ratios of, for the line under them (core.stats.clock_phrase's words, as
        Replay and `store compare` say it)."""
        if self.clocks == {"cpu"}:
            return CPU_CLOCK_NOTE
        return f"{capitalised(clock_phrase(self.clocks))}; tok/s is the wall clock's. " if self.clocks else ""

    def add(self, slot: int, run, reference: "Reference", div: int | None = None) -> None:
        """`div`: where the run's output first parts from greedy's (core.stats.run_divergence), None where it does
        not: a speed-up on other text is a speed on another task (a loop drafts easily), and is marked so."""
        if run.status != "complete":  # a cancelled or failed run measured nothing
            return
        m = run_metrics(run)
        self.tps[slot].append(m["tps"])
        self.mals[slot].append(m["mal"])
        if run.steps:
            self.trees[slot].append(sum(s.tree_size for s in run.steps) / len(run.steps))
        ratio, clock = reference.speedup(run)
        if ratio is not None:
            self.speedups[slot].append(ratio)
            self.clocks.add(clock)
            if div is not None:
                self.parted[slot].append((div, len(run.output_ids)))

    def other_text(self) -> dict[str, tuple[int, int]]:
        """Per method whose speed-up was measured on text other than greedy's: (token, of tokens) of its earliest
        divergence over the passes."""
        return {n: min(p) for n, p in zip(self.names, self.parted) if p}

    def summary(self):
        return speed_summary(self.names, self.tps, self.speedups, self.mals)

    def tree_sizes(self) -> dict[str, float]:
        return {n: sum(t) / len(t) for n, t in zip(self.names, self.trees) if t}

    def mean_speedups(self) -> dict[str, float]:
        return {n: sum(s) / len(s) for n, s in zip(self.names, self.speedups) if s}

    def mean_mals(self) -> dict[str, float]:
        return {n: sum(m) / len(m) for n, m in zip(self.names, self.mals) if m and None not in m}


def speed_frame(summary, other_text: Mapping[str, tuple[int, int]] | None = None) -> pd.DataFrame:
    """The speed table; a speed-up measured on other text than greedy's (Speeds.other_text) carries OTHER_TEXT_MARK,
    which other_text_note explains under the table."""
    rows = [
        {
            "method": n,
            "runs": t["n"],
            SPEED_COLUMNS[2]: plus_minus(t, "{:.1f}"),
            SPEED_COLUMNS[3]: plus_minus(s, "{:.2f}×") + (f" {OTHER_TEXT_MARK}" if n in (other_text or {}) else ""),
            # as the column says it (greedy's 1.0 showed as "1"); "–" as the other cells of a run that measured nothing
            "MAL": "–" if mal is None else f"{mal:.2f}",
        }
        for n, t, s, mal in summary
    ]
    return pd.DataFrame(rows, columns=SPEED_COLUMNS)


def other_text_note(other_text: Mapping[str, tuple[int, int]]) -> str:
    """The line under the speed table for the speed-ups marked OTHER_TEXT_MARK: where each such method's text parted
    from greedy's. A method that wrote greedy's text (every lossless one at T = 0) is not named."""
    if not other_text:
        return ""
    where = "; ".join(f"{n} from token {k} (of {total})" for n, (k, total) in other_text.items())
    return (
        f"{OTHER_TEXT_MARK} wrote other text than greedy: {where}. Its speed-up is measured on different text "
        "(and text that repeats itself is easy to draft). "
    )


# ---------------------------------------------------------------- lossless flips


def _lossless(name: str) -> bool:
    try:
        return get_method(name).lossless
    except WorkbenchError:
        return False


def measured_at_t0(params, div: int | None) -> bool:
    """At T = 0 greedy's tokens are the reference: a run that left them gets the divergence measured (one forward
    of the target), a lossless one to show it is a near-tie, a relaxed one to tell rounding from its rule."""
    return div is not None and not sampled(params)


def sampled(params) -> bool:
    """Whether a run sampled its tokens (temperature > 0) rather than took the target's argmax."""
    return (params.get("temperature") or 0) > 0


def sampling_note(greedy: RunTrace, run: RunTrace, div: int | None) -> str:
    """The column's line where a run left greedy's text and either run sampled (temperature > 0): the texts part by
    chance there, and no forward can say whose rule chose (the seventeenth fresh pass: at 0.8 the note blamed
    aasd's rule for a token greedy's own run had sampled at rank 3). "" at T = 0 or without a divergence. A method
    that takes no temperature (aasd) is said to have decoded at 0 whenever greedy sampled."""
    if sampled(greedy.params) and "temperature" not in run.params:  # the method has no such parameter (aasd)
        # said with or without a divergence: the twentieth pass read the column as sampled, and its speed-up too
        return (
            f"\n\n*this method takes no temperature: it decoded deterministically (temperature 0), while greedy "
            f"sampled at {greedy.params['temperature']:g}; its text and speed-up are against that sampled run (set "
            "temperature 0 to compare like with like)*"
        )
    who = [
        f"{name} at temperature {r.params['temperature']:g}"
        for name, r in (("greedy", greedy), ("this run", run))
        if sampled(r.params)
    ]
    if div is None or not who:
        return ""
    return (
        f"\n\n*parts from greedy's text at token {div}: {' and '.join(who)} sampled, so the texts part by chance, "
        "not by the method's rule (set temperature 0 to compare against greedy's own tokens)*"
    )


def flip_applies(name: str, params, div: int | None) -> bool:
    """A lossless method at T = 0 that left greedy's tokens (it should not, except at near-ties)."""
    return measured_at_t0(params, div) and _lossless(name)


def stopped_before_diverging(greedy: RunTrace, run: RunTrace) -> str:
    """The column's line for a run cut short (Stopped, or at its cap) while its tokens still equalled greedy's: no
    divergence is marked (core.stats.run_divergence), and this says why there is none."""
    n = len(run.output_ids)
    if n >= len(greedy.output_ids) or not cut_short(run) or run_divergence(greedy, run) is not None:
        return ""
    if not n:  # "its 0 tokens equal greedy's" (the seventeenth fresh pass)
        return "\n\n*stopped before writing a token*"
    return f"\n\n*stopped before diverging: its {n} tokens equal greedy's*"


def flip_mark(div: int, report) -> dict:
    """tokens_html's marker for such a flip: the class FLIP_CLASS and a title with the position (and the
    target's logit gap there when fidelity.flip_report measured it)."""
    return {"marker_title": tokens.flip_title(div, report), "marker_class": FLIP_CLASS}


def measured_divergence(pool, model_name, models, ids, greedy_ids, run) -> dict | None:
    """fidelity.flip_report at the run's first divergence from greedy (the run is over, its slot given back); None
    when it cannot be measured: the mark then stands on the position alone."""
    try:
        with pool.slot(model_name):
            return flip_report(models.target, ids, greedy_ids, run.output_ids)
    except Exception:  # noqa: BLE001 - the mark stands on the position alone
        return None


# ---------------------------------------------------------------- the components


@dataclass
class CompareForm:
    """The tab's components. `inputs` is the order of the compare handler's (and the API's) parameters."""

    model: gr.Dropdown
    draft: gr.Dropdown
    methods: gr.Dropdown
    task: gr.Dropdown
    task_file: gr.File
    chat: gr.Checkbox
    repeats: gr.Number
    context: gr.Textbox
    prompt: gr.Textbox
    prompt_info: gr.Markdown
    max_new: gr.Number
    controls: dict[str, gr.Number]
    compress_rate: gr.Number
    compressor: gr.Dropdown
    run: gr.Button
    stop: gr.Button
    status: gr.Markdown
    heads: list[gr.Markdown]
    stats: list[gr.Markdown]
    bodies: list[gr.HTML]
    speed_plot: gr.Plot
    speed_table: gr.Dataframe
    speed_note: gr.Markdown
    uploaded: gr.State  # the tasks of the uploaded file, by choice label
    upload_error: gr.State  # why the uploaded file could not be read ("" when it could, or there is none)
    task_cap: gr.State  # the token cap the last task filled in: a different value in the field is the user's own
    upload_note: gr.Markdown  # under the upload control: what the file gave, or why it could not be read
    on_load: dict = field(default_factory=dict)  # event arguments the app runs when the page loads (the prompt line)

    @property
    def inputs(self) -> list:
        return (
            [self.model, self.draft, self.methods, self.prompt, self.context, self.chat, self.max_new]
            + [self.controls[n] for n in PARAM_FIELDS]
            + [self.task, self.uploaded, self.compress_rate, self.compressor, self.repeats, self.upload_error]
        )

    @property
    def cleared_outputs(self) -> list:
        """What a task change empties (task_change_cleared's order)."""
        return [*self.heads, *self.stats, *self.bodies, self.speed_plot, self.speed_table, self.speed_note, self.status]

    def outputs(self, compare_ids: gr.State) -> list:
        return (
            [self.status, compare_ids]
            + self.heads
            + self.stats
            + self.bodies
            + [self.speed_plot, self.speed_table, self.speed_note]
        )


def _number(name: str, active: bool, info: str) -> gr.Number:
    # No min/max on the field: core.params checks ranges and says what the parameter means.
    spec = PARAMS[name]
    return lenient(
        gr.Number(
            OWN_DEFAULT if name in OWN_DEFAULT_FIELDS else spec.default,
            label=field_label(name),
            info=info,  # what the parameter is, in words (core.params' one description of it), and why it is greyed
            # no precision=0 on an int's field: Gradio rounded a typed 2.5 to 2 unseen; core.spec refuses it in words
            elem_id=f"param-{name}",
            interactive=active,
        )
    )


def build_form(tasks: Mapping[str, Task], allow_local: bool = True) -> CompareForm:
    first = next(iter(tasks.values()))
    where = "preset, hub id or local folder" if allow_local else "preset or Hugging Face hub id"
    defaults = service.DEFAULT_METHODS
    taken = params_taken(defaults)
    with gr.Row():
        model = gr.Dropdown(
            service.model_choices(),
            value=service.default_model(),
            allow_custom_value=True,
            label=f"Model ({where})",
            scale=3,
            elem_id="compare-model",
        )
        draft = gr.Dropdown(
            [""] + [p for p in service.PRESETS if service.is_fetched(p)],
            value="",
            allow_custom_value=True,
            label="Draft model (for sd / csd with a draft; optional)",
            scale=2,
        )
        methods = gr.Dropdown(
            service.UI_METHODS + list(FITTED_VARIANTS) + list(ONLINE_VARIANTS),
            value=list(service.DEFAULT_METHODS),
            multiselect=True,
            max_choices=SLOTS,
            allow_custom_value=True,
            label=f"Methods (up to {SLOTS}; greedy: the speed-up reference; variants: aasd[align_graft=1], "
            "aasd[auto] = fitted thresholds; csd reads the shipped memory, csd[memory_mode=online] adds to it)",
            scale=3,
            elem_id="compare-methods",
        )
    with gr.Row():
        task = gr.Dropdown([FREE_TEXT] + list(tasks), value=first.id, label=TASK_LABEL, scale=2, elem_id="compare-task")
        with gr.Column(scale=2):  # collapsed beside the task: the page keeps its height until a file is wanted
            with gr.Accordion("…or upload a task file (JSON Lines, one task a line)", open=False, elem_id="upload-box"):
                # Any file is taken and read by the handler: Gradio's own type filter answered a .png with a bare
                # "Error" on the control, where the handler says what is wrong beside it (upload_note).
                task_file = gr.File(label="task file (JSON Lines: .jsonl or .json)", elem_id="task-file")
                upload_note = gr.Markdown("", elem_id="upload-note")
                gr.Markdown(UPLOAD_HINT, elem_id="upload-hint")
        chat = gr.Checkbox(first.chat, label="apply the chat template", scale=1)
        repeats = lenient(
            gr.Number(  # no precision or bounds: check_repeats refuses 2.5 and 64 in words (Gradio rounded 2.5 to 2)
                1,
                scale=1,
                elem_id="compare-repeats",
                label=f"Repeats (1–{MAX_REPEATS}; interleaved; error bars)",
            )
        )
    with gr.Row():
        context = gr.Textbox(
            first.context or "",
            # the drafters copy from the whole prompt as the model reads it, chat template and system line included
            # (the eighteenth pass found "context" nodes such as <|im_start|> under a label saying this box was the
            # pool); a label, not an info line: the Run button must stay on the first screen
            label="Context (optional; drafts copy from the whole prompt, chat template included)",
            lines=4,
            max_lines=12,
            scale=3,
            elem_id="compare-context",
        )
        prompt = gr.Textbox(
            task_fields(first)[1], label="Prompt", lines=4, max_lines=12, scale=2, elem_id="compare-prompt"
        )
    with gr.Accordion(
        "Parameters (every method reads the ones it takes; the fields the chosen methods ignore are greyed out)",
        open=False,
    ):
        with gr.Row():
            # A number field without bounds, not a slider: a slider's page clamped a typed 5000 to 1024 (and −3 to 1)
            # without a word; check_max_new_tokens refuses it in the words every parameter is refused in.
            max_new = lenient(gr.Number(task_fields(first)[2], elem_id="compare-max-new", label=MAX_NEW_LABEL, scale=2))
            controls = {name: _number(name, name in taken, field_info(name, defaults)) for name in TUNABLE}
        with gr.Row():
            controls.update({name: _number(name, name in taken, field_info(name, defaults)) for name in MORE_PARAMS})
        with gr.Row():
            compress_rate = lenient(
                gr.Number(
                    1.0,
                    label="compress: the fraction of the context's tokens the model reads "
                    "(0 < rate ≤ 1; 1 = off). casd / aasd still draft from the full "
                    "context (method[pool=compressed]: not)",
                )
            )
            compressor = gr.Dropdown(
                COMPRESSORS,
                value="selfinfo",
                label="compressor (selfinfo: built in, offline; [layers=8]: scored by the first 8 "
                "layers, cheaper; [unit=sentence]: keeps whole sentences; llmlingua: the "
                "llmlingua package, needs network once; llmlingua2: LLMLingua-2's token classifier, "
                "needs network once (tiktoken's BPE file, the classifier from the hub) or a local "
                "classifier folder in WORKBENCH_LLMLINGUA2_MODEL)",
            )
    with gr.Row():
        run = gr.Button(RUN_LABEL, variant="primary", elem_id="compare-run")
        stop = gr.Button("Stop", variant="stop")
    prompt_info = gr.Markdown("", elem_id="compare-prompt-info")  # under Run: read before pressing it
    status = gr.Markdown("", elem_id="compare-status")
    gr.HTML(tokens.legend_html())
    heads, bodies, stats = [], [], []
    with gr.Row(equal_height=False):
        for i in range(SLOTS):
            # The method's title, its output text, then its metrics and notes: the heads are one line each, so the
            # texts start level across the columns whatever the metrics and notes say (the csd column's notes
            # above its text put it 130 px below greedy's)
            with gr.Column(min_width=240, elem_classes=["compare-col"]):  # hidden while its head is empty: CSS
                heads.append(gr.Markdown(f"### {service.DEFAULT_METHODS[i]}" if i < 3 else "", elem_id=f"col-head-{i}"))
                bodies.append(gr.HTML("", elem_id=f"col-text-{i}", elem_classes=["tokens"]))
                stats.append(gr.Markdown("", elem_id=f"col-metrics-{i}"))
    with gr.Row(equal_height=False):
        speed_plot = gr.Plot(show_label=False, elem_id="compare-speed", scale=1)
        speed_table = gr.Dataframe(
            speed_frame([]),
            headers=SPEED_COLUMNS,
            interactive=False,
            elem_id="compare-speed-table",
            # Shares of the table's width: a long variant label (aasd[alpha=0,beta=0.001,max_nodes=8]) sized the method
            # column to itself and pushed speed-up and MAL past the right edge at 1280 px (the twenty-second pass);
            # the label is now cut with an ellipsis (the column head names the method whole) and numbers wrap (CSS)
            column_widths=["28%", "11%", "19%", "28%", "14%"],
            label=f"Speed per method: tok/s (wall clock) and speed-up (decoding CPU time) as mean (interval: "
            f"{INTERVAL_WORDS}) over the repeats; MAL = mean accepted length, tokens written per target forward",
            scale=1,
        )
    speed_note = gr.Markdown("", elem_id="compare-speed-note")
    return CompareForm(
        model,
        draft,
        methods,
        task,
        task_file,
        chat,
        repeats,
        context,
        prompt,
        prompt_info,
        max_new,
        controls,
        compress_rate,
        compressor,
        run,
        stop,
        status,
        heads,
        stats,
        bodies,
        speed_plot,
        speed_table,
        speed_note,
        gr.State({}),
        gr.State(""),
        gr.State(task_fields(first)[2]),
        upload_note,
    )


# ---------------------------------------------------------------- one comparison


@dataclass
class ColumnsView:
    """What one update of the tab shows; `values()` in CompareForm.outputs' order."""

    status: str
    run_ids: list[int] = field(default_factory=list)
    heads: list = field(default_factory=lambda: [gr.update()] * SLOTS)
    metrics: list = field(default_factory=lambda: [""] * SLOTS)
    notes: list = field(default_factory=lambda: [""] * SLOTS)  # column_notes: sent under the metrics, in their box
    texts: list = field(default_factory=lambda: [""] * SLOTS)
    figure: Any = None
    table: Any = None
    note: str = ""
    closing: bool = False  # the comparison's last update: everything is sent again
    _sent: tuple | None = field(default=None, repr=False)  # the figure and table objects the last values() sent

    def values(self) -> list:
        """The outputs; while the comparison streams, a figure and table already sent go as gr.update() (unchanged):
        rebuilding and serialising them for every update (several a second) cost 20-85 ms of Python each time, on
        the core the decoding shares."""
        sent, self._sent = self._sent, (self.figure, self.table)
        unchanged = not self.closing and sent is not None and all(a is b for a, b in zip(sent, self._sent))
        if unchanged:
            figure, table = gr.update(), gr.update()
        else:
            figure = self.figure if self.figure is not None else empty_figure("")
            table = self.table if self.table is not None else speed_frame([])
        # The notes share the metrics' box (under the output text): a box of their own would add an output to the
        # `compare` API, whose outputs clients read by position
        metrics = [m + ("\n\n" if m and n else "") + n for m, n in zip(self.metrics, self.notes)]
        return [self.status, list(self.run_ids), *self.heads, *metrics, *self.texts, figure, table, self.note]


@dataclass
class StatusOnly:
    """A status line over the last comparison's columns, left as they are: "loading…" before this comparison's first
    method starts (its first view clears them), or a refusal, after which nothing ran (the eighteenth newcomer pass
    lost a comparison's columns, chart and table to a mistyped model name)."""

    status: str

    def values(self) -> list:
        return [self.status, *[gr.skip()] * (3 * SLOTS + 4)]  # ColumnsView.values' outputs after the status


def refusal(e: WorkbenchError, last_runs) -> StatusOnly:
    """A Run refused before anything ran: the reason, and whose results the columns below still are."""
    ids = [int(i) for i in (last_runs or [])]
    kept = (
        # on the error's line: an API client reads a refusal as one line
        # not "the columns show runs #…": a task change may have cleared them (the twentieth newcomer pass)
        f" · Nothing ran: the columns below are as they were (the last comparison's runs "
        f"{', '.join(f'#{i}' for i in ids)} stay stored)"
        if ids
        else ""
    )
    return StatusOnly(error_md(e) + kept)


def _text(value, what: str) -> str:
    """A text field's value: text (None: empty); anything else, which only the API can send, is a clear error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text, got {type(value).__name__}")
    return value


def _number_or_none(value, what: str):
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise InvalidInputError(f"{what} must be a number, got {str(value)[:40]!r}")


@dataclass
class CompareRequest:
    """A comparison's inputs as the form (or the API) gives them; `checked` refuses values of the wrong kind."""

    model: str
    draft: str | None
    methods: Sequence[str]
    prompt: str
    context: str
    chat: bool
    max_new_tokens: Any
    params: dict[str, Any]
    task_choice: str | None
    uploaded: Mapping[str, Task] | None
    compress_rate: Any
    compressor: str | None
    repeats: Any
    upload_error: str = ""

    def checked(self) -> "CompareRequest":
        """The request with every field of the kind the form sends (the API can send anything): InvalidInputError
        naming the field otherwise. Ranges are checked later, where the values are used."""
        methods = self.methods
        if methods is None or isinstance(methods, str):
            methods = [methods] if methods else []
        if not isinstance(methods, (list, tuple)) or not all(isinstance(m, str) for m in methods):
            raise InvalidInputError('methods must be a list of method names, e.g. ["greedy", "aasd"]')
        if self.chat is not None and not isinstance(self.chat, bool):
            raise InvalidInputError(f"use_chat must be true or false, got {str(self.chat)[:40]!r}")
        params = {n: _number_or_none(v, n) for n, v in self.params.items()}
        return CompareRequest(
            _text(self.model, "the model").strip(),
            _text(self.draft, "the draft model").strip() or None,
            list(methods),
            _text(self.prompt, "the prompt"),
            _text(self.context, "the context"),
            self.chat is not False,
            self.max_new_tokens,
            params,
            self.task_choice if isinstance(self.task_choice, str) else None,
            self.uploaded if isinstance(self.uploaded, dict) else None,
            _number_or_none(self.compress_rate, "compress_rate"),
            _text(self.compressor, "the compressor") or None,
            self.repeats,
            self.upload_error if isinstance(self.upload_error, str) else "",
        )


@dataclass
class Reference:
    """A pass's greedy run: the tokens a lossless method should emit and the run every speed-up is against."""

    ids: list[int] | None = None
    run: RunTrace | None = None

    def speedup(self, run: RunTrace) -> tuple[float | None, str]:
        """(`run`'s speed-up against this pass's greedy run, its clock) as core.stats.speedup gives it, the same
        figure Replay shows for the stored pair; (None, "") before greedy has run."""
        return stats_speedup(run, self.run) if self.run is not None else (None, "")


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


CPU_CLOCK_NOTE = (
    f"{capitalised(CLOCK_PHRASES['cpu'])} (tokens per CPU second of decoding, every torch thread's, from the end of "
    "the prompt's prefill to the last step): the time decoding waits while a browser draws this page or another "
    "program takes the core is not counted. Other work still slows CPU time itself (shared caches and memory), "
    "unevenly across methods: on a busy machine run Repeats, or compare on an idle one. tok/s is the wall clock's. "
)


@dataclass(frozen=True)
class Place:
    """Where a method's run stands: method `position` of `of`, in pass `rep`."""

    position: int
    of: int
    rep: int


class Comparison:
    """One comparison: `prepare` checks everything and loads the model (raising WorkbenchError with the reason),
    then iterating yields a ColumnsView per update while the methods run, pass after pass."""

    def __init__(
        self,
        req: CompareRequest,
        store: Store,
        pool: service.ModelPool,
        tasks: Mapping[str, Task],
        stop: threading.Event,
        run_stop,
        owner_tags: Sequence[str],
        where: str,
    ):
        self.req, self.store, self.pool, self.tasks = req, store, pool, tasks
        self.stop, self.run_stop, self.owner_tags, self.where = stop, run_stop, tuple(owner_tags), where

    def picked_task(self) -> Task | None:
        return picked_task(self.req.task_choice, self.tasks, self.req.uploaded)

    def chosen_task(self) -> Task | None:
        """The chosen task, whose references score every output as bench scores them; free text, or a task whose
        prompt or context was edited, has none that apply."""
        r, t = self.req, self.picked_task()
        if t is not None and task_fields(t)[:2] != ((r.context or ""), (r.prompt or "")):
            return None
        return t

    def check(self) -> None:
        """Everything that can be refused before a model loads."""
        r = self.req
        self.specs = check_inputs(r.upload_error, r.prompt, self.picked_task(), r.methods, r.model, r.draft)
        self.n_repeats = check_repeats(r.repeats)
        chosen = {
            n: v
            for n, v in r.params.items()
            if v is not None and (v != OWN_DEFAULT if n in OWN_DEFAULT_FIELDS else v != PARAMS[n].default)
        }
        task = self.picked_task()
        task_cap = task_fields(task, r.task_choice in self.tasks)[2] if task else PARAMS["max_new_tokens"].default
        self.max_new_tokens = chosen["max_new_tokens"] = check_max_new_tokens(r.max_new_tokens, task_cap)
        self.per_method = [
            service.method_params(name, chosen, {"memory_mode": app_memory_mode(name, over), **over})
            if get_method(name).reads_memory
            else service.method_params(name, chosen, over)
            for name, over in self.specs
        ]
        for spec in (r.model, r.draft):
            service.check_model_access(spec, self.pool.allow_local)
        check_model_source(r.model, r.draft, allow_local=self.pool.allow_local)

    def prepare(self) -> Iterator[StatusOnly]:
        """Check, load, build the prompt and compress it; yields "loading…" views on the way."""
        r = self.req
        self.check()
        loaded = self.pool.loaded(r.model) if (r.draft or "").strip() else None  # with a draft: which one loads
        yield StatusOnly(loading_words(r.model, r.draft, loaded))
        self.models = self.pool.load(r.model, r.draft)
        self.text, self.ids = service.build_prompt(self.models.target.tokenizer, r.prompt, r.context, bool(r.chat))
        self.compression, self.full_ids = None, None
        if r.compress_rate is not None and r.compress_rate != 1:  # compressed once, before any run starts or is stored
            yield StatusOnly(f"compressing the context to {r.compress_rate:g} of its tokens…")
            with self.pool.slot(r.model):
                self.text, self.ids, self.compression, self.full_ids = service.compress_context(
                    self.models.target, r.prompt, r.context, r.compress_rate, r.compressor, bool(r.chat)
                )
        check_prompt(self.ids, self.models.target.max_context)

    def wait_note(self) -> str:
        """What this comparison waits for while another one has the model's turn (ModelPool.turns)."""
        busy = self.pool.busy.get(self.req.model)
        if busy:
            return f"waiting for {self.req.model}: the server is {busy}; your comparison starts when it is done"
        return (
            f"waiting for {self.req.model}: another comparison is using it (comparisons take the model in turns, "
            "each for all its methods); yours starts when it is done"
        )

    def _take_turn(self, view: "ColumnsView") -> Iterator["ColumnsView"]:
        """Wait for this comparison's turn on the model, saying so (and why) while it waits; Stop ends the wait."""
        told = False
        while not self.pool.turns.take(self.req.model, self):
            if self.stop.is_set():
                return
            if not told:
                told, view.status = True, self.wait_note()
                yield view
            time.sleep(0.2)

    def __iter__(self) -> Iterator[ColumnsView]:
        names = [self.req.methods[i] for i in range(len(self.specs))]
        shipped = shipped_table(self.models.target, self.models.draft)
        view = ColumnsView(
            "",
            heads=[column_title(names[i]) if i < len(names) else "" for i in range(SLOTS)],
            notes=[column_notes(names[i], self.req.draft, shipped) if i < len(names) else "" for i in range(SLOTS)],
        )
        self.speeds, self.task = Speeds(names), self.chosen_task()
        order = sorted(
            range(len(self.specs)), key=lambda i: self.specs[i][0] != "greedy"
        )  # greedy first: the reference
        yield from self._take_turn(view)
        if self.stop.is_set():  # Stop while waiting for the turn: nothing ran
            for slot in order:
                view.metrics[slot] = NOT_RUN
            view.status, view.closing = closing_status(view.run_ids, self.where, True, self.compression), True
            yield view
            return
        try:  # the turn is held until the last method is done; a consumer that stops resuming loses it (turns.idle)
            for shown in self._turn(view, names, order):
                self.pool.turns.suspended(self.req.model, self, True)
                yield shown
                self.pool.turns.suspended(self.req.model, self, False)
        finally:
            self.pool.turns.give_back(self.req.model, self)

    def _turn(self, view: ColumnsView, names: list[str], order: list[int]) -> Iterator[ColumnsView]:
        """Every method of the comparison, in `order`, for every pass, while this comparison has the model's turn."""
        yield from self._measure_costs(view)
        stopped = self.stop.is_set()
        started: set[int] = set()
        for rep in range(1, self.n_repeats + 1):
            if stopped:
                break
            reference = Reference()  # each pass's speed-ups are against its own greedy run
            for position, slot in enumerate(order, start=1):
                started.add(slot)
                yield from self._column(view, slot, Place(position, len(order), rep), reference)
                if self.stop.is_set():
                    stopped = True
                    break
                summary = self.speeds.summary()
                other_text = self.speeds.other_text()
                view.figure = speed_figure(summary, method_colors(names), other_text, OTHER_TEXT_MARK)
                view.table = speed_frame(summary, other_text)
                view.note = (
                    other_text_note(other_text)
                    + self.speeds.clock_note()
                    + (
                        service.speed_note(
                            self.models.target,
                            self.speeds.tree_sizes(),
                            self.speeds.mean_mals(),
                            len(self.ids),
                            self.speeds.mean_speedups(),
                            rep,
                        )
                        or ""
                    )
                )
        for slot in not_started(order, started):
            view.metrics[slot] = NOT_RUN
        view.status, view.closing = closing_status(view.run_ids, self.where, stopped, self.compression), True
        yield view

    def _measure_costs(self, view: ColumnsView) -> Iterator[ColumnsView]:
        """The model's t(n, L) on this machine, measured once before the first method that sizes its trees by it
        (max_nodes=auto), with a status that says so: it takes a minute or more on a CPU, which the status would
        otherwise show as that method reading its prompt."""
        target, draft = self.models.target, self.models.draft
        if service.cached_curve(target) is not None or not any(
            sizes_trees(get_method(name), resolve_params(name, params), draft)
            for (name, _), params in zip(self.specs, self.per_method)
        ):
            return
        view.status = (
            f"measuring how long a forward over a draft tree takes on this machine for {self.req.model} "
            "(once per model and machine, about a minute or more on a CPU; max_nodes=auto sizes the trees by it)…"
        )
        yield view
        try:
            with self.pool.slot(self.req.model, should_stop=self.stop.is_set):
                cost_model(target)
        except service.Cancelled:  # Stop while waiting for the model: the comparison ends
            return

    def _column(self, view: ColumnsView, slot: int, place: "Place", reference: "Reference") -> Iterator[ColumnsView]:
        """One method's run into its column: streamed steps, then the finished run with its metrics, score and marks."""
        name, run, div, flip, stopping, greedy_sampled = self.specs[slot][0], None, None, False, False, False
        for prog in self._stream(name, slot):
            # Once Stop is heard the line says "stopping" until the comparison says "stopped": the run's last
            # updates (its cancelled record) carry no stopping flag and read "0 of 128 tokens written" in between
            stopping = stopping or prog.stopping
            if prog.error:
                view.metrics[slot] = error_md(prog.error)
            elif prog.run is not None:
                run = prog.run
                if prog.run_id is not None:
                    view.run_ids.append(prog.run_id)
                self.pool.prefill_clock.observe(self.models.target, run)
                if name == "greedy":
                    reference.ids, reference.run = run.output_ids, run
                div = run_divergence(reference.run, run) if reference.run is not None and name != "greedy" else None
                self.speeds.add(slot, run, reference, div)
                # greedy's own run sampled (temperature > 0): its tokens are no reference for a rule or a flip
                greedy_sampled = reference.run is not None and sampled(reference.run.params)
                flip = not greedy_sampled and flip_applies(name, self.per_method[slot], div)
                view.texts[slot] = tokens.run_html(run, first_divergence=div, **flip_mark(div, None) if flip else {})
                view.metrics[slot] = self._metrics(run, prog.run_id, reference.speedup(run)[0], place)
                if reference.run is not None and name != "greedy":
                    view.metrics[slot] += stopped_before_diverging(reference.run, run)
                    view.metrics[slot] += sampling_note(reference.run, run, div)
                clocks = wall_clock_note(run, reference.run) if reference.run is not None and name != "greedy" else ""
                # in words: the stopwatch sign U+23F1 drew as a box (Debian's Chromium fonts lack it)
                view.metrics[slot] += f"\n\n*clocks:* {clocks}" if clocks else ""
            else:
                view.texts[slot] = tokens.tokens_html(tokens.step_origins(prog.steps, self.models.target.tokenizer))
                view.metrics[slot] = running_metrics(prog, self.max_new_tokens)
            view.status = running_status(  # the method as the user wrote it (its column's head): aasd[auto], not aasd
                self.req.methods[slot],
                place.position,
                place.of,
                place.rep,
                self.n_repeats,
                replace(prog, stopping=True) if stopping else prog,
                self.max_new_tokens,
            )
            if prog.waiting and self.pool.busy.get(self.req.model):  # the server's own work holds the slot: say which
                view.status = self.wait_note()
            yield view
        if (
            measured_at_t0(self.per_method[slot], div)
            and not greedy_sampled
            and not self.stop.is_set()
            and div < min(len(reference.ids), len(run.output_ids))
        ):
            report = measured_divergence(self.pool, self.req.model, self.models, self.ids, reference.ids, run)
            if flip:
                view.texts[slot] = tokens.run_html(run, first_divergence=div, **flip_mark(div, report))
            decode = self.models.target.tokenizer.decode
            view.metrics[slot] += tokens.divergence_note(report, flip, decode, run)

    def _metrics(self, run, run_id, ratio: float | None, place: "Place") -> str:
        """The column's metrics line; with repeats, which pass it shows."""
        task = self.task
        score = score_task(task, run.output_text) if task is not None else None
        shown = (
            f"pass {place.rep} of {self.n_repeats} (the last shown; the chart and table: all passes) · "
            if self.n_repeats > 1
            else ""
        )
        return (
            shown
            + metrics_md(run, run_id, None, score, score_label(task) if task is not None else None, speedup=ratio)
            + rescued_md(run)
            + self._fit_note(run)
            + self._memory_note(run)
        )

    def _fit_note(self, run) -> str:
        """Where a run's fitted thresholds came from (the fit file it read just now), beside the values it used."""
        if not run.params.get("fitted"):
            return ""
        fit, where, path, fit_dtype = fit_origin(self.models.target, run.method)
        return fit_source_md(fit, where, path, fit_dtype, run.dtype)

    def _memory_note(self, run) -> str:
        """memory_note for a run that read CSD's memory, against this model pair's shipped table."""
        if "memory_sha" not in run.params:
            return ""
        target, draft = self.models.target, self.models.draft if run.draft_model else None
        shipped = shipped_memory(target, draft)
        pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
        return memory_note(run.params, shipped.total, shipped.fingerprint(), memory_path(pair).name)

    def _stream(self, name: str, slot: int) -> Iterator[service.Progress]:
        # The worker holds the model's slot, so a client that goes away gives it back (service.stream_run)
        context = (self.req.context or "").strip() or None
        return service.stream_run(
            name,
            self.models,
            self.ids,
            self.per_method[slot],
            prompt_text=self.text,
            context=context,
            store=self.store,
            tags=("workbench", *self.owner_tags),
            idle_cancel=self.pool.idle_cancel,
            compression=self.compression,
            uncompressed_ids=self.full_ids,
            stop=self.run_stop(),
            slot=lambda should_stop: self.pool.slot(self.req.model, should_stop),
        )


# ---------------------------------------------------------------- Stop


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


# ---------------------------------------------------------------- the handlers


class CompareHandlers:
    """The tab's event handlers. Project errors come back as a status message, never as an exception."""

    def __init__(self, store: Store, pool: service.ModelPool, tasks: Mapping[str, Task], who=lambda request: None):
        self.store, self.pool, self.tasks, self.who = store, pool, tasks, who
        self.stops = StopFlags()

    def pick_task(self, choice, uploaded, cap_now, task_cap, last_runs=None, context=None, prompt=None):
        """(context, prompt, max_new_tokens, chat, the task's cap, then task_change_cleared's outputs) of the chosen
        task. A token cap other than the one the last task filled in is the user's own and is kept (read from the field
        itself: no event can race it). The last comparison's results are cleared: they answered another prompt.
        "(free text)" empties boxes that hold a task's text and keeps text the user typed (typed_by_user)."""
        if choice == OWN_TEXT:  # set by `typed`: the boxes hold what the user typed, and stay
            return (gr.update(),) * (5 + CLEARED_OUTPUTS)
        if choice == FREE_TEXT:
            fields = free_text_fields()
            if typed_by_user(context, prompt, [*self.tasks.values(), *(uploaded or {}).values()]):
                fields = (gr.update(), gr.update(), *fields[2:])
        else:
            bundled = choice in self.tasks
            t = self.tasks.get(choice) or (uploaded or {}).get(choice)
            if t is None:
                return (gr.update(),) * (5 + CLEARED_OUTPUTS)
            fields = task_fields(t, bundled)
        users = cap_now is not None and task_cap is not None and cap_now != task_cap
        return (
            fields[0],
            fields[1],
            gr.update() if users else fields[2],
            fields[3],
            task_cap if users else fields[2],
            *task_change_cleared(last_runs),
        )

    def typed(self, choice, uploaded, context, prompt):
        """The task picker once the user typed in the prompt or context box (own_text_choice)."""
        return own_text_choice(choice, self.tasks, uploaded, context, prompt)

    def upload(self, path, current=None):
        """(tasks, task dropdown, status line, the file's error, the note under the upload control): a file that
        cannot be read is said so at once beside the control, and remembered, so Run refuses instead of running the
        sample still chosen. The file removed (✕): its tasks leave the picker, and a picker still on one of them goes
        back to the first bundled sample (a value no longer among the choices made Run fail in Gradio's own words)."""
        if not path:
            own = [OWN_TEXT] if current == OWN_TEXT else []  # the user's typed text stays what runs
            keep = isinstance(current, str) and (current in (FREE_TEXT, OWN_TEXT) or current in self.tasks)
            value = current if keep else next(iter(self.tasks), FREE_TEXT)
            choices = [FREE_TEXT, *own, *self.tasks]
            return {}, gr.update(choices=choices, value=value, label=TASK_LABEL), "", "", ""
        try:
            refused = binary_upload(path)
            if refused:
                raise InvalidInputError(refused)
            loaded = {f"upload:{t.id}": t for t in service.sample_tasks(path)}
            if not loaded:  # "loaded 0 task(s)" read as a success (the seventeenth fresh pass)
                raise InvalidInputError(
                    f"{Path(path).name} holds no task: write one JSON object a line ({UPLOAD_FORMAT})"
                )
        except WorkbenchError as e:
            note = upload_error_md(public_message(str(e)))
            return {}, gr.update(), note, public_message(str(e)), note
        done = f"loaded {len(loaded)} task(s) from the file: the first is chosen under Task"
        return (
            loaded,
            gr.update(
                choices=[FREE_TEXT] + list(self.tasks) + list(loaded),
                value=next(iter(loaded), FREE_TEXT),
                label=uploaded_label(len(loaded)),
            ),
            done,
            "",
            done,
        )

    def recheck(self, status, model_name, draft_name, method_list, prompt_text, task_choice, uploaded, upload_error):
        """The status line once the model, the methods, the prompt or the task changed (input_warning)."""
        task = picked_task(task_choice, self.tasks, uploaded)
        return input_warning(status, upload_error, prompt_text, task, method_list, model_name, draft_name)

    def active_fields(self, method_list):
        taken = params_taken(method_list)
        return [gr.update(interactive=n in taken, info=field_info(n, method_list)) for n in PARAM_FIELDS]

    def prompt_info(self, model_name, prompt_text, context_text, use_chat, method_list, compress_rate=None):
        """The prompt's length in tokens and the estimated time to read it, before Run (a model this pool has not
        loaded yet is loaded when it is a fetched preset; otherwise the line waits for the first Run)."""
        name = (model_name or "").strip()
        models = self.pool.loaded(name)
        try:
            if models is None and name in service.PRESETS and service.is_fetched(name):
                models = self.pool.load(name)
            if models is None or not ((prompt_text or "").strip() or (context_text or "").strip()):
                return ""
            _, ids = service.build_prompt(models.target.tokenizer, prompt_text, context_text, bool(use_chat))
        except WorkbenchError as e:
            return error_md(e)
        target = models.target
        compressed = None
        if isinstance(compress_rate, (int, float)) and 0 < compress_rate < 1 and (context_text or "").strip():
            context_tokens = len(target.tokenizer((context_text or "").strip()).input_ids)
            compressed = (compressed_length(len(ids), context_tokens, compress_rate), float(compress_rate))
        read = compressed[0] if compressed else len(ids)
        # an emptied prompt (the status line says so): the count is of what is left, not of "the prompt"
        counted = "prompt" if (prompt_text or "").strip() else "context and chat template" if use_chat else "context"
        note = prompt_note(
            len(ids),
            self.pool.prefill_clock.estimate(target, read),
            len(method_list or []),
            target.max_context,
            counted,
            idle=self.pool.prefill_clock.idle_estimate(target, read),
            compressed=compressed,
        )
        precision = precision_note(str(target.dtype).replace("torch.", ""))
        return note + (f"\n\n{precision}" if precision else "")

    @gpu
    def compare(
        self,
        request: gr.Request,
        model_name,
        draft_name,
        method_list,
        prompt_text,
        context_text,
        use_chat,
        max_new_tokens,
        delta,
        alpha,
        beta,
        tau,
        lam,
        key_len,
        ngram,
        align_m,
        align_graft,
        max_nodes,
        gamma,
        top_k,
        temperature,
        top_p,
        seed,
        task_choice,
        uploaded_tasks,
        compress_rate,
        compressor,
        repeats,
        upload_error="",
        last_runs=None,
    ):
        # The signature is the API's list of named parameters; the parameter fields among them are read by name, in
        # PARAM_FIELDS (the one list of them: CompareForm.inputs' order, checked against this signature by a test).
        given = locals()
        params = {name: given[name] for name in PARAM_FIELDS}
        req = CompareRequest(
            model_name,
            draft_name,
            method_list,
            prompt_text,
            context_text,
            use_chat,
            max_new_tokens,
            params,
            task_choice,
            uploaded_tasks,
            compress_rate,
            compressor,
            repeats,
            upload_error or "",
        )
        viewer = self.who(request)
        where = self.store.where if viewer is None or viewer.owner is None else "yours until you share them"
        stop = self.stops.begin(request)
        try:
            try:
                comparison = Comparison(
                    req.checked(),
                    self.store,
                    self.pool,
                    self.tasks,
                    stop,
                    lambda: self.stops.for_run(request),
                    viewer.run_tags if viewer is not None else (),
                    where,
                )
                for view in comparison.prepare():
                    yield view.values()
            except WorkbenchError as e:
                yield refusal(e, last_runs).values()
                return
            for view in comparison:
                yield view.values()
        finally:  # done, failed, or its client went away: Stop has nothing to stop any more
            self.stops.end(request)

    def stop(self, request: gr.Request):
        # The comparison itself writes "stopped" in the status line (it ends within a step); a toast says the click
        # was heard. Writing the status here too would race the comparison's last update and could win.
        if self.stops.stop(request):
            gr.Info(
                "Stopping: the method running now ends at its next step (or its next prompt chunk) and is stored "
                "as cancelled."
            )


STARTING = "starting your comparison…"


def running_button():
    """Run while its comparison runs: not clickable, and says why; the status line says a comparison is starting
    (the last one's "done: runs … stored" stood beside the new columns for ~0.7 s, nineteenth pass)."""
    return gr.update(value=RUNNING_LABEL, interactive=False), STARTING


def idle_button():
    """Run once its comparison has ended, however it ended."""
    return gr.update(value=RUN_LABEL, interactive=True)


def compare_tab(store: Store, pool: service.ModelPool, compare_ids: gr.State, who=lambda request: None) -> CompareForm:
    """Build the tab and wire it."""
    tasks = {t.id: t for t in service.sample_tasks()}
    form = build_form(tasks, pool.allow_local)
    h = CompareHandlers(store, pool, tasks, who)
    # A refusal in the status line answered the last Run's inputs: re-checked as they change, not left until the next
    # Run (after pick_task, which writes the status too; a task filling the boxes in changes the prompt as well).
    recheck = dict(
        fn=h.recheck,
        inputs=[form.status, form.model, form.draft, form.methods, form.prompt, form.task, form.uploaded]
        + [form.upload_error],
        outputs=[form.status],
        api_name=False,
        show_progress="hidden",
        trigger_mode="always_last",
    )
    form.task.change(
        h.pick_task,
        [form.task, form.uploaded, form.max_new, form.task_cap, compare_ids, form.context, form.prompt],
        [form.context, form.prompt, form.max_new, form.chat, form.task_cap, *form.cleared_outputs],
        api_name=False,
    ).then(**recheck)
    for component in (form.model, form.draft, form.methods, form.prompt, form.context):
        component.change(**recheck)
    form.task_file.change(
        h.upload,
        [form.task_file, form.task],
        [form.uploaded, form.task, form.status, form.upload_error, form.upload_note],
        api_name=False,
    )
    # .change, not .input: a paste (Playwright's fill) sent no .input and the picker kept the sample's name (the
    # twenty-third pass); a task filling the boxes in changes nothing here, as its text is the task's own
    for box in (form.context, form.prompt):
        box.change(
            h.typed,
            [form.task, form.uploaded, form.context, form.prompt],
            [form.task],
            api_name=False,
            show_progress="hidden",
            trigger_mode="always_last",
        )
    form.methods.change(h.active_fields, [form.methods], [form.controls[n] for n in PARAM_FIELDS], api_name=False)
    info = dict(
        fn=h.prompt_info,
        inputs=[form.model, form.prompt, form.context, form.chat, form.methods, form.compress_rate],
        outputs=[form.prompt_info],
        api_name=False,
        trigger_mode="always_last",
        show_progress="hidden",
    )
    for component in (form.model, form.prompt, form.context, form.chat, form.methods, form.compress_rate):
        component.change(**info)
    # show_progress="hidden": the status line says how far the comparison is; Gradio's own overlay puts a live timer
    # and a pulsing mask on every output, redrawn for as long as the comparison runs, on the CPU the decoding shares
    # when the browser runs beside the server.
    # Run is greyed out and reads "Running…" while its comparison runs: a second click used to be dropped without a
    # word (an event runs once at a time) and the results stood under settings changed since. `.then` runs whether the
    # comparison ended done, stopped, refused or failed, so Run always comes back; the first step is not queued, so
    # it answers at once even while other sessions' comparisons hold the queue.
    form.run.click(running_button, None, [form.run, form.status], api_name=False, queue=False).then(
        h.compare,
        [*form.inputs, compare_ids],  # the last comparison's runs: a refusal says the columns are still theirs
        form.outputs(compare_ids),
        api_name="compare",
        concurrency_id="generate",
        show_progress=COMPARE_PROGRESS,
    ).then(idle_button, None, [form.run], api_name=False, queue=False, show_progress="hidden")
    # Queued (so the request carries the session that Run came from) but never waiting behind the generations.
    form.stop.click(h.stop, None, None, api_name=False, concurrency_limit=None)
    form.on_load = {k: v for k, v in info.items() if k != "trigger_mode"}
    return form
