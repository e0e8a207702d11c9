"""`python -m workbench bench --data F --methods M1,M2`: every method on every task, interleaved per
task, scored by workbench.evaluation.scores.score_task, printed as a table and written as JSON (--out)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.errors import WorkbenchError
from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="run methods over tasks, interleaved, and print a table")
    p.add_argument("--data", required=True,
                   help="a task file (JSON Lines: the project's rows, Spec-Bench's question.jsonl, LongBench or HumanEval rows)")
    p.add_argument("--methods", default="greedy,pld")
    p.add_argument("--categories", help="comma-separated categories (Spec-Bench: summarization,rag,...)")
    p.add_argument("--limit", type=int, help="tasks per category")
    p.add_argument("--out", help="write the JSON results here")
    common.add_exec_args(p)
    common.add_decoding_args(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from core.methods import get_method, parse_method_spec, resolve_params, split_method_list
    from workbench.evaluation.bench import format_table, run_bench
    from workbench.evaluation.tasks import load_tasks

    methods = split_method_list(args.methods)  # variants like aasd[align_graft=1] keep their commas
    if not methods:
        raise WorkbenchError("--methods names no method: pass e.g. --methods greedy,pld")
    given = common.params_from(args)
    for m in methods:  # every method and variant value checked before any model loads
        name, overrides = parse_method_spec(m)
        resolve_params(name, {k: v for k, v in given.items() if k in get_method(name).params} | overrides)
    if args.out:  # a long run must not end in an unwritable --out
        common.check_writable(args.out, "--out")
    scorer = common.task_scorer(args)  # no sandbox for --execute-code fails here, not after the run
    tasks = load_tasks(args.data, categories=args.categories.split(",") if args.categories else None, limit=args.limit)
    if not tasks:
        raise WorkbenchError(f"no tasks selected from {args.data}")
    store = common.open_store(args)
    target, draft = common.load_models(args)
    params = common.params_from(args)
    run_ids: list[int] = []

    def keep(task, run):  # one bulk insert per finished run, outside the timed decoding; in the order of the rows
        run_ids.append(store.save_run(run, tags=["bench", f"task={task.id}", *args.tag]))

    result = run_bench(target, tasks, methods, params, draft=draft, max_new_tokens=args.max_new_tokens, scorer=scorer,
                       on_run=keep if store is not None else None)
    for row, run_id in zip(result["tasks"], run_ids):
        row["run_id"] = run_id
    result["config"] = {"model": target.name, "draft": draft.name if draft else None, "device": str(target.device),
                        "dtype": str(target.dtype).replace("torch.", ""), "data": str(args.data), "tasks": len(tasks),
                        "categories": args.categories, "params": params, "execute_code": args.execute_code}
    print(format_table(result["methods"]))
    if args.out:
        try:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
            print(f"wrote {args.out}", file=sys.stderr)
        except OSError as e:  # keep the results: they took the whole run
            print(json.dumps(result, indent=1))
            print(f"error: could not write {args.out} ({e.strerror or type(e).__name__}); the results are printed above",
                  file=sys.stderr)
            return 2
    if store is not None:
        print(f"stored {len(run_ids)} runs in {store.where} (python -m workbench store list --tag bench)", file=sys.stderr)
    return 0
