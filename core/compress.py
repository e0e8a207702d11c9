"""Prompt compression (CASD; METHODS.md "Prompt compression"): the model reads a shortened context while
the draft pool may keep the full one (`pool=full`, the default of the context-drafting methods).

Only the context is compressed; the instruction and the question around it stay whole (the caller
splits the prompt: workbench.evaluation.tasks.prompt_parts). Two compressors:

- `selfinfo` (built in, offline, deterministic): token-level self-information −log p(token | prefix)
  under a small local causal LM (the target itself, or any loaded model), the idea of Selective Context
  and LLMLingua-1. Tokens are grouped into words (a word never loses half its tokens), each word scored
  by the mean self-information of its tokens, and every sentence gets its share of the budget
  (`select_units`): the context keeps round(rate × N) of its N tokens, up to one word.
- `llmlingua` (the `llmlingua` package, 0.2.2, imported only when asked for): LLMLingua-1's
  `PromptCompressor` over a local causal-LM folder. It needs tiktoken's gpt-3.5-turbo BPE file
  (downloaded at start unless cached in TIKTOKEN_CACHE_DIR); without it, CompressorUnavailable says so.

The decisions are pure functions (`split_sentences`, `word_starts`, `select_units`), tested without a model.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import InvalidInputError, WorkbenchError

COMPRESSORS = {
    "selfinfo": "built in: keep the words of highest self-information under a local causal LM, budget per sentence (offline)",
    "llmlingua": "the llmlingua package (LLMLingua-1 over a local model folder; needs tiktoken's BPE file, i.e. network once)",
}
DEFAULT_COMPRESSOR = "selfinfo"
POOLS = ("full", "compressed")  # what the draft pool holds when the prompt is compressed
DEFAULT_POOL = "full"
WINDOW = 512  # tokens per forward when measuring self-information (bounds the logits' memory)


class CompressorUnavailable(WorkbenchError):
    """A compressor that cannot load or run here (package missing, a file it downloads unreachable)."""


def check_rate(rate: Any) -> float:
    """The kept fraction of context tokens: a finite number in (0, 1]."""
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise InvalidInputError(f"--compress must be a number in (0, 1] (the kept fraction of context tokens), got {rate!r}") from None
    if not math.isfinite(value) or not 0.0 < value <= 1.0:
        raise InvalidInputError(f"--compress = {rate} is out of range (0, 1]: it is the fraction of context tokens kept "
                                f"(0.5 keeps half; 1 keeps all)")
    return value


def check_compressor(name: Any) -> str:
    name = str(name or DEFAULT_COMPRESSOR).strip().lower()
    if name not in COMPRESSORS:
        raise InvalidInputError(f"unknown compressor {name!r}; known: " + "; ".join(f"{k} ({v})" for k, v in COMPRESSORS.items()))
    return name


def check_pool(value: Any) -> str:
    """`pool=full|compressed` (also 1|0): what a context-drafting method's pool holds under compression."""
    text = str(value).strip().lower()
    text = {"1": "full", "0": "compressed", "1.0": "full", "0.0": "compressed"}.get(text, text)
    if text not in POOLS:
        raise InvalidInputError(f"pool must be full (the pool holds the uncompressed context, CASD) or compressed "
                                f"(the pool holds the prompt the model reads), got {value!r}")
    return text


@dataclass(frozen=True)
class Compression:
    """One compressed context and what it cost."""

    text: str  # the compressed context
    compressor: str
    rate: float  # the target: kept fraction of context tokens
    reached: float  # the fraction kept, counted in the compressor's tokens
    tokens_in: int
    tokens_kept: int
    seconds: float

    def record(self) -> dict[str, Any]:
        """What a run records in its parameters (read by nothing that verifies: re-scoring ignores them)."""
        return {"compress": self.rate, "compressor": self.compressor, "compress_reached": round(self.reached, 4),
                "compress_tokens": f"{self.tokens_kept}/{self.tokens_in}", "compress_seconds": round(self.seconds, 4)}


# ---- pure decisions -------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentence chunks whose concatenation is `text` exactly: a cut after . ! ? (and closing quotes or
    brackets) followed by whitespace, and after every run of newlines; the whitespace stays with the
    sentence before it."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > start:
            out.append(text[start : m.end()])
            start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def word_starts(pieces: Sequence[str]) -> list[bool]:
    """Whether each token (given as its decoded text) begins a word: the first token, a token that begins
    with whitespace, and the token after one that ends with whitespace. A token of whitespace alone stays
    with the word before it (so a kept word keeps the space or line break after it)."""
    out = []
    for i, piece in enumerate(pieces):
        if i == 0:
            out.append(True)
        elif piece and not piece.strip():
            out.append(False)
        else:
            out.append(piece[:1].isspace() or pieces[i - 1][-1:].isspace())
    return out


def units_of(starts: Sequence[bool], sentence_of: Sequence[int]) -> list[int]:
    """The unit (word) index of every token: a new unit at each word start and at each new sentence."""
    out, unit = [], -1
    for i, (s, sent) in enumerate(zip(starts, sentence_of)):
        if i == 0 or s or sent != sentence_of[i - 1]:
            unit += 1
        out.append(unit)
    return out


