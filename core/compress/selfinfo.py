"""The built-in compressor `selfinfo`: token-level self-information −log p(token | prefix) under a small local
causal LM (the target itself, or any loaded model), the idea of Selective Context and LLMLingua-1. Tokens are
grouped into words (a word never loses half its tokens), each word scored by the mean self-information of its
tokens, and every sentence gets its share of the budget (core.compress.select)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from core.compress.early_exit import check_layers, model_device, scoring_path
from core.compress.select import join_runs, runs, select_units, split_sentences, unit_scores, units_of, word_starts
from core.compress.spec import UNITS, Compression, check_context, check_rate, compressor_label
from core.errors import InvalidInputError

WINDOW = 512  # tokens per forward when measuring self-information (bounds the logits' memory)
HEAD_ROWS = 128  # positions per LM-head product when scoring (the float32 logits stay small and in cache)


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
    device = model_device(model)
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
        context = check_context(context)
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
        context = check_context(context)
        ids, kept, _ = self.select(context, rate)
        if rate >= 1.0:
            return Compression(context, self.name, rate, 1.0, len(ids), len(ids), time.perf_counter() - started)
        text = join_runs([self.tokenizer.decode(ids[a:b]) for a, b in runs(kept)])
        return Compression(
            text, self.name, rate, len(kept) / len(ids), len(ids), len(kept), time.perf_counter() - started
        )
