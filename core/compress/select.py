"""The decisions of the built-in compressor, as pure functions tested without a model: how a context splits
into sentences and words (`split_sentences`, `word_starts`, `units_of`), which words to keep under the budget
(`select_units`), and how the kept runs are joined back into text."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from core.compress.spec import check_rate

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


def select_units(
    lengths: Sequence[int], scores: Sequence[float], sentence_of: Sequence[int], rate: float
) -> list[bool]:
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
