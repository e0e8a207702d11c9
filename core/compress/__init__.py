"""Prompt compression (CASD): the model reads a shortened context while the draft pool may keep the full one
(`pool=full`, the default of the context-drafting methods).

Only the context is compressed; the instruction and the question around it stay whole (the caller splits the
prompt: workbench.evaluation.tasks.prompt_parts). Three compressors, made by `make_compressor`:

- `selfinfo` (built in, offline, deterministic; core.compress.selfinfo): token-level self-information
  −log p(token | prefix) under a small local causal LM, the idea of Selective Context and LLMLingua-1. Words are
  scored by the mean self-information of their tokens, and every sentence gets its share of the budget
  (core.compress.select): the context keeps round(rate × N) of its N tokens, up to one word.
  `selfinfo[layers=K]` scores with the model's first K decoder layers, its final norm and its LM head
  (core.compress.early_exit: about K/L of a forward). `selfinfo[unit=sentence]` keeps whole sentences instead
  (coarse-grained, as LLMLingua's sentence filter), so the kept text stays readable.
- `llmlingua` and `llmlingua2` (the `llmlingua` package, 0.2.2, imported only when asked for;
  core.compress.llmlingua): LLMLingua-1's `PromptCompressor` over a local causal-LM folder, and LLMLingua-2, a
  token classifier (WORKBENCH_LLMLINGUA2_MODEL, a hub id or folder) that labels every word keep or drop. Both
  need tiktoken's BPE file (downloaded once); what is out of reach is CompressorUnavailable, saying which.

Names, options, rates and the pool setting are checked in core.compress.spec (core.spec's grammar).
"""

from __future__ import annotations

from core.compress.early_exit import check_layers, decoder_layer_count, decoder_of, early_exit_decoder, scoring_path
from core.compress.llmlingua import (
    DEFAULT_LLMLINGUA2_MODEL,
    LLMLINGUA2_MODEL_ENV,
    LegacyCacheLM,
    LLMLingua2Compressor,
    LLMLinguaCompressor,
    llmlingua2_classifier,
    llmlingua_failure,
)
from core.compress.select import join_runs, runs, select_units, split_sentences, unit_scores, units_of, word_starts
from core.compress.selfinfo import HEAD_ROWS, WINDOW, SelfInfoCompressor, self_information
from core.compress.spec import (
    COMPRESSOR_OPTIONS,
    COMPRESSORS,
    DEFAULT_COMPRESSOR,
    DEFAULT_POOL,
    POOLS,
    UNITS,
    Compression,
    CompressorUnavailable,
    check_compressor,
    check_pool,
    check_rate,
    compressor_label,
    is_pool_method,
    parse_compressor,
)

__all__ = [
    "COMPRESSORS",
    "COMPRESSOR_OPTIONS",
    "DEFAULT_COMPRESSOR",
    "DEFAULT_LLMLINGUA2_MODEL",
    "DEFAULT_POOL",
    "HEAD_ROWS",
    "LLMLINGUA2_MODEL_ENV",
    "LLMLingua2Compressor",
    "LLMLinguaCompressor",
    "LegacyCacheLM",
    "POOLS",
    "UNITS",
    "WINDOW",
    "Compression",
    "CompressorUnavailable",
    "SelfInfoCompressor",
    "check_compressor",
    "check_layers",
    "check_pool",
    "check_rate",
    "compressor_label",
    "decoder_layer_count",
    "decoder_of",
    "early_exit_decoder",
    "is_pool_method",
    "join_runs",
    "llmlingua2_classifier",
    "llmlingua_failure",
    "make_compressor",
    "parse_compressor",
    "runs",
    "scoring_path",
    "select_units",
    "self_information",
    "split_sentences",
    "unit_scores",
    "units_of",
    "word_starts",
]


def make_compressor(name: str, model) -> SelfInfoCompressor | LLMLinguaCompressor:
    """The named compressor (a spec: `selfinfo`, `selfinfo[layers=8]`, `selfinfo[unit=sentence]`, `llmlingua`, `llmlingua2`)
    over `model` (a core.models.LoadedModel: the target, or another small LM; llmlingua2 only counts with its tokenizer)."""
    name, options = parse_compressor(name)
    if name == "llmlingua2":  # its classifier comes from WORKBENCH_LLMLINGUA2_MODEL, not from `model`
        return LLMLingua2Compressor(tokenizer=model.tokenizer, device=str(model.device))
    if name == "llmlingua":
        return LLMLinguaCompressor(model.path, tokenizer=model.tokenizer, device=str(model.device))
    return SelfInfoCompressor(
        model.model, model.tokenizer, layers=options.get("layers"), unit=options.get("unit", UNITS[0])
    )
