"""What the app does, without Gradio: resolve models, run methods with streaming and storing, list runs.

The UI (workbench/ui/) only turns these results into components. Models are loaded once per
(source, device, dtype) by core.models and shared read-only; each loaded model has a semaphore so
at most `per_model` generations use it at once (the rest wait in Gradio's bounded queue).
"""

from __future__ import annotations

import logging
import math
import os
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInputError, WorkbenchError
from core.models import DEFAULT_MODEL, PRESETS, check_pair, encode_prompt, is_fetched, load_model
from core.thresholds import shipped_fit_models
from core.trace import RunTrace, StepTrace
from workbench.evaluation.tasks import Task, load_tasks
from workbench.methods import METHODS, get_method, parse_method_spec, recorded_params, resolve_params, run_method
from workbench.suffix_corpus import corpus_for, record_output

log = logging.getLogger(__name__)
# aasd[auto] (the shipped fitted thresholds, core/fits) where the default model has one; the paper's α, β stay `aasd`.
DEFAULT_METHODS = ("greedy", "aasd[auto]" if DEFAULT_MODEL in shipped_fit_models("aasd") else "aasd", "csd")
# Methods a user can add to the comparison (the reference baselines run through transformers and are
# offered too; beam search is left to the CLI: it has no steps to show).
UI_METHODS = [m for m in METHODS if m != "beam"]
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "samples.jsonl")
MAX_PROMPT_CHARS = 200_000  # a UI guard before tokenising; the model's context length is checked after
# The workbench compares methods token for token, so its models load in float32 unless `serve --dtype` says otherwise:
# in bfloat16 the target's logits tie often enough that strict methods part from greedy's text on the default sample
# (aasd-strict at token 8 of 128 on an Intel Xeon with avx512_bf16, one thread), for a greedy only 5-10 % faster
# there (benchmarks/bench_dtype.py prints both). SmolLM2's shipped fitted thresholds are float32 ones too.
WORKBENCH_DTYPE = "float32"
MAX_METHODS = 4  # methods per comparison: the Compare tab's columns (the API is held to the same number)
# A generation whose consumer has not come back for its next update in this many seconds is cancelled:
# Gradio stops reading a streaming handler when its client disconnects, without closing it.
IDLE_CANCEL_SECONDS = 10.0


HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def is_hub_id(spec: str) -> bool:
    """`owner/name` as the Hugging Face hub spells repository ids (no "..", "--" or a .gguf file name)."""
    return bool(HUB_ID.fullmatch(spec)) and ".." not in spec and "--" not in spec and not spec.lower().endswith(".gguf")


def not_offered(spec: str) -> InvalidInputError:
    """The one answer, in multi-user mode, for a model that is neither a preset nor a hub id: the same whether the
    text names an existing folder, a file, a .gguf or nothing at all, so the box cannot probe the server's disk."""
    return InvalidInputError(
        f"{spec[:80]!r} is not a model this server offers: choose a preset ({', '.join(PRESETS)}) or a Hugging Face hub "
        "id such as HuggingFaceTB/SmolLM2-135M-Instruct (local folders and .gguf files load only when the server is "
        "started with `serve --allow-local-models`)"
    )


def hub_failed(spec: str) -> InvalidInputError:
    """The one answer, in multi-user mode, for a hub id that could not be loaded (whatever the reason, and also for
    an id that happens to name a folder on the server, which is never opened)."""
    return InvalidInputError(
        f"could not load {spec[:80]!r} from the Hugging Face hub: check the repository id and that "
        f"this server can reach the hub; presets here: {', '.join(PRESETS)}"
    )


def check_model_access(spec: str, allow_local: bool) -> None:
    """Refuse, before anything is looked at, a model the server does not offer: with `allow_local` (single-user mode,
    or `serve --allow-local-models`) anything core.models loads; otherwise presets and hub ids only (ModelPool's
    loading then answers a hub id that is also a path here as a hub failure, without opening it)."""
    spec = (spec or "").strip()
    if allow_local or not spec or spec in PRESETS:
        return
    if not is_hub_id(spec):
        raise not_offered(spec)


class Cancelled(WorkbenchError):
    """The generation was stopped (Stop, a closed tab, a client that went away) before it finished."""


def default_model() -> str:
    """The packaged preset when it is fetched; on a Space (or anywhere it is not) the hub copy."""
    return DEFAULT_MODEL if is_fetched(DEFAULT_MODEL) else PRESETS[DEFAULT_MODEL].hub_id


def model_choices() -> list[str]:
    fetched = [name for name in PRESETS if is_fetched(name) and name != "qwen2.5-coder-0.5b"]
    return fetched or [default_model()]


