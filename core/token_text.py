"""How a token's text is shown to a person, in every view (the app's tables and figures, the CLI, the CSV export):
whitespace made visible, and a verification reason's correction token named by its text instead of its id.

The engine's reasons (core.walk) name the correction t* by id ("correction 504"): an id is what a machine keeps
(node records carry it as correction_id too), a text is what a person reads."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# A token's whitespace as a sign (the replay's browser-drawn figures get this table: workbench/ui/replay_js.py).
WHITESPACE_SIGNS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
EMPTY = "∅"  # a token with no text (an incomplete UTF-8 piece decodes to U+FFFD instead)
_WHITESPACE = re.compile("[" + "".join(WHITESPACE_SIGNS) + "]")
_CORRECTION = re.compile(r"\bcorrection (\d+)")
TokenText = Callable[[int], str]


def visible_token(text: str | None) -> str:
    """A token's text with its whitespace visible: ' the' → '␣the', '\\n' → '↵', '\\t' → '⇥'; '' → '∅'."""
    return _WHITESPACE.sub(lambda m: WHITESPACE_SIGNS[m.group()], text or "") or EMPTY


def spoken_reason(reason: str | None, text_of: TokenText) -> str:
    """A reason with each "correction 504" as "correction '␣the'" (the token's visible text)."""
    if not reason:
        return reason or ""
    return _CORRECTION.sub(lambda m: f"correction '{visible_token(text_of(int(m.group(1))))}'", reason)


def texts_by_id(pairs: Iterable[tuple[int, str]], decode: Callable[[list[int]], str] | None = None) -> TokenText:
    """id -> text from (token id, text) pairs a run's node records carry, else `decode`'s (asked only for ids no
    record names: it may load a tokenizer), else ⟨id⟩."""
    known = dict(pairs)

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