def select_units(lengths: Sequence[int], scores: Sequence[float], sentence_of: Sequence[int], rate: float) -> list[bool]:
    """Which units (words) to keep.

    Sentences are taken in order; each gets the budget round(rate × tokens up to its end) − tokens kept so
    far (rounding carried forward, so the whole context keeps round(rate × N) tokens, up to one unit).
    Within a sentence, units go in by decreasing score (ties: the earlier first) while they fit its budget;
    a budget a sentence cannot use passes to the next. Something is always kept. Pure and deterministic."""
    rate = check_rate(rate)
    n = len(lengths)
    if not (len(scores) == len(sentence_of) == n):
        raise ValueError("lengths, scores and sentence_of must have one entry per unit")
    keep = [False] * n
    if n == 0:
        return keep
    if rate >= 1.0:
        return [True] * n
    by_sentence: dict[int, list[int]] = {}
    for u, s in enumerate(sentence_of):
        by_sentence.setdefault(s, []).append(u)
    seen = kept = 0
    for s in sorted(by_sentence):
        units = by_sentence[s]
        seen += sum(lengths[u] for u in units)
        budget = int(math.floor(rate * seen + 0.5)) - kept
        for u in sorted(units, key=lambda u: (-float(scores[u]), u)):
            if lengths[u] <= budget:
                keep[u] = True
                budget -= lengths[u]
                kept += lengths[u]
    if not any(keep):
        keep[min(range(n), key=lambda u: (-float(scores[u]), u))] = True
    return keep


def runs(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted indices as [start, stop) runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def join_runs(pieces: Sequence[str]) -> str:
    """The kept runs' texts joined, with a space where a cut would glue two words together."""
    out = ""
    for p in pieces:
        if out and p and not out[-1].isspace() and not p[0].isspace():
            out += " "
        out += p
    return out


def unit_scores(info: Sequence[float], units: Sequence[int]) -> tuple[list[int], list[float]]:
    """(tokens per unit, mean self-information per unit)."""
    n = (max(units) + 1) if len(units) else 0
    total, count = [0.0] * n, [0] * n
    for x, u in zip(info, units):
        total[u] += float(x)
        count[u] += 1
    return count, [t / c if c else 0.0 for t, c in zip(total, count)]


# ---- self-information under a causal LM -----------------------------------------------------

def self_information(model, ids: Sequence[int], window: int = WINDOW) -> np.ndarray:
    """−log p(ids[i] | ids[:i]) in nats under `model` (a transformers causal LM), in windows of `window`
    tokens (each window conditioned on its own tokens only); the first token of each window, which has no
    prefix there, gets the window's highest value (such tokens are kept rather than dropped blindly)."""
    import torch

    ids = [int(t) for t in ids]
    out = np.zeros(len(ids), dtype=np.float64)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(ids), window):
            chunk = ids[start : start + window]
            x = torch.tensor([chunk], dtype=torch.long, device=device)
            logits = model(input_ids=x).logits[0].float()
            if len(chunk) > 1:
                lp = logits[:-1].log_softmax(-1)
                nll = -lp.gather(1, x[0, 1:, None])[:, 0]
                values = nll.cpu().numpy().astype(np.float64)
                out[start + 1 : start + len(chunk)] = values
                out[start] = values.max()
            else:
                out[start] = 0.0
    return out


class SelfInfoCompressor:
    """The built-in compressor: words of highest self-information under `model`, budget per sentence."""

    name = "selfinfo"

    def __init__(self, model, tokenizer, window: int = WINDOW):
        self.model, self.tokenizer, self.window = model, tokenizer, window

    def tokenize(self, context: str) -> tuple[list[int], list[int]]:
        """(token ids, sentence index per token): each sentence chunk tokenized on its own."""
        ids, sentence_of = [], []
        for s, chunk in enumerate(split_sentences(context)):
            chunk_ids = [int(t) for t in self.tokenizer(chunk, add_special_tokens=False).input_ids]
            ids += chunk_ids
            sentence_of += [s] * len(chunk_ids)
        return ids, sentence_of

    def compress(self, context: str, rate: float) -> Compression:
        rate = check_rate(rate)
        started = time.perf_counter()
        context = _check_context(context)
        ids, sentence_of = self.tokenize(context)
        if not ids:
            raise InvalidInputError("nothing to compress: the context has no tokens")
        if rate >= 1.0:
            return Compression(context, self.name, rate, 1.0, len(ids), len(ids), time.perf_counter() - started)
        info = self_information(self.model, ids, self.window)
        pieces = [self.tokenizer.decode([t]) for t in ids]
        units = units_of(word_starts(pieces), sentence_of)
        lengths, scores = unit_scores(info, units)
        unit_sentence = [0] * len(lengths)
        for u, s in zip(units, sentence_of):
            unit_sentence[u] = s
        keep = select_units(lengths, scores, unit_sentence, rate)
        kept = [i for i, u in enumerate(units) if keep[u]]
        text = join_runs([self.tokenizer.decode(ids[a:b]) for a, b in runs(kept)])
        kept = [ids[i] for i in kept]
        return Compression(text, self.name, rate, len(kept) / len(ids), len(ids), len(kept), time.perf_counter() - started)


