"""The command line: `python -m workbench models|generate|bench ...`."""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

from core.stats import run_metrics
from core.errors import WorkbenchError
from core.params import PARAMS


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from core.models import DEFAULT_MODEL

    p.add_argument("--model", default=DEFAULT_MODEL, help=f"preset, local folder, .gguf file or hub id (default {DEFAULT_MODEL})")
    p.add_argument("--draft", default=None, help="draft model for draft-model methods (must share the target's tokenizer)")
    add_load_args(p)
    p.add_argument("--no-store", action="store_true", help="do not keep the run's trace in the store")
    p.add_argument("--tag", action="append", default=[], help="label the stored run(s) (repeatable; `store list --tag`)")


def add_load_args(p: argparse.ArgumentParser) -> None:
    """How models load: every command that loads one takes these."""
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cuda, mps or cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own Python code (off by default)")


def _add_db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=None,
                   help="trace store: a SQLAlchemy URL or a SQLite file (default: $WORKBENCH_DB, else <home>/traces.db)")


def _open_store(args):
    """The trace store, opened before any model loads so a bad --db fails fast; None with --no-store."""
    if getattr(args, "no_store", False):
        return None
    from workbench.store import Store

    return Store(args.db)


def _add_param_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("method parameters (defaults depend on the method)")
    for spec in PARAMS.values():
        g.add_argument(f"--{spec.name.replace('_', '-')}", dest=spec.name, type=spec.kind, default=None,
                       help=f"{spec.help} (range {spec.low}..{spec.high})")


def _params(args) -> dict:
    return {name: getattr(args, name) for name in PARAMS if getattr(args, name, None) is not None}


def _load(args):
    from core.models import check_pair, load_model

    target = load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    draft = None
    if args.draft:
        draft = load_model(args.draft, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
        check_pair(target, draft)
    return target, draft


def cmd_models(args) -> int:
    from core.models import PRESETS, fetch_preset, is_fetched, preset_path

    if args.action == "list":
        for name, preset in PRESETS.items():
            state = f"fetched at {preset_path(name)}" if is_fetched(name) else f"not fetched (python -m workbench models fetch {name})"
            print(f"{name:22s} {state}")
        return 0
    for name in args.names or []:
        path = fetch_preset(name, force=args.force)
        print(f"{name}: ready at {path}")
    return 0


def cmd_generate(args) -> int:
    from core.methods import resolve_params, run_method
    from core.models import encode_prompt

    given = _params(args)
    params = resolve_params(args.method, given)  # fail on bad parameters before loading anything
    prompt = args.prompt
    if args.prompt_file:
        prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    context = Path(args.context_file).read_text(encoding="utf-8") if args.context_file else None
    text = f"{context}\n\n{prompt}" if context else prompt
    if not text or not text.strip():
        raise WorkbenchError("the prompt is empty: pass --prompt TEXT (or --prompt-file F)")
    store = _open_store(args)
    target, draft = _load(args)
    ids = encode_prompt(target.tokenizer, text, chat=None if not args.no_chat else False)
    streamed = []
    recording = store.recording(_header(args.method, params, target, draft, text, ids, context), tags=args.tag) if store else nullcontext()

    def show(step):
        if store is not None:
            recording.add_step(step)
        if not args.json:
            piece = target.tokenizer.decode(step.emitted, skip_special_tokens=True)
            streamed.append(piece)
            print(piece, end="", flush=True)

    with recording:  # a run that raises or is interrupted stays in the store, marked failed or cancelled
        # run_method resolves `given` itself: some resolved defaults (top_k=0) do not pass validation a second time
        run = run_method(args.method, target, ids, given, draft=draft, prompt_text=text, context=context,
                         stop_strings=args.stop or (), on_step=show)
        if store is not None:
            recording.finish(run)
    run_id = recording.run_id if store is not None else None
    m = run_metrics(run)
    if args.json:
        print(json.dumps({
            "text": run.output_text, "token_ids": run.output_ids, "accept_lengths": run.accept_lengths,
            "metrics": {k: m[k] for k in ("mal", "tps", "steps", "tokens", "decode_seconds", "prefill_seconds", "accept_rate")},
            "run_id": run_id, "method": run.method, "params": run.params, "stop_reason": run.stop_reason,
        }))
    else:
        if not streamed:  # transformers' baselines do not stream through our engine
            print(run.output_text, end="")
        print()
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"[{run.method}] {m['tokens']} tokens in {m['steps']} steps, MAL {fmt(m['mal'])}, "
              f"{fmt(m['tps'])} tok/s, acceptance {fmt(m['accept_rate'])}, stop: {run.stop_reason}", file=sys.stderr)
        if run_id is not None:
            print(f"stored as run {run_id} in {store.where}", file=sys.stderr)
    return 0


def _header(method, params, target, draft, prompt, prompt_ids, context):
    """The run as known before decoding: what the store records when the run starts."""
    from core.trace import RunTrace

    return RunTrace(method=method, params=params, model=target.name, draft_model=draft.name if draft else None,
                    device=str(target.device), dtype=str(target.dtype).replace("torch.", ""), prompt=prompt,
                    prompt_ids=list(prompt_ids), context=context, model_fingerprint=target.fingerprint,
                    draft_fingerprint=draft.fingerprint if draft else None)


