"""`python -m workbench generate --method M --prompt TEXT`: one generation with one method, streamed
(or one JSON object with --json), its trace kept in the store unless --no-store."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext

from core.errors import WorkbenchError
from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("generate", help="one generation with one method")
    p.add_argument("--method", default="greedy")
    p.add_argument("--prompt", default="")
    p.add_argument("--prompt-file")
    p.add_argument("--context-file", help="a document placed before the prompt")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--no-chat", action="store_true", help="do not apply the tokenizer's chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    common.add_compress_args(p)
    common.add_decoding_args(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    # The files first: a missing one is said at once, not after torch and transformers have loaded (~10 s)
    prompt = common.read_text_file(args.prompt_file, "--prompt-file") if args.prompt_file else args.prompt
    context = common.read_text_file(args.context_file, "--context-file") if args.context_file else None
    from core.errors import InvalidInputError
    from core.models import encode_prompt
    from core.stats import TOKEN_ACCEPTANCE, run_metrics
    from workbench.methods import parse_method_spec, resolve_params, run_method
    from workbench.store import StoreError

    # A variant (aasd[align_graft=1]) as bench and the UI take it; its values checked before anything loads
    method, overrides = parse_method_spec(args.method)
    given = {**common.params_from(args), **overrides}
    params = resolve_params(method, given)  # fail on bad parameters before loading anything
    if args.stop is not None and any(not s for s in args.stop):
        raise InvalidInputError('--stop "" would stop before the first token: give each --stop a non-empty string')
    text = f"{context}\n\n{prompt}" if context else prompt
    if not text or not text.strip():
        raise WorkbenchError("the prompt is empty: pass --prompt TEXT (or --prompt-file F)")
    from core.files import MAX_PROMPT_CHARS, check_text

    check_text(text, what="the prompt", max_chars=MAX_PROMPT_CHARS)  # before any model loads
    from workbench.evaluation.bench import check_compression, load_compressor

    check_compression(args.compress, args.compressor, args.compressor_model)
    if args.compress is not None and not (context or "").strip():
        raise InvalidInputError(
            "--compress shortens the context: pass it with --context-file F (the prompt itself stays whole); "
            "the context is empty"
        )
    store = common.open_store(args)
    target, draft = common.load_models(args)
    chat = None if not args.no_chat else False
    compression, full_ids = None, None
    compressor = load_compressor(
        args.compress,
        args.compressor,
        args.compressor_model,
        target,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
    )
    if compressor is not None:  # before the store hears of the run: a compressor that fails leaves nothing behind
        full_ids = encode_prompt(target.tokenizer, text, chat=chat)
        compression = compressor.compress(context, args.compress)
        text = f"{compression.text}\n\n{prompt}"
        params = {**params, **compression.record()}
    ids = encode_prompt(target.tokenizer, text, chat=chat)
    streamed = []
    reading, writing = _progress_bars(len(ids), params.get("max_new_tokens"), args.json)
    recording = (
        store.recording(_header(method, params, target, draft, text, ids, context), tags=args.tag)
        if store
        else nullcontext()
    )

    def read(done, total):
        reading.update(done - reading.n)

    def show(step):
        reading.close()  # the prompt is read: the first step's tokens follow
        if writing.n == 0:
            writing.reset()  # its clock starts with decoding, not when the bar was made before the prompt's read
        writing.update(len(step.emitted))
        if store is not None:
            recording.add_step(step)
        if not args.json:
            piece = target.tokenizer.decode(step.emitted, skip_special_tokens=True)
            streamed.append(piece)
            print(piece, end="", flush=True)

    stored = store is not None
    with recording:  # a run that raises or is interrupted stays in the store, marked failed or cancelled
        with reading, writing:  # closed before the lines below (transformers' baselines call neither callback)
            # run_method resolves `given` itself: some resolved defaults (top_k=0) do not pass validation a second time
            run = run_method(
                method,
                target,
                ids,
                given,
                draft=draft,
                prompt_text=text,
                context=context,
                stop_strings=args.stop or (),
                on_step=show,
                on_prefill=read,
                compression=compression,
                uncompressed_ids=full_ids,
            )
        if store is not None:
            try:
                recording.finish(run)
            except StoreError as e:  # the generation is done: show it, and say the store did not keep it
                print(f"\nwarning: the run was not stored: {e}", file=sys.stderr)
                recording.status, stored = "failed", False
    run_id = recording.run_id if stored else None
    m = run_metrics(run)
    if args.json:
        print(
            json.dumps(
                {
                    "text": run.output_text,
                    "token_ids": run.output_ids,
                    "accept_lengths": run.accept_lengths,
                    "metrics": {
                        k: m[k]
                        for k in ("mal", "tps", "steps", "tokens", "decode_seconds", "prefill_seconds", "accept_rate")
                    },
                    "run_id": run_id,
                    "method": run.method,
                    "params": run.params,
                    "stop_reason": run.stop_reason,
                }
            )
        )
    else:
        if not streamed:  # transformers' baselines do not stream through our engine
            print(run.output_text, end="")
        print()
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731  (as the app shows it)
        if compression is not None:
            print(
                f"[{compression.compressor}] context {compression.tokens_in} -> {compression.tokens_kept} tokens (rate "
                f"{compression.reached:.3f} for {compression.rate:g}) in {compression.seconds:.2f} s; pool "
                f"{run.params.get('pool', '-')}",
                file=sys.stderr,
            )
        print(
            f"[{run.method}] {m['tokens']} tokens in {m['steps']} steps, MAL {fmt(m['mal'])}, "
            f"{fmt(m['tps'])} tok/s, {TOKEN_ACCEPTANCE} {pct(m['accept_rate'])}, stop: {run.stop_reason}",
            file=sys.stderr,
        )
        if run_id is not None:
            print(f"stored as run {run_id} in {store.where}", file=sys.stderr)
    return 0


def _progress_bars(prompt_tokens: int, max_new_tokens: int | None, as_json: bool):
    """Progress on stderr as bench shows it (tqdm): the prompt's prefill in tokens read, which on a long prompt took
    minutes with nothing on screen; then, with --json, the tokens written (streamed text is its own progress, and a
    bar redrawn beside it on the terminal would break its lines)."""
    from tqdm.auto import tqdm

    reading = tqdm(total=prompt_tokens, desc="reading the prompt", unit="token", leave=False, file=sys.stderr)
    # smoothing=0: the rate is the average over decoding, as the JSON's tps is; tqdm's default recent-rate average
    # showed 8.58 token/s beside a tps of 0.92 (the twenty-first newcomer pass)
    writing = tqdm(
        total=max_new_tokens,
        desc="writing",
        unit="token",
        leave=False,
        file=sys.stderr,
        disable=not as_json,
        smoothing=0,
    )
    return reading, writing


def _header(method, params, target, draft, prompt, prompt_ids, context):
    """The run as known before decoding: what the store records when the run starts."""
    from core.trace import RunTrace

    return RunTrace(
        method=method,
        params=params,
        model=target.name,
        draft_model=draft.name if draft else None,
        device=str(target.device),
        dtype=str(target.dtype).replace("torch.", ""),
        prompt=prompt,
        prompt_ids=list(prompt_ids),
        context=context,
        model_fingerprint=target.fingerprint,
        draft_fingerprint=draft.fingerprint if draft else None,
    )
