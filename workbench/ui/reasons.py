"""What a verification rule's reason reads like in the UI: AASD's per-node threshold under its own name, and a
correction token by its text, not its id (the engine's reasons give ids; runs stored before the engine named AASD's
threshold θ say "δ" for both thresholds)."""

from __future__ import annotations

import re
from collections.abc import Callable

from core.token_text import TokenText, spoken_reason, texts_by_id
from core.trace import RunTrace

AASD_THRESHOLD = "θ"  # AASD's per-node threshold min(α·H + β, max p): not CASD's fixed δ, so not named δ
_AASD_RULE = re.compile(r"δ (\S+) = min\(α·H \+ β, max p\)")
__all__ = ["AASD_THRESHOLD", "TokenText", "known_texts", "readable_reason"]


def readable_reason(reason: str | None, text_of: TokenText | None = None) -> str:
    """A rule's reason as the replay shows it: AASD's per-node threshold named θ (older runs' reasons call it δ,
    CASD's fixed threshold's name), and the correction t* as its token text instead of its id (core.token_text)."""
    if not reason:
        return reason or ""
    out = _AASD_RULE.sub(lambda m: f"{AASD_THRESHOLD} {m.group(1)} = min(α·H + β, max p)", reason)
    return spoken_reason(out, text_of) if text_of is not None else out


def known_texts(trace: RunTrace, decode: Callable[[list[int]], str] | None = None) -> TokenText:
    """id -> text for a run's tokens: the texts its node records carry, else `decode`'s, else ⟨id⟩ (texts_by_id)."""
    return texts_by_id(((n.token_id, n.token_text) for s in trace.steps for n in s.nodes), decode)
