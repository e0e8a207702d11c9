"""Running methods over tasks, interleaved per task so machine noise hits every method alike;
results as plain data (the JSON that `bench` writes), scored by workbench.evaluation.scores.score_task
as they run or afterwards from saved outputs (`score_results`), and a checkpoint file that makes long
runs resumable (`run_resumable`: one line per finished run, skipped when the run is repeated)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from core.models import encode_prompt
from core.stats import add_speedups, equal_share, first_divergence, pool, run_metrics, run_totals
from core.suffix import SuffixCorpus
from core.trace import RunTrace
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task, compress_prompt, middle_truncate
from workbench.methods import get_method, parse_method_spec, resolve_params, run_batch, run_method

Scorer = Callable[[Task, str], float | None]  # (task, generated text) -> score ×100, None = absent
STREAM_WINDOW = 4  # batches' worth of tasks a method streams before the next method runs the same tasks


def check_compression(rate: float | None, compressor: str | None, compressor_model: str | None) -> None:
    """--compress / --compressor / --compressor-model checked before any model loads."""
    from core.compress import check_compressor, check_rate

    if rate is not None:
        check_rate(rate)
        check_compressor(compressor)
    elif compressor or compressor_model:
        raise InvalidInputError("--compressor and --compressor-model need --compress RATE")


def load_compressor(rate: float | None, compressor: str | None, compressor_model: str | None, target, **how: Any):
    """The compressor --compress asks for (None without it), scoring with `compressor_model` (loaded with
    `how`: device, dtype, trust_remote_code) or the target itself."""
    if rate is None:
        return None
    from core.compress import make_compressor
    from core.models import load_model

    model = load_model(compressor_model, **how) if compressor_model else target
    return make_compressor(compressor, model)


def check_contexts(tasks: Sequence[Task]) -> None:
    """Before any run: every task must have a context to compress (else nothing would be stored half-done)."""
    from workbench.evaluation.tasks import prompt_parts

    empty = [t.id for t in tasks if not prompt_parts(t)[1].strip()]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise InvalidInputError(
            f"--compress shortens each task's context, but {len(empty)} task(s) have none: {shown} "
            f"(choose tasks with a context, e.g. spec-bench:summarization,rag or LongBench rows)"
        )


def summarise(
    runs: Mapping[str, list[RunTrace]], scores: Mapping[str, list[float | None]] | None = None
) -> dict[str, dict[str, Any]]:
    """Per method: MAL and TPS pooled over tasks (total tokens / total steps or seconds), speed-up vs greedy."""
    out = {}
    for name, rs in runs.items():
        sc = list(scores[name]) if scores and name in scores else [None] * len(rs)
        out[name] = pool([{**run_totals(r), "score": s} for r, s in zip(rs, sc)])
    return add_speedups(out)


def summarise_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The same summary from result rows (run_bench's `tasks`, a checkpoint's lines), per method in order of appearance."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    summary = add_speedups({m: pool(rs) for m, rs in by.items()})
    greedy = {(r.get("category") or "", r["id"]): r.get("token_ids") for r in by.get("greedy", [])}
    for m, rs in by.items():  # fidelity beside every speed-up: greedy's tokens reproduced before the first divergence
        pairs = [
            (greedy[k], r["token_ids"])
            for r in rs
            if (k := (r.get("category") or "", r["id"])) in greedy
            and greedy[k] is not None
            and r.get("token_ids") is not None
        ]
        summary[m]["equal_to_greedy"] = equal_share(pairs)
        flips = [r["flip"] for r in rs if r.get("flip")]
        summary[m]["flips"] = len(flips)
        summary[m]["near_tie_flips"] = sum(f["near_tie"] for f in flips)
    return summary


def task_key(task: Task, method: str) -> tuple[str, str, str]:
    """What identifies one result: the task's category and id, and the method as written (with overrides)."""
    return (task.category or "", task.id, method)


def row_key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return (row.get("category") or "", str(row["id"]), row["method"])


