"""Suffix corpus speed at SuffixDecoding's scale: build from 10,000 stored runs, lookups at 1M tokens,
memory.

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_suffix_index.py --threads 1

A temporary SQLite trace store gets `--runs` complete runs of one model fingerprint (outputs of
`--mean-len` tokens on average, 20-300; a quarter repeat an earlier output with a few tokens changed,
as agent loops and edits do). Their token ids are SmolLM2's over the standard library's Python source
when the preset is fetched (else Zipf-distributed ids). Then:

- build: `workbench.store.corpus.load_corpus` (the store read + the suffix arrays), `--repeats` times;
- lookup: decoding is simulated on held-out requests (half repeat a stored output with changes, half
  are new text): each step proposes (timed: the match and a tree of at most `--max-nodes` nodes),
  then commits what strict verification would accept plus one token. Also a cold lookup (a new
  request whose first propose searches 64 tokens without a previous match to start from);
- memory: bytes of the corpus's arrays and the process's peak RSS.

Targets (issue 35): build <= 5 s including the store read; lookup <= 0.1 ms at 1M corpus tokens.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from core.suffix import SuffixCorpus, SuffixSpeculator  # noqa: E402

FINGERPRINT = "bench-suffix"


def machine(threads: int) -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    marks = ", ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "amx_bf16"))
    return f"{model} ({os.cpu_count()} cores; {marks}); threads {threads}; Python {platform.python_version()}, numpy {np.__version__}"


def token_stream(n: int, seed: int) -> tuple[np.ndarray, str]:
    """n token ids: SmolLM2's over the standard library's source when fetched, else Zipf ids."""
    try:
        from core.models import is_fetched, preset_path

        if is_fetched("smollm2-135m"):
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(preset_path("smollm2-135m"))
            stdlib = Path(os.__file__).parent
            ids: list[int] = []
            for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
                try:
                    ids += tok.encode(path.read_text(encoding="utf-8"))
                except (UnicodeDecodeError, OSError):
                    continue
                if len(ids) >= n:
                    return np.asarray(ids[:n], dtype=np.int64), "SmolLM2 token ids of the standard library's source"
    except Exception as e:  # no transformers or no model: the synthetic ids still measure speed
        print(f"(tokenizer unavailable: {e}; using Zipf ids)")
    rng = np.random.default_rng(seed)
    return (np.minimum(rng.zipf(1.2, size=n), 49_152) - 1).astype(np.int64), "Zipf(1.2) ids over 49,152"


def make_outputs(stream: np.ndarray, count: int, mean_len: int, rng: np.random.Generator) -> list[list[int]]:
    """`count` outputs cut from the stream; a quarter repeat an earlier one with 1-3 tokens changed."""
    outputs: list[list[int]] = []
    pos = 0
    for _ in range(count):
        if outputs and rng.random() < 0.25:
            out = list(outputs[int(rng.integers(0, len(outputs)))])
            for _ in range(int(rng.integers(1, 4))):
                out[int(rng.integers(0, len(out)))] = int(stream[int(rng.integers(0, len(stream)))])
        else:
            length = int(np.clip(rng.normal(mean_len, mean_len * 0.4), 20, 300))
            if pos + length > len(stream):
                pos = 0
            out = stream[pos : pos + length].tolist()
            pos += length
        outputs.append(out)
    return outputs


def fill_store(url: str, outputs: list[list[int]], prompts: list[list[int]]):
    """Insert the runs in bulk (one transaction): rows as Store.save_run would write them."""
    from sqlalchemy import insert
    from sqlalchemy.orm import Session

    from core.trace import RunTrace
    from workbench.store import Store
    from workbench.store.rows import run_row, utcnow
    from workbench.store.schema import Run

    store = Store(url)
    rows = []
    for out, prompt in zip(outputs, prompts):
        trace = RunTrace(
            method="greedy",
            params={"max_new_tokens": 300},
            model="smollm2-135m",
            draft_model=None,
            device="cpu",
            dtype="float32",
            prompt="(synthetic)",
            prompt_ids=prompt,
            output_ids=out,
            output_text="(synthetic)",
            status="complete",
            model_fingerprint=FINGERPRINT,
            stop_reason="eos",
        )
        rows.append({**run_row(trace), "created": utcnow(), "finished": utcnow()})
    with Session(store.engine) as s, s.begin():
        for i in range(0, len(rows), 2000):
            s.execute(insert(Run), rows[i : i + 2000])
    return store


def simulate(spec: SuffixSpeculator, prompt: list[int], target: list[int]):
    """Decode `target` after `prompt` with strict verification of each draft; time every propose
    (wall clock, and this thread's CPU time, which a busy machine inflates less)."""
    spec.begin(prompt)
    text = list(prompt)
    times, cpu, sizes = [], [], []
    pos = 0
    while pos < len(target):
        c, t = time.thread_time(), time.perf_counter()
        d = spec.propose(text)
        times.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
        sizes.append(len(d))
        ok = d.accepted_by(target[pos : len(target) - 1])  # the last token is always the bonus
        new = target[pos : pos + ok + 1]
        spec.commit(new)
        text += new
        pos += len(new)
    spec.end_request()
    return times, cpu, sizes


def rss() -> int:
    """This process's resident set now, in bytes (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def ms(xs) -> str:
    return f"{statistics.mean(xs) * 1e3:.4f} / {statistics.median(xs) * 1e3:.4f} / {float(np.percentile(xs, 95)) * 1e3:.4f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--mean-len", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=1_000_000, help="the corpus bound")
    ap.add_argument("--repeats", type=int, default=3, help="corpus builds timed")
    ap.add_argument("--requests", type=int, default=200, help="held-out requests decoded for the lookup timing")
    ap.add_argument("--max-nodes", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="recorded (numpy's sorts and searches use one)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from workbench.store.corpus import load_corpus, stored_outputs

    print(machine(args.threads))
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rng = np.random.default_rng(args.seed)
    stream, what = token_stream(args.runs * args.mean_len * 13 // 10 + 50_000, args.seed)
    held_out = stream[-40_000:]
    stream = stream[:-40_000]
    outputs = make_outputs(stream, args.runs, args.mean_len, rng)
    prompts = [
        stream[int(p) : int(p) + int(rng.integers(50, 400))].tolist()
        for p in rng.integers(0, len(stream) - 400, args.runs)
    ]
    print(f"{args.runs:,} runs, {sum(map(len, outputs)):,} output tokens ({what}); bound {args.max_tokens:,} tokens")

    with tempfile.TemporaryDirectory() as tmp:
        store = fill_store(f"sqlite:///{tmp}/traces.db", outputs, prompts)
        rss_before = rss()
        reads, builds, totals, cpu_totals = [], [], [], []
        corpus = None
        for _ in range(args.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            corpus = load_corpus(store, FINGERPRINT, args.max_tokens)
            totals.append(time.perf_counter() - t0)
            cpu_totals.append(time.process_time() - c0)
            t0 = time.perf_counter()
            rows = stored_outputs(store, FINGERPRINT, args.max_tokens)
            reads.append(time.perf_counter() - t0)
            builds.append(totals[-1] - reads[-1])
        rss_after = rss()
        store.close()
    print(
        f"corpus: {len(corpus):,} requests (duplicates skipped), {corpus.tokens:,} tokens, hash {corpus.content_hash()}, "
        f"{len(rows):,} rows read"
    )
    print("| build from the store, s (each repeat) | CPU s | of which the store read | of which the suffix arrays |")
    print("|---|---|---|---|")
    print(
        f"| {' / '.join(f'{x:.2f}' for x in totals)} | {' / '.join(f'{x:.2f}' for x in cpu_totals)} | "
        f"{' / '.join(f'{x:.2f}' for x in reads)} | {' / '.join(f'{x:.2f}' for x in builds)} |"
    )

    # lookups: requests that repeat stored outputs with changes, and new text
    keys = corpus.keys()
    requests = []
    for i in range(args.requests):
        prompt = held_out[int(rng.integers(0, 20_000)) :][: int(rng.integers(20, 200))].tolist()
        if i % 2 == 0:
            target = corpus.sequence(keys[int(rng.integers(0, len(keys)))]).tolist()
            for _ in range(int(rng.integers(0, 3))):
                target[int(rng.integers(0, len(target)))] = int(stream[int(rng.integers(0, len(stream)))])
            kind = "repeat"
        else:
            start = int(rng.integers(20_000, len(held_out) - 300))
            target = held_out[start : start + int(rng.integers(50, 200))].tolist()
            kind = "new"
        requests.append((kind, prompt, target))
    print(
        f"\nlookups over {corpus.tokens:,} corpus tokens, max_nodes {args.max_nodes}, alpha 4, min_prob 0.1 "
        f"(ms, mean / median / p95)"
    )
    print("| lookup | proposes | wall ms | CPU ms | nodes (mean) |")
    print("|---|---|---|---|---|")
    for label, use_context in (("corpus + request text", True), ("corpus only", False)):
        spec = SuffixSpeculator(corpus, max_nodes=args.max_nodes, use_context=use_context)
        by_kind: dict[str, list[list]] = {"repeat": [[], [], []], "new": [[], [], []]}
        for kind, prompt, target in requests:
            for acc, xs in zip(by_kind[kind], simulate(spec, prompt, target)):
                acc.extend(xs)
        every = [a + b for a, b in zip(by_kind["repeat"], by_kind["new"])]
        big = [[x for x, n in zip(col, every[2]) if n >= 12] for col in every[:2]]
        rows_out = [
            (f"{label}, every step", every),
            (f"{label}, repeat requests", by_kind["repeat"]),
            (f"{label}, new requests", by_kind["new"]),
        ]
        for name, (wall, cpu, sizes) in rows_out:
            print(f"| {name} | {len(wall):,} | {ms(wall)} | {ms(cpu)} | {statistics.mean(sizes):.1f} |")
        if big[0]:
            print(
                f"| {label}, trees of 12-{args.max_nodes} nodes | {len(big[0]):,} | {ms(big[0])} | {ms(big[1])} | - |"
            )
        cold, cold_cpu = [], []
        for kind, prompt, target in requests:
            spec.begin(prompt + target[:64])
            c, t = time.thread_time(), time.perf_counter()
            spec.propose()
            cold.append(time.perf_counter() - t)
            cold_cpu.append(time.thread_time() - c)
        print(f"| {label}, cold (first propose of a request) | {len(cold):,} | {ms(cold)} | {ms(cold_cpu)} | - |")

    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows = [(k, corpus.sequence(k)) for k in keys]
    tracemalloc.start()
    rebuilt = SuffixCorpus(rows, max_tokens=args.max_tokens)
    build_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rebuilt.content_hash() == corpus.content_hash()
    del rebuilt
    print(
        f"\nmemory: corpus arrays {corpus.nbytes / 2**20:.1f} MiB ({corpus.nbytes / max(1, corpus.tokens):.1f} bytes per token); "
        f"peak allocation while building the suffix arrays {build_peak / 2**20:.0f} MiB (tracemalloc); "
        f"process RSS before the store was read {rss_before / 2**20:.0f} MiB, after {rss_after / 2**20:.0f} MiB, "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (the process also holds the "
        f"tokenizer, the synthetic runs and the store's rows)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