def draft_for(model: str) -> str | None:
    """The draft model a pair preset names (the Qwen coder pair), if any."""
    preset = PRESETS.get(model)
    return preset.draft if preset else None


def sample_tasks(path: str | None = None) -> list[Task]:
    return load_tasks(path or SAMPLES)


@dataclass
class Models:
    target: Any
    draft: Any | None


class ComparisonTurns:
    """Whole comparisons take a model in turns, `per_model` at a time: two comparisons started together ran
    method by method in alternation while the second one's status said it waited for the first. A comparison takes
    its turn before its first method and gives it back when it ends; each method still holds the model's slot
    (ModelPool.slot) while it runs, which a replay's re-run also takes. A comparison whose consumer stopped resuming
    it (a closed tab: its generator may never be closed) loses its turn after `idle` seconds suspended."""

    def __init__(self, per_model: int = 1, idle: float = 10.0):
        self.per_model, self.idle = per_model, idle
        self._holders: dict[str, dict[object, float | None]] = {}  # model -> holder -> suspended since (None: active)
        self._lock = threading.Lock()

    def take(self, model: str, holder: object) -> bool:
        """Take a turn on `model` for `holder` if one is free (or `holder` has it): True when it has it."""
        now = time.monotonic()
        with self._lock:
            held = self._holders.setdefault(model, {})
            for other, since in list(held.items()):
                if since is not None and now - since > self.idle:
                    del held[other]
            if holder in held or len(held) < self.per_model:
                held[holder] = None
                return True
            return False

    def suspended(self, model: str, holder: object, yes: bool) -> None:
        """The holder's generator yields (`yes`) or is resumed: only a suspended holder can lose its turn."""
        with self._lock:
            held = self._holders.get(model, {})
            if holder in held:
                held[holder] = time.monotonic() if yes else None

    def give_back(self, model: str, holder: object) -> None:
        with self._lock:
            self._holders.get(model, {}).pop(holder, None)


