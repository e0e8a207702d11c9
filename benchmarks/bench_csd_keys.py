"""Generalised memory keys (issue 34 lever 1): coverage and rescue precision of csd[keys=exact|text|prefix|all].

On held-out benchmark items (the first --limit HumanEval and GSM8K items, alternating; the memory's corpus is
checked to be disjoint from their prompts), plain `sd` decodes each item and every rejection is kept with its
output position, draft token x, the target's correction t* and the logit gap z(x) − z(t*). For each key order and
λ, offline:

- **coverage**: the share of the rejections whose lookup reaches λ under some key of the order (what CSD could
  rescue at most; the issue's measure with keys=exact);
- **gated**: the share that also passes the gate z(x) − z(t*) ≥ log τ: the rescues CSD would make at that
  rejection (on sd's path; a real csd run leaves that path after its first rescue);
- **precision**: of those rescues, the share that leave the text as greedy wrote it. For every rejection that
  keys=all would rescue at the smallest λ reported (a superset of every other order's rescues), the target
  continues greedily for --rejoin-tokens tokens after x; the rescue is *text-preserving* when x plus that
  continuation (its last token dropped, which may be cut) is a prefix of greedy's text from there, and
  *word-preserving* when that holds after case-folding and collapsing whitespace. A swap of synonyms
  (' solve' for ' determine') preserves neither, so precision here is a lower bound on harmless rescues.

Intervals are Wilson 95 % intervals over rejections (rejections of one item are not independent: read them as
a guide). Which key fired is counted per order (the most specific one that reached λ).

    python benchmarks/bench_csd_keys.py --limit 10 --max-new-tokens 128 --threads 1

Resumable: one checkpoint line per item in results/csd_keys/<dtype>_<tokens>.jsonl; --no-run reports what is there.
Writes results/csd_keys/report_<dtype>_<tokens>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core.rules import KEY_NAMES, KEY_ORDERS, KeyCounts, key_lookup  # noqa: E402

LAMS = (2, 4, 6)
TAU = 0.01


def wilson(k: int, n: int) -> tuple[float, float] | None:
    if not n:
        return None
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


def sd_rejections(steps) -> list[dict]:
    """Every rejection of a lossless run: output position, x, t* and the logit gap z(x) − z(t*)."""
    out, emitted = [], 0
    for step in steps:
        for n in step.nodes:
            if n.decision == "rejected" and n.correction_id is not None:
                out.append(
                    {"pos": emitted + n.depth - 1, "x": n.token_id, "t": n.correction_id, "gap": -float(n.logit_gap)}
                )
        emitted += len(step.emitted)
    return out


def same_text(branch: str, greedy: str) -> bool:
    """Whether `branch` is a prefix of `greedy` (or the reverse, when greedy's text ended first)."""
    n = min(len(branch), len(greedy))
    return branch[:n] == greedy[:n]


def words(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def key_rows(rows: list[dict], memory, keys_of) -> None:
    """Adds to every rejection its counts under each key kind (exact first), from the frozen memory."""
    kinds = keys_of(KEY_NAMES["all"])
    for row in rows:
        for r in row["rejections"]:
            r["counts"] = dict(memory.key_counts(r["x"], r["t"], kinds).counts)


def lookup(r: dict, order: tuple[str, ...], lam: int) -> str | None:
    kind, _ = key_lookup(KeyCounts(tuple((k, r["counts"][k]) for k in order)), lam)
    return kind


OPERATORS = {
    "==",
    "!=",
    "<",
    ">",
    "<=",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "=",
}  # symbols only: "and" is also English


def swaps_meaning(x_text: str, t_text: str) -> bool:
    """A rescue that writes another number or operator than the target's (' 3' for ' 1', ' ==' for ' !='): whatever
    the memory says, such a swap changes what the text computes."""
    from core.memory import normalised_text

    x, t = normalised_text(x_text), normalised_text(t_text)
    return x != t and (any(ch.isdigit() for ch in x + t) or x in OPERATORS or t in OPERATORS)


def summarise(rows: list[dict], texts=None, lams=LAMS, tau: float = TAU) -> dict:
    rej = [r for row in rows for r in row["rejections"]]
    n = len(rej)
    log_tau = math.log(tau)
    out = {"items": len(rows), "rejections": n, "by_order": {}}
    for name, code in KEY_NAMES.items():
        order = KEY_ORDERS[code]
        per_lam = {}
        for lam in lams:
            fired = [(r, lookup(r, order, lam)) for r in rej]
            hit = [(r, k) for r, k in fired if k is not None]
            gated = [(r, k) for r, k in hit if r["gap"] >= log_tau]
            judged = [(r, k) for r, k in gated if "rejoin" in r]
            kinds = {}
            for r, k in gated:
                kinds[k] = kinds.get(k, 0) + 1
            risky = sum(swaps_meaning(texts(r["x"]), texts(r["t"])) for r, _ in gated) if texts else None
            t_ok = sum(r["rejoin"]["text"] for r, _ in judged)
            w_ok = sum(r["rejoin"]["words"] for r, _ in judged)
            per_lam[lam] = {
                "covered": len(hit),
                "coverage": len(hit) / n if n else None,
                "coverage_ci": wilson(len(hit), n),
                "gated": len(gated),
                "gated_share": len(gated) / n if n else None,
                "fired_key": kinds,
                "number_or_operator_swaps": risky,
                "judged": len(judged),
                "text_preserving": t_ok,
                "words_preserving": w_ok,
                "precision_text": t_ok / len(judged) if judged else None,
                "precision_text_ci": wilson(t_ok, len(judged)),
                "precision_words": w_ok / len(judged) if judged else None,
                "precision_words_ci": wilson(w_ok, len(judged)),
            }
        out["by_order"][name] = per_lam
    return out


def rescue_lines(rows: list[dict], texts, lam: int = max(LAMS), tau: float = TAU) -> list[str]:
    """Every judged rescue: what keys=all would have accepted where, by which key, and what the text became."""
    lines = [
        "",
        f"Every rejection keys=all would rescue at λ {min(LAMS)} (the key that fires at λ {lam} in brackets), "
        "with the text greedy wrote and the text after the rescue:",
        "",
        "| item | x for t* | counts exact / text / prefix | z(x) − z(t*) | key at λ 2 (λ 6) | greedy wrote | after the rescue |",
        "|---|---|---|---|---|---|---|",
    ]
    order = KEY_ORDERS[KEY_NAMES["all"]]

    def cell(text: str) -> str:
        return repr(text[:48]).replace("|", "\\|")

    for row in rows:
        for r in row["rejections"]:
            if "rejoin" not in r:
                continue
            c = r["counts"]
            lines.append(
                f"| {row['id']} | {cell(texts(r['x']))} for {cell(texts(r['t']))} | {c['exact']} / {c['text']} / "
                f"{c['prefix']} | {r['gap']:.2f} | {lookup(r, order, min(LAMS))} ({lookup(r, order, lam) or '–'}) | "
                f"{cell(r['rejoin'].get('greedy', '–'))} | {cell(r['rejoin']['branch'])} |"
            )
    return lines


FORCED_PER_CPU_HOUR = 18_300  # teacher-forced observations per CPU hour of the default corpus (docs/CSD.md, lever 2)
CURVE_ORDERS = ("exact", "text", "all")


def thinned_curve(
    rows: list[dict], memory, keys_of, fractions=(1 / 16, 1 / 8, 1 / 4, 1 / 2, 1), draws: int = 5, seed: int = 0
) -> list[dict]:
    """Coverage against observations for each key order: the memory thinned to a fraction f of its observations
    (each observation kept with probability f, a binomial draw per pair: the table after f of its observations,
    taken in random order rather than the corpus's), its generalised keys derived again; the mean of `draws` draws."""
    import numpy as np

    from core.memory import CorrectionMemory

    rng = np.random.default_rng(seed)
    rej = [r for row in rows for r in row["rejections"]]
    full = memory.snapshot()
    every = keys_of(KEY_NAMES["all"])
    out = []
    for f in fractions:
        points = []
        for _ in range(draws if f < 1 else 1):
            counts = {pair: int(rng.binomial(n, f)) for pair, n in full.items()} if f < 1 else dict(full)
            thinned = CorrectionMemory({k: v for k, v in counts.items() if v})
            looked = [dict(thinned.key_counts(r["x"], r["t"], every).counts) for r in rej]
            point = {"observations": thinned.total, "pairs": len(thinned)}
            for order in CURVE_ORDERS:
                kinds = KEY_ORDERS[KEY_NAMES[order]]
                for lam in LAMS:
                    hit = sum(
                        key_lookup(KeyCounts(tuple((k, c[k]) for k in kinds)), lam)[0] is not None for c in looked
                    )
                    point[f"{order} lam>={lam}"] = hit / len(rej) if rej else 0.0
            points.append(point)
        out.append({k: sum(p[k] for p in points) / len(points) for k in points[0]})
    return out


def curve_lines(curve: list[dict]) -> list[str]:
    from bench_forced_calibration import crossing

    lines = [
        "",
        "Coverage against observations (the memory thinned at random, the mean of 5 draws below the full table; λ 2 / 4 / 6):",
        "",
        "| observations | pairs | " + " | ".join(f"{o} λ 2 / 4 / 6" for o in CURVE_ORDERS) + " |",
        "|---|---|" + "---|" * len(CURVE_ORDERS),
    ]
    for p in curve:
        cells = [" / ".join(f"{100 * p[f'{o} lam>={lam}']:.1f}" for lam in LAMS) for o in CURVE_ORDERS]
        lines.append(f"| {p['observations']:,.0f} | {p['pairs']:,.0f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where λ 6 would reach 20 % (least-squares line of coverage against log2 observations through the "
        f"points above 0; CPU hours at {FORCED_PER_CPU_HOUR:,} forced observations per hour):",
        "",
    ]
    for order in CURVE_ORDERS:
        c = crossing(curve, key=f"{order} lam>=6")
        lines.append(
            f"- {order}: "
            + (
                "no line (fewer than two points above 0, or no gain)"
                if c is None
                else f"+{100 * c['per_doubling']:.1f} points per doubling over {c['points']} points; 20 % at about "
                f"{c['observations']:,.0f} observations, {c['observations'] / FORCED_PER_CPU_HOUR:,.1f} CPU hours"
            )
        )
    return lines


def pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def ci(v) -> str:
    return "–" if v is None else f"[{100 * v[0]:.1f}, {100 * v[1]:.1f}]"


def render(s: dict, head: list[str]) -> list[str]:
    lines = [
        *head,
        "",
        f"{s['items']} items, {s['rejections']} rejections of plain sd.",
        "",
        "| keys | λ | covered | coverage [95 % CI] | gated (would rescue) | fired key | number/operator swaps | judged | text-preserving [CI] | word-preserving [CI] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, per_lam in s["by_order"].items():
        for lam, v in per_lam.items():
            fired = ", ".join(f"{k} {c}" for k, c in sorted(v["fired_key"].items())) or "–"
            lines.append(
                f"| {name} | {lam} | {v['covered']} | {pct(v['coverage'])} {ci(v['coverage_ci'])} | {v['gated']} | "
                f"{fired} | {v['number_or_operator_swaps']} | {v['judged']} | {pct(v['precision_text'])} {ci(v['precision_text_ci'])} | "
                f"{pct(v['precision_words'])} {ci(v['precision_words_ci'])} |"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=10, help="HumanEval and GSM8K items each (the first N: held out)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memory", default=None, help="a memory file (default: the user's table, else the shipped one)")
    ap.add_argument(
        "--rejoin-tokens", type=int, default=12, help="greedy tokens after a rescued x for the precision check"
    )
    ap.add_argument("--max-minutes", type=float, default=None, help="stop starting items after this long (resumable)")
    ap.add_argument("--no-run", action="store_true", help="report the checkpoint without running models")
    ap.add_argument("--out", default="results/csd_keys")
    args = ap.parse_args()

    import platform

    import torch
    from bench_csd import load_memory, pair_items

    from core.memory import PairKeys
    from core.models import check_pair, encode_prompt, load_model
    from workbench.methods import run_method

    out_dir = ROOT / args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{args.dtype}_{args.max_new_tokens}"
    ckpt = out_dir / f"{stem}.jsonl"
    items = pair_items(args.limit, args.max_new_tokens, args.max_new_tokens)
    done = {}
    if ckpt.exists():
        for line in ckpt.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a half-written last line of a killed run
            done[row["id"]] = row
    torch.set_num_threads(args.threads)
    if args.no_run:  # the report alone: the tokenizer and the memory, no model
        from transformers import AutoTokenizer

        from core.memory import SHIPPED_DIR, CorrectionMemory
        from core.models import preset_path

        tokenizer, text_id = AutoTokenizer.from_pretrained(preset_path("qwen2.5-coder-1.5b")), "qwen2.5-coder"
        memory = CorrectionMemory.load(args.memory or next(SHIPPED_DIR.glob("*.json.gz")))
    else:
        target = load_model("qwen2.5-coder-1.5b", device="cpu", dtype=args.dtype)
        draft = load_model("qwen2.5-coder-0.5b", device="cpu", dtype=args.dtype)
        memory = load_memory(
            target, draft, False, [i.text for i in items], args.memory
        )  # refused if it saw these prompts
        tokenizer, text_id = target.tokenizer, target.fingerprint

    def keys_of(code: int) -> PairKeys:
        return PairKeys.of(code, tokenizer, text_id)

    all_keys = keys_of(KEY_NAMES["all"])
    log_tau, lam_min = math.log(TAU), min(LAMS)
    start = time.perf_counter()
    todo = [i for i in items if i.id not in done]
    if todo and not args.no_run:
        check_pair(target, draft)
        with ckpt.open("a", encoding="utf-8") as fh:
            for k, item in enumerate(todo, 1):
                if args.max_minutes is not None and time.perf_counter() - start > 60 * args.max_minutes:
                    print(f"stopped after {args.max_minutes} minutes; run again to resume", file=sys.stderr)
                    break
                ids = encode_prompt(target.tokenizer, item.text, chat=item.chat)
                w, c = time.perf_counter(), time.process_time()
                run = run_method(
                    "sd", target, ids, {"max_new_tokens": item.max_new_tokens}, draft=draft, stop_strings=item.stop
                )
                out_ids = list(run.output_ids)
                # A rejection in the step a stop string cut off lies past the answer: not counted.
                rej = [r for r in sd_rejections(run.steps) if r["pos"] < len(out_ids)]
                judged = 0
                for r in rej:
                    assert out_ids[r["pos"]] == r["t"], "a rejection's correction is the token greedy wrote there"
                    counts = memory.key_counts(r["x"], r["t"], all_keys)
                    if key_lookup(counts, lam_min)[0] is None or r["gap"] < log_tau:
                        continue
                    branch = run_method(
                        "greedy", target, ids + out_ids[: r["pos"]] + [r["x"]], {"max_new_tokens": args.rejoin_tokens}
                    ).output_ids
                    b = target.tokenizer.decode([r["x"], *branch[:-1]])
                    g = target.tokenizer.decode(out_ids[r["pos"] :])
                    r["rejoin"] = {
                        "text": same_text(b, g),
                        "words": same_text(words(b), words(g)),
                        "branch": target.tokenizer.decode([r["x"], *branch]),
                        "greedy": target.tokenizer.decode(out_ids[r["pos"] : r["pos"] + len(branch) + 1]),
                    }
                    judged += 1
                row = {
                    "id": item.id,
                    "kind": item.kind,
                    "tokens": len(out_ids),
                    "rejections": rej,
                    "seconds": time.perf_counter() - w,
                    "cpu_seconds": time.process_time() - c,
                }
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                done[item.id] = row
                print(
                    f"{k}/{len(todo)} {item.id}: {len(rej)} rejections, {judged} judged, {len(out_ids)} tokens, "
                    f"{row['seconds']:.0f} s",
                    file=sys.stderr,
                )
    rows = [done[i.id] for i in items if i.id in done]
    key_rows(rows, memory, keys_of)
    s = summarise(rows, lambda i: tokenizer.decode([i]))
    flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    head = [
        f"# csd memory keys: coverage and precision on held-out items ({args.dtype}, ≤ {args.max_new_tokens} new tokens)",
        "",
        f"Qwen2.5-Coder-1.5B target, 0.5B draft; memory {memory.path} ({len(memory)} pairs, {memory.total} "
        f"observations, sha {memory.fingerprint()}); τ {TAU}; rejoin check {args.rejoin_tokens} tokens. "
        f"CPU {cpu}; avx512_bf16 {'avx512_bf16' in flags}; amx {'amx' in flags}; {args.threads} thread(s). "
        f"Items: {', '.join(r['id'] for r in rows)}.",
    ]
    curve = thinned_curve(rows, memory, keys_of)
    lines = render(s, head) + curve_lines(curve) + rescue_lines(rows, lambda i: tokenizer.decode([i]))
    (out_dir / f"report_{stem}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / f"report_{stem}.json").write_text(
        json.dumps({"summary": s, "curve": curve, "items": [r["id"] for r in rows]}, indent=1), encoding="utf-8"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
