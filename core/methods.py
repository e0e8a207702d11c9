"""Named methods: which drafter, which verifier, which parameters (with their defaults) each uses,
and `run_method`, which runs one of them and returns its RunTrace."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from core.engine import Cancelled, DecodeConfig, Drafter, Verifier, check_prompt, decode
from core.errors import InvalidInputError
from core.params import PARAMS, validate
from core.trace import RunTrace, StepTrace
from core.verify import (
    Rescue,
    Rule,
    adaptive,
    by_source,
    fixed,
    mixed,
    sampling_processors,
    strict,
    top_k_rule,
    verify_by_rule,
    verify_by_sampling,
)

COMMON = ("max_new_tokens",)
SAMPLING = ("temperature", "top_k", "top_p", "seed")


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    params: Mapping[str, Any]  # the parameters it reads, with its defaults
    lossless: bool  # reproduces the target's own decoding (greedy, or its sampling distribution)
    make: Callable[..., tuple[Drafter, Verifier, int]] | None = None  # (params, context_ids) -> drafter, verifier, prefill top-k
    hf_mode: str | None = None  # run through transformers' generate instead of our engine
    needs_draft: bool = False
    tags: tuple[str, ...] = field(default=())
    takes_models: bool = False  # make(params, context_ids, target=, draft=, memory=): draft-model and CSD methods
    reads_memory: bool = False  # reads CSD's correction memory (a benchmark gives it a private copy)
    # How the method verifies at T = 0, as data: `make` builds its verifier from these same callables
    # and workbench.rescore re-applies them to stored steps, so the two cannot drift apart.
    rules_of: Callable[[dict[str, Any]], Rule | Mapping[str, Rule]] | None = None  # rule-based: one rule, or one per source
    rescue_of: Callable[[dict[str, Any]], Rescue | None] | None = None  # draft-model/CSD walk; returning None = strict walk


def _defaults(*names: str, **overrides: Any) -> dict[str, Any]:
    out = {n: PARAMS[n].default for n in names}
    out.update(overrides)
    return out


def strict_or_sampling(params: dict[str, Any], rules: Rule | Mapping[str, Rule] = strict) -> Verifier:
    """`rules` (greedy verification by default) at temperature 0; lossless speculative sampling above it."""
    if params.get("temperature", 0.0) == 0.0:
        return lambda tree, logits, stats: verify_by_rule(tree, stats, rules)
    procs = sampling_processors(params["temperature"], params.get("top_k", 0), params.get("top_p", 1.0))
    gen = torch.Generator().manual_seed(int(params.get("seed", 0)))

    def verify(tree, logits, stats):
        return verify_by_sampling(tree, logits.cpu() if logits.device.type != "cpu" else logits, procs, gen)

    return verify


def _strict(params: dict[str, Any]) -> Rule:
    return strict


def _greedy(params, context_ids=None):
    from core.drafters import NoDraft

    return NoDraft(), strict_or_sampling(params, _strict(params)), 0


def _pld(params, context_ids=None):
    from core.drafters import PromptLookupDrafter

    return PromptLookupDrafter(max_ngram=3, num_tokens=10), strict_or_sampling(params, _strict(params)), 0


POOL = ("key_len", "ngram", "max_nodes")
ALIGN = ("align_m", "align_graft", "align_generated")


def _context(align: bool, rules_of: Callable[[dict[str, Any]], Rule | Mapping[str, Rule]]):
    """A context-drafting method's `make`: pool (+ alignment) drafter, verified by `rules_of(params)`."""

    def make(params, context_ids=None):
        from core.drafters import ContextDrafter

        drafter = ContextDrafter(params["key_len"], params["ngram"], params["max_nodes"], params["align_m"] if align else 0,
                                 graft=bool(params.get("align_graft", 0)), context_ids=context_ids,
                                 align_generated=bool(params.get("align_generated", 0)))
        rules = rules_of(params)
        return drafter, (lambda tree, logits, stats: verify_by_rule(tree, stats, rules)), drafter.prefill_topk

    return make


