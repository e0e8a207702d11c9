"""Fit `aasd[fallback=suffix]`'s hand-over margin (core.params `fallback_margin`: the corpus drafts instead of the
context pool only where its match is at least that many tokens longer than the pool's key) on held-out requests
of the repeated workload, and show why the hand-over helps or not on first sight.

    OMP_NUM_THREADS=1 taskset -c 0 nice python benchmarks/fit_suffix_fallback.py --threads 1 \
        [--margins 0,1,2,3,4,6,8,16] [--out results/suffix_fallback_fit.json]

The default items are those of benchmarks/fit_suffix_confidence.py (HELD_OUT_ITEMS in core/drafters/suffix.py
lists their ids; benchmarks/bench_suffix.py warns when a reported item is among them): Spec-Bench categories the
reported run does not use and the code edits from the fourth on, each issued twice (seed 1). aasd and
aasd[fallback=suffix,fallback_margin=m] for each m run interleaved request by request, each fallback with its own
online corpus (empty at the start), so round 1 is first sight for each. The choice reads MAL, not time (untimed:
no lock needed): the margin whose smaller per-round MAL ratio over aasd is highest (ties: the smaller margin).

For every step of every fallback run it also keeps the pool's key, the corpus's match, which drafted, and how many
tokens each of the two trees would have had accepted had it been verified strictly against the tokens the run went
on to produce (the counterfactual of the tree that did not draft; alignment siblings and AASD's relaxed rule are
left out, so it is a strict-acceptance estimate). That answers: on first sight, how often is the corpus's match
longer than the pool's, and how often are those drafts accepted, against what the pool would have given?
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_suffix_confidence import held_out_parser  # noqa: E402
from repeated_workload import build_workload, prompt_of  # noqa: E402

MARGINS = (0, 1, 2, 3, 4, 6, 8, 16)


def strict_accepted(tokens: list[int], parents: list[int], truth: list[int]) -> int:
    """Tokens a draft tree (node i: tokens[i] under parents[i], -1 the root) has accepted under strict
    verification when the target goes on to produce `truth`: the longest root path that `truth` follows."""
    kids: dict[int, dict[int, int]] = defaultdict(dict)
    for i, (parent, tok) in enumerate(zip(parents, tokens)):
        kids[parent].setdefault(tok, i)
    node, n = -1, 0
    for tok in truth:
        node = kids[node].get(tok)
        if node is None:
            break
        n += 1
    return n


def pool_accepted(hits: list[list[int]], truth: list[int]) -> int:
    """The same for the pool's retrieved continuations (a trie of them: the longest common prefix with `truth`)."""
    best = 0
    for h in hits:
        n = 0
        while n < len(h) and n < len(truth) and h[n] == truth[n]:
            n += 1
        best = max(best, n)
    return best


def choose(results: dict, margins: list[int]) -> int:
    """The margin whose smaller per-round MAL ratio over aasd is highest (ties: the smaller margin)."""

    def worst(m: int) -> float:
        return min(results[m][r] / results["aasd"][r] for r in ("round 1", "round 2"))

    return max(margins, key=lambda m: (round(worst(m), 4), -m))


def hand_over_table(steps: list[dict]) -> list[dict]:
    """Per round and by how much the corpus's match exceeds the pool's key (steps where it is at least as long):
    steps, mean strict-accepted tokens of the corpus's tree and of the pool's continuations, and the share of steps
    where the corpus tree would have had at least one token accepted."""
    cells: dict[tuple[int, str], list[float]] = {}
    for s in steps:
        if s["corpus_match"] == 0 or s["corpus_match"] < s["key"]:
            continue
        excess = s["corpus_match"] - s["key"]
        band = str(excess) if excess <= 2 else "3-4" if excess <= 4 else "5-8" if excess <= 8 else ">8"
        c = cells.setdefault((s["round"], band), [0, 0.0, 0.0, 0])
        c[0] += 1
        c[1] += s["corpus_accepted"]
        c[2] += s["pool_accepted"]
        c[3] += s["corpus_accepted"] > 0
    order = ["0", "1", "2", "3-4", "5-8", ">8"]
    return [
        {
            "round": r,
            "excess": b,
            "steps": n,
            "corpus_accepted": ca / n,
            "pool_accepted": pa / n,
            "corpus_any": any_ / n,
        }
        for (r, b), (n, ca, pa, any_) in sorted(cells.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1])))
    ]


def print_hand_over(table: list[dict]) -> None:
    print("| round | match - key | steps | corpus tree accepted | pool accepted | corpus accepted >= 1 |")
    print("|---|---|---|---|---|---|")
    for c in table:
        print(
            f"| {c['round']} | {c['excess']} | {c['steps']} | {c['corpus_accepted']:.2f} | {c['pool_accepted']:.2f} "
            f"| {c['corpus_any']:.2f} |"
        )


