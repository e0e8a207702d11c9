"""Named methods as data: which drafter, which acceptance rule (and CSD rescue), which parameters with their
defaults. `METHODS` holds them by name; `register` adds one (workbench registers transformers' own generate
as methods this way: workbench.evaluation.hf_baselines).

`Method.drafter` names a drafter in core.drafters.DRAFTERS; `rules_of(params)` and `rescue_of(params)` say how
it verifies at T = 0 (core.walk.walk applies them; workbench.rescore re-applies the same callables to stored
steps, so the two cannot drift apart); at T > 0 every method verifies by lossless speculative sampling
(core.walk.sample_walk), with its rescue rule where it has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.errors import InvalidInputError
from core.params import AUTO, PARAMS
from core.rules import (
    KEY_ORDERS,
    Deferred,
    Rescue,
    Rules,
    adaptive,
    by_source,
    entropy_gate,
    fixed,
    mixed,
    strict,
    top_k_rule,
    typical,
)
from core.spec import shown

COMMON = ("max_new_tokens",)
POOL = ("key_len", "ngram", "max_nodes", "fallback")
ALIGN = ("align_m", "align_graft", "align_generated")
DRAFT = ("gamma",)
RESCUE = ("rescue_eos",)  # every method with a rescue rule: may it rescue over an end of sequence (core.params)
TABLE = ("warm", "cold")  # Token Recycling's table: where it lives (core.drafters.recycle)
CORPUS = ("cold", "corpus_mode")  # the suffix corpus: the model's shared one or an empty one; online or frozen
SUFFIX = ("max_nodes", "spec_factor", "min_token_prob", *CORPUS)  # suffix speculation (core.drafters.suffix)
SAMPLING = dict(temperature=0.0, seed=0, top_k=0, top_p=1.0)


class ExternalResult(Protocol):
    output_ids: list[int]
    accept_lengths: list[int] | None  # tokens per forward step, where the runner could see them
    prefill_seconds: float
    decode_seconds: float


# (target, draft, prompt_ids, params, stop_strings) -> ExternalResult: a method decoded outside our engine.
ExternalRunner = Callable[[Any, Any, list[int], dict[str, Any], Sequence[str]], ExternalResult]


def _strict(params: Mapping[str, Any]) -> Rules:
    return strict


def _no_rescue(params: Mapping[str, Any]) -> Rescue | None:
    return None


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    params: Mapping[str, Any]  # the parameters it reads, with its defaults
    lossless: bool  # reproduces the target's own decoding (greedy, or its sampling distribution)
    drafter: str = "none"  # a core.drafters.DRAFTERS name
    drafter_without_draft: str | None = None  # the drafter when no draft model is loaded (csd: context drafts)
    rules_of: Callable[[Mapping[str, Any]], Rules] = _strict  # the acceptance rule(s) at T = 0: one, or one per source
    rescue_of: Callable[[Mapping[str, Any]], Rescue | None] = _no_rescue  # CSD's rescue of a rejected candidate
    reads_memory: bool = False  # reads CSD's correction memory (a benchmark gives it a private copy)
    needs_draft: bool = False
    external: ExternalRunner | None = None  # decoded outside our engine (no steps to trace or re-score)
    tags: tuple[str, ...] = field(default=())

    @property
    def in_engine(self) -> bool:
        """Decoded by our engine, so its steps are traced and can be re-scored."""
        return self.external is None


def param_defaults(*names: str, **overrides: Any) -> dict[str, Any]:
    out = {n: PARAMS[n].default for n in names}
    out.update(overrides)
    return out


# The rules of the rule-based methods. AASD's split (core.rules.by_source): relaxed for copied and
# alignment nodes, strict for generated text.
def _fixed(p) -> Rules:
    return by_source(fixed(p["delta"]))


def _mixed(p) -> Rules:
    return by_source(mixed(p["delta"], p["top_k"]))


def _adaptive(p) -> Rules:
    """AASD's split, with alignment nodes under their own α, β where given (`alpha_alignment`, `beta_alignment`:
    what `aasd[auto]` records from the per-source fit)."""
    a, b = p.get("alpha_alignment"), p.get("beta_alignment")
    if a is None and b is None:
        return by_source(adaptive(p["alpha"], p["beta"]))
    # each source's reason names its own α, β: a re-score moving the context α, β leaves the alignment ones
    rules = by_source(adaptive(p["alpha"], p["beta"], "context"))
    rules["alignment"] = adaptive(p["alpha"] if a is None else a, p["beta"] if b is None else b, "alignment")
    return rules


def _topk(p) -> Rules:
    return by_source(top_k_rule(p["top_k"]))


def _typical(p) -> Rules:
    """Medusa's typical acceptance, on AASD's split."""
    return by_source(typical(p["epsilon"], p["alpha"]))


def _deferred(p) -> Rules:
    """FLy's entropy gate on AASD's split, each step's path cut where the deferred window fails."""
    return Deferred(by_source(entropy_gate(p["entropy_gate"])), p["window"])