class ModelPool:
    """Loads models on first use (core.models caches them) and bounds concurrent use per model."""

    def __init__(
        self,
        device: str = "auto",
        dtype: str = WORKBENCH_DTYPE,
        per_model: int = 1,
        trust_remote_code: bool = False,
        placement=None,
        allow_local: bool = True,
    ):
        self.device, self.dtype, self.per_model, self.trust_remote_code = device, dtype, per_model, trust_remote_code
        # Local folders and .gguf files: the CLI's and a single-user app's; a multi-user app offers presets and hub
        # ids only (check_model_access) unless started with `serve --allow-local-models`. build_app sets it.
        self.allow_local = allow_local
        self.placement = placement  # core.placement.Placement: serve --device-map / --max-memory, for every model
        self._slots: dict[str, threading.Semaphore] = {}
        self._loaded: dict[str, Models] = {}
        self._lock = threading.Lock()
        self.prefill_clock = PrefillClock()
        self.turns = ComparisonTurns(
            per_model, IDLE_CANCEL_SECONDS
        )  # whole comparisons take a model in turns (not method by method)
        self.idle_cancel = IDLE_CANCEL_SECONDS  # see stream_run
        self.busy: dict[str, str] = {}  # model -> what holds its slot when it is not a generation (warm_up)
        self.warm_up_forward = True  # _warm: False only to measure what it saves (benchmarks/bench_first_pass.py)
        self._warmed: set[int] = set()  # ids of the loaded models already run once (core.models caches them)
        self._warm_lock = threading.Lock()

    def loaded(self, model: str) -> Models | None:
        """The model as this pool last loaded it (None before that): no loading, for quick looks at it."""
        with self._lock:
            return self._loaded.get((model or "").strip())

    def load(self, model: str, draft: str | None = None) -> Models:
        model = (model or "").strip()
        if not model:
            raise InvalidInputError("choose a model: a preset name, a local folder or a hub id")
        draft = (draft or "").strip() or None
        for spec in (model, draft):
            check_model_access(spec, self.allow_local)
        how = {
            "device": self.device,
            "dtype": self.dtype,
            "trust_remote_code": self.trust_remote_code,
            "placement": self.placement,
        }
        target = self._load(model, how)
        d = None
        if draft:
            d = self._load(draft, how)
            check_pair(target, d)
        for loaded in (target, d):
            self._warm(loaded)
        with self._lock:
            self._loaded[model] = Models(target, None)
        return Models(target, d)

    def _warm(self, model) -> None:
        """Run a model once, untimed, the first time this pool hands it out (core.methods.warm_up), so a process's
        one-off first-forward costs do not land on the first timed run (greedy's: a comparison runs it first).
        A second request loading the same model meanwhile waits here until the warm-up is done."""
        if model is None or not self.warm_up_forward:
            return
        with self._warm_lock:
            if id(model) in self._warmed:
                return
            from core import methods

            try:
                runs = methods.warm_up(model)
                self.prefill_clock.observe(model, timed_prefill(model, runs[0].prompt_ids), warm_up=True)
            except Exception as e:  # an optimisation only: the comparison's own run reports what is wrong
                log.warning("warm-up forward of %s skipped: %s: %s", getattr(model, "name", model), type(e).__name__, e)
            self._warmed.add(id(model))

    def _load(self, spec: str, how: dict):
        if self.allow_local or spec in PRESETS:
            return load_model(spec, **how)
        # A hub id: one answer however it failed (core.models' own words may describe the server), and the same for
        # an id that also names a path here, which core.models would open instead of asking the hub.
        if os.path.lexists(spec):
            raise hub_failed(spec)
        try:
            return load_model(spec, **how)
        except WorkbenchError:
            raise hub_failed(spec) from None

    def warm_up(self, model: str) -> threading.Thread:
        """Load `model` and measure its t(n, L) on this machine (core.timing) in a background thread, holding one of
        its slots, so a first comparison does not spend its first minute measuring (`serve` does this for the default
        model while the page opens). A comparison that comes meanwhile waits, and `busy` says for what."""

        def work():
            from core import timing

            try:
                target = self.load(model).target
                if cached_curve(target) is not None:
                    return
                with self.slot(model):
                    self.busy[model] = "measuring how long a forward over a draft tree takes on this machine (once)"
                    timing.cost_model(target)
            except WorkbenchError as e:  # the first comparison measures it, or says what is wrong
                log.warning("warm-up of %s skipped: %s", model, e)
            finally:
                self.busy.pop(model, None)

        thread = threading.Thread(target=work, name=f"warm-up {model}", daemon=True)
        thread.start()
        return thread

    def wait_idle(self, timeout: float = 600.0) -> bool:
        """Wait until no thread is inside a model of this pool: a first-use warm-up forward (_warm) or a generation
        holding a slot. False when `timeout` seconds per slot were not enough. For a clean shutdown: a thread still
        in torch when the interpreter exits aborts it ("terminate called without an active exception", status 134)."""
        with self._warm_lock:
            pass
        with self._lock:
            slots = list(self._slots.values())
        for sem in slots:
            taken = 0
            for _ in range(self.per_model):
                if not sem.acquire(timeout=timeout):
                    break
                taken += 1
            for _ in range(taken):
                sem.release()
            if taken < self.per_model:
                return False
        return True

    @contextmanager
    def slot(self, model: str, should_stop=None, poll: float = 0.2):
        """Hold one of `model`'s generation slots; waiting ends with Cancelled once `should_stop()` is true."""
        with self._lock:
            sem = self._slots.setdefault(model, threading.Semaphore(self.per_model))
        while not sem.acquire(timeout=poll):
            if should_stop is not None and should_stop():
                raise Cancelled("cancelled while waiting for the model")
        try:
            yield
        finally:
            sem.release()


def check_methods(
    names: Sequence[str], model: str, draft: str | None, limit: int = MAX_METHODS
) -> list[tuple[str, dict[str, str]]]:
    """Parse the chosen methods and refuse combinations that cannot run, before any model loads."""
    if not names:
        raise InvalidInputError("choose at least one method")
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise InvalidInputError("methods must be a list of method names")
    if len(names) > limit:
        raise InvalidInputError(
            f"{len(names)} methods chosen; a comparison runs at most {limit}: "
            f"remove {len(names) - limit} (run the others in a second comparison)"
        )
    specs = [parse_method_spec(n) for n in names]
    seen: dict[tuple, str] = {}
    for text, (name, params) in zip(names, specs):
        key = (name, tuple(sorted(params.items())))
        if key in seen:  # two columns of one method: two "1.00×" greedy rows, and no saying which one is the reference
            first = seen[key].strip()
            written = f" (as {first!r} before it)" if first != text.strip() else ""
            raise InvalidInputError(
                f"{text.strip()!r} is chosen twice{written}: a comparison runs each method once; remove one "
                "(set Repeats to run every method several times, interleaved)"
            )
        seen[key] = text
    for name, _ in specs:
        method = get_method(name)
        pair = draft_for(model)
        if not draft and (method.needs_draft or (name in ("csd", "sd-memory-only") and pair)):
            hint = (
                f" (for this preset: {pair}; fetch it with `python -m workbench models fetch {pair}`)" if pair else ""
            )
            raise InvalidInputError(f"method {name!r} needs a draft model: fill in the draft model field{hint}")
    return specs


