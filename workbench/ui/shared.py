"""What the tabs share: parameter labels, the run cache, run lists and the metrics line. No Gradio here."""

from __future__ import annotations

import functools
import html
import math
import os
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from itertools import accumulate
from pathlib import Path
from typing import Any

import pandas as pd

from core.errors import InvalidInputError, WorkbenchError
from core.methods import asked_as as spelled_with
from core.models import PRESETS, is_fetched, preset_path
from core.params import PARAMS, SHIPPED_MEMORY
from core.rules import EOS_EXEMPT, Rescue
from core.stats import ACCEPTANCE_MEANING, TOKEN_ACCEPTANCE, run_metrics
from core.thresholds import describe_values
from core.trace import RunTrace
from workbench.methods import get_method, resolve_params
from workbench.store import RunNotFoundError, Store, StoredRun
from workbench.ui import tokens
from workbench.ui.access import Viewer, not_visible, shown_tags

TUNABLE = ("delta", "alpha", "beta", "tau", "lam")  # the live-tuning sliders
SYMBOL = {"delta": "δ", "alpha": "α", "beta": "β", "tau": "τ", "lam": "λ", "gamma": "γ"}
RUN_COLUMNS = ["id", "method", "model", "status", "tokens", "MAL", "tok/s", "tags", "created"]
# Shares of the runs table's width, so the table fits its box at any window width (a 1024 px window needed a sideways
# scroll to see "created", the twenty-first pass); a longer cell is clipped rather than wrapped (tall rows hid runs).
# At 1024 px the shares hold a preset's model name, "cancelled" and "created" to the minute whole
RUN_COLUMN_WIDTHS = ["5%", "19%", "19%", "10%", "7%", "6%", "7%", "10%", "17%"]
APP_DEFAULTS = {"memory_mode": SHIPPED_MEMORY}  # the app's plain `csd` reads the shipped memory (compare_tab)


def asked_as(method: str, params: Mapping[str, Any] | None, leave_out: tuple = ()) -> str:
    """A run's method as the app's methods box takes it: `aasd[alpha=0.05]`, `aasd[auto]`, plain `csd` for the shipped
    memory, so a label typed back into Compare runs the same thing (core.methods.asked_as); `leave_out` names
    parameters not to write (a sweep's own)."""
    return spelled_with(method, params, APP_DEFAULTS, leave_out)


try:  # ZeroGPU on Hugging Face Spaces: request a GPU per generation; a no-op elsewhere
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(fn):
        return fn


# An absolute path (POSIX or Windows) inside a message: a browser user sees only its last part.
_SERVER_PATH = re.compile(r"(?<![\w.:/])(?:[A-Za-z]:\\|/)(?:[^\s'\"/\\:]+[/\\])+([^\s'\"/\\:]*)")

_DB_URL = re.compile(r"(sqlite:///)/?(?:[^\s'\"/]+/)*([^\s'\"/]+)")


def public_message(text: str) -> str:
    """A message for a browser: server folders cut to "…/name" (the user's own input stays recognisable)."""
    text = _DB_URL.sub(lambda m: f"{m.group(1)}…/{m.group(2)}", str(text))
    return _SERVER_PATH.sub(lambda m: f"…/{m.group(1)}", text)


MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~])")