def cmd_bench(args) -> int:
    from workbench.evaluation.bench import format_table, run_bench
    from core.methods import parse_method_spec, split_method_list
    from workbench.evaluation.tasks import load_tasks

    methods = split_method_list(args.methods)  # variants like aasd[align_graft=1] keep their commas
    for m in methods:
        parse_method_spec(m)
    tasks = load_tasks(args.data, categories=args.categories.split(",") if args.categories else None, limit=args.limit)
    if not tasks:
        raise WorkbenchError(f"no tasks selected from {args.data}")
    store = _open_store(args)
    target, draft = _load(args)
    run_ids: list[int] = []

    def keep(task, run):  # one bulk insert per finished run, outside the timed decoding; in the order of the rows
        run_ids.append(store.save_run(run, tags=["bench", f"task={task.id}", *args.tag]))

    result = run_bench(target, tasks, methods, _params(args), draft=draft, max_new_tokens=args.max_new_tokens,
                       on_run=keep if store is not None else None)
    for row, run_id in zip(result["tasks"], run_ids):
        row["run_id"] = run_id
    result["config"] = {"model": target.name, "draft": draft.name if draft else None, "device": str(target.device),
                        "dtype": str(target.dtype).replace("torch.", ""), "data": str(args.data), "tasks": len(tasks),
                        "categories": args.categories, "params": _params(args)}
    print(format_table(result["methods"]))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    if store is not None:
        print(f"stored {len(run_ids)} runs in {store.where} (python -m workbench store list --tag bench)", file=sys.stderr)
    return 0


def _when(value: str) -> "datetime":
    from datetime import datetime

    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from None


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def cmd_store(args) -> int:
    from workbench.store import Store

    store = Store(args.db)
    if args.action == "list":
        runs = store.list_runs(method=args.method, model=args.model, tag=args.tag, status=args.status,
                               since=args.since, until=args.until, limit=args.limit)
        if args.json:
            print(json.dumps([{**vars(r), "created": r.created.isoformat()} for r in runs]))
            return 0
        print(f"{'id':>6}  {'created (UTC)':19}  {'status':9}  {'method':14}  {'model':24}  {'tokens':>6}  {'steps':>5}  {'MAL':>5}  {'tok/s':>7}  tags")
        for r in runs:
            m = r.metrics or {}
            print(f"{r.id:>6}  {r.created:%Y-%m-%d %H:%M:%S}  {r.status:9}  {r.method:14}  {r.model[-24:]:24}  "
                  f"{_fmt(m.get('tokens')):>6}  {_fmt(m.get('steps')):>5}  {_fmt(m.get('mal')):>5}  {_fmt(m.get('tps')):>7}  "
                  f"{','.join(r.tags)}")
        return 0
    if args.action == "show":
        return _show(store, args)
    if args.action == "export":
        if not args.run and not args.all:
            raise WorkbenchError("name the runs to export with --run ID (repeatable), or pass --all")
        paths = store.export_csv(None if args.all else args.run, args.out)
        print(f"wrote {', '.join(str(p) for p in paths.values())}")
        return 0
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
    else:
        print(f"first divergence at token {result['first_divergence']}: run {args.a} has {result['token_a']} "
              f"(step {result['step_a']}), run {args.b} has {result['token_b']} (step {result['step_b']})")
    la, lb = result["lengths_a"], result["lengths_b"]
    print(f"{'step':>5}  {'run ' + str(args.a):>8}  {'run ' + str(args.b):>8}")
    for i in range(max(len(la), len(lb))):
        print(f"{i:>5}  {_fmt(la[i] if i < len(la) else None):>8}  {_fmt(lb[i] if i < len(lb) else None):>8}")
    return 0