def run_bench(
    target,
    tasks: Sequence[Task],
    methods: Sequence[str],
    params: Mapping[str, Any] | None = None,
    *,
    draft=None,
    max_new_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    scorer: Scorer | None = score_task,
    memories: Mapping[str, Any] | None = None,
    priors: Mapping[str, Any] | None = None,
    skip: Callable[[Task, str], bool] | None = None,
    on_run: Callable[[Task, RunTrace], None] | None = None,
    on_result: Callable[[dict[str, Any], Task, RunTrace], None] | None = None,
    progress: bool = True,
    compress: float | None = None,
    compressor=None,
    batch_size: int = 1,
) -> dict[str, Any]:
    """Run every method on every task (greedy added first when missing) and summarise.

    A method may carry its own overrides, `aasd[align_graft=1]`; its results are keyed by that label.
    Each output is scored by `scorer` (score_task without running code by default; None: no scores).
    Prompts over `max_prompt_tokens` lose their middle (LongBench's truncation). `memories` maps a
    method label to the correction memory it reads (CSD), `priors` to the acceptance prior its max_nodes=auto
    sizer starts from (core.acceptance_prior; e.g. the suffix drafter's stored confidence calibration). `skip(task, label)` leaves a run out (done
    earlier); `on_result(row, task, run)` sees each result row as soon as the run ends.
    With `compress` (a rate in (0, 1]) each task's context is compressed once by `compressor`
    (core.compress) before its methods run; context-drafting methods draft from the full prompt unless
    `pool=compressed`; every row records the rate reached and the compression time.
    With `batch_size` B > 1, B tasks decode at once per method (core.methods.run_batch), a waiting task
    taking a finished row's place, over windows of STREAM_WINDOW * B tasks (each method streams a window
    in turn, so machine noise hits all alike); a row's decode and prefill seconds are its share (by
    tokens) of its window's, so pooled tokens/s counts all rows' tokens over the windows' decode time. Rows stay in task order. Every row that is not greedy's gets
    `first_divergence` from greedy's tokens; a lossless method's divergence gets a `flip` report (the
    target's logit margin there: workbench.evaluation.fidelity).
    """
    methods = list(dict.fromkeys(["greedy", *methods]))
    if compress is not None:
        from core.compress import check_rate

        compress = check_rate(compress)
        if compressor is None:
            raise InvalidInputError("compress needs a compressor (core.compress.make_compressor)")
        check_contexts(tasks)
    names: dict[str, str] = {}
    per_method: dict[str, dict[str, Any]] = {}
    for m in methods:  # fail on an unknown name or a bad value before any model work
        name, overrides = parse_method_spec(m)
        names[m] = name
        per_method[m] = {k: v for k, v in (params or {}).items() if k in get_method(name).params} | overrides
        resolve_params(name, per_method[m])
    lossless = {m: get_method(names[m]).lossless and not float(per_method[m].get("temperature") or 0) for m in methods}
    if batch_size > 1:
        external = [m for m in methods if get_method(names[m]).external is not None]
        if external:
            raise InvalidInputError(
                f"{', '.join(external)} run(s) through transformers' generate, which cannot batch "
                "speculative decoding (transformers#32165): drop them or use --batch-size 1"
            )
        if compress is not None:
            raise InvalidInputError("--compress with --batch-size > 1 is not supported: use --batch-size 1")
    memories = memories or {}
    priors = priors or {}
    todo = [(task, [m for m in methods if skip is None or not skip(task, m)]) for task in tasks]
    pending = {m for _, ms in todo for m in ms}
    warm = encode_prompt(target.tokenizer, "Hello", chat=False) if pending else []
    for m in methods:  # first calls pay for lazy initialisation; keep that out of the timings
        if m in pending:  # (a throwaway suffix corpus: the warm-up's output must not join the model's)
            run_method(
                names[m],
                target,
                warm,
                {**per_method[m], "max_new_tokens": 4},
                draft=draft,
                memory=memories.get(m),
                corpus=SuffixCorpus(),
            )
    from tqdm.auto import tqdm

    total = len(tasks) * len(methods)
    bar = tqdm(
        total=total, initial=total - sum(len(ms) for _, ms in todo), desc="bench", unit="run", disable=not progress
    )
    rows: list[dict[str, Any]] = []
    greedy_ids: dict[tuple[str, str], list[int]] = {}

    def record(task: Task, m: str, run: RunTrace, ids: list[int], full_ids, compression, seconds=None) -> None:
        score = scorer(task, run.output_text) if scorer else None
        met = run_metrics(run)
        row = {
            "id": task.id,
            "category": task.category,
            "method": m,
            "text": run.output_text,
            "token_ids": run.output_ids,
            "score": score,
            "mal": met["mal"],
            "tps": met["tps"],
            "accept_rate": met["accept_rate"],
            **run_totals(run),
        }
        if (
            seconds is not None
        ):  # a batch row: its share of the batch's time, so pooled tokens/s is all rows' tokens over it
            row["decode_seconds"], row["prefill_seconds"] = seconds
            row["tps"] = met["tokens"] / seconds[0] if seconds[0] > 0 else None
            row["batch_size"] = run.params.get("batch_size")
        key = (task.category or "", task.id)
        if m == "greedy":
            greedy_ids[key] = run.output_ids
        elif key in greedy_ids:
            row["first_divergence"] = first_divergence(greedy_ids[key], run.output_ids)
            if lossless[m] and row["first_divergence"] is not None:
                from workbench.evaluation.fidelity import flip_report

                row["flip"] = flip_report(target, ids, greedy_ids[key], run.output_ids)
        if compression is not None:
            row.update(
                prompt_tokens=len(ids),
                full_prompt_tokens=len(full_ids),
                compressor=compression.compressor,
                compress=compression.rate,
                compress_reached=compression.reached,
                compress_seconds=compression.seconds,
                pool=run.params.get("pool"),
            )
        rows.append(row)
        if on_run is not None:
            on_run(task, run)
        if on_result is not None:
            on_result(row, task, run)
        bar.update(1)

    def prompt_of(task: Task):
        text = task.prompt()
        compression, full_ids = None, None
        if compress is not None:  # the pool may hold the whole prompt: no truncation there
            full_ids = encode_prompt(target.tokenizer, text, chat=task.chat)
            text, compression = compress_prompt(task, compressor, compress)
        if max_prompt_tokens:
            text = middle_truncate(text, target.tokenizer, max_prompt_tokens)
        return text, encode_prompt(target.tokenizer, text, chat=task.chat), compression, full_ids

    def params_of(m: str, task: Task) -> dict[str, Any]:
        p = dict(per_method[m])
        limit = max_new_tokens or task.max_new_tokens
        if limit:
            p["max_new_tokens"] = limit
        return p

    if batch_size <= 1:
        for task, task_methods in todo:
            if not task_methods:
                continue
            text, ids, compression, full_ids = prompt_of(task)
            for m in task_methods:
                bar.set_postfix_str(f"{task.id} {m}")  # the run under way (set before it, not after)
                run = run_method(
                    names[m],
                    target,
                    ids,
                    params_of(m, task),
                    draft=draft,
                    prompt_text=text,
                    context=task.context,
                    stop_strings=task.stop,
                    memory=memories.get(m),
                    compression=compression,
                    uncompressed_ids=full_ids,
                    prior=priors.get(m),
                )
                record(task, m, run, ids, full_ids, compression)
    else:
        window = batch_size * STREAM_WINDOW
        for start in range(0, len(todo), window):
            chunk = [(task, ms, *prompt_of(task)) for task, ms in todo[start : start + window] if ms]
            for m in methods:
                members = [c for c in chunk if m in c[1]]
                if not members:
                    continue
                p = [params_of(m, c[0]) for c in members]
                bar.set_postfix_str(f"{m} on {len(members)} items")
                runs = run_batch(
                    names[m],
                    target,
                    [c[3] for c in members],
                    per_method[m],
                    draft=draft,
                    prompt_texts=[c[2] for c in members],
                    row_stop_strings=[c[0].stop for c in members],
                    memory=memories.get(m),
                    max_new_tokens=[x["max_new_tokens"] for x in p],
                    slots=batch_size,
                    prior=priors.get(m),
                )
                tokens = sum(len(r.output_ids) for r in runs) or 1
                batch_decode, batch_prefill = max(r.decode_seconds for r in runs), runs[0].prefill_seconds
                for (task, _, text, ids, compression, full_ids), run in zip(members, runs):
                    share = len(run.output_ids) / tokens
                    record(
                        task, m, run, ids, full_ids, compression, seconds=(batch_decode * share, batch_prefill * share)
                    )
        order = {(t.category or "", t.id): i for i, t in enumerate(tasks)}
        rank = {m: i for i, m in enumerate(methods)}
        rows.sort(key=lambda r: (order[(r.get("category") or "", r["id"])], rank[r["method"]]))
    bar.close()
    return {"methods": summarise_rows(rows), "tasks": rows}


