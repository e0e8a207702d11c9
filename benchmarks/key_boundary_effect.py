"""What the sentence-and-line-boundary guard takes out of the generalised keys of a correction memory.

Since the guard (core.memory.same_boundary), a text or prefix key never pairs a token that ends a sentence or a line
with one that does not. This counts, over a memory's exact pairs and the target's token texts, the observations
and keys each kind had without the guard and has with it, the keys at count >= λ, and the largest keys it removed,
and looks up the pairs named on the command line (draft and correction texts, as Python literals).

    python benchmarks/key_boundary_effect.py --model qwen2.5-coder-1.5b \\
        --pair "'.\\n'" "' to'" --pair "'.'" "' to'" --pair "')\\n\\n\\n'" "')'"

Default memory: the model pair's shipped table (core/memories/). No model weights are loaded: the tokenizer only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def key_counts(pairs: dict[tuple[int, int], int], text: dict[int, str], guarded: bool) -> dict[str, Counter]:
    """Observations per text and prefix key over the exact pairs, with the boundary guard or as before it (the
    guard is the key functions' only change, so "before" is them with `same_boundary` left out)."""
    from core.memory import normalised_text, prefix_key, prefix_relation, text_key

    out: dict[str, Counter] = {"text": Counter(), "prefix": Counter()}
    for (d, t), n in pairs.items():
        dt, tt = text[d], text[t]
        if guarded:
            tk, pk = text_key(dt, tt), prefix_key(dt, tt)
        else:
            nd, nt = normalised_text(dt), normalised_text(tt)
            tk, pk = ((nd, nt) if nd and nt else None), prefix_relation(nd, nt)
        if tk:
            out["text"][tk] += n
        if pk:
            out["prefix"][pk] += n
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="the target whose tokenizer gives the texts")
    ap.add_argument("--memory", default=None, help="a memory file (default: the shipped forced-calibration table)")
    ap.add_argument("--lam", type=int, default=6)
    ap.add_argument("--top", type=int, default=12, help="how many of the largest removed keys to list")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("DRAFT", "CORRECTION"))
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from core.memory import SHIPPED_DIR, CorrectionMemory, same_boundary
    from core.models import is_fetched, preset_path

    if not is_fetched(args.model):
        print(f"{args.model} is not fetched: python -m workbench models fetch {args.model}", file=sys.stderr)
        return 2
    tok = AutoTokenizer.from_pretrained(preset_path(args.model))
    if args.memory:
        path = Path(args.memory)
    else:
        found = [p for p in SHIPPED_DIR.glob("*.json.gz") if "forced_calibration" in CorrectionMemory.load(p).meta]
        if len(found) != 1:
            print(f"no single shipped forced-calibration table in {SHIPPED_DIR}; pass --memory", file=sys.stderr)
            return 2
        path = found[0]
    memory = CorrectionMemory.load(path)
    pairs = memory.snapshot()
    ids = {i for pair in pairs for i in pair}
    text = {i: tok.decode([i]) for i in ids}
    print(f"memory {path.name}: {sum(pairs.values()):,} observations, {len(pairs):,} exact pairs; λ {args.lam}")

    before, after = key_counts(pairs, text, guarded=False), key_counts(pairs, text, guarded=True)
    print("| kind | observations keyed (before → after) | keys | keys at count ≥ λ |")
    print("|---|---|---|---|")
    for kind in ("text", "prefix"):
        b, a = before[kind], after[kind]
        at_b, at_a = sum(n >= args.lam for n in b.values()), sum(n >= args.lam for n in a.values())
        print(f"| {kind} | {sum(b.values()):,} → {sum(a.values()):,} | {len(b):,} → {len(a):,} | {at_b:,} → {at_a:,} |")
    crossing = Counter()
    for (d, t), n in pairs.items():
        if not same_boundary(text[d], text[t]) and before["text"].get(_text_of(text[d], text[t])):
            crossing[_text_of(text[d], text[t])] += n
    print(f"\nthe {args.top} largest text keys the guard removed (observations):")
    for key, n in crossing.most_common(args.top):
        print(f"  {key!r}: {n}")

    for draft_src, corr_src in args.pair:
        draft, corr = ast.literal_eval(draft_src), ast.literal_eval(corr_src)
        d_ids, c_ids = tok.encode(draft), tok.encode(corr)
        if len(d_ids) != 1 or len(c_ids) != 1:
            print(f"{draft!r} → {corr!r}: not one token each under {args.model}'s tokenizer ({d_ids}, {c_ids})")
            continue
        exact = memory.count(d_ids[0], c_ids[0])
        key = _text_of(draft, corr)
        print(
            f"{draft!r} → {corr!r}: exact count {exact}; text key {key!r} count before {before['text'].get(key, 0)},"
            f" after {after['text'].get(key, 0) if same_boundary(draft, corr) else 'no key'}"
        )
    return 0


def _text_of(draft: str, corr: str) -> tuple[str, str]:
    from core.memory import normalised_text

    return (normalised_text(draft), normalised_text(corr))


if __name__ == "__main__":
    sys.exit(main())
