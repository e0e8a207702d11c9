"""What a compression is asked for and what it gives: the compressors and their options (written
`NAME[option=value]`, core.spec's grammar), the rate, what the draft pool holds, and the `Compression` record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInputError, WorkbenchError
from core.spec import parse_spec, shown, to_number

COMPRESSORS = {
    "selfinfo": "built in: keep the words of highest self-information under a local causal LM, budget per sentence (offline)",
    "llmlingua": "the llmlingua package (LLMLingua-1 over a local model folder; needs tiktoken's BPE file, i.e. network once)",
    "llmlingua2": "the llmlingua package (LLMLingua-2: a token classifier from the hub or the folder in WORKBENCH_LLMLINGUA2_MODEL; "
    "needs tiktoken's BPE file and the classifier, i.e. network once)",
}
DEFAULT_COMPRESSOR = "selfinfo"
POOLS = ("full", "compressed")  # what the draft pool holds when the prompt is compressed
DEFAULT_POOL = "full"
MAX_LAYERS = 1024  # layers=K beyond any model's depth is refused here; K <= L is checked once the model is loaded


class CompressorUnavailable(WorkbenchError):
    """A compressor that cannot load or run here (package missing, a file it downloads unreachable)."""


def check_rate(rate: Any) -> float:
    """The kept fraction of context tokens: a finite number in (0, 1]."""
    return float(
        to_number(
            rate,
            float,
            "--compress",
            0,
            1,
            low_open=True,
            meaning="it is the fraction of context tokens kept (0.5 keeps half; 1 keeps all)",
        )
    )


COMPRESSOR_OPTIONS = {  # compressor -> {option: what it does}; written NAME[option=value,...]
    "selfinfo": {
        "layers": "layers=K: score with the first K decoder layers of the scoring model, then its final norm and "
        "LM head (early exit: about K/L of a forward; 1 <= K <= L)",
        "unit": "unit=word|sentence: keep the most informative words of every sentence (word, the default) or the "
        "most informative whole sentences (sentence: coarse-grained, the kept text stays readable)",
    },
}
UNITS = ("word", "sentence")  # what selfinfo keeps or drops whole; word is the default (not written in the label)


def parse_compressor(spec: Any) -> tuple[str, dict[str, int | str]]:
    """`selfinfo[layers=8]` -> ("selfinfo", {"layers": 8}); a bare name has no options (None: the default).
    Options are checked here as far as they can be without a model (1 ≤ K ≤ MAX_LAYERS; K ≤ L once the model is
    loaded; unit is word or sentence, and unit=word, the default, is dropped so that the label stays canonical)."""
    text = DEFAULT_COMPRESSOR if spec is None or spec == "" else spec
    parsed = parse_spec(text.lower() if isinstance(text, str) else text, "compressor", example="selfinfo[layers=8]")
    name = parsed.name
    if name not in COMPRESSORS:
        raise InvalidInputError(
            f"unknown compressor {shown(name)}; known: "
            + "; ".join(f"{k} ({v})" for k, v in COMPRESSORS.items())
            + "; selfinfo takes [layers=K] (early-exit scoring) and [unit=sentence] (whole sentences)"
        )
    allowed = COMPRESSOR_OPTIONS.get(name, {})
    options: dict[str, int | str] = {}
    for key, value in parsed.items.items():
        if key not in allowed:
            known = "; ".join(allowed.values()) or "none"
            raise InvalidInputError(f"bad option {shown(key)} in compressor spec {shown(text)}; {name} takes: {known}")
        if key == "unit":
            if value not in UNITS:
                raise InvalidInputError(
                    f"{name}[unit={shown(value)}]: unit must be one of {', '.join(UNITS)} "
                    f"(what the compressor keeps or drops whole)"
                )
            if value != UNITS[0]:
                options[key] = value
        else:
            options[key] = int(
                to_number(
                    value,
                    int,
                    f"{name}[{key}]",
                    1,
                    MAX_LAYERS,
                    meaning=f"{key} must be a whole number >= 1, K of the scoring model's L decoder layers",
                )
            )
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
        raise InvalidInputError(
            f"pool must be full (the pool holds the uncompressed context, CASD) or compressed "
            f"(the pool holds the prompt the model reads), got {shown(value)}"
        )
    return text


def is_pool_method(method) -> bool:
    """Methods whose drafts come from the context pool (core.drafters.context): those `pool=` applies to."""
    return "context" in (method.drafter, method.drafter_without_draft)


def check_context(context: str | None) -> str:
    if context is None or not str(context).strip():
        raise InvalidInputError(
            "nothing to compress: the context is empty (compression shortens the context only; the "
            "instruction and question stay whole): give a context, or leave out --compress"
        )
    return str(context)


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
        return {
            "compress": self.rate,
            "compressor": self.compressor,
            "compress_reached": round(self.reached, 4),
            "compress_tokens": f"{self.tokens_kept}/{self.tokens_in}",
            "compress_seconds": round(self.seconds, 4),
        }