def escape_markdown(text: str) -> str:
    """`text` shown as written in a Markdown component: "t*'s" stays t*'s, not the start of italics."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", text)


def error_md(e: Exception | str) -> str:
    """An error as the status line shows it, without the server's folders, its Markdown characters escaped (a
    message is plain text: "t*" in it must not open italics and leave a stray "**"). Every status that shows an
    error goes through here."""
    return f"**⚠ {escape_markdown(public_message(str(e)))}**"


UNBOUNDED = 2**31  # an upper bound this large (the seed's 2⁶³ − 1) is shown as "any integer ≥ low"


def param_label(name: str) -> str:
    """ "δ delta: default 0.1, range (0, 1]": symbol (for the Greek-letter parameters only, so no name shows
    twice), name, default and range from core.params; a practically unbounded range reads "any integer ≥ 0"."""
    spec = PARAMS[name]
    shown = f"{SYMBOL[name]} {name}" if name in SYMBOL else name
    if spec.high is not None and spec.high >= UNBOUNDED:
        kind = "integer" if spec.kind is int else "number"
        return f"{shown}: default {spec.default}, any {kind} {'>' if spec.low_open else '≥'} {spec.low}"
    bracket = "(" if spec.low_open else "["
    words = f"; {', '.join(f'{v} = {k}' for k, v in spec.names.items())}" if spec.names else ""  # max_nodes: 0 = auto
    return f"{shown}: default {spec.default}, range {bracket}{spec.low}, {spec.high}]{words}"


def counted(n: int, word: str) -> str:
    """ "1 token", "2 tokens": a count with its noun in the right number (passes read "1 tokens replaced")."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def sig(x: float | None) -> float | None:
    """Four significant digits, for tables."""
    return None if x is None else float(f"{x:.4g}")


class RunCache:
    """Finished runs by id (they never change), so replay steps switch without reloading.

    An entry is (stored run, token origins, step ends): what the replay shows without recomputing."""

    def __init__(self, store: Store, size: int = 16):
        self.store, self.size, self._runs, self._lock = store, size, OrderedDict(), threading.Lock()

    def get(self, run_id: int, viewer: Viewer | None = None) -> tuple[StoredRun, list[tuple[str, str]], list[int]]:
        """The run, if `viewer` may see it (RunNotFoundError, as for a missing run, when not)."""
        run_id = run_id_of(run_id)
        with self._lock:
            entry = self._runs.get(run_id)
            if entry is not None:
                self._runs.move_to_end(run_id)
        if entry is not None:
            if viewer is not None:
                viewer.check(run_id, entry[0].tags)
            return entry
        if viewer is not None:
            try:
                viewer.check(run_id, self.store.run_tags(run_id))
            except RunNotFoundError:
                raise not_visible(run_id, viewer) from None
        stored = self.store.load_run(run_id)
        entry = (stored, tokens.token_origins(stored.trace), step_ends(stored.trace))
        if stored.trace.status != "running":
            with self._lock:
                self._runs[run_id] = entry
                while len(self._runs) > self.size:
                    self._runs.popitem(last=False)
        return entry

    def forget(self, run_id: int) -> None:
        """Drop a run whose tags changed (shared)."""
        with self._lock:
            self._runs.pop(run_id_of(run_id), None)


def step_ends(run: RunTrace) -> list[int]:
    """Tokens emitted up to and including each step."""
    return list(accumulate(len(s.emitted) for s in run.steps))


def fitted_md(params) -> str:
    """ " · fitted thresholds: context α 0.05, β 0.03 · alignment …" for a run that verified with the
    thresholds fitted to its model (`aasd[auto]`); "" for any other run."""
    if not params.get("fitted"):
        return ""
    return f" · fitted thresholds: {describe_values(params)}"


def fit_source_md(fit: Mapping[str, Any] | None, where: str, path, fit_dtype: str | None, run_dtype: str) -> str:
    """ " · fitted in float32 by the shipped fit af044….json on 3 held-out items per family (this run is bfloat16:
    …)": where a run's fitted thresholds came from (core.thresholds.fit_origin's answer), "" when there is no fit."""
    if fit is None or path is None:
        return ""
    whose = "the shipped fit" if where.startswith("shipped") else "your own fit"
    items = (fit.get("items") or {}).get("per_family")
    on = f" on {items} held-out items per family" if items else ""
    text = f" · thresholds fitted in {fit_dtype}{on} ({whose} `{Path(path).name}`)"
    if fit.get("relaxed") is False:  # the fit fell back to the rule's lossless setting
        text += "; no relaxed setting kept every family's score, so these are the lossless ones: greedy's text"
    if fit_dtype and run_dtype and fit_dtype != run_dtype:
        text += (
            f"; this run is {run_dtype}: no fit was made in {run_dtype}, so the {fit_dtype} one serves (the "
            "probabilities it thresholds move about a percent between them)"
        )
    return text