class LLMLinguaCompressor:
    """LLMLingua-1 (`llmlingua.PromptCompressor`) over a local causal-LM folder, imported only when used."""

    name = "llmlingua"

    def __init__(self, model_path: str, tokenizer=None, device: str = "cpu"):
        try:
            from llmlingua import PromptCompressor
        except ImportError as e:
            raise CompressorUnavailable(f"the llmlingua compressor needs the llmlingua package ({e}): pip install llmlingua==0.2.2, "
                                        f"or use --compressor selfinfo (built in, offline)") from None
        self.tokenizer = tokenizer
        try:
            self.pc = PromptCompressor(model_name=str(model_path), device_map=str(device))
        except Exception as e:  # tiktoken's download, a model it cannot read, an API it no longer finds
            raise CompressorUnavailable(llmlingua_failure(e, "start")) from None
        self.pc.model = LegacyCacheLM(self.pc.model)

    def compress(self, context: str, rate: float) -> Compression:
        rate = check_rate(rate)
        started = time.perf_counter()
        context = _check_context(context)
        if rate >= 1.0:
            n = self._count(context)
            return Compression(context, self.name, rate, 1.0, n, n, time.perf_counter() - started)
        try:
            res = self.pc.compress_prompt([context], rate=rate, use_sentence_level_filter=False, use_context_level_filter=False,
                                          use_token_level_filter=True)
        except Exception as e:
            raise CompressorUnavailable(llmlingua_failure(e, "compress")) from None
        text = str(res["compressed_prompt"]).strip("\n")
        n_in, n_out = self._count(context), self._count(text)
        return Compression(text, self.name, rate, n_out / max(n_in, 1), n_in, n_out, time.perf_counter() - started)

    def _count(self, text: str) -> int:
        tok = self.tokenizer if self.tokenizer is not None else self.pc.tokenizer
        return len(tok(text, add_special_tokens=False).input_ids)


class LegacyCacheLM:
    """llmlingua 0.2.2, written for transformers 4, passes and slices the KV cache as per-layer (key, value)
    pairs; transformers 5 speaks DynamicCache. This wrapper converts at the boundary (everything else is the model)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def __call__(self, input_ids, attention_mask=None, past_key_values=None, use_cache=True, **kwargs):
        from transformers import DynamicCache

        from core.cache import cache_arg

        cache = None
        if past_key_values is not None:
            cache = DynamicCache(ddp_cache_data=[(k, v) for k, v in past_key_values], config=self.model.config)
        extra = cache_arg(self.model, cache) if cache is not None else {}
        out = self.model(input_ids, attention_mask=attention_mask, use_cache=use_cache, **extra, **kwargs)
        returned = getattr(out, "past_key_values", None)
        if returned is None:
            returned = getattr(out, "cache", None)
        if returned is not None and hasattr(returned, "layers"):
            out.past_key_values = [(layer.keys, layer.values) for layer in returned.layers]
        return out


def llmlingua_failure(error: BaseException, when: str) -> str:
    """A readable reason llmlingua could not run (the usual one: tiktoken's BPE file is out of reach)."""
    text = f"{type(error).__name__}: {str(error)[:300]}"
    names = {type(c).__name__ for c in type(error).__mro__} | {type(error).__module__.split(".")[0]}
    network = bool(names & {"ConnectionError", "requests", "urllib3", "Timeout"}) or "openaipublic" in str(error) \
        or "tiktoken" in str(error)
    if network:
        return (f"llmlingua could not {when}: at start it calls tiktoken.encoding_for_model('gpt-3.5-turbo'), which downloads "
                f"the cl100k_base BPE file from openaipublic.blob.core.windows.net, and that failed ({text}). Go online once, "
                f"or put the cached file in TIKTOKEN_CACHE_DIR; or use --compressor selfinfo (built in, offline)")
    return f"llmlingua could not {when} ({text}); use --compressor selfinfo (built in, offline)"


def _check_context(context: str | None) -> str:
    if context is None or not str(context).strip():
        raise InvalidInputError("nothing to compress: the context is empty (compression shortens the context only; the "
                                "instruction and question stay whole): give a context, or leave out --compress")
    return str(context)


def make_compressor(name: str, model) -> SelfInfoCompressor | LLMLinguaCompressor:
    """The named compressor over `model` (a core.models.LoadedModel: the target, or another small LM)."""
    name = check_compressor(name)
    if name == "llmlingua":
        return LLMLinguaCompressor(model.path, tokenizer=model.tokenizer, device=str(model.device))
    return SelfInfoCompressor(model.model, model.tokenizer)


def is_pool_method(method) -> bool:
    """Methods whose drafts come from the context pool (core.drafters.context): those `pool=` applies to."""
    return "context" in (method.drafter, method.drafter_without_draft)
