"""The command line: `python -m workbench models|generate|bench ...`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.errors import WorkbenchError
from core.params import PARAMS


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from core.models import DEFAULT_MODEL

    p.add_argument("--model", default=DEFAULT_MODEL, help=f"preset, local folder, .gguf file or hub id (default {DEFAULT_MODEL})")
    p.add_argument("--draft", default=None, help="draft model for draft-model methods (must share the target's tokenizer)")
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cuda, mps or cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own Python code (off by default)")
    p.add_argument("--no-store", action="store_true", help="do not keep the run's trace (the only mode until the trace store lands)")


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

    params = resolve_params(args.method, _params(args))  # fail on bad parameters before loading anything
    prompt = args.prompt
    if args.prompt_file:
        prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    context = Path(args.context_file).read_text(encoding="utf-8") if args.context_file else None
    text = f"{context}\n\n{prompt}" if context else prompt
    if not text or not text.strip():
        raise WorkbenchError("the prompt is empty: pass --prompt TEXT (or --prompt-file F)")
    target, draft = _load(args)
    ids = encode_prompt(target.tokenizer, text, chat=None if not args.no_chat else False)
    streamed = []

    def show(step):
        if not args.json:
            piece = target.tokenizer.decode(step.emitted, skip_special_tokens=True)
            streamed.append(piece)
            print(piece, end="", flush=True)

    run = run_method(args.method, target, ids, params, draft=draft, prompt_text=text, context=context,
                     stop_strings=args.stop or (), on_step=show)
    m = run.metrics()
    if args.json:
        print(json.dumps({
            "text": run.output_text, "token_ids": run.output_ids, "accept_lengths": run.accept_lengths,
            "metrics": {k: m[k] for k in ("mal", "tps", "steps", "tokens", "decode_seconds", "prefill_seconds", "accept_rate")},
            "run_id": None, "method": run.method, "params": run.params, "stop_reason": run.stop_reason,
        }))
    else:
        if not streamed:  # transformers' baselines do not stream through our engine
            print(run.output_text, end="")
        print()
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"[{run.method}] {m['tokens']} tokens in {m['steps']} steps, MAL {fmt(m['mal'])}, "
              f"{fmt(m['tps'])} tok/s, acceptance {fmt(m['accept_rate'])}, stop: {run.stop_reason}", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from core.bench import format_table, run_bench
    from core.methods import get_method
    from core.tasks import load_tasks

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        get_method(m)
    tasks = load_tasks(args.data, categories=args.categories.split(",") if args.categories else None, limit=args.limit)
    if not tasks:
        raise WorkbenchError(f"no tasks selected from {args.data}")
    target, draft = _load(args)
    result = run_bench(target, tasks, methods, _params(args), draft=draft, max_new_tokens=args.max_new_tokens)
    result["config"] = {"model": target.name, "draft": draft.name if draft else None, "device": str(target.device),
                        "dtype": str(target.dtype).replace("torch.", ""), "data": str(args.data), "tasks": len(tasks),
                        "categories": args.categories, "params": _params(args)}
    print(format_table(result["methods"]))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Training-free speculative decoding, step by step.")
    sub = parser.add_subparsers(dest="command", required=True)

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
    return parser


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
