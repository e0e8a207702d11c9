"""Named methods: which drafter, which acceptance rule (and CSD rescue), which parameters with their
defaults, and the one factory that turns a method into a drafter and a verifier.

A method is data. `Method.drafter` names a drafter in core.drafters.DRAFTERS; `rules_of(params)` and
`rescue_of(params)` say how it verifies at T = 0 (core.walk.walk applies them; workbench.rescore re-applies
the same callables to stored steps, so the two cannot drift apart); at T > 0 every method verifies by
lossless speculative sampling (core.walk.sample_walk), with its rescue rule where it has one.
Methods that run elsewhere (transformers' own generate) are registered by plugins: a function listed under
the entry-point group `spec_workbench.methods` receives `register` (workbench.evaluation.hf_baselines is one).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from core.compress import DEFAULT_POOL, Compression, check_pool, is_pool_method
from core.drafters import DraftEnv, Drafter, RecycleTable, make_drafter
from core.drafters.recycle import shared_table
from core.engine import Cancelled, DecodeConfig, Verifier, check_prompt, decode
from core.errors import InvalidInputError
from core.params import PARAMS, validate
from core.rules import Rescue, Rules, adaptive, by_source, fixed, mixed, strict, top_k_rule
from core.sizing import AUTO, TreeSizer
from core.target_stats import sampling_processors
from core.thresholds import FITTED_PARAMS, fitted_values
from core.trace import RunTrace, StepTrace
from core.walk import sample_walk, walk

COMMON = ("max_new_tokens",)
POOL = ("key_len", "ngram", "max_nodes", "fallback")
ALIGN = ("align_m", "align_graft", "align_generated")
DRAFT = ("gamma",)
RESCUE = ("rescue_eos",)  # every method with a rescue rule: may it rescue over an end of sequence (core.params)
TABLE = ("warm", "cold")  # Token Recycling's table: where it lives (core.drafters.recycle)
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


def rescue_for(method: Method, params: Mapping[str, Any], eos_ids: Sequence[int] | None = None) -> Rescue | None:
    """The method's rescue rule for a target whose end-of-sequence ids are `eos_ids` (else the `eos_ids` a
    run recorded in its params): with `rescue_eos=no` a correction t* among them is never rescued over.
    The engine (make_verifier) and the offline re-scoring (workbench.rescore) both build it here."""
    rescue = method.rescue_of(params)
    if rescue is None or params.get("rescue_eos", 1):
        return rescue
    ids = eos_ids if eos_ids is not None else params.get("eos_ids")
    if ids is None:
        raise InvalidInputError(f"{method.name}[rescue_eos=no] exempts the target's end-of-sequence ids, which are not "
                                "known here: pass the target's eos_ids (a run records them in its params as eos_ids)")
    if not ids:
        warnings.warn(f"{method.name}[rescue_eos=no]: the target has no end-of-sequence id, so nothing is exempt")
    return replace(rescue, exempt=frozenset(int(t) for t in ids))


def make_verifier(method: Method, params: Mapping[str, Any], memory=None, generator: torch.Generator | None = None,
                  eos_ids: Sequence[int] | None = None) -> Verifier:
    """The method's verification: `walk` with its rule and rescue at T = 0, `sample_walk` above it.
    A given `memory` (core.memory.CorrectionMemory) is read and updated at every rejection; `eos_ids`
    (the target's) are what `rescue_eos=no` exempts from rescue (rescue_for)."""
    rules, rescue = method.rules_of(params), rescue_for(method, params, eos_ids)

    frozen = bool(params.get("memory_mode", 0))

    def count_of(tree):
        if memory is None:
            return None
        if frozen:  # read only: the run leaves the memory as it found it
            return lambda node, correction: memory.count(tree.tokens[node], correction)
        return lambda node, correction: memory.observe(tree.tokens[node], correction)

    temperature = float(params.get("temperature", 0.0))
    if temperature == 0.0:
        def verify(proposal, logits, stats):
            tree = proposal.tree
            return walk(tree, stats.nodes, stats.logp, rules, rescue=rescue, argmax=stats.row_argmax, count_of=count_of(tree))

        return verify
    procs = sampling_processors(temperature, params.get("top_k", 0), params.get("top_p", 1.0))
    generator = generator if generator is not None else torch.Generator().manual_seed(int(params.get("seed", 0)))

    def verify_sampled(proposal, logits, stats):
        return sample_walk(proposal.tree, logits, procs, generator, rescue=rescue, count_of=count_of(proposal.tree),
                           q_rows=proposal.q_rows)

    return verify_sampled


def recycle_table(method: Method, params: Mapping[str, Any], target) -> RecycleTable | None:
    """The Token Recycling table a run drafts from (None when it uses none): the model's process-wide
    table (warm=1: also loaded from and saved to the workbench home), or a private empty one (cold=1)."""
    if method.drafter != "recycle" and not params.get("fallback", 0):
        return None
    if params.get("cold", 0):
        if params.get("warm", 0):
            raise InvalidInputError("cold=1 starts from an empty table and warm=1 loads the saved one: choose one")
        return RecycleTable(target.vocab_size)
    return shared_table(target, warm=bool(params.get("warm", 0)))


def tree_sizer(method: Method, params: Mapping[str, Any], target, draft=None) -> TreeSizer | None:
    """`max_nodes=auto` for tree drafters (context, recycle): a sizer over the model's measured t(n)."""
    name = method.drafter if draft is not None or method.drafter_without_draft is None else method.drafter_without_draft
    if params.get("max_nodes", None) != AUTO or name not in ("context", "recycle"):
        return None
    from core.timing import cost_curve

    return TreeSizer(cost_curve(target))


def build(method: Method, params: Mapping[str, Any], *, target=None, draft=None, context_ids: Sequence[int] | None = None,
          memory=None, table: RecycleTable | None = None) -> tuple[Drafter, Verifier]:
    """The one method factory: the method's drafter and verifier for one request.

    Methods that read CSD's memory use the model pair's shared, persisted table unless `memory` is given;
    the others touch a memory only when given one (plain SD then counts its rejections, as calibration does). Drafter and sampling verifier share the run's one random stream (two
    streams with one seed would correlate the draft's samples with the acceptance test's). Token Recycling's
    table (`recycle`, `fallback=1`) is the model's shared one unless `table` is given."""
    if method.external is not None:
        raise InvalidInputError(f"method {method.name!r} runs outside our engine (transformers' generate)")
    if method.reads_memory and memory is None:
        from core.memory import shared_memory

        memory = shared_memory(target, draft)
    if table is None:
        table = recycle_table(method, params, target)
    generator = torch.Generator().manual_seed(int(params.get("seed", 0)))
    name = method.drafter if draft is not None or method.drafter_without_draft is None else method.drafter_without_draft
    env = DraftEnv(target=target, draft=draft, context_ids=list(context_ids) if context_ids is not None else None,
                   generator=generator, table=table)
    drafter = make_drafter(name, dict(params), env)
    eos_ids = getattr(target, "eos_ids", None)
    return drafter, make_verifier(method, params, memory, generator, eos_ids=eos_ids)


# The rules of the rule-based methods. AASD's split (core.rules.by_source): relaxed for copied and
# alignment nodes, strict for generated text.
def _fixed(p) -> Rules:
    return by_source(fixed(p["delta"]))


def _mixed(p) -> Rules:
    return by_source(mixed(p["delta"], p["top_k"]))


def _adaptive(p) -> Rules:
    """AASD's split, with alignment nodes under their own α, β where given (`alpha_alignment`, `beta_alignment`:
    what `aasd[auto]` records from the per-source fit)."""
    rules = by_source(adaptive(p["alpha"], p["beta"]))
    a, b = p.get("alpha_alignment"), p.get("beta_alignment")
    if a is not None or b is not None:
        rules["alignment"] = adaptive(p["alpha"] if a is None else a, p["beta"] if b is None else b)
    return rules


def _topk(p) -> Rules:
    return by_source(top_k_rule(p["top_k"]))


def _adaptive_all(p) -> Rules:
    """recycle-aasd: AASD's entropy-adaptive rule for every node (all of them are recycled)."""
    return adaptive(p["alpha"], p["beta"])


# CSD's rescue rules (seed 004): the methods differ only in which conditions a rescue needs.
def _csd_rule(p) -> Rescue:
    return Rescue(lam=p["lam"], tau=p["tau"])


def _memory_rule(p) -> Rescue:
    return Rescue(lam=p["lam"])


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
    Method("pld", "prompt lookup decoding: longest n-gram ≤ 3 in prompt + output, one chain of 10", GREEDY, True,
           drafter="prompt_lookup"),
    Method("top-k", "top-k sampling (k = 50, T = 1)", param_defaults(*COMMON, "seed", temperature=1.0, top_k=50, top_p=1.0), True),
    Method("nucleus", "nucleus sampling (p = 0.8, T = 1)", param_defaults(*COMMON, "seed", temperature=1.0, top_k=0, top_p=0.8), True),
    Method("casd", "context-aware drafting, fixed threshold δ with EOS guard", param_defaults(*COMMON, *POOL, "delta", "fitted"),
           False, drafter="context", rules_of=_fixed),
    Method("casd-mixed", "context-aware drafting, δ and top-k together", param_defaults(*COMMON, *POOL, "delta", "top_k"), False,
           drafter="context", rules_of=_mixed),
    Method("aasd", "context drafting + alignment sampling + entropy-adaptive verification",
           param_defaults(*COMMON, *POOL, *ALIGN, "alpha", "beta", "alpha_alignment", "beta_alignment", "fitted"), False,
           drafter="context", rules_of=_adaptive),
    Method("aasd-strict", "AASD drafting with strict verification (lossless)", param_defaults(*COMMON, *POOL, *ALIGN), True,
           drafter="context"),
    Method("aasd-no-align", "ablation: AASD without alignment sampling", param_defaults(*COMMON, *POOL, "alpha", "beta"), False,
           drafter="context", rules_of=_adaptive),
    Method("aasd-fixed", "ablation: AASD drafting with CASD's fixed threshold", param_defaults(*COMMON, *POOL, *ALIGN, "delta"), False,
           drafter="context", rules_of=_fixed),
    Method("aasd-topk", "ablation: AASD drafting with a top-k acceptance rule", param_defaults(*COMMON, *POOL, *ALIGN, "top_k"), False,
           drafter="context", rules_of=_topk),
    # Draft-model speculative decoding and CSD (seed 004): one drafter and one walk; the methods differ only
    # in the rescue rule and in whether they read the correction memory.
    # Token Recycling (arXiv 2408.08696): the target's own past top-k after each token, drafted as a static tree.
    Method("recycle", "Token Recycling: a tree from the target's own top-8 after each token, refreshed by every forward "
           "(strict: lossless)", param_defaults(*COMMON, "max_nodes", *TABLE, "temperature", "seed", top_k=0, top_p=1.0,
                                                max_nodes=RECYCLE_NODES), True, drafter="recycle"),
    Method("recycle-aasd", "Token Recycling verified by AASD's entropy-adaptive rule (lossy)",
           param_defaults(*COMMON, "max_nodes", *TABLE, "alpha", "beta", max_nodes=RECYCLE_NODES), False, drafter="recycle",
           rules_of=_adaptive_all),
    Method("sd", "speculative decoding with a draft model: γ tokens per step, greedy or rejection sampling (lossless)",
           param_defaults(*COMMON, *DRAFT, **SAMPLING), True, drafter="draft_model", needs_draft=True),
    Method("csd", "calibrated SD: a rejected draft token is rescued when its correction pair is frequent in the memory "
           "(count ≥ λ) and the target's gate passes (p(x)/p(t*) ≥ τ); over context drafts when no draft model is given",
           param_defaults(*COMMON, *DRAFT, "tau", "lam", "memory_mode", *RESCUE, *POOL, "align_m", **SAMPLING), False, drafter="draft_model",
           drafter_without_draft="context", rescue_of=_csd_rule, reads_memory=True),
    Method("csd-context", "single-model CSD: the rescue rule over context drafts (AASD's drafter), memory keyed by the target alone",
           param_defaults(*COMMON, "tau", "lam", "memory_mode", *RESCUE, *POOL, "align_m", **SAMPLING), False, drafter="context",
           rescue_of=_csd_rule, reads_memory=True),
    Method("lossy-sd", "SD with the gate alone at a lenient τ (p(x)/p(t*) ≥ 0.6), no memory",
           param_defaults(*COMMON, *DRAFT, *RESCUE, tau=0.6, **SAMPLING), False, drafter="draft_model", rescue_of=_gate_rule,
           needs_draft=True),
    Method("sd-memory-only", "ablation: SD rescuing every rejection whose pair is frequent in the memory (count ≥ λ), no gate",
           param_defaults(*COMMON, *DRAFT, "lam", "memory_mode", *RESCUE, **SAMPLING), False, drafter="draft_model", rescue_of=_memory_rule,
           reads_memory=True,
           needs_draft=True),
    Method("sd-gating-only", "ablation: SD with the gate alone at CSD's τ (p(x)/p(t*) ≥ τ), no memory",
           param_defaults(*COMMON, *DRAFT, "tau", *RESCUE, **SAMPLING), False, drafter="draft_model", rescue_of=_gate_rule,
           needs_draft=True),
]:
    register(m)