def build_prompt(tokenizer, prompt: str, context: str | None, chat: bool = True) -> tuple[str, list[int]]:
    prompt, context = (prompt or "").strip(), (context or "").strip() or None
    if not prompt and not context:
        raise InvalidInputError("the prompt is empty: type a question or instruction (and optionally a context)")
    text = f"{context}\n\n{prompt}" if context else prompt
    if len(text) > MAX_PROMPT_CHARS:
        raise InvalidInputError(
            f"the prompt and context are {len(text):,} characters; the limit here is {MAX_PROMPT_CHARS:,}. Shorten the context."
        )
    return text, encode_prompt(tokenizer, text, chat=None if chat else False)


def model_key(target) -> tuple[str, str, str]:
    return (str(target.name), str(target.device), str(target.dtype))


MIN_SCALED_READ = 128  # prompt tokens a prefill needs before PrefillClock scales other lengths from it
READS_KEPT = 8  # the latest whole prefills PrefillClock combines per model (besides the warm-up's)
SHORT_READ = 1024  # prompt tokens up to which a read's time beyond the rate is the fixed cost of a read now


class PrefillClock:
    """How long reading a prompt takes on this server, per loaded model: one function of the prompt's length,
    monotone in it. Its shape comes from the model's cost model t(n, L) measured here (reading costs more per token
    as the prompt grows: core.timing's per-node slope at the cache length each prefill chunk reads at,
    prefill_shape), else a rate per token. A read's time is that shape times a rate, plus what else held the core
    while it ran (a page being drawn, another request), which a short read cannot tell apart from its rate: the
    thirteenth fresh pass saw a 221-token read take 1.3 s, then 1.9 s (the warm-up's 256 tokens: 0.7 s), and the
    latest read alone, scaled up, priced a 7,041-token prompt at 90 s, then 2.1 min; it read in 60 s. So the rate is
    combined from this server's latest whole reads of at least MIN_SCALED_READ tokens and the warm-up's timed read
    (an idle one), each weighted by its work in the shape's units (a long read outweighs short ones, and its time
    averages the load over the whole read), at the weighted lower third (a busy core makes reads slower, never
    faster); what the latest short read (SHORT_READ) took beyond that rate is added as a fixed cost, not scaled.
    With no read yet the shape alone is said to be an underestimate."""

    def __init__(self):
        self._reads: dict[tuple[str, str, str], deque[tuple[int, float]]] = {}  # model -> its latest reads (tokens, s)
        self._warm_up: dict[tuple[str, str, str], tuple[int, float]] = {}  # model -> the warm-up's timed read
        self._lock = threading.Lock()

    def observe(self, target, run: RunTrace, warm_up: bool = False) -> None:
        n = len(run.prompt_ids)
        # A very short read is all fixed overhead: scaled up to thousands of tokens a 66-token read priced a
        # 4,383-token prompt at 97 s that read in 31 s, so reads below MIN_SCALED_READ tokens are not kept.
        if n >= MIN_SCALED_READ and run.prefill_seconds > 0 and prefill_completed(run):
            key = model_key(target)
            with self._lock:
                if warm_up:
                    self._warm_up[key] = (n, run.prefill_seconds)
                else:
                    self._reads.setdefault(key, deque(maxlen=READS_KEPT)).append((n, run.prefill_seconds))

    def estimate(self, target, tokens: int) -> tuple[float, str] | None:
        """(seconds, what it is based on) for a prompt of `tokens`, or None with nothing to go on."""
        key = model_key(target)
        with self._lock:
            reads, warm = list(self._reads.get(key, ())), self._warm_up.get(key)
        model = cost_model(target)
        if not reads and not warm:
            if model is None:
                return None
            return prefill_shape(model, tokens), "the model's measured cost curve; a first prefill takes longer"

        def shape(n: int) -> float:
            return float(n) if model is None else prefill_shape(model, n)

        rate = read_rate([(n, seconds, shape(n)) for n, seconds in reads + ([warm] if warm else [])])
        if not reads:
            assert warm is not None
            return rate * shape(tokens), (
                f"this server's warm-up prefill of a {warm[0]:,}-token prompt, scaled to this length; an idle read: "
                "while other work shares the CPU it takes longer"
            )
        n, seconds = reads[-1]
        longest = max(m for m, _ in reads + ([warm] if warm else []))
        source = f"this server's latest prefill (a {n:,}-token prompt in {seconds:.1f} s), scaled to this length"
        if len(reads) > 1 or warm:
            source = (
                f"the rate of this server's {len(reads) + bool(warm)} kept prefills (up to {longest:,} tokens; the "
                f"latest a {n:,}-token prompt in {seconds:.1f} s), scaled to this length"
            )
        # What the latest short read took beyond the rate is paid by every read now (a page drawn on the same core
        # during a comparison: the eighth pass's 221-token reads took 1.35-1.77 s beside an idle 0.3 s), added as
        # seconds; a long read's excess is load spread over its work, which the rate already weighs (the fourteenth
        # pass: after a 3,818-token read of 33 s, that excess added to a 190-token prompt priced it at 3.7 s)
        short = [(m, t) for m, t in reads if m <= SHORT_READ]
        fixed = max(short[-1][1] - rate * shape(short[-1][0]), 0.0) if short else 0.0
        return rate * shape(tokens) + fixed, source

    def idle_estimate(self, target, tokens: int) -> float | None:
        """The time to read `tokens` at the fastest rate any kept read (or the warm-up's) was read at: what the read
        takes with the core to itself, the low end of a range whose high end is `estimate` (the load recent reads
        saw). The sixteenth fresh pass: reads made while the page was drawing priced a 6,709-token prompt at 82 s; it
        read in about 50 s. None with no read yet."""
        key = model_key(target)
        with self._lock:
            reads = list(self._reads.get(key, ())) + ([self._warm_up[key]] if key in self._warm_up else [])
        if not reads:
            return None
        model = cost_model(target)

        def shape(n: int) -> float:
            return float(n) if model is None else prefill_shape(model, n)

        return min(seconds / shape(n) for n, seconds in reads) * shape(tokens)


