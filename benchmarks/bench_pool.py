"""Draft-pool speed at CASD's scale: build over N tokens, lookups, incremental extends.

    python benchmarks/bench_pool.py [--tokens 1000000]

Targets (issue 3): build <= 2 s and median lookup <= 1 ms at 1M tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from core.pool import DraftPool  # noqa: E402


def corpus(n: int, vocab: int = 50_000, seed: int = 0) -> np.ndarray:
    """Zipf-distributed tokens with repeated spans copied in, like real documents."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.2, size=n), vocab) - 1
    for _ in range(n // 200):  # copy 20..80-token spans around, so long keys recur
        length = int(rng.integers(20, 80))
        src, dst = rng.integers(0, n - length, size=2)
        ids[dst : dst + length] = ids[src : src + length]
    return ids.astype(np.int64)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--key-len", type=int, default=6)
    ap.add_argument("--ngram", type=int, default=6)
    args = ap.parse_args()
    ids = corpus(args.tokens)
    builds = []
    for _ in range(3):
        t = time.perf_counter()
        pool = DraftPool(ids, key_len=args.key_len, ngram=args.ngram)
        builds.append(time.perf_counter() - t)
    rng = np.random.default_rng(1)
    lookups = []
    for pos in rng.integers(args.key_len, args.tokens, size=2000):
        suffix = ids[pos - args.key_len : pos].tolist()
        t = time.perf_counter()
        pool.lookup(suffix, max_hits=16)
        lookups.append((time.perf_counter() - t) * 1e3)
    extends = []
    for i in range(1000):
        new = rng.integers(0, 50_000, size=int(rng.integers(1, 11))).tolist()
        t = time.perf_counter()
        pool.extend(new)
        extends.append((time.perf_counter() - t) * 1e3)
    build, med, p95 = min(builds), statistics.median(lookups), float(np.percentile(lookups, 95))
    print("| tokens | build s (best of 3) | lookup ms median | lookup ms p95 | extend ms median (1-10 tokens) |")
    print("|---|---|---|---|---|")
    print(f"| {args.tokens:,} | {build:.3f} | {med:.3f} | {p95:.3f} | {statistics.median(extends):.3f} |")
    ok = build <= 2.0 and med <= 1.0
    print(
        f"{'PASS' if build <= 2.0 else 'MISS'} build <= 2 s; {'PASS' if med <= 1.0 else 'MISS'} median lookup <= 1 ms"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