def whole_run_tps(status: str, tps: float | None) -> float | None:
    """A run's tokens per second where it is a whole run's speed: none for a cancelled or failed run, whose speed
    measured part of a run (nothing, when Stop came during the prompt). Compare's column and the runs list both show
    "–" for it, beside its status (Compare said "–", the Replay list 12.4 tok/s for the same cancelled run)."""
    return tps if status == "complete" else None


def metrics_md(
    run: RunTrace,
    run_id: int | None,
    greedy_tps: float | None,
    score: float | None = None,
    score_name: str | None = None,
    speedup: float | None = None,
) -> str:
    """One line of a run's metrics; the speed-up is `speedup` when given, else against `greedy_tps`; `score` is the task's
    score against its references (workbench.evaluation.scores.score_task, as bench computes it), said what it
    is by `score_name` (e.g. "F1 against the task's reference answers, 0–100"); a run with fitted thresholds
    shows the values it used."""
    m = run_metrics(run)
    m["tps"] = whole_run_tps(run.status, m.get("tps"))
    fmt = lambda v, f="{:.2f}": "–" if v is None else f.format(v)  # noqa: E731
    ratio = speedup if speedup is not None else m["tps"] / greedy_tps if greedy_tps and m.get("tps") else None
    speed = "–" if ratio is None else f"{ratio:.2f}×"
    state = "" if run.status == "complete" else f" · **{run.status}**"
    if run.status != "complete":  # a stopped run's answer is cut short: scoring it would grade what Stop left
        score = None
        # and its speed measured part of a run (whole_run_tps): the speed table leaves it out, and so does its column
        speed = "–"
    return (
        f"{with_meaning('MAL', MAL_MEANING, 'metric-name')} **{fmt(m['mal'])}** · {fmt(m['tps'], '{:.1f}')} tok/s · speed-up {speed} · "
        f"{named(TOKEN_ACCEPTANCE)} {fmt(m['accept_rate'], '{:.0%}')} · {m['steps']} steps · {m['tokens']} tokens"
        + (f" · score **{score:.1f}**" + (f" ({score_name})" if score_name else "") if score is not None else "")
        + fitted_md(run.params)
        + f" · run #{run_id if run_id is not None else '–'}{state}"
    )


def rescue_rule(trace: RunTrace) -> Rescue | None:
    """The run's rescue rule (CSD's memory count λ and logit gate τ) under its own recorded values, or None for a
    method without one (a method this server does not know has none). Values the rule cannot read fall back to the
    method's defaults (a run may record only some of them)."""
    try:
        method = get_method(trace.method)
    except WorkbenchError:  # a method this server does not know: nothing to rescue with
        return None
    defaults = resolve_params(method.name)
    try:
        return method.rescue_of({**defaults, **{k: v for k, v in trace.params.items() if k in method.params}})
    except Exception:  # noqa: BLE001 - stored values the rule cannot read: the method's defaults decide
        return method.rescue_of(defaults)


RESCUED_MEANING = (
    "draft tokens the target rejected that CSD accepted anyway: the pair (draft token, the target's own choice) had "
    "been seen at least λ times in the correction memory, and the target gives the draft token at least τ times "
    "the probability of its own choice. Only these can make csd's text differ from greedy's; 0 = csd wrote what "
    "strict verification accepts"
)


def rescued_md(run: RunTrace) -> str:
    """ " · rescued 0 tokens (no pair reached λ 6 this run: 5 rejections; the largest count was 2)": a CSD-style
    run's rescues (what CSD adds over strict verification), and when there are none, why; "" for a method that
    rescues nothing."""
    rule = rescue_rule(run)
    if rule is None:
        return ""
    head = with_meaning("rescued", RESCUED_MEANING, "metric-name")
    rescued = sum(1 for s in run.steps for n in s.nodes if n.decision == "rescued")
    if rescued:
        return f" · {head} **{rescued}** token{'s' if rescued != 1 else ''}"
    return f" · {head} **0** tokens ({_why_none_rescued(run, rule)})"