def read_rate(reads: Sequence[tuple[int, float, float]]) -> float:
    """Seconds per unit of prefill shape from (tokens, seconds, shape) reads: the weighted lower third of their
    rates, each weighted by its shape (its work): the rate the faster third of the work was read at."""
    ordered = sorted((seconds / work, work) for _, seconds, work in reads)
    third, total = sum(work for _, work in ordered) / 3, 0.0
    for rate, work in ordered:
        total += work
        if total >= third:
            return rate
    return ordered[-1][0]


def prefill_completed(run: RunTrace) -> bool:
    """Whether `run` read its whole prompt, so its prefill_seconds is a whole read's price: a complete run did, and so
    did any run that took a step (decoding starts after the prefill). A run Stopped with no step may have been cut
    mid-prompt: its prefill_seconds is a part of a read, priced as the whole it would halve the estimate."""
    return run.status == "complete" or bool(run.steps)


CALIBRATION_PROMPT = 256  # tokens of the prefill ModelPool's warm-up times, so a first estimate has a prefill to scale


def timed_prefill(target, ids: Sequence[int], tokens: int = CALIBRATION_PROMPT) -> RunTrace:
    """A greedy run of one token on `ids` repeated to `tokens` tokens, timed as any run is: its prefill_seconds is
    this server's measured price of reading a prompt that long (after warm-up, so without first-forward costs).
    The cost curve alone prices a prefill 2-2.5x low (a causal prefill forward costs more per token than a tree's
    slope), so PrefillClock's first estimate scales this one instead."""
    from core import methods

    ids = list(ids) or [0]
    prompt = (ids * (tokens // len(ids) + 1))[:tokens]
    return methods.run_method("greedy", target, prompt, {"max_new_tokens": 1})


def prefill_shape(model, tokens: int) -> float:
    """The cost model's price of reading `tokens` prompt tokens in prefill chunks: each chunk's tokens at the
    per-node slope of t(n, L) at the chunk's middle (L: the tokens before it plus half the chunk)."""
    from core.cache import PREFILL_CHUNK

    top = model.sizes[-1]
    total = 0.0
    for start in range(0, tokens, PREFILL_CHUNK):
        width = min(tokens, start + PREFILL_CHUNK) - start
        middle = start + width / 2
        total += width * max(model(top, middle) - model(0, middle), 1e-9) / top
    return total


def cost_model(target):
    """The model's t(n, L) (a core.cost_model.CostModel) when core.timing has measured it on this machine (saved in
    the home), else None."""
    from core import timing

    try:
        # a disturbed measurement too: it is what the sizer uses in this process, and the speed note says so
        return timing.load(timing.timing_path(target), timing.machine_signature(target), disturbed_ok=True)
    except (AttributeError, TypeError):  # a model without a fingerprint or device (a test stand-in)
        return None


def cached_curve(target, length: int | None = None):
    """The model's t(n) after `length` cached tokens (core.timing.CURVE_LENGTH when None), a core.sizing.CostCurve,
    when core.timing has measured t(n, L) on this machine (saved in the home), else None."""
    from core import timing
    from core.sizing import CostCurve

    model = cost_model(target)
    return None if model is None else CostCurve(*model.curve_at(timing.CURVE_LENGTH if length is None else length))


REFERENCE_TREE = 16  # draft nodes of the tree the speed note prices first (a typical AASD tree before sizing)


def disturbed(target) -> str:
    """A few words when the model's saved cost curve was measured while other work took the cores (its times
    disagree with each other: core.cost_model.disorder), "" otherwise."""
    from core import timing
    from core.cost_model import DISTURBED

    d = timing.saved_disorder(target)
    if d is None or d <= DISTURBED:
        return ""
    return (
        f"; measured while other work took the cores, so its times disagree with each other by up to {d:.1f}×: this "
        "figure, the estimates below and the trees sized from it may be off, and the app measures it again at its "
        "next start"
    )


NO_TREE = 0.05  # draft nodes per step below which a method's speed note says it drafted nothing


def speed_note(
    target,
    tree_sizes: Mapping[str, float],
    mals: Mapping[str, float],
    length: int | None = None,
    measured: Mapping[str, float] | None = None,
    measured_passes: int = 1,
) -> str | None:
    """One line under the speed-ups: an estimate of them from what a verification forward over a tree costs here,
    t(n)/t(0) from the model's measured cost curve (core.timing), for a 16-node tree and for the trees each method
    drafted, and each method's MAL: MAL ÷ t(n)/t(0) counts the forwards only, so drafting pulls a measurement
    below it and greedy's per-token Python work (a decoding step's bookkeeping and its recorded trace, which a
    method pays once per step) pushes one above it, systematically; one pass on a busy machine lands either side.
    No cost paid per step lifts a speed-up above the MAL itself (a method's step costs at least greedy's), so one
    above it means greedy's forwards ran slower than the method's: other work shared the CPU during greedy's pass.
    Against a GPU, where a forward over a few dozen tokens costs about as much as over one, the speed-up approaches
    the MAL. The curve is read at `length` cached tokens (the prompt's). `measured` (method -> mean speed-up over
    `measured_passes` passes) flags a speed-up above the method's MAL (with 5 % slack).
    None before the curve is measured."""
    curve = cached_curve(target, length)
    if curve is None:
        return None
    where = "CPU" if getattr(target.device, "type", str(target.device)) == "cpu" else str(target.device)
    parts = [
        f"a forward that verifies {REFERENCE_TREE} draft tokens takes {curve(REFERENCE_TREE) / curve(0):.1f}× as "
        f"long as a greedy step here (t({REFERENCE_TREE})/t(0), from the model's measured cost curve{disturbed(target)})"
    ]
    noisy = []
    for method, n in tree_sizes.items():
        mal = mals.get(method)
        if not mal or get_method(parse_method_spec(method)[0]).drafter == "none":  # greedy drafts nothing by design
            continue
        if measured and measured.get(method, 0.0) > mal * 1.05:
            noisy.append(f"{method} measured {measured[method]:.2f}× with MAL {mal:.2f}")
        if n < NO_TREE:
            parts.append(f"{method} drafted nothing (larger trees cost more here than they were expected to gain)")
            continue
        # Under one node a step is a small tree, not "almost nothing": one copied token a step nearly doubled the
        # tokens per forward in the twenty-second pass (MAL 1.88 from trees of 0.96 nodes)
        size = f"{n:.1f}" if n < 2 else f"{n:.0f}"  # never "1 nodes": below 2 with a decimal
        why = " (larger ones cost more here than they were expected to gain)" if n < 1 else ""
        ratio = curve(n) / curve(0)
        parts.append(
            f"{method}: trees of {size} nodes on average{why} take {ratio:.1f}× a greedy "
            f"step, MAL {mal:.2f} → an estimated ≈ {mal / ratio:.2f}× greedy"
        )
    warning = (
        " A speed-up above its MAL is not the method's: no per-step cost makes a method's step cheaper than greedy's,"
        " so other work slowed the greedy pass ("
        + "; ".join(noisy)
        + "): another program on these cores, or a browser drawing this page on the same core (greedy runs first,"
        " while the page redraws for the new comparison)"
        + (
            "; run with Repeats for intervals."
            if not (measured_passes and measured_passes > 1)
            else "; see the intervals above."
        )
        if noisy
        else ""
    )
    return (
        f"Estimated speed-ups on this {where}, from the forwards' measured cost and each method's MAL (tokens "
        "written per target forward): "
        + "; ".join(parts)
        + ". An estimate, not a limit: it counts the forwards only, so time spent drafting pulls a measured "
        "speed-up below it, while greedy's per-token Python work (a decoding step's bookkeeping and its recorded "
        "trace for every token, which a method pays once per step of several tokens) pushes one above it, "
        "systematically; a single pass on a busy machine varies either way. On a GPU a forward over a few dozen "
        "tokens costs about as much as over one (t(n)/t(0) ≈ 1), so the same runs would approach their MAL." + warning
    )


_COMPRESSORS: dict[tuple[str, str, str], Any] = {}  # (compressor, model path, dtype): llmlingua loads its own copy once
_COMPRESSORS_LOCK = threading.Lock()


def compress_context(
    target, prompt: str, context: str | None, rate: Any, compressor: str | None = None, chat: bool = True
) -> tuple[str, list[int], Any, list[int]]:
    """The prompt with its context compressed to `rate` (core.compress; the prompt itself stays whole):
    (text, ids, the Compression, the uncompressed prompt's ids for the full-context pool)."""
    from core.compress import check_compressor, check_rate, make_compressor

    rate, name = check_rate(rate), check_compressor(compressor)
    prompt, context = (prompt or "").strip(), (context or "").strip()
    if not context:
        raise InvalidInputError(
            "compression shortens the context, and the context is empty: fill in the context box "
            "(or leave the compression rate empty)"
        )
    full_text, full_ids = build_prompt(target.tokenizer, prompt, context, chat)
    key = (name, str(getattr(target, "path", target.name)), str(target.dtype))
    with _COMPRESSORS_LOCK:
        comp = _COMPRESSORS.get(key)
        if comp is None:
            comp = _COMPRESSORS[key] = make_compressor(name, target)
    done = comp.compress(context, rate)
    text = f"{done.text}\n\n{prompt}" if prompt else done.text
    return text, encode_prompt(target.tokenizer, text, chat=None if chat else False), done, full_ids


def method_params(name: str, values: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The UI's parameter values that this method takes, validated (ranges are checked here)."""
    allowed = get_method(name).params
    chosen = {k: v for k, v in values.items() if k in allowed and v is not None}
    chosen.update(overrides or {})
    for k, v in chosen.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidInputError(f"{k} must be a finite number, got {v}")
    resolve_params(name, chosen)  # raises a readable InvalidInputError on a bad value
    return chosen


@dataclass
class Progress:
    method: str
    steps: list[StepTrace]
    run: RunTrace | None = None  # set when the run has finished (or failed or was cancelled)
    run_id: int | None = None
    error: str | None = None
    prefill: tuple[int, int] | None = None  # (prompt tokens read, of) while the prompt is being read
    stopping: bool = False  # Stop was asked for: the run ends at its next step or prompt chunk
    waiting: bool = False  # the run waits for the model's slot (another generation holds it): nothing read yet

    @property
    def tokens(self) -> int:
        """Tokens emitted so far."""
        return sum(len(s.emitted) for s in self.steps)


STOP_POLL = 0.25  # seconds between stream_run's looks at the stop flag while the worker is silent (a prompt chunk)
# Seconds between two progress updates of a decoding run, the same for every method: each update costs the page
# (a browser on the same core) a re-render, so updates paced per step would make the fastest method pay the most.
UPDATE_EVERY = 0.5


def stream_run(
    method: str,
    models: Models,
    prompt_ids: list[int],
    params: Mapping[str, Any],
    *,
    prompt_text: str,
    context: str | None = None,
    store=None,
    tags: Sequence[str] = (),
    stop: threading.Event | None = None,
    every: float | None = None,
    slot=None,
    idle_cancel: float | None = IDLE_CANCEL_SECONDS,
    compression=None,
    uncompressed_ids: Sequence[int] | None = None,
) -> Iterator[Progress]:
    """Run one method in a worker thread and yield its progress at most every `every` seconds (UPDATE_EVERY when
    None); while the prompt
    is read, once when the worker starts and once per prefill chunk (Progress.prefill = (tokens read, of)).

    The run is recorded in `store` as it goes (a cancelled or failed run stays there, marked so).
    Setting `stop`, closing this generator, or leaving it suspended at a yield for more than
    `idle_cancel` seconds (a client that went away) cancels the run at its next step or prompt chunk. `slot`, when
    given, is called with the stop test and returns the context manager (ModelPool.slot) the worker
    holds while it decodes, so a cancelled run gives its slot back even if this generator is never resumed.
    `compression` and `uncompressed_ids` (compress_context) are passed to run_method: a compressed prompt,
    recorded as such, with context-drafting methods drafting from the full prompt unless pool=compressed.
    """
    stop = stop or threading.Event()
    every = UPDATE_EVERY if every is None else every
    suspended: list[float | None] = [None]  # when this generator last yielded and was not resumed yet

    def should_stop() -> bool:
        since = suspended[0]
        if idle_cancel is not None and since is not None and time.monotonic() - since > idle_cancel:
            stop.set()
        return stop.is_set()

    steps: list[StepTrace] = []
    events: queue.Queue = queue.Queue()
    target, draft = models.target, models.draft
    header_params = recorded_params(method, target, params, compression)  # what the run decodes with, fit included
    header = RunTrace(
        method=method,
        params=header_params,
        model=target.name,
        draft_model=draft.name if draft else None,
        device=str(target.device),
        dtype=str(target.dtype).replace("torch.", ""),
        prompt=prompt_text,
        prompt_ids=list(prompt_ids),
        context=context,
        model_fingerprint=target.fingerprint,
        draft_fingerprint=draft.fingerprint if draft else None,
    )

    def work():
        from contextlib import nullcontext

        try:
            with slot(should_stop) if slot is not None else nullcontext():
                events.put(("start", None))  # the slot is ours: this method is the one running now
                if (
                    store is not None
                ):  # the model's suffix corpus, from the store on its first run (workbench.suffix_corpus)
                    corpus_for(store, target.fingerprint)
                rec = store.recording(header, tags=tags) if store is not None else nullcontext()
                with rec:

                    def on_step(step):
                        if store is not None:
                            rec.add_step(step)
                        events.put(("step", step))

                    run = run_method(
                        method,
                        target,
                        prompt_ids,
                        params,
                        draft=draft,
                        prompt_text=prompt_text,
                        context=context,
                        on_step=on_step,
                        should_stop=should_stop,
                        compression=compression,
                        uncompressed_ids=uncompressed_ids,
                        on_prefill=lambda done, total: events.put(("prefill", (done, total))),
                    )
                    if store is not None:
                        rec.finish(run)
                        record_output(run, rec.run_id, store)
            events.put(("done", (run, rec.run_id if store is not None else None)))
        except WorkbenchError as e:
            events.put(("error", str(e)))
        except Exception as e:  # keep serving: the message goes to the column
            events.put(("error", f"{type(e).__name__}: {e}"))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    last, started, told, told_waiting = 0.0, False, False, False
    try:
        while True:
            try:
                batch = [events.get(timeout=STOP_POLL)]
            except queue.Empty:
                # Stop during a prompt chunk (seconds each) or a slow step: say "stopping" now, from here, rather than
                # at the chunk's end (the Stop handler cannot write the status: it would race this stream's updates)
                if started and stop.is_set() and not told:
                    told = True
                    suspended[0] = time.monotonic()
                    yield Progress(method, list(steps), stopping=True)  # no prefill: no prompt chunk was read
                    suspended[0] = None
                elif not started and not told_waiting:  # the slot is someone else's: say so, not "reading"
                    told_waiting = True
                    suspended[0] = time.monotonic()
                    yield Progress(method, [], waiting=True)
                    suspended[0] = None
                continue
            # Everything the worker reported while this generator was suspended at its last yield goes into the next
            # update: taking one step per update fell behind whenever the consumer took longer than a step (a page
            # on a shared core), so the page showed a stale count for seconds and then jumped.
            while True:
                try:
                    batch.append(events.get_nowait())
                except queue.Empty:
                    break
            stepped = False
            for kind, item in batch:
                if kind == "step":
                    steps.append(item)
                    stepped = True
                elif kind in ("start", "prefill"):  # the slot is ours, or a prompt chunk was read (seconds each)
                    started = True
                    suspended[0] = time.monotonic()
                    yield Progress(
                        method, [], prefill=(0, len(prompt_ids)) if kind == "start" else item, stopping=stop.is_set()
                    )
                    suspended[0] = None
                elif kind == "done":
                    run, run_id = item
                    yield Progress(method, run.steps or list(steps), run=run, run_id=run_id)
                    return
                else:
                    yield Progress(method, list(steps), error=item)
                    return
            # At most one update per `every` seconds, counted from when the consumer came back for more: the
            # consumer's own time (rendering the page) is not decoding time to be filled with more updates.
            if stepped and time.monotonic() - last >= every:
                suspended[0] = time.monotonic()
                yield Progress(method, list(steps), stopping=stop.is_set())
                suspended[0] = None
                last = time.monotonic()
    finally:  # the consumer went away (Stop, closed tab): end the worker's run too
        stop.set()