def _adaptive_all(p) -> Rules:
    """recycle-aasd: AASD's entropy-adaptive rule for every node (all of them are recycled)."""
    return adaptive(p["alpha"], p["beta"])


# CSD's rescue rules (docs/ALGORITHMS.md): the methods differ only in which conditions a rescue needs.
def _csd_rule(p) -> Rescue:
    return Rescue(lam=p["lam"], tau=p["tau"], keys=KEY_ORDERS[p.get("keys", 0)])


def _memory_rule(p) -> Rescue:
    return Rescue(lam=p["lam"], keys=KEY_ORDERS[p.get("keys", 0)])


def _gate_rule(p) -> Rescue:
    return Rescue(tau=p["tau"])


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


GREEDY = param_defaults(*COMMON, "temperature", "seed", top_k=0, top_p=1.0)
# Template nodes per step: auto = sized from the model's t(n) each step (1.39x vs 1.35x for a fixed 16, the best fixed
# size of 8 / 16 / 32 / 80 on this CPU; docs/RESULTS.md); 80 = the paper's whole tree.
RECYCLE_NODES = AUTO
for m in [
    Method("greedy", "autoregressive decoding through our engine (the speed-up baseline)", GREEDY, True),
    Method(
        "pld",
        "prompt lookup decoding: longest n-gram ≤ 3 in prompt + output, one chain of 10",
        GREEDY,
        True,
        drafter="prompt_lookup",
    ),
    Method(
        "top-k",
        "top-k sampling (k = 50, T = 1)",
        param_defaults(*COMMON, "seed", temperature=1.0, top_k=50, top_p=1.0),
        True,
    ),
    Method(
        "nucleus",
        "nucleus sampling (p = 0.8, T = 1)",
        param_defaults(*COMMON, "seed", temperature=1.0, top_k=0, top_p=0.8),
        True,
    ),
    Method(
        "casd",
        "context-aware drafting, fixed threshold δ with EOS guard",
        param_defaults(*COMMON, *POOL, "delta", "fitted"),
        False,
        drafter="context",
        rules_of=_fixed,
    ),
    Method(
        "casd-mixed",
        "context-aware drafting, δ and top-k together",
        param_defaults(*COMMON, *POOL, "delta", "top_k"),
        False,
        drafter="context",
        rules_of=_mixed,
    ),
    Method(
        "aasd",
        "context drafting + alignment sampling + entropy-adaptive verification",
        param_defaults(
            *COMMON,
            *POOL,
            *ALIGN,
            "alpha",
            "beta",
            "alpha_alignment",
            "beta_alignment",
            "fitted",
            *CORPUS,
            "fallback_margin",
        ),
        False,
        drafter="context",
        rules_of=_adaptive,
    ),
    Method(
        "aasd-strict",
        "AASD drafting with strict verification (lossless)",
        param_defaults(*COMMON, *POOL, *ALIGN, "fallback_margin"),
        True,
        drafter="context",
    ),
    Method(
        "aasd-no-align",
        "ablation: AASD without alignment sampling",
        param_defaults(*COMMON, *POOL, "alpha", "beta"),
        False,
        drafter="context",
        rules_of=_adaptive,
    ),
    Method(
        "aasd-fixed",
        "ablation: AASD drafting with CASD's fixed threshold",
        param_defaults(*COMMON, *POOL, *ALIGN, "delta"),
        False,
        drafter="context",
        rules_of=_fixed,
    ),
    Method(
        "aasd-topk",
        "ablation: AASD drafting with a top-k acceptance rule",
        param_defaults(*COMMON, *POOL, *ALIGN, "top_k"),
        False,
        drafter="context",
        rules_of=_topk,
    ),
    # Peers' relaxed rules on AASD's drafting (docs/AUTOMATIC_SETTINGS.md, "Peer rules"): Medusa's typical acceptance
    # (α = √ε = 0.3, Medusa's defaults) and an entropy-gated deferred check in FLy's style.
    Method(
        "typical",
        "AASD drafting with Medusa's typical acceptance: p > min(ε, α·exp(−H)) (lossy)",
        param_defaults(*COMMON, *POOL, *ALIGN, "epsilon", "alpha", alpha=0.3),
        False,
        drafter="context",
        rules_of=_typical,
    ),
    Method(
        "fly",
        "AASD drafting with FLy-style verification: a mismatch passes where the target's entropy ≥ the gate, "
        "kept only if the next `window` tokens match the target (lossy)",
        param_defaults(*COMMON, *POOL, *ALIGN, "entropy_gate", "window"),
        False,
        drafter="context",
        rules_of=_deferred,
    ),
    # Draft-model speculative decoding and CSD (docs/ALGORITHMS.md): one drafter and one walk; the methods differ only
    # in the rescue rule and in whether they read the correction memory.
    # Token Recycling (arXiv 2408.08696): the target's own past top-k after each token, drafted as a static tree.
    Method(
        "recycle",
        "Token Recycling: a tree from the target's own top-8 after each token, refreshed by every forward "
        "(strict: lossless)",
        param_defaults(
            *COMMON, "max_nodes", *TABLE, "temperature", "seed", top_k=0, top_p=1.0, max_nodes=RECYCLE_NODES
        ),
        True,
        drafter="recycle",
    ),
    Method(
        "recycle-aasd",
        "Token Recycling verified by AASD's entropy-adaptive rule (lossy)",
        param_defaults(*COMMON, "max_nodes", *TABLE, "alpha", "beta", max_nodes=RECYCLE_NODES),
        False,
        drafter="recycle",
        rules_of=_adaptive_all,
    ),
    # SuffixDecoding (arXiv 2411.04975): trees from the model's previous outputs and the request's own text.
    Method(
        "suffix",
        "suffix speculation: the longest earlier match in this request or the model's previous outputs, "
        "a tree of its most frequent continuations sized by the match length (strict: lossless)",
        param_defaults(*COMMON, *SUFFIX, "temperature", "seed", top_k=0, top_p=1.0),
        True,
        drafter="suffix",
    ),
    Method(
        "suffix-aasd",
        "suffix speculation verified by AASD's entropy-adaptive rule (lossy)",
        param_defaults(*COMMON, *SUFFIX, "alpha", "beta"),
        False,
        drafter="suffix",
        rules_of=_adaptive_all,
    ),
    Method(
        "sd",
        "speculative decoding with a draft model: γ tokens per step, greedy or rejection sampling (lossless)",
        param_defaults(*COMMON, *DRAFT, **SAMPLING),
        True,
        drafter="draft_model",
        needs_draft=True,
    ),
    Method(
        "csd",
        "calibrated SD: a rejected draft token is rescued when its correction pair is frequent in the memory "
        "(count ≥ λ) and the target's gate passes (p(x)/p(t*) ≥ τ); over context drafts when no draft model is given",
        param_defaults(*COMMON, *DRAFT, "tau", "lam", "memory_mode", "keys", *RESCUE, *POOL, "align_m", **SAMPLING),
        False,
        drafter="draft_model",
        drafter_without_draft="context",
        rescue_of=_csd_rule,
        reads_memory=True,
    ),
    Method(
        "csd-context",
        "single-model CSD: the rescue rule over context drafts (AASD's drafter), memory keyed by the target alone",
        param_defaults(*COMMON, "tau", "lam", "memory_mode", "keys", *RESCUE, *POOL, "align_m", **SAMPLING),
        False,
        drafter="context",
        rescue_of=_csd_rule,
        reads_memory=True,
    ),
    Method(
        "lossy-sd",
        "SD with the gate alone at a lenient τ (p(x)/p(t*) ≥ 0.6), no memory",
        param_defaults(*COMMON, *DRAFT, *RESCUE, tau=0.6, **SAMPLING),
        False,
        drafter="draft_model",
        rescue_of=_gate_rule,
        needs_draft=True,
    ),
    Method(
        "sd-memory-only",
        "ablation: SD rescuing every rejection whose pair is frequent in the memory (count ≥ λ), no gate",
        param_defaults(*COMMON, *DRAFT, "lam", "memory_mode", "keys", *RESCUE, **SAMPLING),
        False,
        drafter="draft_model",
        rescue_of=_memory_rule,
        reads_memory=True,
        needs_draft=True,
    ),
    Method(
        "sd-gating-only",
        "ablation: SD with the gate alone at CSD's τ (p(x)/p(t*) ≥ τ), no memory",
        param_defaults(*COMMON, *DRAFT, "tau", *RESCUE, **SAMPLING),
        False,
        drafter="draft_model",
        rescue_of=_gate_rule,
        needs_draft=True,
    ),
]:
    register(m)


def get_method(name: str) -> Method:
    method = METHODS.get(name)
    if method is None:
        raise InvalidInputError(f"unknown method {shown(name)}; known methods: {', '.join(METHODS)}")
    return method