def _show(store, args) -> int:
    if args.step is not None:
        step = store.load_step(args.id, args.step)
        if args.json:
            print(json.dumps({**{k: v for k, v in vars(step).items() if k != "nodes"}, "nodes": [n.to_dict() for n in step.nodes]}))
            return 0
        print(f"run {args.id} step {step.index}: cache position {step.cache_pos}, {step.tree_size} draft nodes, "
              f"{step.accepted} accepted, emitted {step.emitted}, {step.step_ms:.2f} ms")
        print(f"{'node':>4} {'parent':>6} {'depth':>5} {'token':>7}  {'text':12} {'source':10} {'decision':9} {'p':>7} {'rank':>4}  reason")
        for n in step.nodes:
            print(f"{n.node:>4} {n.parent:>6} {n.depth:>5} {n.token_id:>7}  {n.token_text[:12]!r:12} {n.source:10} "
                  f"{n.decision:9} {_fmt(n.p):>7} {_fmt(n.rank):>4}  {n.reason}")
        return 0
    stored = store.load_run(args.id, nodes=False)
    run = stored.trace
    if args.json:
        print(json.dumps({"id": stored.id, "created": stored.created.isoformat(), "tags": stored.tags, "status": run.status,
                          "error": run.error, "method": run.method, "params": run.params, "model": run.model,
                          "draft_model": run.draft_model, "text": run.output_text, "token_ids": run.output_ids,
                          "accept_lengths": run.accept_lengths, "metrics": stored.metrics, "stop_reason": run.stop_reason}))
        return 0
    print(f"run {stored.id}: {run.method} on {run.model}" + (f" with draft {run.draft_model}" if run.draft_model else "")
          + f", {run.device}/{run.dtype}, {run.status}" + (f" ({run.error})" if run.error else ""))
    print(f"created {stored.created:%Y-%m-%d %H:%M:%S} UTC, tags {','.join(stored.tags) or '-'}, params {json.dumps(run.params)}")
    m = stored.metrics or {}
    print(f"{len(run.output_ids)} tokens in {len(run.steps)} steps, MAL {_fmt(m.get('mal'))}, {_fmt(m.get('tps'))} tok/s, "
          f"stop: {run.stop_reason}")
    print(f"output: {run.output_text!r}")
    print(f"accept lengths: {run.accept_lengths}  (store show {stored.id} --step N lists a step's tree)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Training-free speculative decoding, step by step.")
    sub = parser.add_subparsers(dest="command", required=True)
    from workbench import calibrate_cmd, report_cmd

    calibrate_cmd.add_parser(sub)
    report_cmd.add_parser(sub)

    models = sub.add_parser("models", help="list or fetch the embedded model presets")
    models.add_argument("action", choices=["list", "fetch"])
    models.add_argument("names", nargs="*", help="presets to fetch")
    models.add_argument("--force", action="store_true", help="fetch again even if present")
    models.set_defaults(func=cmd_models)

    gen = sub.add_parser("generate", help="one generation with one method")
    gen.add_argument("--method", default="greedy")
    gen.add_argument("--prompt", default="")
    gen.add_argument("--prompt-file")
    gen.add_argument("--context-file", help="a document placed before the prompt")
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    gen.add_argument("--no-chat", action="store_true", help="do not apply the tokenizer's chat template")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    _add_model_args(gen)
    _add_param_args(gen)
    gen.set_defaults(func=cmd_generate)

    bench = sub.add_parser("bench", help="run methods over tasks, interleaved, and print a table")
    bench.add_argument("--data", required=True, help="a task file (JSON Lines) or Spec-Bench's question.jsonl")
    bench.add_argument("--methods", default="greedy,pld")
    bench.add_argument("--categories", help="comma-separated categories (Spec-Bench: summarization,rag,...)")
    bench.add_argument("--limit", type=int, help="tasks per category")
    bench.add_argument("--out", help="write the JSON results here")
    _add_model_args(bench)
    _add_param_args(bench)
    bench.set_defaults(func=cmd_bench)
    _add_db_arg(gen)
    _add_db_arg(bench)

    store = sub.add_parser("store", help="list, show, export, import, delete or compare stored runs")
    actions = store.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="stored runs, newest first")
    ls.add_argument("--method")
    ls.add_argument("--model", help="target or draft model id")
    ls.add_argument("--tag")
    ls.add_argument("--status", choices=["running", "complete", "failed", "cancelled"])
    ls.add_argument("--since", type=_when, help="created at or after (UTC, YYYY-MM-DD[THH:MM])")
    ls.add_argument("--until", type=_when, help="created before (UTC)")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--json", action="store_true")
    show = actions.add_parser("show", help="one run (or one step's tree with --step)")
    show.add_argument("id", type=int)
    show.add_argument("--step", type=int)
    show.add_argument("--json", action="store_true")
    export = actions.add_parser("export", help="write runs.csv, steps.csv and nodes.csv")
    export.add_argument("--run", type=int, action="append", help="run id (repeatable)")
    export.add_argument("--all", action="store_true", help="every run in the store")
    export.add_argument("--out", required=True, help="folder for the CSV files")
    imp = actions.add_parser("import", help="read a folder written by `store export`")
    imp.add_argument("folder")
    imp.add_argument("--renumber", action="store_true", help="give the runs new ids (when their ids are taken)")
    rm = actions.add_parser("delete", help="delete runs with their steps and nodes")
    rm.add_argument("ids", type=int, nargs="+")
    cmp_ = actions.add_parser("compare", help="first divergence and per-step lengths of two runs")
    cmp_.add_argument("a", type=int)
    cmp_.add_argument("b", type=int)
    cmp_.add_argument("--json", action="store_true")
    for p in (ls, show, export, imp, rm, cmp_):
        _add_db_arg(p)
        p.set_defaults(func=cmd_store)

    serve = sub.add_parser("serve", help="start the Gradio workbench (python app.py does the same)")
    serve.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1; 0.0.0.0 to share on a network)")
    serve.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    add_load_args(serve)
    _add_db_arg(serve)
    serve.set_defaults(func=cmd_serve)
    return parser


def cmd_serve(args) -> int:
    from workbench.service import ModelPool
    from workbench.ui import build_app, launch

    demo = build_app(args.db, ModelPool(args.device, args.dtype, trust_remote_code=args.trust_remote_code))
    launch(demo, server_name=args.host, server_port=args.port)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
