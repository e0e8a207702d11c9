"""Every tunable parameter in one table: default, range and meaning. The CLI, the methods and the UI read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInputError
from core.rules import KEY_NAMES
from core.spec import shown, to_number

MEMORY_MODES = {"online": 0, "frozen": 1, "shipped": 2}  # CSD's memory_mode values by name
SHIPPED_MEMORY = MEMORY_MODES["shipped"]
AUTO = 0  # what `auto` stands for in the parameters that take it (max_nodes, gamma): a size chosen while decoding


def auto_or(value: Any, fixed_for_auto: Any) -> Any:
    """The parameter's value, or `fixed_for_auto` when it is `auto`: the one place a drafter reads the convention."""
    return fixed_for_auto if is_auto(value) else int(value)


def is_auto(value: Any) -> bool:
    """Whether a size parameter's value means `auto` (None, an unset parameter, does not)."""
    return value is not None and int(value) == AUTO


@dataclass(frozen=True)
class ParamSpec:
    name: str
    default: Any
    low: float
    high: float
    kind: type  # int or float
    help: str
    low_open: bool = False  # True when `low` itself is not allowed
    names: Mapping[str, int] | None = None  # words accepted for values (`aasd[fallback=recycle]` = fallback 1)


PARAMS: dict[str, ParamSpec] = {
    p.name: p
    for p in [
        ParamSpec("max_new_tokens", 128, 1, 32768, int, "tokens to generate at most"),
        ParamSpec("temperature", 0.0, 0.0, 10.0, float, "0 = greedy; > 0 samples (lossless for strict methods)"),
        ParamSpec("top_p", 1.0, 0.0, 1.0, float, "nucleus sampling mass", low_open=True),
        ParamSpec("top_k", 5, 1, 1_000_000, int, "k of the top-k rule (mixed, top-k ablation) or of top-k sampling"),
        ParamSpec("seed", 0, 0, 2**63 - 1, int, "random seed for sampling"),
        ParamSpec("num_beams", 10, 1, 64, int, "beam width of the beam-search baseline"),
        ParamSpec("delta", 0.1, 0.0, 1.0, float, "fixed acceptance threshold δ (CASD)", low_open=True),
        ParamSpec("alpha", 0.1, 0.0, 10.0, float, "entropy weight α of the adaptive threshold (AASD)"),
        ParamSpec("beta", 0.1, 0.0, 1.0, float, "offset β of the adaptive threshold (AASD)"),
        # Per source: alignment nodes may take their own α, β (unset: the same as context nodes).
        ParamSpec("alpha_alignment", None, 0.0, 10.0, float, "α for alignment nodes (AASD); unset = α"),
        ParamSpec("beta_alignment", None, 0.0, 1.0, float, "β for alignment nodes (AASD); unset = β"),
        ParamSpec(
            "epsilon", 0.09, 0.0, 1.0, float, "typical acceptance's ceiling ε: accept p > min(ε, α·exp(−H)) (Medusa)"
        ),
        ParamSpec(
            "entropy_gate",
            1.5,
            0.0,
            20.0,
            float,
            "fly: a mismatch is considered only where the target's entropy (nats) is at least this",
        ),
        ParamSpec(
            "window",
            3,
            1,
            64,
            int,
            "fly: tokens after a considered mismatch that must all match the target's argmax for it to stay",
        ),
        ParamSpec(
            "fitted",
            0,
            0,
            1,
            int,
            "1 = verify with the thresholds `calibrate --thresholds` fitted for this model, "
            "device and dtype (aasd: α, β per source; casd: δ), written `aasd[auto]`; the run records the values "
            "it used in alpha, beta, alpha_alignment, beta_alignment (delta), so it re-scores without the fit",
        ),
        ParamSpec(
            "tau",
            0.01,
            0.0,
            1.0,
            float,
            "CSD gate: a rejected draft token x may be rescued only if the gap to the target's top token t*, z(t*) − z(x) in logits, is at most −ln τ (so x has at least τ times t*'s probability)",
            low_open=True,
        ),
        ParamSpec("lam", 6, 0, 1_000_000, int, "CSD memory threshold λ"),
        ParamSpec(
            "memory_mode",
            0,
            0,
            2,
            int,
            "CSD's correction memory: online (0) = every rejection adds to it as the run "
            "goes (the paper); frozen (1) = read only, so a run leaves it as it was (bench and report default to "
            "frozen); shipped (2) = read only, and the table shipped with the package (empty for a pair without "
            "one) rather than the one online runs have grown, so a run repeats exactly on any machine (the app's "
            "default)",
            names=MEMORY_MODES,
        ),
        ParamSpec(
            "rescue_eos",
            1,
            0,
            1,
            int,
            "CSD's rescue over an end of sequence: yes (1) = a rejection whose correction "
            "t* is one of the target's EOS ids may be rescued like any other (the paper); no (0) = it never is "
            "(reason 't* is EOS: exempt'), so a rescue cannot lengthen an answer; the memory counts the pair either way",
            names={"yes": 1, "no": 0},
        ),
        ParamSpec(
            "keys",
            0,
            0,
            3,
            int,
            "CSD's memory keys: exact (0) = a rejection is looked up by its (draft, correction) "
            "token pair alone (the paper); text (1) = then by the two tokens' texts, case, surrounding space and Unicode "
            "form aside; prefix (2) = then by the draft's text when one text is a prefix of the other (a tokenisation "
            "variant); all (3) = exact, text, prefix. The most specific key whose count reached λ decides and the "
            "reason names it",
            names=KEY_NAMES,
        ),
        ParamSpec(
            "key_len",
            6,
            1,
            32,
            int,
            "the longest run of last tokens looked up in the context (l): a draft copies what followed its match there",
        ),
        ParamSpec("ngram", 6, 1, 64, int, "tokens copied after each match (n): how long each drafted continuation is"),
        ParamSpec(
            "align_m",
            2,
            0,
            16,
            int,
            "alignment alternatives (m): where a copied token is not what the model predicted there while reading "
            "the prompt, up to m of its own top predictions are drafted beside it; 0 = none",
        ),
        ParamSpec(
            "align_graft",
            0,
            0,
            1,
            int,
            "whether each alignment alternative also gets the copied continuation under it: "
            "no (0) = it stays one token, yes (1) = the continuation follows it too",
            names={"no": 0, "yes": 1},
        ),
        ParamSpec("align_generated", 0, 0, 1, int, "1 = alignment sampling also covers generated text (extension)"),
        ParamSpec(
            "max_nodes",
            0,
            0,
            256,
            int,
            "draft-node budget per tree (root excluded); auto (0) = the size that "
            "maximises expected tokens per second, from this model's measured forward times",
            names={"auto": AUTO},
        ),
        ParamSpec(
            "gamma",
            6,
            0,
            64,
            int,
            "tokens the draft model proposes per step (γ); auto (0) = up to 16, stopping after a token the draft "
            "model gives a probability under a confidence threshold tuned as it runs (transformers' dynamic "
            "speculation)",
            names={"auto": AUTO},
        ),
        ParamSpec(
            "warm",
            0,
            0,
            1,
            int,
            "Token Recycling: 1 = load the model's table from the workbench home and save it "
            "after each run (0 = the table lives in this process only)",
        ),
        ParamSpec(
            "cold",
            0,
            0,
            1,
            int,
            "Token Recycling / suffix corpus: 1 = start from an empty table (corpus) of this "
            "run's own, so the run depends on its prompt alone (0 = the model's, shared by the process's runs)",
        ),
        ParamSpec(
            "fallback",
            0,
            0,
            2,
            int,
            "context drafting where the pool has no match: 0 = none (one token), "
            "1 = recycle (Token Recycling's tree from the model's table), 2 = suffix (a tree from the model's "
            "corpus of previous outputs)",
            names={"none": 0, "recycle": 1, "suffix": 2},
        ),
        ParamSpec(
            "fallback_margin",
            0,
            0,
            64,
            int,
            "fallback=suffix: the corpus drafts instead of the context pool only where its match is at least this "
            "many tokens longer than the pool's key (0 = wherever it is at least as long, fitted on held-out "
            "items; 1 = only where it is longer)",
        ),
        ParamSpec(
            "corpus_mode",
            0,
            0,
            1,
            int,
            "suffix corpus: online (0) = the run's output joins the model's corpus "
            "when it ends (SuffixDecoding); frozen (1) = read only, so a rerun drafts and decodes exactly alike",
            names={"online": 0, "frozen": 1},
        ),
        ParamSpec(
            "spec_factor",
            4.0,
            0.0,
            64.0,
            float,
            "suffix: draft nodes per matched token (the tree holds at most "
            "spec_factor × match length nodes, and max_nodes)",
        ),
        ParamSpec(
            "min_token_prob",
            0.1,
            0.0,
            1.0,
            float,
            "suffix: a node joins the tree only if its continuation "
            "frequency (product of the conditionals from the match) reaches this",
        ),
    ]
}


def validate(values: Mapping[str, Any], allowed: Mapping[str, Any], method: str = "this method") -> dict[str, Any]:
    """Merge `values` over a method's defaults (`allowed`), checking names, types and ranges (core.spec.to_number);
    a refusal names `method`."""
    out = dict(allowed)
    for name, value in values.items():
        if value is None:
            continue
        spec = PARAMS.get(name)
        if spec is None:
            # the method's own parameters, not every method's: a list with num_beams and lam read as aasd taking them
            raise InvalidInputError(
                f"unknown parameter {shown(name)}; {method} takes: {', '.join(sorted(allowed)) or 'no parameters'}"
            )
        if name not in allowed:
            raise InvalidInputError(
                f"parameter {name!r} has no effect on {method}; it takes: {', '.join(sorted(allowed)) or 'no parameters'}"
            )
        out[name] = to_number(
            value, spec.kind, name, spec.low, spec.high, low_open=spec.low_open, words=spec.names, meaning=spec.help
        )
    return out