def _context_method(name: str, summary: str, params: Mapping[str, Any], lossless: bool, *, align: bool,
                    rules_of: Callable[[dict[str, Any]], Rule | Mapping[str, Rule]]) -> Method:
    return Method(name, summary, params, lossless, _context(align, rules_of), rules_of=rules_of)


# The rules of the rule-based methods. AASD's split (core.verify.by_source): relaxed for copied and
# alignment nodes, strict for generated text.
def _fixed(p) -> Mapping[str, Rule]:
    return by_source(fixed(p["delta"]))


def _mixed(p) -> Mapping[str, Rule]:
    return by_source(mixed(p["delta"], p["top_k"]))


def _adaptive(p) -> Mapping[str, Rule]:
    return by_source(adaptive(p["alpha"], p["beta"]))


def _topk(p) -> Mapping[str, Rule]:
    return by_source(top_k_rule(p["top_k"]))


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


register(Method("greedy", "autoregressive decoding through our engine (the speed-up baseline)",
                _defaults(*COMMON, "temperature", "seed", top_k=0, top_p=1.0), True, _greedy, rules_of=_strict))
register(Method("pld", "prompt lookup decoding: longest n-gram ≤ 3 in prompt + output, one chain of 10",
                _defaults(*COMMON, "temperature", "seed", top_k=0, top_p=1.0), True, _pld, rules_of=_strict))
register(Method("top-k", "top-k sampling (k = 50, T = 1)", _defaults(*COMMON, "seed", temperature=1.0, top_k=50, top_p=1.0), True, _greedy,
                rules_of=_strict))
register(Method("nucleus", "nucleus sampling (p = 0.8, T = 1)", _defaults(*COMMON, "seed", temperature=1.0, top_k=0, top_p=0.8), True, _greedy,
                rules_of=_strict))
register(Method("beam", "beam search through transformers (width 10)", _defaults(*COMMON, "num_beams"), False, hf_mode="beam"))
register(Method("hf-generate", "transformers generate(), greedy", _defaults(*COMMON), True, hf_mode="hf-generate"))
register(Method("hf-prompt-lookup", "transformers prompt lookup (10 tokens, n-gram ≤ 3)", _defaults(*COMMON), True, hf_mode="hf-prompt-lookup"))
register(Method("hf-assisted", "transformers assisted generation with the draft model", _defaults(*COMMON), True,
                hf_mode="hf-assisted", needs_draft=True))


register(_context_method("casd", "context-aware drafting, fixed threshold δ with EOS guard", _defaults(*COMMON, *POOL, "delta"), False,
                         align=False, rules_of=_fixed))
register(_context_method("casd-mixed", "context-aware drafting, δ and top-k together", _defaults(*COMMON, *POOL, "delta", "top_k"), False,
                         align=False, rules_of=_mixed))
register(_context_method("aasd", "context drafting + alignment sampling + entropy-adaptive verification",
                         _defaults(*COMMON, *POOL, *ALIGN, "alpha", "beta"), False, align=True, rules_of=_adaptive))
register(_context_method("aasd-strict", "AASD drafting with strict verification (lossless)", _defaults(*COMMON, *POOL, *ALIGN), True,
                         align=True, rules_of=_strict))
register(_context_method("aasd-no-align", "ablation: AASD without alignment sampling", _defaults(*COMMON, *POOL, "alpha", "beta", align_m=0),
                         False, align=False, rules_of=_adaptive))
register(_context_method("aasd-fixed", "ablation: AASD drafting with CASD's fixed threshold", _defaults(*COMMON, *POOL, *ALIGN, "delta"), False,
                         align=True, rules_of=_fixed))
register(_context_method("aasd-topk", "ablation: AASD drafting with a top-k acceptance rule", _defaults(*COMMON, *POOL, *ALIGN, "top_k"), False,
                         align=True, rules_of=_topk))


