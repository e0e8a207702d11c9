"""Fit the suffix drafter's node confidence (core.suffix.draft.node_confidence: the continuation's empirical
probability discounted by the matched length, even odds at MATCH_HALF tokens) on held-out requests of the
repeated workload, and show how well it is calibrated.

    OMP_NUM_THREADS=1 taskset -c 0 nice python benchmarks/fit_suffix_confidence.py --threads 1 \
        [--categories math,reasoning,...] [--code 5 --code-offset 3] [--out results/suffix_confidence.json]

The default items are disjoint from the reported run's (docs/RESULTS.md: Spec-Bench coding, summarization,
rag, qa, writing and the first 3 code edits): other Spec-Bench categories and code edits from the fourth on.
`suffix` runs with a fixed budget (min(max_nodes, 4 x match), no sizer) and one online corpus, so every node it
drafts is judged when its parent is accepted; each judged node's evidence (conditional probability, match
length, depth, source) and verdict is kept. The fit is the `half` of the grid with the highest Bernoulli
log-likelihood of the verdicts. Untimed: no lock needed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from repeated_workload import SPEC_BENCH, build_workload, prompt_of  # noqa: E402

HELD_OUT = "math,reasoning,extraction,stem,humanities,roleplay,translation"
HALVES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0)


def judged_nodes(draft, new_tokens: list[int], max_depth: int, stops: set[int]) -> list[tuple[int, bool]]:
    """(node, accepted) for every node strict verification judged: those whose parent is on the accepted
    path (the longest tree path that the committed tokens follow). Nodes the engine pruned (deeper than
    `max_depth`, a stop token or below one) were never judged and are left out."""
    kids: dict[int, dict[int, int]] = {}
    for i, (parent, tok) in enumerate(zip(draft.parents, draft.tokens)):
        kids.setdefault(parent, {})[tok] = i
    depths = draft.depths()
    on_path, node = {-1}, -1
    for tok in new_tokens:
        node = kids.get(node, {}).get(tok, None)
        if node is None:
            break
        on_path.add(node)
    pruned: set[int] = set()
    for i, (parent, tok) in enumerate(zip(draft.parents, draft.tokens)):
        if depths[i] > max_depth or tok in stops or parent in pruned:
            pruned.add(i)
    return [(i, i in on_path) for i, parent in enumerate(draft.parents) if parent in on_path and i not in pruned]


def log_likelihood(records: list[dict], half: float) -> float:
    from core.suffix.draft import node_confidence

    total = 0.0
    for r in records:
        p = min(max(node_confidence(r["q"], r["matched"], half), 1e-3), 1 - 1e-3)
        total += math.log(p if r["accepted"] else 1 - p)
    return total


def calibration_table(records: list[dict], half: float) -> list[dict]:
    """Per (source, confidence bucket): nodes, mean confidence, observed acceptance."""
    from core.acceptance_prior import confidence_bucket
    from core.suffix.draft import node_confidence

    cells: dict[tuple[str, int], list[float]] = {}
    for r in records:
        c = node_confidence(r["q"], r["matched"], half)
        cell = cells.setdefault((r["source"], confidence_bucket(c)), [0, 0.0, 0])
        cell[0] += 1
        cell[1] += c
        cell[2] += r["accepted"]
    return [
        {"source": s, "bucket": b, "nodes": n, "confidence": sc / n, "accepted": a / n, "accepted_count": a}
        for (s, b), (n, sc, a) in sorted(cells.items())
    ]


def held_out_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a fit on held-out items of the repeated workload (core.drafters.suffix.FIT_ITEMS by default)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--spec-bench", type=Path, default=SPEC_BENCH)
    ap.add_argument("--categories", default=HELD_OUT)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--code", type=int, default=5)
    ap.add_argument("--code-offset", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = held_out_parser(__doc__)
    ap.add_argument("--max-nodes", type=int, default=32, help="the fixed node cap the judged trees were drafted under")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "suffix_confidence.json")
    a = ap.parse_args(argv)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    from core.drafters.base import Proposal
    from core.drafters.suffix import SuffixDrafter
    from core.methods import run_method
    from core.models import encode_prompt, load_model
    from core.suffix import SuffixCorpus

    rows_in = build_workload(
        a.spec_bench, a.per_category, a.code, a.seed, [c for c in a.categories.split(",") if c], a.code_offset
    )
    target = load_model(a.model, device="cpu", dtype=a.dtype)
    stops = set(target.eos_ids) if hasattr(target, "eos_ids") else set()
    records: list[dict] = []
    state: dict = {}

    def propose(self, sequence):
        draft = self.speculator.propose(sequence)
        state["draft"], state["generated"] = draft, len(sequence) - state["prompt_len"]
        return Proposal(draft.as_tree(sequence[-1]))

    def commit(self, new_tokens, predictions):
        draft = state.pop("draft", None)
        if draft is not None and len(draft):
            max_depth = a.max_new_tokens - state["generated"] - 1
            q, depths = draft.conditionals(), draft.depths()
            for i, accepted in judged_nodes(draft, list(new_tokens), max_depth, stops):
                records.append(
                    {
                        "item": state["id"],
                        "source": draft.sources[i],
                        "q": q[i],
                        "matched": draft.match_len + depths[i] - 1,
                        "match_len": draft.match_len,
                        "depth": depths[i],
                        "accepted": bool(accepted),
                    }
                )
        self.speculator.commit(new_tokens)

    SuffixDrafter.propose, SuffixDrafter.commit = propose, commit
    corpus = SuffixCorpus(fingerprint=target.fingerprint)
    previous: dict[str, str] = {}
    started = time.time()
    for i, row in enumerate(rows_in):
        ids = encode_prompt(target.tokenizer, prompt_of(row, previous))
        state.update(id=row["id"], prompt_len=len(ids))
        run = run_method(
            "suffix", target, ids, {"max_nodes": a.max_nodes, "max_new_tokens": a.max_new_tokens}, corpus=corpus
        )
        previous[row["id"]] = run.output_text  # lossless: greedy's output
        print(f"[{i + 1}/{len(rows_in)}] {row['id']} ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    fits = {h: log_likelihood(records, h) for h in HALVES}
    best = max(fits, key=lambda h: fits[h])
    print(f"{len(records)} judged nodes from {len(rows_in)} requests: {sorted({r['item'] for r in records})}")
    for h, ll in fits.items():
        print(f"half {h:5.1f}: log-likelihood {ll:9.1f}{'  <- best' if h == best else ''}")
    table = calibration_table(records, best)
    print("| source | bucket | nodes | mean confidence | accepted |\n|---|---|---|---|---|")
    for c in table:
        print(f"| {c['source']} | {c['bucket']} | {c['nodes']} | {c['confidence']:.2f} | {c['accepted']:.2f} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(a).items()},
                "items": [r["id"] for r in rows_in],
                "log_likelihood": fits,
                "best_half": best,
                "calibration": table,
                "records": records,
            },
            indent=1,
        )
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