def _why_none_rescued(run: RunTrace, rule: Rescue) -> str:
    rejected = [n for s in run.steps for n in s.nodes if n.parent >= 0 and n.decision == "rejected"]
    if not rejected:
        return "no draft token was rejected this run"
    n = len(rejected)
    rejections = f"{n} rejection{'s' if n != 1 else ''}"
    if rule.lam is not None:
        counts = [x.mem_count for x in rejected if x.mem_count is not None]
        reached = [x for x in rejected if x.mem_count is not None and x.mem_count >= rule.lam]
        if not reached:
            largest = f"; the largest count was {max(counts)}" if counts else ""
            return f"no pair reached λ {rule.lam} this run: {rejections}{largest}"
        eos = sum(1 for x in reached if EOS_EXEMPT in (x.reason or ""))
        gate = len(reached) - eos
        why = [f"the logit gate (τ {rule.tau:g}) refused {gate}" if gate and rule.tau is not None else ""]
        why.append(f"{eos} would have ended the text (rescue_eos=no)" if eos else "")
        why = [w for w in why if w] or ["none was rescued"]
        return f"{len(reached)} of {rejections} reached λ {rule.lam}, but " + " and ".join(why)
    return f"the logit gate (τ {rule.tau:g}) refused all {rejections}"


MAL_MEANING = (
    "mean accepted length: tokens written per target forward (accepted draft tokens plus the forward's own token; "
    "greedy's is 1)"
)


def with_meaning(name: str, meaning: str, kind: str) -> str:
    """`name` with `meaning` on hover (a dotted underline says there is one); `kind` names its CSS class."""
    return (
        f'<span class="{kind}" title="{html.escape(meaning, quote=True)}" style="border-bottom:1px dotted">'
        f"{html.escape(name)}</span>"
    )


def named(name: str) -> str:
    """One of core.stats' acceptance names with its meaning on hover."""
    return with_meaning(name, ACCEPTANCE_MEANING[name], "acceptance-name")


def runs_frame(store: Store, filter_text: str = "", limit: int = 200, viewer: Viewer | None = None) -> pd.DataFrame:
    """The stored runs `viewer` may see (all without one), newest first, keeping those whose method, model,
    tags, status or id contain the filter."""
    text = (filter_text or "").strip()
    rows = []
    for r in store.list_runs(limit=limit, any_tag=viewer.visible_tags if viewer is not None else None):
        m = r.metrics or {}
        row = {
            "id": r.id,
            "method": asked_as(r.method, r.params),
            "model": r.model,
            "status": r.status,
            "tokens": m.get("tokens"),
            "MAL": round(m["mal"], 2) if m.get("mal") else None,
            "tok/s": round(tps, 1) if (tps := whole_run_tps(r.status, m.get("tps"))) else None,
            "tags": ", ".join(shown_tags(r.tags)),
            "created": r.created.strftime("%Y-%m-%d %H:%M"),  # to the minute: the id orders runs
        }
        if not text or any(text.lower() in str(row[k]).lower() for k in ("method", "model", "tags", "status", "id")):
            rows.append(row)
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def shown_runs(frame: pd.DataFrame):
    """runs_frame as the runs table draws it: MAL with two decimals and tok/s with one, as the Compare tab writes
    them (the table printed greedy's MAL 1.0 as "1"), and tokens whole (a float column once a run lacks them). A
    pandas Styler sets what the cells show and leaves the values numbers, so the table still sorts by value and a
    click hands back the frame itself. A long method label is cut (short_label)."""
    return frame.style.format(
        {"tokens": "{:.0f}", "MAL": "{:.2f}", "tok/s": "{:.1f}", "method": short_label}, na_rep=""
    )


