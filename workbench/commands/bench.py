"""`python -m workbench bench --data F --methods M1,M2`: every method on every task, interleaved per
task, scored by workbench.evaluation.scores.score_task, printed as a table and written as JSON (--out)."""

from __future__ import annotations

import argparse
import json
import sys

from core.errors import WorkbenchError
from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="run methods over tasks, interleaved, and print a table")
    p.add_argument(
        "--data",
        required=True,
        help="a task file (JSON Lines: the project's rows, Spec-Bench's question.jsonl, LongBench or HumanEval rows)",
    )
    p.add_argument("--methods", default="greedy,pld")
    p.add_argument("--categories", help="comma-separated categories (Spec-Bench: summarization,rag,...)")
    p.add_argument("--limit", type=common.integer("limit", 1, 10**9), help="tasks per category")
    p.add_argument("--out", help="write the JSON results here")
    p.add_argument(
        "--batch-size",
        type=common.integer("batch_size", 1, 4096),
        default=1,
        metavar="B",
        help="decode B tasks at once per method (left padding, per-row trees; not for hf-* methods); "
        "tokens/s then counts all rows' tokens over each batch's decode time",
    )
    p.add_argument(
        "--num-processes",
        type=common.integer("num_processes", 1, 1024),
        default=1,
        metavar="N",
        help="shard the tasks over N processes on this machine, each with its own model copy and cores / N "
        "threads, all writing one store; needs --out (shard checkpoints live beside it; a killed "
        "shard resumes when the command runs again). Under `accelerate launch` the launcher's "
        "processes are the shards",
    )
    p.add_argument(
        "--repeats",
        type=common.integer("repeats", 1, 10_000),
        default=1,
        metavar="N",
        help="run the whole benchmark N times (methods interleaved per task in each pass) and report, per "
        "method, the mean, standard deviation and 95 %% interval of tokens/s and speed-up over the passes",
    )
    p.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # K/N: one shard (set by --num-processes)
    p.add_argument(
        "--merge-timeout",
        type=common.number_type(float, "merge_timeout", low=0),
        default=86400.0,
        metavar="S",
        help="under accelerate launch: how long rank 0 waits for the other shards before merging (default 1 day)",
    )
    common.add_exec_args(p)
    common.add_compress_args(p)
    common.add_decoding_args(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from workbench.evaluation.bench import check_compression, load_compressor, repeat_bench
    from workbench.evaluation.tasks import load_tasks
    from workbench.methods import get_method, parse_method_spec, resolve_params, split_method_list

    methods = split_method_list(args.methods)  # variants like aasd[align_graft=1] keep their commas
    if not methods:
        raise WorkbenchError("--methods names no method: pass e.g. --methods greedy,pld")
    given = common.params_from(args)
    for m in methods:  # every method and variant value checked before any model loads
        name, overrides = parse_method_spec(m)
        resolve_params(name, {k: v for k, v in given.items() if k in get_method(name).params} | overrides)
    check_compression(args.compress, args.compressor, args.compressor_model)
    if args.batch_size < 1 or args.num_processes < 1 or args.repeats < 1:
        raise WorkbenchError("--batch-size, --num-processes and --repeats must be at least 1")
    if args.repeats > 1 and (args.num_processes > 1 or args.shard):
        raise WorkbenchError("--repeats runs in one process: drop --num-processes, or run the command N times")
    if args.out:  # a long run must not end in an unwritable --out
        common.check_writable(args.out, "--out")
    scorer = common.task_scorer(args)  # no sandbox for --execute-code fails here, not after the run
    tasks = load_tasks(args.data, categories=args.categories.split(",") if args.categories else None, limit=args.limit)
    if not tasks:
        raise WorkbenchError(f"no tasks selected from {args.data}")
    from workbench.evaluation import shards

    shard = shards.parse_shard(args.shard) if args.shard else shards.shard_from_env()
    if (args.num_processes > 1 or shard is not None) and not args.out:
        raise WorkbenchError(
            "many processes need --out: each shard keeps its results beside it, and the merge writes it"
        )
    if args.num_processes > 1 and shard is None:  # the parent: start the shards, wait, merge
        common.open_store(args)  # a bad --db fails here, once, not in every shard
        argv = [a for a in _without(args.argv, "--num-processes") if a != "bench"]
        shards.launch(argv, args.num_processes, args.out)
        return _merge(args, tasks, methods, shards.Shard(0, args.num_processes))
    if shard is not None:
        return _run_shard(args, tasks, methods, shard)
    store = common.open_store(args)
    target, draft = common.load_models(args)
    corpus_state = _suffix_corpus(store, target, methods, common.benchmark_params(args))
    priors = _confidence_priors(store, target, methods, common.benchmark_params(args))
    overlap = _fit_overlap(target, methods, common.benchmark_params(args), tasks)
    compressor = load_compressor(
        args.compress,
        args.compressor,
        args.compressor_model,
        target,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
    )
    params = common.benchmark_params(args)
    timer = _StoreTimer()

    def keep(row, task, run):  # one bulk insert per finished run, outside the timed decoding
        with timer:
            row["run_id"] = store.save_run(run, tags=["bench", f"task={task.id}", *args.tag])

    result = repeat_bench(
        target,
        tasks,
        methods,
        params,
        repeats=args.repeats,
        draft=draft,
        max_new_tokens=args.max_new_tokens,
        scorer=scorer,
        on_result=keep if store is not None else None,
        compress=args.compress,
        compressor=compressor,
        batch_size=args.batch_size,
        priors=priors,
    )
    result["config"] = _config(args, target, draft, params, len(tasks), compressor)
    if corpus_state is not None:
        result["config"]["suffix_corpus"] = corpus_state
    if overlap:
        result["fit_overlap"] = overlap
    result["store_seconds"], result["wall_seconds"] = timer.seconds, timer.wall()
    return _report(args, result, timer.count, store)


def _suffix_corpus(store, target, methods, params, say: bool = True) -> dict | None:
    """The store's suffix corpus installed when a method drafts from one; says which (or that it is cold)."""
    from workbench.suffix_corpus import install_for_bench

    note, state = install_for_bench(store, target.fingerprint, methods, params)
    if note and say:
        print(note, file=sys.stderr)
    return state


def _confidence_priors(store, target, methods, params, say: bool = True) -> dict:
    """The stored calibration of the suffix drafter's confidence, per method that drafts from a corpus (none
    without a store); says how many stored nodes calibrate each."""
    if store is None:
        return {}
    from workbench.suffix_corpus import confidence_priors

    priors = confidence_priors(store, target.fingerprint, methods, params)
    for spec, prior in priors.items():
        if say:
            nodes = sum(v for _, v in prior.calibration.values())
            print(f"{spec}: node confidences calibrated by {nodes} stored nodes of its method", file=sys.stderr)
    return priors


def _fit_overlap(target, methods, params, tasks) -> dict:
    """Warn (before the run) when a method verifies with thresholds fitted on items this bench evaluates."""
    from workbench.evaluation.thresholds import describe_overlap, fit_overlap

    overlap = fit_overlap(target, methods, params, tasks)
    if overlap:
        print(
            f"warning: fitted thresholds evaluated on the items they were fitted on, so these results are not held "
            f"out: {describe_overlap(overlap)} (fit on other items: calibrate --thresholds --held-out-from)",
            file=sys.stderr,
        )
    return overlap


def _config(args, target, draft, params, n_tasks: int, compressor=None) -> dict:
    return {
        "model": target.name,
        "draft": draft.name if draft else None,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "data": str(args.data),
        "tasks": n_tasks,
        "categories": args.categories,
        "params": params,
        "execute_code": args.execute_code,
        "compress": args.compress,
        "compressor": getattr(compressor, "name", None),
        "compressor_model": args.compressor_model,
        "batch_size": args.batch_size,
        "repeats": getattr(args, "repeats", 1),
    }


def _report(args, result: dict, stored: int, store) -> int:
    """Print the table (and the near-tie flip summary), write --out."""
    from workbench.evaluation.bench import format_table
    from workbench.evaluation.fidelity import flip_summary

    print(format_table(result["methods"]))
    line = flip_summary([r.get("flip") for r in result["tasks"]])
    if line:
        print(line)
    if args.out:
        from core.files import write_output

        try:
            write_output(args.out, json.dumps(result, indent=1), what="--out", force=True)
            print(f"wrote {args.out}", file=sys.stderr)
        except WorkbenchError as e:  # keep the results: they took the whole run
            print(json.dumps(result, indent=1))
            print(f"error: {e}; the results are printed above", file=sys.stderr)
            return 2
    if store is not None:
        share = ""
        if result.get("store_seconds") is not None and result.get("wall_seconds"):
            share = f", {result['store_seconds']:.2f} s writing = {100 * result['store_seconds'] / result['wall_seconds']:.1f} % of the run"
        print(
            f"stored {stored} runs in {store.where}{share} (python -m workbench store list --tag bench)",
            file=sys.stderr,
        )
    return 0


def _without(argv: list[str], option: str) -> list[str]:
    """argv without `option` and its value (either `--opt V` or `--opt=V`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == option:
            skip = True
        elif not a.startswith(option + "="):
            out.append(a)
    return out


def _run_shard(args, tasks, methods, shard) -> int:
    """One shard: its share of the tasks, results appended to its checkpoint as they end (a rerun resumes),
    traces into the shared store; rank 0 under accelerate launch then waits for the others and merges."""
    import os

    import torch

    from workbench.evaluation import shards
    from workbench.evaluation.bench import Checkpoint, run_resumable

    if os.environ.get("WORKBENCH_SHARD_THREADS"):
        torch.set_num_threads(int(os.environ["WORKBENCH_SHARD_THREADS"]))
        shards.pin_to_shard_cores()
    store = common.open_store(args)
    target, draft = common.load_models(args)
    params = common.benchmark_params(args)
    _suffix_corpus(store, target, methods, params, say=shard.rank == 0)
    priors = _confidence_priors(store, target, methods, params, say=shard.rank == 0)
    if shard.rank == 0:
        _fit_overlap(target, methods, params, tasks)
    config = _config(args, target, draft, params, len(tasks))
    mine = shards.shard_tasks(tasks, shard)

    timer = _StoreTimer()

    def store_run(task, run):
        if store is None:
            return None
        with timer:
            return store.save_run(run, tags=["bench", f"task={task.id}", *args.tag])

    with Checkpoint(
        shards.checkpoint_path(args.out, shard),
        config,
        must_match=["model", "dtype", "data", "categories", "params", "batch_size"],
    ) as checkpoint:
        run_resumable(
            target,
            mine,
            methods,
            checkpoint,
            params,
            store_run=store_run,
            draft=draft,
            max_new_tokens=args.max_new_tokens,
            scorer=common.task_scorer(args),
            batch_size=args.batch_size,
            progress=shard.rank == 0,
            priors=priors,
        )
    # the shard's time writing the store beside its wall time: the merge adds them up
    shards.done_path(args.out, shard).write_text(
        json.dumps({"store_seconds": timer.seconds, "wall_seconds": timer.wall()}) + "\n"
    )
    if args.shard or shard.rank != 0:  # a child of --num-processes, or a non-zero rank: the merge is not ours
        return 0
    shards.wait_for_shards(args.out, shard.world, args.merge_timeout)
    return _merge(args, tasks, methods, shard)


def _merge(args, tasks, methods, shard) -> int:
    """The shards' rows in one process's order, summarised as one process summarises them."""
    from workbench.evaluation import shards
    from workbench.evaluation.bench import read_checkpoint, summarise_rows

    rows = shards.merge_rows(
        tasks, methods, [shards.read_shard(args.out, shards.Shard(k, shard.world)) for k in range(shard.world)]
    )
    header, _ = read_checkpoint(shards.checkpoint_path(args.out, shards.Shard(0, shard.world)))
    times = [shards.shard_times(args.out, shards.Shard(k, shard.world)) for k in range(shard.world)]
    result = {
        "methods": summarise_rows(rows),
        "tasks": rows,
        "config": {**(header or {}).get("config", {}), "processes": shard.world},
        "store_seconds": sum(t.get("store_seconds", 0.0) for t in times),
        "wall_seconds": sum(t.get("wall_seconds", 0.0) for t in times),
    }  # process-seconds, as store_seconds are
    return _report(args, result, sum(r.get("run_id") is not None for r in rows), common.open_store(args))


class _StoreTimer:
    """Seconds spent writing runs to the store, beside the wall time since it was made (issue 21: storing
    must stay a small share of a bench run, at batch size 8 and with several processes on one store)."""

    def __init__(self):
        import time

        self._clock, self.start, self.seconds, self.count = time.perf_counter, time.perf_counter(), 0.0, 0

    def __enter__(self):
        self._t = self._clock()

    def __exit__(self, *exc):
        self.seconds += self._clock() - self._t
        self.count += 1

    def wall(self) -> float:
        return self._clock() - self.start