def get_method(name: str) -> Method:
    method = METHODS.get(name)
    if method is None:
        raise InvalidInputError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return method


def resolve_params(name: str, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    values = dict(values or {})
    pool = values.pop("pool", None)  # pool=full|compressed: a word, not a number (core.compress), for pool methods only
    p = validate(values, get_method(name).params)
    if pool is not None:
        if not is_pool_method(get_method(name)):
            raise InvalidInputError(f"pool={pool} has no effect on {name}: it says what the context pool of a context-drafting "
                                    f"method holds under --compress ({', '.join(n for n, m in METHODS.items() if is_pool_method(m))})")
        p["pool"] = check_pool(pool)
    if p.get("fitted"):  # the fit sets these: given ones would be silently replaced
        given = [k for k in FITTED_PARAMS.get(name, ()) if (values or {}).get(k) is not None]
        if given:
            raise InvalidInputError(f"{name}[auto] verifies with the fitted {', '.join(FITTED_PARAMS[name])}; "
                                    f"{', '.join(given)} cannot be given beside it: drop {'it' if len(given) == 1 else 'them'} or auto")
    return p


AUTO_THRESHOLDS = "auto"  # `aasd[auto]`: short for `aasd[fitted=1]`, the thresholds fitted to the model


def parse_method_spec(spec: str) -> tuple[str, dict[str, str]]:
    """`aasd[align_graft=1,alpha=0.2]` -> ("aasd", {"align_graft": "1", "alpha": "0.2"}): one method
    with its own parameter overrides, so a bench can put variants of a method side by side. A bare
    `auto` is `fitted=1`: `aasd[auto]` verifies with the thresholds fitted to the model (core.thresholds)."""
    spec = spec.strip()
    name, _, rest = spec.partition("[")
    name = name.strip()
    get_method(name)
    overrides: dict[str, str] = {}
    if rest:
        if not rest.endswith("]"):
            raise InvalidInputError(f"bad method spec {spec!r}: write NAME or NAME[param=value,...]")
        for item in filter(None, (x.strip() for x in rest[:-1].split(","))):
            if item == AUTO_THRESHOLDS:
                if name not in FITTED_PARAMS:
                    raise InvalidInputError(f"{name} has no fitted thresholds; `[auto]` works for {', '.join(FITTED_PARAMS)}")
                overrides["fitted"] = "1"
                continue
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise InvalidInputError(f"bad parameter {item!r} in {spec!r}: write param=value (or auto)")
            overrides[key.strip()] = value.strip()
    return name, overrides


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
    compression: Compression | None = None,
    uncompressed_ids: Sequence[int] | None = None,
) -> RunTrace:
    """Run method `name` on the loaded `target` (a core.models.LoadedModel) and return its trace.

    `context_ids`, when given, fills the draft pool instead of the prompt (CASD: the full document in
    the pool, a shortened prompt to the model). A cancelled run comes back with status `cancelled` and what it had; errors propagate.
    `memory` (a core.memory.CorrectionMemory) replaces the shared, persisted correction memory of
    the model pair for CSD methods (a benchmark passes a private copy so its items never reach the file).
    `compression` (core.compress.Compression) says the prompt's context was compressed: the run records the
    compressor, the target rate and the rate reached, and a context-drafting method with `pool=full` (its
    default) drafts from `uncompressed_ids`, the prompt before compression (CASD), unless `context_ids` is given.
    """
    method, run, context_ids = _new_run(name, target, prompt_ids, params, draft=draft, prompt_text=prompt_text,
                                        context=context, context_ids=context_ids, compression=compression,
                                        uncompressed_ids=uncompressed_ids)
    if method.external is not None:
        res = method.external(target, draft, run.prompt_ids, run.params, tuple(stop_strings))
        run.output_ids, run.external_accept_lengths = res.output_ids, res.accept_lengths
        run.prefill_seconds, run.decode_seconds = res.prefill_seconds, res.decode_seconds
        run.stop_reason = "eos" if res.output_ids and res.output_ids[-1] in target.eos_ids else "max_new_tokens"
        run.status = "complete"
    else:
        parts = _decoding_parts(method, run, target, draft, context_ids, memory)
        try:
            res = decode(target.model, target.tokenizer, target.eos_ids, run.prompt_ids, parts.drafter, parts.verifier,
                         _decode_config(run, stop_strings), target.max_context, on_step=on_step, should_stop=should_stop,
                         sizer=parts.sizer)
            run.status = "complete"
        except Cancelled as c:
            res = c.partial
            run.status = "cancelled"
        _finish(run, res, parts)
    run.output_text = target.tokenizer.decode(run.output_ids, skip_special_tokens=True)
    return run


