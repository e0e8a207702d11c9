"""`python -m workbench store list|show|export|import|delete|compare`: the stored runs."""

from __future__ import annotations

import argparse
import json

from core.errors import WorkbenchError
from core.token_text import spoken_reason, texts_by_id, visible_token
from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    store = subparsers.add_parser("store", help="list, show, export, import, delete or compare stored runs")
    actions = store.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="stored runs, newest first")
    ls.add_argument("--method")
    ls.add_argument("--model", help="target or draft model id")
    ls.add_argument("--tag")
    ls.add_argument("--status", choices=["running", "complete", "failed", "cancelled"])
    ls.add_argument("--since", type=_when, help="created at or after (UTC, YYYY-MM-DD[THH:MM])")
    ls.add_argument("--until", type=_when, help="created before (UTC)")
    ls.add_argument("--limit", type=common.integer("limit", 1, 10**9), default=50)
    ls.add_argument("--json", action="store_true")
    show = actions.add_parser("show", help="one run (or one step's tree with --step)")
    show.add_argument("id", type=common.RUN_ID)
    show.add_argument("--step", type=common.integer("step", 0))
    show.add_argument("--json", action="store_true")
    export = actions.add_parser(
        "export",
        help="write runs.csv, steps.csv and nodes.csv, or OpenInference spans "
        "(JSON Lines, or live over OTLP to Phoenix or a collector)",
    )
    export.add_argument("--run", type=common.RUN_ID, action="append", help="run id (repeatable)")
    export.add_argument("--all", action="store_true", help="every run in the store")
    export.add_argument(
        "--format",
        default="csv",
        choices=["csv", "openinference"],
        help="csv: a folder of runs.csv, steps.csv, nodes.csv (what `store import` reads); "
        "openinference: one LLM span per run and one child span per step (docs/OPENINFERENCE.md)",
    )
    export.add_argument("--out", help="csv: the folder for the CSV files; openinference: the .jsonl file")
    export.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="openinference: send the spans over OTLP/HTTP (with or without --out), e.g. "
        "http://localhost:6006/v1/traces (Phoenix); a URL without a path gets /v1/traces",
    )
    export.add_argument(
        "--otlp-timeout",
        type=common.number_type(float, "otlp_timeout", low=0),
        default=10.0,
        metavar="S",
        help="seconds to keep retrying one OTLP request (default 10)",
    )
    export.add_argument("--force", action="store_true", help="replace files that already exist at --out")
    export.add_argument(
        "--project",
        default=None,
        help="openinference: the project the spans are filed under in Phoenix (default spec-workbench)",
    )
    imp = actions.add_parser("import", help="read a folder written by `store export`")
    imp.add_argument("folder")
    imp.add_argument("--renumber", action="store_true", help="give the runs new ids (when their ids are taken)")
    rm = actions.add_parser("delete", help="delete runs with their steps and nodes")
    rm.add_argument("ids", type=common.RUN_ID, nargs="+")
    cmp_ = actions.add_parser("compare", help="first divergence and per-step lengths of two runs")
    cmp_.add_argument("a", type=common.RUN_ID)
    cmp_.add_argument("b", type=common.RUN_ID)
    cmp_.add_argument("--json", action="store_true")
    for p in (ls, show, export, imp, rm, cmp_):
        common.add_db_arg(p)
        p.set_defaults(func=run)
    return store