def main(argv: list[str] | None = None) -> None:
    ap = held_out_parser(__doc__)
    ap.add_argument("--margins", default=",".join(map(str, MARGINS)))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "suffix_fallback_fit.json")
    ap.add_argument("--summarise", type=Path, default=None, help="print the hand-over table of a saved fit (its --out)")
    a = ap.parse_args(argv)
    if a.summarise:
        saved = json.loads(a.summarise.read_text())
        for m, steps_of in saved["steps"].items():
            print(f"\n{m}: steps where the corpus's match is at least the pool's key, strict-accepted tokens per step")
            print_hand_over(hand_over_table(steps_of))
        return
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    from core.drafters.context import ContextDrafter
    from core.drafters.suffix import corpus_drafts
    from core.methods import run_method
    from core.models import encode_prompt, load_model
    from core.pool import DraftPool
    from core.stats import run_totals
    from core.suffix import SuffixCorpus, SuffixSpeculator

    margins = [int(m) for m in a.margins.split(",") if m.strip()]
    rows_in = build_workload(
        a.spec_bench, a.per_category, a.code, a.seed, [c for c in a.categories.split(",") if c], a.code_offset
    )
    target = load_model(a.model, device="cpu", dtype=a.dtype)

    # Capture what each fallback step saw: the pool's lookup and the corpus's draft (the drafter calls both).
    seen: dict = {}
    lookup, suffix_propose, propose = DraftPool.lookup, SuffixSpeculator.propose, ContextDrafter.propose

    def lookup_spy(self, *args, **kw):
        out = lookup(self, *args, **kw)
        seen["pool"] = out
        return out

    def suffix_spy(self, sequence, *args, **kw):
        out = suffix_propose(self, sequence, *args, **kw)
        seen["corpus"] = out
        return out

    def propose_spy(self, sequence):
        seen.pop("corpus", None)
        out = propose(self, sequence)
        if self.suffix is not None and "corpus" in seen:
            key, hits = seen["pool"]
            draft = seen["corpus"]
            chosen = len(draft) > 0 and corpus_drafts(draft.match_len, key, self.fallback_margin)
            seen["steps"].append(
                {
                    "g": len(sequence) - seen["prompt_len"],
                    "key": key,
                    "corpus_match": draft.match_len if len(draft) else 0,
                    "corpus": (list(draft.tokens), list(draft.parents)),
                    "hits": [h.tokens.tolist() for h in hits],
                    "chosen": "corpus" if chosen else "pool",
                }
            )
        return out

    DraftPool.lookup, SuffixSpeculator.propose, ContextDrafter.propose = lookup_spy, suffix_spy, propose_spy

    methods = ["aasd"] + [f"aasd[fallback=suffix,fallback_margin={m}]" for m in margins]
    corpora = {m: SuffixCorpus(fingerprint=target.fingerprint) for m in methods[1:]}
    totals: dict[str, dict[str, list[float]]] = {m: defaultdict(lambda: [0.0, 0.0]) for m in methods}
    steps: dict[str, list[dict]] = {m: [] for m in methods[1:]}
    previous: dict[str, str] = {}
    started = time.time()
    for i, row in enumerate(rows_in):
        ids = encode_prompt(target.tokenizer, prompt_of(row, previous))
        greedy = run_method("greedy", target, ids, {"max_new_tokens": a.max_new_tokens})
        previous[row["id"]] = greedy.output_text
        for m in methods:
            name, over = (
                ("aasd", {})
                if m == "aasd"
                else ("aasd", {"fallback": 2, "fallback_margin": margins[methods.index(m) - 1]})
            )
            seen.update(prompt_len=len(ids), steps=[])
            run = run_method(name, target, ids, {**over, "max_new_tokens": a.max_new_tokens}, corpus=corpora.get(m))
            t = run_totals(run)
            for group in (f"round {row['round']}", "overall"):
                totals[m][group][0] += t["decoded"]
                totals[m][group][1] += t["steps"]
            if m in steps:
                out = run.output_ids
                for s in seen["steps"]:
                    truth = out[s["g"] :]
                    s["corpus_accepted"] = strict_accepted(*s.pop("corpus"), truth)
                    s["pool_accepted"] = pool_accepted(s.pop("hits"), truth)
                    s["round"], s["item"] = row["round"], row["id"]
                    steps[m].append(s)
        print(f"[{i + 1}/{len(rows_in)}] {row['id']} ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    mal = {m: {g: d / n for g, (d, n) in totals[m].items()} for m in methods}
    results = {"aasd": mal["aasd"], **{mg: mal[methods[k + 1]] for k, mg in enumerate(margins)}}
    best = choose(results, margins)
    print(f"held-out items ({len(rows_in)}): {', '.join(r['id'] for r in rows_in)}")
    print(
        "| rule | MAL round 1 | MAL round 2 | MAL overall | round 1 / aasd | round 2 / aasd | corpus drafted (r1, r2) |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in methods:
        r = mal[m]
        share = ""
        if m in steps:
            share = ", ".join(
                f"{sum(s['chosen'] == 'corpus' for s in steps[m] if s['round'] == k)}/{sum(s['round'] == k for s in steps[m])}"
                for k in (1, 2)
            )
        print(
            f"| {m} | {r['round 1']:.3f} | {r['round 2']:.3f} | {r['overall']:.3f} | "
            f"{r['round 1'] / mal['aasd']['round 1']:.3f} | {r['round 2'] / mal['aasd']['round 2']:.3f} | {share or '-'} |"
        )
    print(f"chosen margin: {best} (highest smaller per-round MAL ratio over aasd)")
    base = methods[1 + margins.index(best)]
    table = hand_over_table(steps[base])
    print(f"\n{base}: steps where the corpus's match is at least the pool's key, strict-accepted tokens per step")
    print_hand_over(table)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(a).items()},
                "items": [r["id"] for r in rows_in],
                "mal": mal,
                "chosen_margin": best,
                "hand_over": table,
                "steps": steps,
                "minutes": (time.time() - started) / 60,
            },
            indent=1,
        )
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
