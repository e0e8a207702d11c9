"""The one grammar for a name with variants, and the one reading of a parameter's value as a bounded number.

A variant is written `NAME[key=value,...]`: methods (`aasd[alpha=0.2,align_graft=1]`, core.methods.spec) and
compressors (`selfinfo[layers=8]`, core.compress) are both read by `parse_spec`, and a list of them
(`greedy,aasd[alpha=0.2,beta=0.1]`) is split by `split_specs`.

    spec  := NAME | NAME "[" items "]"
    items := item ("," item)*            empty items (",," or a trailing ",") are skipped
    item  := KEY "=" VALUE | WORD        a bare WORD is a flag its caller names (`aasd[auto]`)

NAME is any text without brackets, commas or "="; KEY and WORD are ASCII identifiers; VALUE is any text
without brackets or commas (what reads it checks it). Spaces around the parts are ignored. A key given
twice, an empty name or key, brackets that do not balance or that nest, and text after "]" are refused.

`to_number` turns a value (text from a spec or the command line, or a number from the UI or a stored run)
into an int or a finite float within bounds: only ASCII digits, no nan or infinity, and a magnitude
checked before the conversion (a 400-digit seed is out of range, not an OverflowError).

Every refusal is an InvalidInputError of one line: what is wrong, then what to write instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

from core.errors import InvalidInputError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"[+-]?[0-9]+\Z")  # [0-9], not \d: int() would also take Arabic-Indic or full-width digits
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
MAX_DIGITS = 40  # longer numbers are out of every range here; refused before int() or float() sees them
SHOWN = 60  # characters of the user's text an error message repeats


def shown(value: Any, quoted: bool = True) -> str:
    """The user's value as an error message repeats it: its repr (or its text), cut to SHOWN characters."""
    if isinstance(value, Integral) and abs(int(value)) >= 10**SHOWN:  # str() of a 5000-digit int raises
        return f"an integer of {int(value).bit_length()} bits"
    text = repr(value) if quoted else str(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


@dataclass(frozen=True)
class Spec:
    """A parsed `NAME[key=value,...]`: the name, the key=value items in order, and the bare flags."""

    name: str
    items: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()


def parse_spec(text: Any, what: str, flags: Collection[str] = (), example: str = "NAME[key=value,...]") -> Spec:
    """Read `text` as NAME or NAME[key=value,...]; `what` names the thing in errors ("method", "compressor"),
    `flags` are the bare words allowed inside the brackets, `example` is what the errors tell the user to write."""
    if not isinstance(text, str):
        raise InvalidInputError(f"a {what} must be text such as {example}, got {shown(text)}")

    def bad(problem: str) -> InvalidInputError:
        return InvalidInputError(f"bad {what} spec {shown(text)}: {problem}; write NAME or {example}")

    name, bracket, rest = text.strip().partition("[")
    name = name.strip()
    if not name:
        raise bad("the name is empty")
    if "]" in name or "," in name or "=" in name:
        raise bad("the name has ']', ',' or '=' outside brackets")
    if not bracket:
        return Spec(name)
    if not rest.endswith("]"):
        raise bad("the '[' is not closed by a final ']'" if "]" not in rest else "there is text after the closing ']'")
    body = rest[:-1]
    if "[" in body or "]" in body:
        raise bad("brackets nest or do not balance")
    items: dict[str, str] = {}
    found: list[str] = []
    for part in (p.strip() for p in body.split(",")):
        if not part:
            continue
        key, eq, value = (x.strip() for x in part.partition("="))
        if not eq:
            if part not in flags:
                allowed = f" or {' or '.join(sorted(flags))}" if flags else ""
                raise bad(f"bad option {shown(part)}, not key=value{allowed}")
            if part in found:
                raise bad(f"{part} is given twice")
            found.append(part)
            continue
        if not key:
            raise bad(f"an item {shown(part)} has no key before '='")
        if not _IDENTIFIER.match(key):
            raise bad(f"the key {shown(key)} is not a name of letters, digits and '_'")
        if key in items:
            raise bad(f"{key} is given twice")
        items[key] = value  # may be empty: what reads it says what it takes
    return Spec(name, items, tuple(found))


def split_specs(text: str, what: str = "method") -> list[str]:
    """Split `greedy,aasd[alpha=0.2,beta=0.1],pld` on the commas outside brackets; empty entries are skipped."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise InvalidInputError(
                f"bad {what} list {shown(text)}: brackets nest or do not balance; write NAME,NAME[key=value,...],..."
            )
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise InvalidInputError(
            f"bad {what} list {shown(text)}: a '[' is not closed; write NAME,NAME[key=value,...],..."
        )
    out.append(text[start:])
    return [x.strip() for x in out if x.strip()]


def to_number(
    value: Any,
    kind: type,
    name: str,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    words: Mapping[str, int] | None = None,
    meaning: str = "",
) -> int | float:
    """`value` as `kind` (int or float) in [low, high] ((low, high] with `low_open`), or one of `words`
    (`auto`, `frozen`) mapped to its number. Text must be ASCII digits (an int) or a decimal number (a float);
    numbers must be finite, and an int must be whole. `meaning` ends the out-of-range message."""
    if words and isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    either = f" or one of {', '.join(words)}" if words else ""
    a_kind = "an integer" if kind is int else "a number"
    what = f" (range {'(' if low_open else '['}{low}, {high}]){': ' + meaning if meaning else ''}"  # ends every refusal
    if isinstance(value, str):
        text = value.strip()
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise InvalidInputError(f"{name} must be a finite number, got {shown(value)}{what}")
        if not (_INT if kind is int else _FLOAT).match(text):
            hint = " (digits 0-9 only)" if any(c.isdigit() and not c.isascii() for c in text) else ""
            raise InvalidInputError(f"{name} must be {a_kind}{either}{hint}, got {shown(value)}{what}")
        if kind is int and len(text.lstrip("+-")) > MAX_DIGITS:
            raise _out_of_range(name, value, low, high, low_open, words, meaning)
        number: int | float = int(text) if kind is int else float(text)
    elif isinstance(value, Integral):  # bool and numpy integers too
        number = int(value)
        if abs(number) >= 10**MAX_DIGITS:  # float() of a huge int overflows
            raise _out_of_range(name, value, low, high, low_open, words, meaning)
    elif isinstance(value, Real):
        number = float(value)
        if kind is int and math.isfinite(number):
            if not number.is_integer():
                raise InvalidInputError(f"{name} must be an integer, got {shown(value)}{what}")
            number = int(number)
    else:
        raise InvalidInputError(f"{name} must be {a_kind}{either}, got {shown(value)}{what}")
    if isinstance(number, float) and not math.isfinite(number):  # NaN passes every comparison and makes invalid JSON
        raise InvalidInputError(f"{name} must be a finite number, got {shown(value)}{what}")
    number = kind(number)
    if (number <= low if low_open else number < low) or number > high:
        raise _out_of_range(name, value, low, high, low_open, words, meaning)
    return number


def _out_of_range(
    name: str, value: Any, low: float, high: float, low_open: bool, words: Mapping[str, int] | None, meaning: str
) -> InvalidInputError:
    bracket = "(" if low_open else "["
    # "; auto stands for 0": what a word means, not "(or one of auto = 0)", which read as a second range
    named = "; " + ", ".join(f"{w} stands for {n}" for w, n in words.items()) if words else ""
    return InvalidInputError(
        f"{name} = {shown(value.strip() if isinstance(value, str) else value, quoted=False)} is out of range {bracket}{low}, {high}]{named}"
        + (f": {meaning}" if meaning else "")
    )


AUTO_THRESHOLDS = "auto"  # `aasd[auto]`: short for `aasd[fitted=1]`, the thresholds fitted to the model


def asked_as(method: str, params, changed: Mapping[str, Any] | None = None) -> str:
    """The method as the run was asked for, in the grammar a user writes: `aasd[auto]` for a run with fitted
    thresholds, `aasd[alpha=0.05]` for a variant (`changed`: the parameters that differ from the method's defaults,
    with their values as text; core.methods.spec.changed_params finds them), else the bare method: what typed back
    runs the same thing. The CLI's `store list` and runs.csv's `method_label` name a run through
    core.methods.asked_as; the app's runs list, pickers and replay header through workbench.ui.shared.asked_as."""
    items = ([AUTO_THRESHOLDS] if (params or {}).get("fitted") else []) + [
        f"{k}={v}" for k, v in (changed or {}).items()
    ]
    return f"{method}[{','.join(items)}]" if items else method