# ---- Draft-model speculative decoding and CSD (seed 004) ------------------------------------
# One drafter (the draft model, or the context drafter when no draft model is given to `csd`) and
# one verification walk (core.verify.verify_rescue_*); the methods differ only in the rescue rule
# and in whether they read the correction memory. Methods that read it use the model pair's
# shared, persisted table unless run_method gets `memory=`; the others never touch it.
DRAFT = ("gamma",)
SD_SAMPLING = dict(temperature=0.0, seed=0, top_k=0, top_p=1.0)


def _draft_method(rescue_of: Callable[[dict[str, Any]], Rescue | None], reads_memory: bool, context: bool = False):
    def make(params, context_ids=None, *, target=None, draft=None, memory=None):
        from core.draft_model import build_sd
        from core.memory import shared_memory

        if context:
            draft = None  # csd-context: context drafts even when a draft model is loaded
        if reads_memory and memory is None:
            memory = shared_memory(target, draft)
        return build_sd(params, target=target, draft=draft, rescue=rescue_of(params), memory=memory, context_ids=context_ids)

    return make


def _draft(name: str, summary: str, params: Mapping[str, Any], lossless: bool, *,
           rescue_of: Callable[[dict[str, Any]], Rescue | None], reads_memory: bool, context: bool = False,
           needs_draft: bool = True) -> Method:
    return Method(name, summary, params, lossless, _draft_method(rescue_of, reads_memory, context), needs_draft=needs_draft,
                  takes_models=True, reads_memory=reads_memory, rescue_of=rescue_of)


def _no_rescue(p) -> None:
    return None  # plain SD: the strict walk


def _csd_rule(p) -> Rescue:
    return Rescue(lam=p["lam"], tau=p["tau"])


def _memory_rule(p) -> Rescue:
    return Rescue(lam=p["lam"])


def _gate_rule(p) -> Rescue:
    return Rescue(tau=p["tau"])


register(_draft("sd", "speculative decoding with a draft model: γ tokens per step, greedy or rejection sampling (lossless)",
                _defaults(*COMMON, *DRAFT, **SD_SAMPLING), True, rescue_of=_no_rescue, reads_memory=False))
register(_draft("csd", "calibrated SD: a rejected draft token is rescued when its correction pair is frequent in the memory "
                "(count ≥ λ) and the target's gate passes (p(x)/p(t*) ≥ τ); over context drafts when no draft model is given",
                _defaults(*COMMON, *DRAFT, "tau", "lam", *POOL, "align_m", **SD_SAMPLING), False, rescue_of=_csd_rule,
                reads_memory=True, needs_draft=False))
register(_draft("csd-context", "single-model CSD: the rescue rule over context drafts (AASD's drafter), memory keyed by the target alone",
                _defaults(*COMMON, "tau", "lam", *POOL, "align_m", **SD_SAMPLING), False, rescue_of=_csd_rule, reads_memory=True,
                context=True, needs_draft=False))
register(_draft("lossy-sd", "SD with the gate alone at a lenient τ (p(x)/p(t*) ≥ 0.6), no memory",
                _defaults(*COMMON, *DRAFT, tau=0.6, **SD_SAMPLING), False, rescue_of=_gate_rule, reads_memory=False))
register(_draft("sd-memory-only", "ablation: SD rescuing every rejection whose pair is frequent in the memory (count ≥ λ), no gate",
                _defaults(*COMMON, *DRAFT, "lam", **SD_SAMPLING), False, rescue_of=_memory_rule, reads_memory=True))
register(_draft("sd-gating-only", "ablation: SD with the gate alone at CSD's τ (p(x)/p(t*) ≥ τ), no memory",
                _defaults(*COMMON, *DRAFT, "tau", **SD_SAMPLING), False, rescue_of=_gate_rule, reads_memory=False))


def get_method(name: str) -> Method:
    method = METHODS.get(name)
    if method is None:
        raise InvalidInputError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return method