def run_batch(
    name: str,
    target,
    prompts: Sequence[Sequence[int]],
    params: Mapping[str, Any] | None = None,
    *,
    draft=None,
    prompt_texts: Sequence[str] | None = None,
    stop_strings: Sequence[str] = (),
    memory=None,
    max_new_tokens: Sequence[int] | None = None,
    row_stop_strings: Sequence[Sequence[str]] | None = None,
    should_stop: Callable[[], bool] | None = None,
    slots: int | None = None,
) -> list[RunTrace]:
    """Run method `name` on several prompts in one batch (core.batch): one RunTrace per prompt, as
    run_method would give it (strict methods: the same tokens, bar float near-ties). `max_new_tokens`
    and `row_stop_strings` override the parameter and `stop_strings` per prompt. At most `slots` prompts
    decode at once (all when None); a waiting prompt takes a finished row's place. A run's decode_seconds
    is the batch's decode time until it finished."""
    from core.batch import decode_batch

    method = get_method(name)
    if method.external is not None:
        raise InvalidInputError(f"{name} runs through transformers' generate, which cannot batch speculative decoding "
                                "(transformers#32165): run it with batch size 1")
    if not prompts:
        raise InvalidInputError("the batch is empty: give at least one prompt")
    texts = list(prompt_texts) if prompt_texts is not None else [""] * len(prompts)
    runs, parts = [], []
    for i, ids in enumerate(prompts):
        row_params = dict(params or {}) if max_new_tokens is None else {**(params or {}), "max_new_tokens": max_new_tokens[i]}
        _, run, context_ids = _new_run(name, target, ids, row_params, draft=draft, prompt_text=texts[i])
        runs.append(run)
        parts.append(_decoding_parts(method, run, target, draft, context_ids, memory))
        run.params["batch_size"] = min(slots or len(prompts), len(prompts))
    results = decode_batch(target.model, target.tokenizer, target.eos_ids, [r.prompt_ids for r in runs],
                           [x.drafter for x in parts], [x.verifier for x in parts],
                           [_decode_config(r, row_stop_strings[i] if row_stop_strings is not None else stop_strings)
                            for i, r in enumerate(runs)], target.max_context,
                           sizers=[x.sizer for x in parts], should_stop=should_stop, slots=slots)
    for run, res, x in zip(runs, results, parts):
        run.status = "cancelled" if res.stop_reason == "cancelled" else "complete"
        _finish(run, res, x)
        run.output_text = target.tokenizer.decode(run.output_ids, skip_special_tokens=True)
    return runs