SHORT_LABEL = 36  # characters of a method label the runs table shows


def short_label(label: Any) -> str:
    """A method label as the runs table shows it: cut to SHORT_LABEL characters. A re-run's
    aasd[alpha=0.008,beta=0.003,alpha_alignment=0.1,beta_alignment=0.3] pushed "created" out of view (the twentieth
    newcomer pass), and a wrapped one made rows tall enough to hide the rest of the runs; Replay's header and the
    pickers give the whole label."""
    text = str(label)
    return text if len(text) <= SHORT_LABEL else text[: SHORT_LABEL - 1] + "…"


MAX_RUN_ID = 2**63 - 1  # the largest integer SQLite (and PostgreSQL's BIGINT) stores: no run id is larger
_RUN_ID_TEXT = re.compile(r"([0-9]{1,19})|#([0-9]{1,19})(?:\s.*)?", re.S)  # "12", or a list label "#12 aasd · model"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def run_id_of(value) -> int:
    """A run id from what a number field, a dropdown or the API sends: 12, 12.0, "12" or "#12 aasd", a whole number
    from 1 to 2⁶³ − 1. Anything else (2⁶³, 1e308, nan, "1 OR 1=1", a list) is one clear InvalidInputError; a big
    number used to reach SQLite and come back as an OverflowError traceback."""
    number = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**64:
        number = int(value)
    elif isinstance(value, str):
        m = _RUN_ID_TEXT.fullmatch(value.strip())
        number = int(m.group(1) or m.group(2)) if m else None
    if number is None or not 1 <= number <= MAX_RUN_ID:
        raise InvalidInputError(
            f"{_shown(value)} is not a run id: run ids are whole numbers from 1 to {MAX_RUN_ID} "
            "(pick a run from the list, or type its number)"
        )
    return number


def step_of(value) -> int:
    """A step index from the slider or the API: a whole number ≥ 0 (too large is clamped later to the run's last
    step); anything else is a clear InvalidInputError."""
    if value in (None, ""):
        return 0
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number) or not number.is_integer() or number < 0:
        raise InvalidInputError(f"{_shown(value)} is not a step: steps are whole numbers from 0")
    return int(min(number, MAX_RUN_ID))


def parse_run_ids(values) -> list[int]:
    """Run ids from a dropdown: ids, or typed text such as "12" or "#12 aasd" (run_id_of)."""
    if isinstance(values, (str, int, float)):
        values = [values]
    if not isinstance(values, (list, tuple)):
        raise InvalidInputError(f"{_shown(values)} is not a list of run ids: pick runs from the list")
    return [run_id_of(v) for v in values]


RUN_CHOICES = 200  # runs a run dropdown lists (the newest); an older one is typed by its id (parse_run_ids)
# Every run picker's help. A dropdown's suggestions match the typed text anywhere in a label, so a bare "1" also
# matches the "135M" of a model's name (the sixteenth fresh pass); "#1" matches only the labels' ids.
RUN_PICKER_HELP = (
    f"the newest {RUN_CHOICES} are listed; type #12 to find run 12, or any run's id and Enter for an older one"
)


def run_choices(store: Store, viewer: Viewer | None = None) -> list[tuple[str, int]]:
    """(label, id) of the latest runs `viewer` may see, for the run dropdowns, in ascending order (picker_order)."""
    runs = store.list_runs(limit=RUN_CHOICES, any_tag=viewer.visible_tags if viewer is not None else None)
    return picker_order([(f"#{r.id} {asked_as(r.method, r.params)} · {r.model}", r.id) for r in runs])