def resolve_params(name: str, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return validate(values or {}, get_method(name).params)


def parse_method_spec(spec: str) -> tuple[str, dict[str, str]]:
    """`aasd[align_graft=1,alpha=0.2]` -> ("aasd", {"align_graft": "1", "alpha": "0.2"}): one method
    with its own parameter overrides, so a bench can put variants of a method side by side."""
    spec = spec.strip()
    name, _, rest = spec.partition("[")
    overrides: dict[str, str] = {}
    if rest:
        if not rest.endswith("]"):
            raise InvalidInputError(f"bad method spec {spec!r}: write NAME or NAME[param=value,...]")
        for item in filter(None, (x.strip() for x in rest[:-1].split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise InvalidInputError(f"bad parameter {item!r} in {spec!r}: write param=value")
            overrides[key.strip()] = value.strip()
    get_method(name.strip())
    return name.strip(), overrides


def split_method_list(text: str) -> list[str]:
    """Split `greedy,aasd[alpha=0.2,beta=0.1],pld` on the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def run_method(
    name: str,
    target,
    prompt_ids: Sequence[int],
    params: Mapping[str, Any] | None = None,
    *,
    draft=None,
    prompt_text: str = "",
    context: str | None = None,
    context_ids: Sequence[int] | None = None,
    stop_strings: Sequence[str] = (),
    on_step: Callable[[StepTrace], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    memory=None,
) -> RunTrace:
    """Run method `name` on the loaded `target` (a core.models.LoadedModel) and return its trace.

    `context_ids`, when given, fills the draft pool instead of the prompt (CASD: the full document in
    the pool, a shortened prompt to the model). A cancelled run comes back with status `cancelled` and what it had; errors propagate.
    `memory` (a core.memory.CorrectionMemory) replaces the shared, persisted correction memory of
    the model pair for CSD methods (a benchmark passes a private copy so its items never reach the file).
    """
    method = get_method(name)
    p = resolve_params(name, params)
    if method.needs_draft and draft is None:
        raise InvalidInputError(f"method {name!r} needs a draft model: pass --draft (e.g. the qwen2.5-coder-0.5b preset)")
    prompt_ids = [int(t) for t in prompt_ids]
    check_prompt(prompt_ids, target.max_context)
    run = RunTrace(
        method=name, params=p, model=target.name, draft_model=draft.name if draft is not None else None,
        device=str(target.device), dtype=str(target.dtype).replace("torch.", ""), prompt=prompt_text,
        prompt_ids=prompt_ids, context=context, model_fingerprint=target.fingerprint,
        draft_fingerprint=draft.fingerprint if draft is not None else None,
    )
    if method.hf_mode is not None:
        from workbench.evaluation.hf_baselines import run_hf

        res = run_hf(method.hf_mode, target.model, target.tokenizer, target.eos_ids, prompt_ids, p,
                     stop_strings, draft.model if draft is not None else None)
        run.output_ids, run.external_accept_lengths = res.output_ids, res.accept_lengths
        run.prefill_seconds, run.decode_seconds = res.prefill_seconds, res.decode_seconds
        run.stop_reason = "eos" if res.output_ids and res.output_ids[-1] in target.eos_ids else "max_new_tokens"
    else:
        ctx = list(context_ids) if context_ids is not None else None
        if method.takes_models:
            drafter, verifier, prefill_topk = method.make(p, ctx, target=target, draft=draft, memory=memory)
        else:
            drafter, verifier, prefill_topk = method.make(p, ctx)
        cfg = DecodeConfig(max_new_tokens=p["max_new_tokens"], stop_strings=tuple(stop_strings), prefill_topk=prefill_topk,
                           generated_topk=getattr(drafter, "generated_topk", 0))
        try:
            res = decode(target.model, target.tokenizer, target.eos_ids, prompt_ids, drafter, verifier, cfg,
                         target.max_context, on_step=on_step, should_stop=should_stop)
            run.status = "complete"
        except Cancelled as c:
            res = c.partial
            run.status = "cancelled"
        run.output_ids, run.steps = res.output_ids, res.steps
        run.prefill_seconds, run.decode_seconds, run.stop_reason = res.prefill_seconds, res.decode_seconds, res.stop_reason
    if run.status == "running":
        run.status = "complete"
    run.output_text = target.tokenizer.decode(run.output_ids, skip_special_tokens=True)
    return run