def _new_run(name: str, target, prompt_ids: Sequence[int], params: Mapping[str, Any] | None, *, draft=None,
             prompt_text: str = "", context: str | None = None, context_ids: Sequence[int] | None = None,
             compression: Compression | None = None, uncompressed_ids: Sequence[int] | None = None):
    """(method, the run's record with its resolved parameters, the pool's context ids): checked before any decoding."""
    method = get_method(name)
    p = resolve_params(name, params)
    if p.get("fitted"):  # the fit's values become the run's own: recorded, and all that rules_of reads
        p.update(fitted_values(target, name))
    if method.needs_draft and draft is None:
        raise InvalidInputError(f"method {name!r} needs a draft model: pass --draft (e.g. the qwen2.5-coder-0.5b preset)")
    if "rescue_eos" in p:  # what rescue_eos=no exempts: recorded, so a re-score can judge with or without it
        p["eos_ids"] = [int(t) for t in target.eos_ids]
    prompt_ids = [int(t) for t in prompt_ids]
    check_prompt(prompt_ids, target.max_context)
    if compression is not None:
        p.update(compression.record())
        if is_pool_method(method):
            p["pool"] = p.get("pool", DEFAULT_POOL)
            if p["pool"] == "full" and context_ids is None:
                if uncompressed_ids is None:
                    raise InvalidInputError(f"{name} with pool=full drafts from the uncompressed prompt: pass its ids")
                context_ids = [int(t) for t in uncompressed_ids]
    run = RunTrace(
        method=name, params=p, model=target.name, draft_model=draft.name if draft is not None else None,
        device=str(target.device), dtype=str(target.dtype).replace("torch.", ""), prompt=prompt_text,
        prompt_ids=prompt_ids, context=context, model_fingerprint=target.fingerprint,
        draft_fingerprint=draft.fingerprint if draft is not None else None,
    )
    return method, run, context_ids