def picker_order(choices: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Run choices by ascending id. A dropdown filters its labels by what is typed and Enter takes the first one left:
    newest first, "#4" then Enter picked run #42 (nineteenth newcomer pass, following RUN_PICKER_HELP); by ascending
    id the run whose id is typed comes before every longer id it starts."""
    return sorted(choices, key=lambda choice: choice[1])


# ---------------------------------------------------------------- colours and models

# Plotly's default colour sequence (the plotly_white template's colorway), in the order runs were chosen.
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52")


def run_colors(labels) -> dict[str, str]:
    """One colour per run (or method) label, by its place in `labels`: a run keeps its colour in every plot
    of a tab, even in a plot where an earlier run has no data."""
    out: dict[str, str] = {}
    for label in labels:
        if label not in out:
            out[label] = PALETTE[len(out) % len(PALETTE)]
    return out


def method_of(label: str) -> str:
    """The method of a run label: "#12 aasd" -> "aasd", "aasd" -> "aasd", "#3 csd (2)" -> "csd"."""
    parts = str(label).split()
    if parts and parts[0].startswith("#"):
        parts = parts[1:]
    return parts[0] if parts else str(label)


def method_colors(labels) -> dict[str, str]:
    """A colour per label by its method (run_colors over the methods, in the order they first appear): three
    methods are three colours however many runs of each are drawn."""
    by_method = run_colors([method_of(label) for label in labels])
    return {label: by_method[method_of(label)] for label in labels}


@functools.lru_cache(maxsize=8)
def tokenizer_of(model: str):
    """The tokenizer of a run's model, without loading the model: a fetched preset's folder, a local folder,
    or a hub id already in the local cache (never a download)."""
    from transformers import AutoTokenizer

    source = str(preset_path(model)) if model in PRESETS and is_fetched(model) else model
    return AutoTokenizer.from_pretrained(source, local_files_only=True)


def decoder_for(model: str):
    """ids -> text with `model`'s tokenizer (tokenizer_of), or None when it is not on this server: the replay and
    the memory tab then name tokens by the texts their runs recorded."""
    try:
        return tokenizer_of(model).decode
    except Exception:  # noqa: BLE001 - no tokenizer here: the run's own token texts name the ids
        return None


def fetched_presets() -> list[str]:
    return [name for name in PRESETS if is_fetched(name)]


_HUB_CHECK: dict[str, tuple[float, bool]] = {}  # endpoint -> (when checked, reachable)


def hub_reachable(timeout: float = 1.5, ttl: float = 60.0) -> bool:
    """Whether this server can open a connection to the Hugging Face hub (checked at most once a minute):
    transformers retries an unreachable hub for ~25 s before it gives up."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    host = constants.ENDPOINT.split("://", 1)[-1].split("/", 1)[0]
    name, _, port = host.partition(":")
    checked = _HUB_CHECK.get(host)
    if checked is not None and time.monotonic() - checked[0] < ttl:
        return checked[1]
    try:
        socket.create_connection((name, int(port or 443)), timeout=timeout).close()
        ok = True
    except OSError:
        ok = False
    _HUB_CHECK[host] = (time.monotonic(), ok)
    return ok


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an id the cache cannot even parse: not cached
        return False


def check_model_source(*specs: str | None, allow_local: bool = True) -> None:
    """Refuse at once a model that is a hub id this server can neither find in its cache nor download (offline,
    or the hub unreachable), naming the presets that are fetched here; presets, folders and files are left to
    core.models, which answers those quickly. Without `allow_local` (a multi-user app) a hub id is never looked
    up on the server's disk: the answer must not depend on what is there (service.check_model_access)."""
    for spec in specs:
        spec = (spec or "").strip()
        if (
            not spec
            or spec in PRESETS
            or spec.startswith((".", "/", "~"))
            or spec.count("/") > 1
            or spec.endswith(".gguf")
            or (allow_local and Path(spec).expanduser().exists())
            or _in_hub_cache(spec)
        ):
            continue
        if not hub_reachable():
            fetched = ", ".join(fetched_presets()) or "none: `python -m workbench models fetch smollm2-135m`"
            raise InvalidInputError(
                f"{spec!r} is not a fetched preset or a folder on this server, and the Hugging Face hub "
                f"is not reachable from it (offline), so it cannot be downloaded. Fetched presets: "
                f"{fetched}; or give a local model folder."
            )
