"""Running methods over tasks, interleaved per task so machine noise hits every method alike;
results as plain data (the JSON that `bench` writes)."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.methods import get_method, parse_method_spec, resolve_params, run_method
from core.models import encode_prompt
from core.tasks import Task
from core.trace import RunTrace


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def summarise(runs: Mapping[str, list[RunTrace]], scores: Mapping[str, list[float | None]] | None = None) -> dict[str, dict[str, Any]]:
    """Per method: MAL and TPS pooled over tasks (total tokens / total steps or seconds), speed-up vs greedy."""
    out: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        ms = [r.metrics() for r in rs]
        steps = sum(m["steps"] for m in ms)
        decoded = sum(m["mal"] * m["steps"] for m in ms if m["mal"] is not None)
        seconds = sum(r.decode_seconds for r in rs)
        drafted, accepted = sum(m["drafted"] for m in ms), sum(m["accepted"] for m in ms)
        step_count = sum(len(r.steps) for r in rs)
        out[name] = {
            "mal": decoded / steps if steps else None,
            "tps": decoded / seconds if seconds else None,
            "speedup": None,
            "accept_rate": accepted / drafted if drafted else None,
            "score": _mean(list(scores[name])) if scores and name in scores else None,
            "draft_ms_per_step": sum(s.draft_ms for r in rs for s in r.steps) / step_count if step_count else None,
            "verify_ms_per_step": sum(s.verify_ms for r in rs for s in r.steps) / step_count if step_count else None,
            "bookkeeping_ms_per_step": sum(s.bookkeeping_ms for r in rs for s in r.steps) / step_count if step_count else None,
            "step_ms": sum(s.step_ms for r in rs for s in r.steps) / step_count if step_count else None,
            "forward_share": (sum(s.forward_ms for r in rs for s in r.steps) / sum(s.step_ms for r in rs for s in r.steps)) if step_count else None,
            "tokens": sum(m["tokens"] for m in ms),
            "e2e_tps": sum(m["tokens"] for m in ms) / sum(r.decode_seconds + r.prefill_seconds for r in rs) if rs else None,
        }
    base = out.get("greedy", {}).get("tps")
    for row in out.values():
        row["speedup"] = row["tps"] / base if base and row["tps"] else None
    return out


def run_bench(
    target,
    tasks: Sequence[Task],
    methods: Sequence[str],
    params: Mapping[str, Any] | None = None,
    *,
    draft=None,
    max_new_tokens: int | None = None,
    scorer: Callable[[Task, str], float | None] | None = None,
    on_run: Callable[[Task, RunTrace], None] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every method on every task (greedy added first when missing) and summarise.

    A method may carry its own overrides, `aasd[align_graft=1]`; its results are keyed by that label.
    """
    methods = list(dict.fromkeys(["greedy", *methods]))
    names: dict[str, str] = {}
    per_method: dict[str, dict[str, Any]] = {}
    for m in methods:  # fail on an unknown name or a bad value before any model work
        name, overrides = parse_method_spec(m)
        names[m] = name
        per_method[m] = {k: v for k, v in (params or {}).items() if k in get_method(name).params} | overrides
        resolve_params(name, per_method[m])
    runs: dict[str, list[RunTrace]] = {m: [] for m in methods}
    scores: dict[str, list[float | None]] = {m: [] for m in methods}
    rows: list[dict[str, Any]] = []
    warm = encode_prompt(target.tokenizer, "Hello", chat=False)
    for m in methods:  # first calls pay for lazy initialisation; keep that out of the timings
        run_method(names[m], target, warm, {**per_method[m], "max_new_tokens": 4}, draft=draft)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(tasks) * len(methods), desc="bench", unit="run", disable=not progress)
    for task in tasks:
        ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
        for m in methods:
            p = dict(per_method[m])
            limit = max_new_tokens or task.max_new_tokens
            if limit:
                p["max_new_tokens"] = limit
            run = run_method(names[m], target, ids, p, draft=draft, prompt_text=task.prompt(), context=task.context)
            score = scorer(task, run.output_text) if scorer and task.answers else None
            runs[m].append(run)
            scores[m].append(score)
            met = run.metrics()
            rows.append({"id": task.id, "category": task.category, "method": m, "text": run.output_text, "token_ids": run.output_ids,
                         "score": score, "mal": met["mal"], "tps": met["tps"], "steps": met["steps"]})
            if on_run is not None:
                on_run(task, run)
            bar.update(1)
            bar.set_postfix_str(f"{task.id} {m}")
    bar.close()
    return {"methods": summarise(runs, scores), "tasks": rows}


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    cols = ["mal", "tps", "speedup", "accept_rate", "score", "step_ms", "forward_share", "draft_ms_per_step",
            "verify_ms_per_step", "bookkeeping_ms_per_step", "tokens"]
    def fmt(v):
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    lines = ["| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in summary.items():
        lines.append(f"| {name} | " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(lines)