# Student's t quantile t(0.975, df) for df = 1..30 (95 % two-sided); beyond 30 the normal's 1.96 is close enough.
T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean, sample standard deviation and the 95 % interval's half-width (Student's t) of repeated measurements."""
    import statistics

    xs = [v for v in values if v is not None]
    if not xs:
        return {"mean": None, "sd": None, "ci95": None, "n": 0}
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    t = T975[len(xs) - 2] if 1 < len(xs) <= 31 else 1.96
    return {
        "mean": statistics.fmean(xs),
        "sd": sd,
        "ci95": t * sd / len(xs) ** 0.5 if len(xs) > 1 else None,
        "n": len(xs),
    }


def repeat_bench(
    target,
    tasks: Sequence[Task],
    methods: Sequence[str],
    params: Mapping[str, Any] | None = None,
    *,
    repeats: int = 1,
    **bench_args: Any,
) -> dict[str, Any]:
    """run_bench `repeats` times (each pass interleaves the methods per task, so every pass's speed-ups are
    ratios in one run); the summary pools all passes and adds, per method, the spread of tokens/s and
    speed-up over the passes (`tps_spread`, `speedup_spread`: mean, sd, ci95, n). Rows carry `repeat`."""
    if repeats < 1:
        raise InvalidInputError(f"repeats must be at least 1 (got {repeats})")
    passes = [run_bench(target, tasks, methods, params, **bench_args) for _ in range(repeats)]
    rows = [dict(r, repeat=i) for i, p in enumerate(passes) for r in p["tasks"]]
    summary = summarise_rows(rows)
    for m, row in summary.items():
        row["tps_spread"] = spread([p["methods"][m]["tps"] for p in passes if m in p["methods"]])
        row["speedup_spread"] = spread([p["methods"][m]["speedup"] for p in passes if m in p["methods"]])
    return {"methods": summary, "tasks": rows, "repeats": repeats}


def score_results(result: Mapping[str, Any], tasks: Sequence[Task], scorer: Scorer = score_task) -> dict[str, Any]:
    """Saved bench results (`{"methods": ..., "tasks": [rows]}`) scored again from each row's `text`,
    without a model: every row's `score`, and each method's mean `score` and `scored` count, replaced;
    the measured numbers stay as recorded. A row finds its task by (category, id), or by id alone when
    that is unique among `tasks`; rows whose task is missing are an error (wrong --data)."""
    rows = result.get("tasks") if isinstance(result, Mapping) else None
    is_row = lambda r: isinstance(r, Mapping) and {"id", "method"} <= r.keys() and isinstance(r.get("text"), str)  # noqa: E731
    if not isinstance(rows, list) or not all(is_row(r) for r in rows):
        raise InvalidInputError(
            'not bench results: expected {"methods": {...}, "tasks": [{"id", "method", "text", ...}, ...]}'
        )
    by_key = {(t.category or "", t.id): t for t in tasks}
    by_id: dict[str, list[Task]] = {}
    for t in tasks:
        by_id.setdefault(t.id, []).append(t)

    def task_of(row: Mapping[str, Any]) -> Task | None:
        found = by_key.get((row.get("category") or "", str(row["id"])))
        same_id = by_id.get(str(row["id"]), [])
        return found or (same_id[0] if len(same_id) == 1 else None)

    matched = [(row, task_of(row)) for row in rows]
    unmatched = list(dict.fromkeys(str(row["id"]) for row, task in matched if task is None))
    ambiguous = [i for i in unmatched if len(by_id.get(i, [])) > 1]
    missing = [i for i in unmatched if i not in ambiguous]
    if ambiguous:
        raise InvalidInputError(
            f"task id {ambiguous[0]} names {len(by_id[ambiguous[0]])} tasks of the data (categories "
            f"{', '.join(str(t.category) for t in by_id[ambiguous[0]])}) and the result rows do not say which"
        )
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InvalidInputError(
            f"{len(missing)} task id(s) of the results are not in the task data: {shown} "
            f"(score with the task file the results were made from)"
        )
    known: dict[tuple[int, str], float | None] = {}  # lossless methods repeat texts: run HumanEval once per text
    scored = []
    for row, task in matched:
        key = (id(task), row["text"])
        if key not in known:
            known[key] = scorer(task, row["text"])
        scored.append({**row, "score": known[key]})
    methods = {name: dict(entry) for name, entry in (result.get("methods") or {}).items()}
    for name, pooled in summarise_rows(scored).items():
        entry = methods.setdefault(name, pooled)  # rows of a method the summary lacks: summarised afresh
        entry["score"], entry["scored"] = pooled["score"], pooled["scored"]
    return {**result, "methods": methods, "tasks": scored}


class Checkpoint:
    """The results of a long benchmark as JSON Lines: a header with the configuration, then one line
    per finished (task, method), appended and flushed as each run ends. A killed run loses only the
    run in flight; a rerun skips what is done. One writer at a time (an exclusive lock on the file)."""

    VERSION = 1

    def __init__(self, path: str | Path, config: Mapping[str, Any], *, must_match: Sequence[str] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+", encoding="utf-8")
        try:
            self._lock()
            header, self._rows = read_checkpoint(self.path, repair=True)
            if header is None:
                self.config = dict(config)
                self._write({"checkpoint": self.VERSION, "config": self.config})
            else:
                self.config = header.get("config") or {}
                differ = [
                    k for k in (must_match if must_match is not None else config) if self.config.get(k) != config.get(k)
                ]
                if differ:
                    shown = "; ".join(f"{k}: {self.config.get(k)!r} there, {config.get(k)!r} now" for k in differ)
                    raise InvalidInputError(
                        f"{self.path} holds results of another configuration ({shown}); "
                        f"use another --out, or --fresh to start over"
                    )
        except BaseException:
            self._fh.close()
            raise

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # not on POSIX: no lock
            return
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InvalidInputError(
                f"{self.path} is being written by another run; wait for it or use another --out"
            ) from None

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def done(self) -> set[tuple[str, str, str]]:
        return set(self._rows)

    def append(self, row: Mapping[str, Any]) -> None:
        self._write(row)
        self._rows[row_key(row)] = dict(row)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows.values())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_checkpoint(
    path: str | Path, *, repair: bool = False
) -> tuple[dict[str, Any] | None, dict[tuple[str, str, str], dict[str, Any]]]:
    """(header, rows by key) of a checkpoint file; a later line for the same key replaces an earlier one.

    A last line cut short by a kill (no newline, not JSON) is dropped and, with `repair`, cut from the
    file so appends start clean; a bad line elsewhere is an error naming it."""
    path = Path(path)
    if not path.exists():
        return None, {}
    lines = path.read_bytes().split(b"\n")  # the last item is b"" when the file ends with a newline
    header: dict[str, Any] | None = None
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    offset = 0
    for number, line in enumerate(lines, start=1):
        complete = number < len(lines)
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                if complete:
                    raise InvalidInputError(
                        f"{path.name} line {number}: not valid JSON; the checkpoint is damaged "
                        f"(move it aside, or pass --fresh to start over)"
                    ) from None
                if repair:
                    with open(path, "r+b") as fh:
                        fh.truncate(offset)
                break
            if not isinstance(obj, dict):
                raise InvalidInputError(f"{path.name} line {number}: not a checkpoint line")
            if "checkpoint" in obj and header is None and not rows:
                header = obj
            elif "method" in obj and "id" in obj and header is not None:
                rows[row_key(obj)] = obj
            else:
                raise InvalidInputError(f"{path.name} line {number}: not a checkpoint line (is {path} a checkpoint?)")
            if not complete and repair:
                with open(path, "ab") as fh:  # a whole last line whose newline was not written yet
                    fh.write(b"\n")
        offset += len(line) + 1
    return header, rows


def run_resumable(
    target,
    tasks: Sequence[Task],
    methods: Sequence[str],
    checkpoint: Checkpoint,
    params: Mapping[str, Any] | None = None,
    *,
    store_run: Callable[[Task, RunTrace], int | None] | None = None,
    **bench_args: Any,
) -> list[dict[str, Any]]:
    """run_bench over the runs the checkpoint does not hold yet, appending each result as it ends;
    returns the checkpoint's rows for these tasks and methods (the only source of the final tables,
    so an interrupted and resumed run gives the table an uninterrupted one gives).

    `store_run(task, run)` may keep the trace elsewhere (the trace store) and return its id."""
    done = checkpoint.done()

    def finished(row: dict[str, Any], task: Task, run: RunTrace) -> None:
        if store_run is not None:
            row["run_id"] = store_run(task, run)
        checkpoint.append(row)

    run_bench(
        target, tasks, methods, params, skip=lambda t, m: task_key(t, m) in done, on_result=finished, **bench_args
    )
    wanted = {task_key(t, m) for t in tasks for m in dict.fromkeys(["greedy", *methods])}
    return [r for r in checkpoint.rows() if row_key(r) in wanted]


# One line per column under the table: `bash run.sh table` printed e2e_tps, forward_share, ... with no word on them.
COLUMN_MEANINGS = {
    "mal": "mean accepted length: tokens per verification step (accepted draft tokens + 1)",
    "tps": "tokens per second of decoding (wall clock, the prompt's prefill excluded)",
    "e2e_tps": "tokens per second end to end (prefill included)",
    # the wall clock, unlike the app's speed-ups from decoding CPU time (core.stats.CLOCK_PHRASES): a benchmark runs
    # alone on pinned cores, where the two agree
    "speedup": "tps ÷ greedy's tps in the same run: a speed-up from the wall clock (not from decoding CPU time, as "
    "the app's are)",
    "speedup_sd": "standard deviation of the speed-up over the repeats",
    "speedup_ci95": "half-width of the speed-up's 95% interval over the repeats",
    "tps_sd": "standard deviation of tps over the repeats",
    "equal_to_greedy": "share of greedy's tokens each output reproduces before it first differs (1.000: identical)",
    "accept_rate": "accepted draft tokens ÷ drafted tokens",
    "rescued_share": "draft tokens CSD's rescue accepted after verification rejected them ÷ drafted tokens",
    "score": "task score against the reference answers, 0–100 (- when the tasks have none)",
    "step_ms": "mean wall time of one verification step, ms",
    "forward_share": "share of step time spent in the target's forward",
    "draft_ms_per_step": "ms per step building the draft tree",
    "verify_ms_per_step": "ms per step judging the drafted tokens",
    "bookkeeping_ms_per_step": "ms per step on the rest (cache updates, trace records)",
    "tokens": "tokens generated, all tasks together",
}


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """The summary as a Markdown table, one row per method, and under it one line saying what each column is."""
    cols = [
        "mal",
        "tps",
        "e2e_tps",
        "speedup",
        "equal_to_greedy",
        "accept_rate",
        "rescued_share",
        "score",
        "step_ms",
        "forward_share",
        "draft_ms_per_step",
        "verify_ms_per_step",
        "bookkeeping_ms_per_step",
        "tokens",
    ]

    def fmt(v):
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    repeated = any((row.get("speedup_spread") or {}).get("n", 0) > 1 for row in summary.values())
    if repeated:  # repeats: the spread over the passes beside the pooled values
        cols[cols.index("speedup") + 1 : cols.index("speedup") + 1] = ["speedup_sd", "speedup_ci95", "tps_sd"]
    lines = ["| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in summary.items():
        if repeated:
            row = {
                **row,
                "speedup_sd": (row.get("speedup_spread") or {}).get("sd"),
                "speedup_ci95": (row.get("speedup_spread") or {}).get("ci95"),
                "tps_sd": (row.get("tps_spread") or {}).get("sd"),
            }
        lines.append(f"| {name} | " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    lines += ["", *(f"  {c}: {COLUMN_MEANINGS[c]}" for c in cols)]
    return "\n".join(lines)
