"""Prompt compression (CASD; METHODS.md "Prompt compression"): the model reads a shortened context while
the draft pool may keep the full one (`pool=full`, the default of the context-drafting methods).

Only the context is compressed; the instruction and the question around it stay whole (the caller
splits the prompt: workbench.evaluation.tasks.prompt_parts). Three compressors:

- `selfinfo` (built in, offline, deterministic): token-level self-information −log p(token | prefix)
  under a small local causal LM (the target itself, or any loaded model), the idea of Selective Context
  and LLMLingua-1. Tokens are grouped into words (a word never loses half its tokens), each word scored
  by the mean self-information of its tokens, and every sentence gets its share of the budget
  (`select_units`): the context keeps round(rate × N) of its N tokens, up to one word.
  `selfinfo[layers=K]` scores with the model's first K decoder layers, its final norm and its LM head (an
  early-exit LM carved from the scoring model: about K/L of a forward; `early_exit_decoder`).
  `selfinfo[unit=sentence]` keeps whole sentences instead (coarse-grained, as LLMLingua's sentence filter):
  those of highest mean self-information while they fit the context's budget, so the kept text stays readable.
- `llmlingua` (the `llmlingua` package, 0.2.2, imported only when asked for): LLMLingua-1's
  `PromptCompressor` over a local causal-LM folder. It needs tiktoken's gpt-3.5-turbo BPE file
  (downloaded at start unless cached in TIKTOKEN_CACHE_DIR); without it, CompressorUnavailable says so.
- `llmlingua2` (the same package): LLMLingua-2, a token classifier (BERT or XLM-RoBERTa) that labels every
  word keep or drop; it works on text, so it is independent of the target. The classifier is a hub id or a
  local folder in WORKBENCH_LLMLINGUA2_MODEL (default: the small bert-base-multilingual meetingbank model); it
  also needs tiktoken's BPE file. Either out of reach is CompressorUnavailable, saying which.

The decisions are pure functions (`split_sentences`, `word_starts`, `select_units`), tested without a model.
"""
from __future__ import annotations

import math
import os
import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import InvalidInputError, WorkbenchError

