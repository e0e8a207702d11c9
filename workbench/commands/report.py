"""`python -m workbench report`: the papers' tables in one resumable command.

    python -m workbench report --tables aasd,casd --data spec-bench:summarization,rag --limit 20 --out results/report/smollm2
    python -m workbench report --tables csd --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --execute-code --limit 20
    python -m workbench report --out results/report/smollm2 --no-run     # the tables again, from the checkpoint alone
    python -m workbench report --frontier --limit 4 --out results/frontier/smollm2   # speed-up vs score change per rule

Every finished (task, method) run is appended to OUT/checkpoint.jsonl at once, and stored in the trace
store tagged `report` (so the workbench shows it); a rerun with the same settings skips what the
checkpoint holds, so a killed run resumes where it stopped. The tables come from the checkpoint only:
OUT/report.md, OUT/tables/*.csv and, for the δ sweep, OUT/figures/delta_sweep_{score,mal}.html (and
.png where kaleido can render).

--frontier sweeps each relaxed rule's threshold (fixed δ, δ + top-k, adaptive α and β, CSD's rescue gate,
Medusa's typical acceptance, FLy-style deferred check; --rules picks some) on the held-out items of the task
families (--families, --limit items each), greedy and every setting interleaved per item, and writes
OUT/frontier.md, OUT/frontier.json and OUT/figures/frontier.html: per setting the speed-up against greedy, MAL,
and per family the mean score change with its paired 95 % bootstrap interval (workbench.evaluation.frontier).
It is not resumable: keep it small. `--frontier --tasks FILE` sweeps on a reviewer's own task file instead, each
row's category a family (workbench.evaluation.family_file; items a held-out split has seen are refused).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.commands import common

CHECKPOINT = "checkpoint.jsonl"
CHAT_MARGIN = 64  # tokens the chat template may add around a truncated prompt
# What must be equal for a rerun to add to an existing checkpoint (the rest describes the machine).
MUST_MATCH = (
    "model",
    "model_fingerprint",
    "draft",
    "draft_fingerprint",
    "device",
    "dtype",
    "params",
    "max_prompt_tokens",
    "execute_code",
    "compress",
    "compressor",
    "compressor_model",
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from workbench.evaluation.report import TABLE_SETS
    from workbench.evaluation.tasks import DATASETS

    p = subparsers.add_parser(
        "report",
        help="the papers' tables (AASD, CASD, CSD) from a resumable benchmark run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tables", default=None, help=f"comma-separated table sets: {', '.join(TABLE_SETS)} (default aasd)")
    p.add_argument(
        "--data",
        action="append",
        default=None,
        help="a dataset (repeatable): "
        + "; ".join(f"{k}: {v}" for k, v in DATASETS.items())
        + "; or a task-file path (default: the tables' own datasets)",
    )
    p.add_argument(
        "--methods", default=None, help="comma-separated method specs (default: every method the tables need)"
    )
    p.add_argument(
        "--limit",
        type=common.integer("limit", 1, 10**9),
        default=None,
        help="tasks per dataset (with --seed: a seeded sample, else the first N)",
    )
    p.add_argument("--out", default="results/report", help="folder for the checkpoint, report.md, tables/ and figures/")
    p.add_argument("--fresh", action="store_true", help="delete the folder's checkpoint and start over")
    p.add_argument(
        "--no-run", action="store_true", help="only rebuild the tables from the folder's checkpoint (no model)"
    )
    common.add_exec_args(p)
    p.add_argument(
        "--max-prompt-tokens",
        type=common.integer("max_prompt_tokens", 1, 10**7),
        default=None,
        help="cut longer prompts in the middle, as LongBench does (default: the model's context minus the generation)",
    )
    p.add_argument(
        "--memory", default=None, help="CSD's calibrated memory file (default: the pair's file under <home>/memory/)"
    )
    p.add_argument("--title", default=None, help="heading of report.md")
    f = p.add_argument_group("--frontier: the speed-quality frontier per relaxed rule, on held-out family items")
    f.add_argument("--frontier", action="store_true", help="sweep each relaxed rule's threshold instead of the tables")
    f.add_argument(
        "--families",
        default=None,
        help="comma-separated task families (default docqa,summarization,rag,code,writing; with --tasks: the file's)",
    )
    f.add_argument(
        "--tasks",
        metavar="FILE",
        default=None,
        help="a task file (JSON Lines) whose rows' categories are the families, in place of the held-out items",
    )
    f.add_argument(
        "--rules", default=None, help="comma-separated rules: casd, mixed, aasd, rescue, typical, fly (default all)"
    )
    common.add_compress_args(p)
    common.add_decoding_args(p)
    p.set_defaults(func=run)
    return p


def _table_sets(text: str | None) -> list[str]:
    from core.errors import InvalidInputError
    from workbench.evaluation.report import TABLE_SETS

    sets = [s.strip().lower() for s in (text or "aasd").split(",") if s.strip()]
    unknown = [s for s in sets if s not in TABLE_SETS]
    if unknown or not sets:
        raise InvalidInputError(
            f"unknown table set(s) {', '.join(unknown) or '(none)'}; known: {', '.join(TABLE_SETS)}"
        )
    return sets


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(args) -> int:
    from core.errors import InvalidInputError
    from workbench.evaluation.bench import (
        Checkpoint,
        check_compression,
        check_contexts,
        load_compressor,
        read_checkpoint,
        run_resumable,
    )
    from workbench.evaluation.report import DEFAULT_DATA, table_methods
    from workbench.evaluation.tasks import load_many
    from workbench.methods import get_method, parse_method_spec, resolve_params, split_method_list

    out = Path(args.out)
    path = out / CHECKPOINT
    if args.frontier:
        return run_frontier(args, out)
    if args.tasks:
        raise InvalidInputError("--tasks gives --frontier its items; the tables read task files with --data")
    if args.no_run:
        header, rows = read_checkpoint(path)
        if header is None:
            raise InvalidInputError(f"no checkpoint at {path}: run the report first (without --no-run)")
        config = header.get("config") or {}
        write_outputs(
            list(rows.values()),
            _table_sets(args.tables or ",".join(config.get("tables") or [])),
            config,
            out,
            args.title,
        )
        return 0

    sets = _table_sets(args.tables)
    params = common.benchmark_params(args)
    methods = split_method_list(args.methods) if args.methods else table_methods(sets)
    for m in methods:  # fail on a bad method or value before loading anything
        name, overrides = parse_method_spec(m)
        resolve_params(name, {k: v for k, v in params.items() if k in get_method(name).params} | overrides)
    need_draft = [m for m in methods if get_method(parse_method_spec(m)[0]).needs_draft]
    if need_draft and not args.draft:
        raise InvalidInputError(
            f"{', '.join(need_draft)} need a draft model: pass --draft (e.g. --model qwen2.5-coder-1.5b "
            f"--draft qwen2.5-coder-0.5b), or leave out the csd tables"
        )
    check_compression(args.compress, args.compressor, args.compressor_model)
    scorer = common.task_scorer(args)  # no sandbox for --execute-code fails here, before any model loads
    specs = args.data or list(dict.fromkeys(d for s in sets for d in DEFAULT_DATA[s]))
    tasks = load_many(specs, limit=args.limit, seed=params.get("seed"))
    if args.compress is not None:
        check_contexts(tasks)  # every task needs a context to compress: fail before anything runs or is stored
    if args.fresh and path.exists():
        path.unlink()
    store = common.open_store(args)
    target, draft = common.load_models(args)
    from workbench.suffix_corpus import install_for_bench

    corpus_note, corpus_state = install_for_bench(store, target.fingerprint, methods, params)
    if corpus_note:  # which corpus the suffix methods draft from: the store's (as in the app), or none
        print(corpus_note, file=sys.stderr)
    longest = params.get("max_new_tokens") or max((t.max_new_tokens or 128) for t in tasks)
    budget = args.max_prompt_tokens or target.max_context - longest - CHAT_MARGIN
    if budget < 16:
        raise InvalidInputError(
            f"no room for a prompt: the model's context is {target.max_context} tokens and generation takes {longest}"
        )
    from workbench.evaluation.thresholds import describe_overlap, fit_overlap

    overlap = fit_overlap(target, methods, params, tasks)
    if overlap:  # a report's tables are its numbers: thresholds fitted on its own items would not be held out
        raise InvalidInputError(
            f"fitted thresholds would be evaluated on the items they were fitted on: "
            f"{describe_overlap(overlap)}; fit on other items (calibrate --thresholds "
            f"--held-out-from N) or report on others"
        )
    memories, memory_note = _memories(target, draft, methods, tasks, args.memory)
    compressor = load_compressor(
        args.compress,
        args.compressor,
        args.compressor_model,
        target,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
    )
    import torch
    import transformers

    config = {
        "model": target.name,
        "model_fingerprint": target.fingerprint,
        "draft": draft.name if draft is not None else None,
        "draft_fingerprint": draft.fingerprint if draft is not None else None,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "params": params,
        "max_prompt_tokens": budget,
        "execute_code": bool(args.execute_code),
        "compress": args.compress,
        "compressor": getattr(compressor, "name", None),
        "compressor_model": args.compressor_model,
        # described, not compared: the first run's machine and settings
        "tables": sets,
        "data": specs,
        "limit": args.limit,
        "methods": methods,
        "csd_memory": memory_note,
        "suffix_corpus": corpus_state,
        "cpu": f"{_cpu()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads",
        "software": f"torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}",
        "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }

    def keep(task, run) -> int | None:
        return store.save_run(run, tags=["report", f"task={task.id}", f"dataset={task.category}", *args.tag])

    with Checkpoint(path, config, must_match=MUST_MATCH) as ckpt:
        done = len(ckpt.done())
        if done:
            print(f"resuming: {done} runs already in {path}", file=sys.stderr)
        rows = run_resumable(
            target,
            tasks,
            methods,
            ckpt,
            params,
            draft=draft,
            max_new_tokens=params.get("max_new_tokens"),
            max_prompt_tokens=budget,
            scorer=scorer,
            memories=memories,
            store_run=keep if store is not None else None,
            compress=args.compress,
            compressor=compressor,
        )
        config["started"] = ckpt.config.get("started", config["started"])  # when the checkpoint began
    write_outputs(rows, sets, config, out, args.title)
    if store is not None:
        print(f"runs stored in {store.where} (python -m workbench store list --tag report)", file=sys.stderr)
    return 0


def run_frontier(args, out: Path) -> int:
    """`report --frontier`: each rule's sweep on the families' held-out items; frontier.md / .json / figures/frontier.html."""
    from core.errors import InvalidInputError
    from workbench.evaluation.families import load_families, parse_families
    from workbench.evaluation.family_file import check_run_unseen, read_family_file
    from workbench.evaluation.frontier import format_frontier, parse_rules, sweep
    from workbench.evaluation.thresholds import family_scorer

    if args.no_run or args.tables or args.methods or args.data or args.draft:
        raise InvalidInputError(
            "--frontier sweeps the relaxed rules on the families' held-out items: drop --no-run, "
            "--tables, --methods, --data and --draft (choose with --rules and --families)"
        )
    sweeps = parse_rules(args.rules)
    if args.execute_code:
        common.task_scorer(args)  # no sandbox fails here
    common.check_writable(str(out / "frontier.json"), "--out")
    if args.tasks:  # a bad file fails here, before the model loads
        groups = read_family_file(args.tasks, args.families, items=args.limit)
    else:
        groups = load_families(parse_families(args.families), "held_out", args.limit or 4)
    names = list(groups)
    tasks = [t for group in groups.values() for t in group]
    target, _ = common.load_models(args)
    params = common.benchmark_params(args)
    if args.tasks:  # an error when a fit or a held-out split has seen an item
        specs = [s for ss in sweeps.values() for s in ss]
        for line in check_run_unseen(target, tasks, specs, params, where=Path(args.tasks).name):
            print(line, file=sys.stderr)
    import torch

    result = sweep(
        target,
        tasks,
        sweeps,
        params=params,
        max_new_tokens=params.get("max_new_tokens"),
        scorer=family_scorer(bool(args.execute_code), args.unsafe_exec),
    )
    result["config"] = {
        "model": target.name,
        "model_fingerprint": target.fingerprint,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "params": params,
        "families": list(names),
        "items_per_family": {f: len(g) for f, g in groups.items()},
        "split": "reviewer task file" if args.tasks else "held_out",
        "tasks_file": args.tasks,
        "cpu": f"{_cpu()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads",
        "command": "python -m workbench " + " ".join(getattr(args, "argv", None) or []),
    }
    out.mkdir(parents=True, exist_ok=True)
    md = format_frontier(result)
    (out / "frontier.md").write_text(md + "\n", encoding="utf-8")
    (out / "frontier.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    from workbench.ui.figures.frontier import frontier_figure

    (out / "figures").mkdir(exist_ok=True)
    frontier_figure(result).write_html(out / "figures" / "frontier.html", include_plotlyjs="directory")
    print(md)
    print(f"wrote {out / 'frontier.md'}, {out / 'frontier.json'}, {out / 'figures' / 'frontier.html'}", file=sys.stderr)
    return 0


def _memories(target, draft, methods, tasks, path) -> tuple[dict[str, Any], str | None]:
    """A private copy of the calibrated correction memory per memory-reading method (benchmark items never reach the file)."""
    from workbench.evaluation.calibration import benchmark_memory
    from workbench.methods import get_method, parse_method_spec

    readers = [m for m in methods if get_method(parse_method_spec(m)[0]).reads_memory]
    if not readers:
        return {}, None
    base = benchmark_memory(target, draft, [t.prompt() for t in tasks], path)
    cal = base.meta.get("calibration")
    forced = base.meta.get("forced_calibration")
    if forced and not cal:  # the shipped memory (core/memories) or calibrate --mode forced
        note = (
            f"{len(base)} pairs, {base.total} observations, teacher-forced over {forced.get('sequences')} sequences "
            f"of {forced.get('corpus')}"
        )
    elif not cal:
        note = "none calibrated: CSD starts from an empty memory and learns online"
        print(
            f"note: {note} (python -m workbench calibrate --model {target.name}"
            + (f" --draft {draft.name}" if draft is not None else "")
            + ")",
            file=sys.stderr,
        )
    else:
        note = f"{len(base)} pairs, {base.total} observations from {cal.get('prompts')} prompts of {cal.get('corpus')}"
    return {m: base.copy() for m in readers}, note


def _setup(config: dict[str, Any], rows: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    per: dict[str, set] = {}
    for r in rows:
        per.setdefault(r.get("category") or "", set()).add(r["id"])
    params = config.get("params") or {}
    return {
        "model": config.get("model"),
        "draft model": config.get("draft"),
        "device / dtype": f"{config.get('device')} / {config.get('dtype')}",
        "CPU": config.get("cpu"),
        "software": config.get("software"),
        "data": ", ".join(config.get("data") or []),
        "tasks per dataset": ", ".join(f"{d} {len(ids)}" for d, ids in per.items()),
        "generation length": (
            f"{params['max_new_tokens']} tokens"
            if params.get("max_new_tokens")
            else "per dataset (LongBench's lengths; 128 where a dataset has none)"
        ),
        "prompt budget": f"{config.get('max_prompt_tokens')} tokens (longer prompts lose their middle)",
        "parameters": json.dumps(params) if params else "the methods' defaults",
        "HumanEval execution": "on (sandboxed)" if config.get("execute_code") else "off (pass@1 absent)",
        "CSD memory": config.get("csd_memory"),
        "prompt compression": (
            f"{config['compressor']} at rate {config['compress']:g}"
            + (f" over {config['compressor_model']}" if config.get("compressor_model") else " over the target")
            + " (context-drafting methods draft from the full prompt unless pool=compressed)"
            if config.get("compress") is not None
            else "none"
        ),
        "started": config.get("started"),
        "checkpoint": shown_path(out / CHECKPOINT),
    }


def shown_path(path: Path) -> str:
    """A path as a report prints it: relative to the working directory when under it, so a generated document
    (docs/RESULTS.md) names no machine's absolute paths; otherwise as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def write_outputs(
    rows: list[dict[str, Any]], sets: list[str], config: dict[str, Any], out: Path, title: str | None = None
) -> Path:
    """report.md, one CSV per table (the papers' too) and the δ-sweep figures, all from `rows`."""
    from workbench.evaluation.report import build_tables, delta_sweep, render_markdown

    pairs = build_tables(rows, sets)
    md = render_markdown(
        pairs, sets, _setup(config, rows, out), title or f"Report: {', '.join(sets)} on {config.get('model')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(md, encoding="utf-8")
    tables = out / "tables"
    tables.mkdir(exist_ok=True)
    for measured, paper in pairs:
        for t in (measured, paper):
            if t is not None:
                (tables / f"{t.key}.csv").write_text(t.csv(), encoding="utf-8")
    written = [out / "report.md", tables]
    if "casd" in sets:
        written += _figures(delta_sweep(rows), out / "figures")
    print(md)
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return out / "report.md"


def _figures(sweep: dict[str, Any], folder: Path) -> list[Path]:
    from workbench.ui.figures.report import delta_sweep_figure

    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    png = True
    for metric in ("score", "mal"):
        fig = delta_sweep_figure(sweep, metric)
        html = folder / f"delta_sweep_{metric}.html"
        fig.write_html(html, include_plotlyjs="directory")  # plotly.min.js once beside the pages: they open offline
        written.append(html)
        if png:
            try:
                fig.write_image(folder / f"delta_sweep_{metric}.png", width=900, height=450)
                written.append(folder / f"delta_sweep_{metric}.png")
            except Exception as e:  # kaleido missing, or no Chrome/Chromium for it to drive
                png = False
                reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
                print(
                    f"note: PNG figures skipped ({reason[:200]}); they need kaleido (pip install 'spec-workbench[report]') "
                    f"and a local Chrome or Chromium",
                    file=sys.stderr,
                )
    return written