@dataclass
class _DecodingParts:
    drafter: Drafter
    verifier: Verifier
    sizer: TreeSizer | None
    table: RecycleTable | None
    warm: bool


def _decoding_parts(method: Method, run: RunTrace, target, draft, context_ids, memory) -> _DecodingParts:
    """The drafter, verifier and tree sizer of one request; what they start from goes into the run's params."""
    p = run.params
    if method.reads_memory:  # which memory the run read, and how: a stored run says what made it
        if memory is None:
            from core.memory import shared_memory

            memory = shared_memory(target, draft)
        p.update(memory_sha=memory.fingerprint(), memory_pairs=len(memory), memory_observations=memory.total)
    table = recycle_table(method, p, target)
    if table is not None:  # the table the run starts from: runs are reproducible from it (docs/RESULTS.md)
        p.update(table.state())
    drafter, verifier = build(method, p, target=target, draft=draft, context_ids=context_ids, memory=memory, table=table)
    sizer = tree_sizer(method, p, target, draft)
    if sizer is not None:  # what the tree sizes were chosen from: the run is reproducible from it
        p["cost_curve_ms"] = " ".join(f"{n}:{t * 1e3:.1f}" for n, t in zip(sizer.cost.sizes, sizer.cost.seconds))
    return _DecodingParts(drafter, verifier, sizer, table, bool(p.get("warm", 0)))


def _decode_config(run: RunTrace, stop_strings: Sequence[str]) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=run.params["max_new_tokens"], stop_strings=tuple(stop_strings))


def _finish(run: RunTrace, res, parts: _DecodingParts) -> None:
    if parts.table is not None and parts.warm:
        parts.table.save()
    run.output_ids, run.steps = res.output_ids, res.steps
    run.prefill_seconds, run.decode_seconds, run.stop_reason = res.prefill_seconds, res.decode_seconds, res.stop_reason


def _load_plugins() -> None:
    """Methods other packages register (entry-point group `spec_workbench.methods`, each a function taking
    `register`): core stays ignorant of them, and a user's own package can add methods the same way."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="spec_workbench.methods"):
        try:
            ep.load()(register)
        except Exception as e:  # a broken plugin must not take the built-in methods down with it
            warnings.warn(f"method plugin {ep.name!r} ({ep.value}) failed to load: {e}")


_load_plugins()
