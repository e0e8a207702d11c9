"""What a verification rule's reason reads like in the UI: AASD's per-node threshold under its own name, and a
correction token by its text, not its id (the engine's reasons give ids; runs stored before the engine named AASD's
threshold θ say "δ" for both thresholds)."""

from __future__ import annotations

import re
from collections.abc import Callable

from core.trace import RunTrace

AASD_THRESHOLD = "θ"  # AASD's per-node threshold min(α·H + β, max p): not CASD's fixed δ, so not named δ
_AASD_RULE = re.compile(r"δ (\S+) = min\(α·H \+ β, max p\)")
_CORRECTION = re.compile(r"\bcorrection (\d+)")
TokenText = Callable[[int], str]


def readable_reason(reason: str | None, text_of: TokenText | None = None) -> str:
    """A rule's reason as the replay shows it: AASD's per-node threshold named θ (older runs' reasons call it δ,
    CASD's fixed threshold's name), and the correction t* as its token text instead of its id."""
    if not reason:
        return reason or ""
    out = _AASD_RULE.sub(lambda m: f"{AASD_THRESHOLD} {m.group(1)} = min(α·H + β, max p)", reason)
    if text_of is not None:
        out = _CORRECTION.sub(lambda m: f"correction {text_of(int(m.group(1)))!r}", out)
    return out


def known_texts(trace: RunTrace, decode: Callable[[list[int]], str] | None = None) -> TokenText:
    """id -> text for a run's tokens: the texts its node records carry, else `decode`'s (asked only for ids no record
    names: it may load a tokenizer), else ⟨id⟩."""
    known = {n.token_id: n.token_text for s in trace.steps for n in s.nodes}

    def text_of(token_id: int) -> str:
        if token_id in known:
            return known[token_id]
        if decode is not None:
            try:
                known[token_id] = decode([token_id])
                return known[token_id]
            except Exception:  # noqa: BLE001 - an id outside the vocabulary: shown by id
                pass
        return f"⟨{token_id}⟩"

    return text_of