def _when(value: str):
    from datetime import datetime

    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from None


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def run(args) -> int:
    from workbench.store import Store

    store = Store(args.db)
    if args.action == "list":
        runs = store.list_runs(
            method=args.method,
            model=args.model,
            tag=args.tag,
            status=args.status,
            since=args.since,
            until=args.until,
            limit=args.limit,
        )
        if args.json:
            print(json.dumps([{**vars(r), "created": r.created.isoformat()} for r in runs]))
            return 0
        from core.methods import asked_as  # here, not at import: `--help` loads no torch

        methods = [asked_as(r.method, r.params) for r in runs]
        width = max([14, *map(len, methods)])  # a longer name (hf-prompt-lookup) pushed the rest of its row right
        print(
            f"{'id':>6}  {'created (UTC)':19}  {'status':9}  {'method':{width}}  {'model':24}  {'tokens':>6}  {'steps':>5}  {'MAL':>5}  {'tok/s':>7}  tags"
        )
        for r, method in zip(runs, methods):
            m = r.metrics or {}
            # a stopped or failed run's speed is no measurement: "-" (the app's columns say "–"), not its partial tok/s
            tps = _fmt(m.get("tps")) if r.status == "complete" else "-"
            print(
                f"{r.id:>6}  {r.created:%Y-%m-%d %H:%M:%S}  {r.status:9}  {method:{width}}  {r.model[-24:]:24}  "
                f"{_fmt(m.get('tokens')):>6}  {_fmt(m.get('steps')):>5}  {_fmt(m.get('mal')):>5}  {tps:>7}  "
                f"{','.join(r.tags)}"
            )
        return 0
    if args.action == "show":
        return _show(store, args)
    if args.action == "export":
        return _export(store, args)
    if args.action == "import":
        ids = store.import_csv(args.folder, renumber=args.renumber)
        print(f"imported {len(ids)} runs into {store.where}: {', '.join(map(str, ids))}")
        return 0
    if args.action == "delete":
        print(f"deleted {store.delete_runs(args.ids)} runs from {store.where}")
        return 0
    result = store.compare(args.a, args.b)  # compare
    if args.json:
        print(json.dumps(result))
        return 0
    if result["identical"]:
        print(f"runs {args.a} and {args.b} emit the same {result['tokens_a']} tokens")
    elif result["stopped_before_diverging"]:  # core.stats.run_divergence: a run cut short is no divergence
        n = min(result["tokens_a"], result["tokens_b"])
        print(
            f"runs {args.a} and {args.b} agree on all {n} tokens of the shorter, which was cut short (stopped or at its cap)"
        )
    else:
        print(
            f"first divergence at token {result['first_divergence']}: run {args.a} has {_said(result, 'a')}, "
            f"run {args.b} has {_said(result, 'b')}"
        )
    if result["speedup_b_over_a"] is not None:
        print(
            f"run {args.b} at {result['speedup_b_over_a']:.2f}× the speed of run {args.a} ({result['speedup_clock']})"
        )
    la, lb = result["lengths_a"], result["lengths_b"]
    print(f"{'step':>5}  {'run ' + str(args.a):>8}  {'run ' + str(args.b):>8}")
    for i in range(max(len(la), len(lb))):
        print(f"{i:>5}  {_fmt(la[i] if i < len(la) else None):>8}  {_fmt(lb[i] if i < len(lb) else None):>8}")
    return 0


def _said(result: dict, which: str) -> str:
    """A diverging token as the Diff tab shows it: its text (whitespace made visible), its id and the step that made
    it; or the run's end, said as a cancellation where the run was Stopped there."""
    token, text, step = result[f"token_{which}"], result[f"text_{which}"], result[f"step_{which}"]
    if token is None:
        if result.get(f"status_{which}") == "cancelled":
            return f"its end (it was cancelled at token {result[f'tokens_{which}']})"
        return "its end"
    return f"{visible_token(text)!r} (id {token})" + ("" if step is None else f" at step {step}")