COMPRESSORS = {
    "selfinfo": "built in: keep the words of highest self-information under a local causal LM, budget per sentence (offline)",
    "llmlingua": "the llmlingua package (LLMLingua-1 over a local model folder; needs tiktoken's BPE file, i.e. network once)",
    "llmlingua2": "the llmlingua package (LLMLingua-2: a token classifier from the hub or the folder in WORKBENCH_LLMLINGUA2_MODEL; "
                  "needs tiktoken's BPE file and the classifier, i.e. network once)",
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


COMPRESSOR_OPTIONS = {  # compressor -> {option: what it does}; written NAME[option=value,...]
    "selfinfo": {"layers": "layers=K: score with the first K decoder layers of the scoring model, then its final norm and "
                           "LM head (early exit: about K/L of a forward; 1 <= K <= L)",
                 "unit": "unit=word|sentence: keep the most informative words of every sentence (word, the default) or the "
                         "most informative whole sentences (sentence: coarse-grained, the kept text stays readable)"},
}
UNITS = ("word", "sentence")  # what selfinfo keeps or drops whole; word is the default (not written in the label)


def parse_compressor(spec: Any) -> tuple[str, dict[str, int | str]]:
    """`selfinfo[layers=8]` -> ("selfinfo", {"layers": 8}); a bare name has no options (None: the default).
    Options are checked here as far as they can be without a model (K ≥ 1; K ≤ L once the model is loaded;
    unit is word or sentence, and unit=word, the default, is dropped so that the label stays canonical)."""
    text = str(spec or DEFAULT_COMPRESSOR).strip().lower()
    name, bracket, rest = text.partition("[")
    name = name.strip()
    if name not in COMPRESSORS:
        raise InvalidInputError(f"unknown compressor {name!r}; known: " + "; ".join(f"{k} ({v})" for k, v in COMPRESSORS.items())
                                + "; selfinfo takes [layers=K] (early-exit scoring) and [unit=sentence] (whole sentences)")
    options: dict[str, int | str] = {}
    if bracket:
        if not rest.endswith("]"):
            raise InvalidInputError(f"bad compressor spec {spec!r}: write NAME or NAME[option=value], e.g. selfinfo[layers=8]")
        allowed = COMPRESSOR_OPTIONS.get(name, {})
        for item in filter(None, (x.strip() for x in rest[:-1].split(","))):
            key, eq, value = (x.strip() for x in item.partition("="))
            if key not in allowed or not eq:
                known = "; ".join(allowed.values()) or "none"
                raise InvalidInputError(f"bad option {item!r} in compressor spec {spec!r}; {name} takes: {known}")
            if key == "unit":
                if value not in UNITS:
                    raise InvalidInputError(f"{name}[unit={value}]: unit must be one of {', '.join(UNITS)} (what the "
                                            f"compressor keeps or drops whole)")
                if value != UNITS[0]:
                    options[key] = value
                continue
            try:
                number = int(value)
            except ValueError:
                number = None
            if number is None or number < 1:
                raise InvalidInputError(f"{name}[{key}={value}]: {key} must be a whole number >= 1 (K of the scoring "
                                        f"model's L decoder layers)")
            options[key] = number
    return name, options


def compressor_label(name: str, options: dict[str, Any]) -> str:
    """The canonical spec a run records: `selfinfo`, `selfinfo[layers=8]`."""
    return name + ("[" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + "]" if options else "")


def check_compressor(name: Any) -> str:
    """The canonical compressor spec (lower case, options sorted), or InvalidInputError."""
    return compressor_label(*parse_compressor(name))


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

HEAD_ROWS = 128  # positions per LM-head product when scoring (the float32 logits stay small and in cache)


def decoder_of(model):
    """(decoder stack, LM head) of a transformers causal LM: the base model (its decoder layers and final norm)
    and the output projection. Logits are head(decoder(x)) for Llama-, Qwen2- and Mistral-style models."""
    get_decoder, get_head = getattr(model, "get_decoder", None), getattr(model, "get_output_embeddings", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if decoder is None or head is None or decoder is model:
        raise CompressorUnavailable(f"{type(model).__name__} has no separate decoder and LM head "
                                    f"(get_decoder / get_output_embeddings): it cannot be scored layer by layer")
    return decoder, head


def decoder_layer_count(model) -> int:
    """L, the number of decoder layers of `model` (its decoder's `layers` list)."""
    layers = getattr(decoder_of(model)[0], "layers", None)
    if layers is None or not hasattr(layers, "__getitem__"):
        raise CompressorUnavailable(f"{type(model).__name__}'s decoder has no `layers` list (Llama, Qwen2, Mistral, "
                                    f"Gemma and SmolLM2 have one): early-exit scoring cannot truncate it")
    return len(layers)


def check_layers(model, layers: int | None) -> int | None:
    """`layers` (K) for early-exit scoring: None (all layers) or 1..L, L the model's decoder layers."""
    if layers is None:
        return None
    total = decoder_layer_count(model)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= total:
        raise InvalidInputError(f"selfinfo[layers={layers}]: the scoring model ({type(model).__name__}) has {total} decoder "
                                f"layers, so layers must be an integer in 1..{total} (early exit after layer K; "
                                f"{total} or no option: the whole model)")
    return layers


def early_exit_decoder(model, layers: int | None):
    """The model's decoder running only its first `layers` decoder layers, then its own final norm: a shallow
    copy of the decoder module whose `layers` list holds the first K layers (the same modules and weights:
    nothing is copied or downloaded). The model itself is never changed, so the engine (or another thread)
    can use it meanwhile; the decoder's own forward still builds masks, rotary embeddings and position ids,
    whatever transformers version runs it (it loops over `self.layers[: config.num_hidden_layers]`, and
    Qwen2 picks each layer's mask by its index, which the first K layers keep)."""
    import copy

    decoder, _ = decoder_of(model)
    if layers is None or layers == decoder_layer_count(model):
        return decoder
    clone = copy.copy(decoder)  # shares the submodule table with `decoder`: give it its own before changing it
    object.__setattr__(clone, "_modules", dict(decoder._modules))
    object.__setattr__(clone, "_parameters", dict(decoder._parameters))
    object.__setattr__(clone, "_buffers", dict(decoder._buffers))
    clone._modules["layers"] = decoder.layers[:layers]  # a new ModuleList over the same first K layers
    clone.__dict__.pop("forward", None)  # an instance-level forward (accelerate's hook) is bound to the original
    return clone


_PROBED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def scoring_path(model, layers: int | None = None):
    """(decoder, head) that self_information runs: the decoder (early exit after `layers` layers) and the LM
    head, checked once per model on an 8-token probe: with all layers, head(decoder(x)) must give the model's
    own logits (a model that rescales or caps its logits after the head fails: then (None, None), and
    self_information falls back to the model's forward); with K < L layers it must differ from them (the
    decoder really stopped early). Early exit on a model that fails either check is CompressorUnavailable."""
    import torch

    layers = check_layers(model, layers)
    seen = _PROBED.setdefault(model, {})
    if layers is None and layers not in seen:
        try:
            decoder_of(model)
        except CompressorUnavailable:  # no separate decoder and head: the model's own forward scores
            seen[None] = False
    if layers not in seen:
        decoder, head = decoder_of(model)
        vocab = int(getattr(model.config, "vocab_size", 0) or head.weight.shape[0])
        x = torch.arange(3, 11, device=_device(model))[None] % vocab
        with torch.inference_mode():
            want = model(input_ids=x, use_cache=False).logits[0].float()
            full = head(decoder(input_ids=x, use_cache=False).last_hidden_state.to(head.weight.device))[0].float()
            same = bool(((full - want).abs().max() <= 0.02 * want.abs().max() + 1e-4).item())
            ok = same
            if same and layers is not None and layers < decoder_layer_count(model):
                short = early_exit_decoder(model, layers)
                part = head(short(input_ids=x, use_cache=False).last_hidden_state.to(head.weight.device))[0].float()
                ok = not torch.equal(part, full)
        if layers is not None and not ok:
            why = ("its logits are not head(decoder(x)) (rescaled or capped after the head)" if not same else
                   "its decoder ran every layer anyway")
            raise CompressorUnavailable(f"early-exit scoring (selfinfo[layers={layers}]) does not work on "
                                        f"{type(model).__name__}: {why}; use selfinfo (the whole model) or --compressor-model")
        seen[layers] = ok
    if not seen[layers]:
        return None, None
    return early_exit_decoder(model, layers), decoder_of(model)[1]


def self_information(model, ids: Sequence[int], window: int = WINDOW, layers: int | None = None) -> np.ndarray:
    """−log p(ids[i] | ids[:i]) in nats under `model` (a transformers causal LM), in windows of `window`
    tokens (each window conditioned on its own tokens only); the first token of each window, which has no
    prefix there, gets the window's highest value (such tokens are kept rather than dropped blindly).

    `layers` = K scores with the first K of the model's L decoder layers, then its final norm and LM head
    (early exit: about K/L of a forward, plus the head). The head runs only on the positions that predict a
    next token, HEAD_ROWS at a time, each block's logits cast to float32 and turned into −log p by
    cross-entropy; the whole window's float32 logits are never held at once."""
    import torch
    import torch.nn.functional as F

    ids = [int(t) for t in ids]
    out = np.zeros(len(ids), dtype=np.float64)
    device = _device(model)
    decoder, head = scoring_path(model, layers)
    with torch.inference_mode():
        for start in range(0, len(ids), window):
            chunk = ids[start : start + window]
            if len(chunk) < 2:
                out[start] = 0.0
                continue
            x = torch.tensor([chunk], dtype=torch.long, device=device)
            if decoder is None:  # the model's own forward: its logits are not head(decoder(x))
                rows = model(input_ids=x, use_cache=False).logits[0, :-1]
                blocks = (rows[i : i + HEAD_ROWS] for i in range(0, len(rows), HEAD_ROWS))
            else:  # the head only on the positions that predict a token, a block at a time
                hidden = decoder(input_ids=x, use_cache=False).last_hidden_state[0, :-1].to(head.weight.device)
                blocks = (head(hidden[i : i + HEAD_ROWS]) for i in range(0, len(hidden), HEAD_ROWS))
            nll, at = [], 0
            for logits in blocks:
                target = x[0, 1 + at : 1 + at + len(logits)].to(logits.device)
                nll.append(F.cross_entropy(logits.float(), target, reduction="none"))
                at += len(logits)
            values = torch.cat(nll).cpu().numpy().astype(np.float64)
            out[start + 1 : start + len(chunk)] = values
            out[start] = values.max()
    return out


def _device(model):
    return next(model.parameters()).device


class SelfInfoCompressor:
    """The built-in compressor: words of highest self-information under `model`, budget per sentence;
    `layers` = K: scored by the model's first K decoder layers (early exit), labelled `selfinfo[layers=K]`;
    `unit="sentence"`: whole sentences of highest mean self-information, one budget for the context."""

    name = "selfinfo"

    def __init__(self, model, tokenizer, window: int = WINDOW, layers: int | None = None, unit: str = "word"):
        self.model, self.tokenizer, self.window = model, tokenizer, window
        self.layers = check_layers(model, layers)
        if unit not in UNITS:
            raise InvalidInputError(f"selfinfo[unit={unit}]: unit must be one of {', '.join(UNITS)}")
        self.unit = unit
        options = {"layers": self.layers, "unit": None if unit == UNITS[0] else unit}
        self.name = compressor_label("selfinfo", {k: v for k, v in options.items() if v is not None})
        scoring_path(model, self.layers)  # fails now (not at the first compression) where early exit cannot work

    def tokenize(self, context: str) -> tuple[list[int], list[int]]:
        """(token ids, sentence index per token): each sentence chunk tokenized on its own."""
        ids, sentence_of = [], []
        for s, chunk in enumerate(split_sentences(context)):
            chunk_ids = [int(t) for t in self.tokenizer(chunk, add_special_tokens=False).input_ids]
            ids += chunk_ids
            sentence_of += [s] * len(chunk_ids)
        return ids, sentence_of

    def select(self, context: str, rate: float) -> tuple[list[int], list[int], np.ndarray]:
        """(context token ids, indices of the tokens kept, self-information per token): the decision alone."""
        rate = check_rate(rate)
        context = _check_context(context)
        ids, sentence_of = self.tokenize(context)
        if not ids:
            raise InvalidInputError("nothing to compress: the context has no tokens")
        if rate >= 1.0:
            return ids, list(range(len(ids))), np.zeros(len(ids))
        info = self_information(self.model, ids, self.window, self.layers)
        if self.unit == "sentence":  # each sentence is a unit, all under one budget (one "sentence" for select_units)
            units = list(sentence_of)
            lengths, scores = unit_scores(info, units)
            keep = select_units(lengths, scores, [0] * len(lengths), rate)
            return ids, [i for i, u in enumerate(units) if keep[u]], info
        pieces = [self.tokenizer.decode([t]) for t in ids]
        units = units_of(word_starts(pieces), sentence_of)
        lengths, scores = unit_scores(info, units)
        unit_sentence = [0] * len(lengths)
        for u, s in zip(units, sentence_of):
            unit_sentence[u] = s
        keep = select_units(lengths, scores, unit_sentence, rate)
        return ids, [i for i, u in enumerate(units) if keep[u]], info

    def compress(self, context: str, rate: float) -> Compression:
        rate = check_rate(rate)
        started = time.perf_counter()
        context = _check_context(context)
        ids, kept, _ = self.select(context, rate)
        if rate >= 1.0:
            return Compression(context, self.name, rate, 1.0, len(ids), len(ids), time.perf_counter() - started)
        text = join_runs([self.tokenizer.decode(ids[a:b]) for a, b in runs(kept)])
        return Compression(text, self.name, rate, len(kept) / len(ids), len(ids), len(kept), time.perf_counter() - started)


def import_prompt_compressor(compressor: str):
    """llmlingua's PromptCompressor class, imported only when an llmlingua compressor is asked for."""
    try:
        from llmlingua import PromptCompressor
    except ImportError as e:
        raise CompressorUnavailable(f"the {compressor} compressor needs the llmlingua package ({e}): pip install llmlingua==0.2.2, "
                                    f"or use --compressor selfinfo (built in, offline)") from None
    return PromptCompressor


class LLMLinguaCompressor:
    """LLMLingua-1 (`llmlingua.PromptCompressor`) over a local causal-LM folder, imported only when used."""

    name = "llmlingua"
    classifier: str | None = None  # LLMLingua-2's token classifier (hub id or folder); LLMLingua-1 has none
    # compress_prompt's arguments besides the context and the rate: the token-level filter alone
    options: dict[str, Any] = {"use_sentence_level_filter": False, "use_context_level_filter": False,
                               "use_token_level_filter": True}

    def __init__(self, model_path: str, tokenizer=None, device: str = "cpu"):
        PromptCompressor = import_prompt_compressor(self.name)
        self.tokenizer = tokenizer
        try:
            # no remote code (llmlingua's own default is to allow it): a local folder's Python stays unread
            self.pc = PromptCompressor(model_name=str(model_path), device_map=str(device), model_config={"trust_remote_code": False})
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
            res = self.pc.compress_prompt([context], rate=rate, **self.options)
        except Exception as e:
            raise CompressorUnavailable(llmlingua_failure(e, "compress", self.name, self.classifier)) from None
        text = str(res["compressed_prompt"]).strip("\n")
        n_in, n_out = self._count(context), self._count(text)
        return Compression(text, self.name, rate, n_out / max(n_in, 1), n_in, n_out, time.perf_counter() - started)

    def _count(self, text: str) -> int:
        tok = self.tokenizer if self.tokenizer is not None else self.pc.tokenizer
        return len(tok(text, add_special_tokens=False).input_ids)


LLMLINGUA2_MODEL_ENV = "WORKBENCH_LLMLINGUA2_MODEL"  # the classifier: a hub id or a local folder
DEFAULT_LLMLINGUA2_MODEL = "microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank"  # the paper's small one
# llmlingua 0.2.2 picks its word splitting by a substring of the model name (WordPiece "##" or SentencePiece "▁")
# and raises NotImplementedError for any other name, such as a local folder's: the name it expects, per model type.
LLMLINGUA2_WORD_SPLITTING = {"bert": "bert-base-multilingual-cased", "xlm-roberta": "xlm-roberta-large"}


def llmlingua2_classifier() -> str:
    """The classifier LLMLingua-2 loads: WORKBENCH_LLMLINGUA2_MODEL (hub id or folder) or the default hub id."""
    return os.path.expanduser(os.environ.get(LLMLINGUA2_MODEL_ENV, "").strip()) or DEFAULT_LLMLINGUA2_MODEL


class LLMLingua2Compressor(LLMLinguaCompressor):
    """LLMLingua-2 (`PromptCompressor(..., use_llmlingua2=True)`): a token classifier keeps the words it labels
    most likely to matter. It reads text only, so the target serves just to count the rate reached."""

    name = "llmlingua2"
    # the package README's call (compress_prompt(prompt, rate=..., force_tokens=['\n', '?'])): line breaks and
    # question marks always kept; the one context is compressed by the token-level filter alone
    options = {"use_context_level_filter": False, "use_token_level_filter": True, "force_tokens": ["\n", "?"]}

    def __init__(self, classifier: str | None = None, tokenizer=None, device: str = "cpu"):
        PromptCompressor = import_prompt_compressor(self.name)
        self.classifier, self.tokenizer = classifier or llmlingua2_classifier(), tokenizer
        if self.classifier.startswith(("/", ".")) and not os.path.isdir(self.classifier):
            raise CompressorUnavailable(f"llmlingua2: {LLMLINGUA2_MODEL_ENV}={self.classifier} is not a folder; give the "
                                        f"folder of an LLMLingua-2 classifier (its config, tokenizer and weights) or a hub id "
                                        f"(default {DEFAULT_LLMLINGUA2_MODEL}), or use --compressor selfinfo (built in, offline)")
        try:  # no remote code: the classifier may be any hub id the environment names
            self.pc = PromptCompressor(model_name=self.classifier, device_map=str(device), use_llmlingua2=True,
                                       model_config={"trust_remote_code": False})
        except Exception as e:  # tiktoken's download, the classifier's, a folder it cannot read
            raise CompressorUnavailable(llmlingua_failure(e, "start", self.name, self.classifier)) from None
        model_type = getattr(self.pc.model.config, "model_type", None)
        if not type(self.pc.model).__name__.endswith("ForTokenClassification") or model_type not in LLMLINGUA2_WORD_SPLITTING:
            raise CompressorUnavailable(f"llmlingua2: {self.classifier} loads as {type(self.pc.model).__name__} "
                                        f"(model type {model_type}); LLMLingua-2 needs a token classifier of type "
                                        f"{' or '.join(LLMLINGUA2_WORD_SPLITTING)}, such as {DEFAULT_LLMLINGUA2_MODEL}")
        self.pc.model_name = LLMLINGUA2_WORD_SPLITTING[model_type]  # read only to split words (see above)


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


def llmlingua_failure(error: BaseException, when: str, compressor: str = "llmlingua", classifier: str | None = None) -> str:
    """A readable reason an llmlingua compressor could not run: tiktoken's BPE file out of reach (both), LLMLingua-2's
    classifier out of reach on the hub (`classifier` given), or whatever else failed."""
    text = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"  # on one line: transformers' spans two
    if classifier is not None and _hub_failure(error):
        if os.path.isdir(classifier):  # transformers names the hub even when a local folder lacks a file
            return (f"{compressor} could not {when}: its classifier model could not be loaded from the folder {classifier} "
                    f"({text}); it must hold a token classifier as save_pretrained writes it (config.json, tokenizer, "
                    f"weights), e.g. {DEFAULT_LLMLINGUA2_MODEL}; or use --compressor selfinfo (built in, offline)")
        return (f"{compressor} could not {when}: its classifier model {classifier} could not be loaded from the Hugging "
                f"Face hub (offline?) ({text}). Go online once (the hub caches it), or set {LLMLINGUA2_MODEL_ENV} to a "
                f"local folder holding the classifier; or use --compressor selfinfo (built in, offline)")
    names = {type(c).__name__ for c in type(error).__mro__} | {type(error).__module__.split(".")[0]}
    network = bool(names & {"ConnectionError", "requests", "urllib3", "Timeout"}) or "openaipublic" in str(error) \
        or "tiktoken" in str(error)
    if network:
        return (f"{compressor} could not {when}: at start it calls tiktoken.encoding_for_model('gpt-3.5-turbo'), which "
                f"downloads the cl100k_base BPE file from openaipublic.blob.core.windows.net, and that failed ({text}). Go "
                f"online once, or put the cached file in TIKTOKEN_CACHE_DIR; or use --compressor selfinfo (built in, offline)")
    return f"{compressor} could not {when} ({text}); use --compressor selfinfo (built in, offline)"


def _hub_failure(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) is the Hugging Face hub out of reach: transformers' OSError
    ("We couldn't connect to 'https://huggingface.co' ...") over huggingface_hub's LocalEntryNotFoundError and kin."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        message = str(error).lower()
        if type(error).__module__.startswith("huggingface_hub") or "huggingface.co" in message or "couldn't connect" in message:
            return True
        error = error.__cause__ or error.__context__
    return False


def _check_context(context: str | None) -> str:
    if context is None or not str(context).strip():
        raise InvalidInputError("nothing to compress: the context is empty (compression shortens the context only; the "
                                "instruction and question stay whole): give a context, or leave out --compress")
    return str(context)


def make_compressor(name: str, model) -> SelfInfoCompressor | LLMLinguaCompressor:
    """The named compressor (a spec: `selfinfo`, `selfinfo[layers=8]`, `selfinfo[unit=sentence]`, `llmlingua`, `llmlingua2`)
    over `model` (a core.models.LoadedModel: the target, or another small LM; llmlingua2 only counts with its tokenizer)."""
    name, options = parse_compressor(name)
    if name == "llmlingua2":  # its classifier comes from WORKBENCH_LLMLINGUA2_MODEL, not from `model`
        return LLMLingua2Compressor(tokenizer=model.tokenizer, device=str(model.device))
    if name == "llmlingua":
        return LLMLinguaCompressor(model.path, tokenizer=model.tokenizer, device=str(model.device))
    return SelfInfoCompressor(model.model, model.tokenizer, layers=options.get("layers"), unit=options.get("unit", UNITS[0]))


def is_pool_method(method) -> bool:
    """Methods whose drafts come from the context pool (core.drafters.context): those `pool=` applies to."""
    return "context" in (method.drafter, method.drafter_without_draft)
