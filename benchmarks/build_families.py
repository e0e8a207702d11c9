"""Write the built task families (docqa, code) as LongBench-format JSON Lines and describe every family's splits.

The rows are a deterministic function of the running Python's standard library
(workbench.evaluation.built_tasks); `workbench.evaluation.families` builds the same rows into the workbench
home on first use. This script writes them where you want them (to read, or to pass as
`--data longbench@PATH`), and prints per family and split the item count, the prompt length in tokens of
--tokenizer-model (when fetched) and whether the splits share an id or a word 13-gram.

    python benchmarks/build_families.py --out results/families
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.evaluation.built_tasks import BUILDERS  # noqa: E402
from workbench.evaluation.families import (
    BUILT_COUNTS,
    FAMILIES,
    SPLITS,
    family_tasks,
    split_overlap,
    write_rows,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/families", help="folder for docqa-<split>.jsonl and code-<split>.jsonl")
    ap.add_argument("--families", default=",".join(FAMILIES), help="families to describe (default: all)")
    ap.add_argument(
        "--tokenizer-model", default="smollm2-135m", help="count prompt tokens with this model's tokenizer ('' to skip)"
    )
    args = ap.parse_args()
    out = Path(args.out)
    for name, build in BUILDERS.items():
        for split in SPLITS:
            rows = build(split, BUILT_COUNTS[split])
            path = write_rows(rows, out / f"{name}-{split}.jsonl")
            kinds = Counter(r.get("question_type", "next line") for r in rows)
            print(
                f"wrote {path}: {len(rows)} rows ({', '.join(f'{k} {v}' for k, v in kinds.items())}) from "
                f"{len({r['module'] for r in rows})} modules"
            )
    tokenizer = None
    if args.tokenizer_model:
        from core.models import is_fetched, load_model

        if is_fetched(args.tokenizer_model):
            tokenizer = load_model(args.tokenizer_model).tokenizer
    print(
        f"\n| family | held-out items | evaluation items | prompt tokens (median, min-max){'' if tokenizer else ' n/a'} "
        f"| shared ids / 13-grams |\n|---|---|---|---|---|"
    )
    for name in (n.strip() for n in args.families.split(",") if n.strip()):
        tasks = {split: family_tasks(name, split) for split in SPLITS}
        lengths = ""
        if tokenizer is not None:
            from core.models import encode_prompt

            n = [len(encode_prompt(tokenizer, t.prompt(), chat=t.chat)) for split in SPLITS for t in tasks[split]]
            lengths = f"{statistics.median(n):.0f} ({min(n)}-{max(n)})"
        overlap = split_overlap(name)
        print(
            f"| {name} | {len(tasks['held_out'])} | {len(tasks['evaluation'])} | {lengths} | "
            f"{len(overlap['ids'])} / {len(overlap['text'])} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