def _export(store, args) -> int:
    if not args.run and not args.all:
        raise WorkbenchError("name the runs to export with --run ID (repeatable), or pass --all")
    runs = None if args.all else args.run
    if args.format == "csv":
        if args.otlp_endpoint or args.project:
            raise WorkbenchError("--otlp-endpoint and --project go with --format openinference")
        if not args.out:
            raise WorkbenchError("--format csv needs --out FOLDER")
        paths = store.export_csv(runs, args.out, force=args.force)
        print(f"wrote {', '.join(str(p) for p in paths.values())}")
        return 0
    from workbench.store.openinference import DEFAULT_PROJECT, export_openinference, otlp_exporter

    if not args.out and not args.otlp_endpoint:
        raise WorkbenchError("--format openinference needs --out FILE.jsonl, --otlp-endpoint URL, or both")
    if args.otlp_timeout <= 0:
        raise WorkbenchError("--otlp-timeout must be more than 0 seconds")
    exporter = otlp_exporter(args.otlp_endpoint, args.otlp_timeout) if args.otlp_endpoint else None
    try:
        done = export_openinference(
            store,
            runs,
            args.out,
            exporter=exporter,
            where=args.otlp_endpoint,
            project=args.project or DEFAULT_PROJECT,
            force=args.force,
        )
    finally:
        if exporter is not None:
            exporter.shutdown()
    where = [w for w in (args.out, args.otlp_endpoint) if w]
    print(f"exported {done['spans']} spans of {done['runs']} run{'s' * (done['runs'] != 1)} to {' and '.join(where)}")
    return 0


def _show(store, args) -> int:
    if args.step is not None:
        step = store.load_step(args.id, args.step)
        if args.json:
            print(
                json.dumps(
                    {
                        **{k: v for k, v in vars(step).items() if k != "nodes"},
                        "nodes": [n.to_dict() for n in step.nodes],
                    }
                )
            )
            return 0
        print(
            f"run {args.id} step {step.index}: cache position {step.cache_pos}, {step.tree_size} draft nodes, "
            f"{step.accepted} accepted, emitted {step.emitted}, {step.step_ms:.2f} ms"
        )
        print(
            f"{'node':>4} {'parent':>6} {'depth':>5} {'token':>7}  {'text':12} {'source':10} {'decision':9} {'p':>7} {'rank':>4}  reason"
        )
        # Reasons name a correction by its text (core.token_text); its id stays in --json's correction_id.
        text_of = texts_by_id((n.token_id, n.token_text) for n in step.nodes)
        for n in step.nodes:
            print(
                f"{n.node:>4} {n.parent:>6} {n.depth:>5} {n.token_id:>7}  {visible_token(n.token_text)[:12]:12} "
                f"{n.source:10} {n.decision:9} {_fmt(n.p):>7} {_fmt(n.rank):>4}  {spoken_reason(n.reason, text_of)}"
            )
        return 0
    stored = store.load_run(args.id, nodes=False)
    run = stored.trace
    if args.json:
        print(
            json.dumps(
                {
                    "id": stored.id,
                    "created": stored.created.isoformat(),
                    "tags": stored.tags,
                    "status": run.status,
                    "error": run.error,
                    "method": run.method,
                    "params": run.params,
                    "model": run.model,
                    "draft_model": run.draft_model,
                    "text": run.output_text,
                    "token_ids": run.output_ids,
                    "accept_lengths": run.accept_lengths,
                    "metrics": stored.metrics,
                    "stop_reason": run.stop_reason,
                }
            )
        )
        return 0
    print(
        f"run {stored.id}: {run.method} on {run.model}"
        + (f" with draft {run.draft_model}" if run.draft_model else "")
        + f", {run.device}/{run.dtype}, {run.status}"
        + (f" ({run.error})" if run.error else "")
    )
    print(
        f"created {stored.created:%Y-%m-%d %H:%M:%S} UTC, tags {','.join(stored.tags) or '-'}, params {json.dumps(run.params)}"
    )
    m = stored.metrics or {}
    print(
        f"{len(run.output_ids)} tokens in {len(run.steps)} steps, MAL {_fmt(m.get('mal'))}, {_fmt(m.get('tps'))} tok/s, "
        f"stop: {run.stop_reason}"
    )
    print(f"output: {run.output_text!r}")
    print(f"accept lengths: {run.accept_lengths}  (store show {stored.id} --step N lists a step's tree)")
    return 0
