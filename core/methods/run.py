"""Running a method: `run_method` decodes one prompt (core.engine.decode, or a method's external runner such
as transformers' generate) and `run_batch` several at once (core.batch.decode_batch); both return RunTraces
whose parameters record everything the run started from (the fitted thresholds, the memory's and the
table's fingerprints, the cost curve), so a stored run says what made it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.acceptance_prior import AcceptancePrior
from core.compress.spec import DEFAULT_POOL, Compression, is_pool_method
from core.drafters import Drafter, RecycleTable
from core.engine import decode
from core.errors import InvalidInputError
from core.methods.build import build, correction_memory, recycle_table, suffix_corpus, tree_sizer
from core.methods.registry import Method, get_method
from core.methods.spec import resolve_params
from core.sizing import TreeSizer
from core.step import Cancelled, DecodeConfig, ProgressCallback, Verifier, check_prompt
from core.suffix import SuffixCorpus
from core.thresholds import fitted_values
from core.trace import RunTrace, StepTrace


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
    on_prefill: ProgressCallback | None = None,
    corpus: SuffixCorpus | None = None,
    prior: AcceptancePrior | None = None,
) -> RunTrace:
    """Run method `name` on the loaded `target` (a core.models.LoadedModel) and return its trace.

    `context_ids`, when given, fills the draft pool instead of the prompt (CASD: the full document in
    the pool, a shortened prompt to the model). A cancelled run comes back with status `cancelled` and what it had; errors propagate.
    `memory` (a core.memory.CorrectionMemory) replaces the shared, persisted correction memory of
    the model pair for CSD methods (a benchmark passes a private copy so its items never reach the file).
    `compression` (core.compress.Compression) says the prompt's context was compressed: the run records the
    compressor, the target rate and the rate reached, and a context-drafting method with `pool=full` (its
    default) drafts from `uncompressed_ids`, the prompt before compression (CASD), unless `context_ids` is given.
    `on_prefill(done, total)` follows the prompt's prefill (core.engine.decode; not for external runners).
    `corpus` (a core.suffix.SuffixCorpus) replaces the model's shared suffix corpus (suffix methods, fallback=suffix);
    an online run (corpus_mode=online) adds its output to the corpus it drafted from when it completes.
    `prior` (core.acceptance_prior.AcceptancePrior) is what `max_nodes=auto` starts its acceptance estimates
    from (the caller reads it, e.g. from stored traces: workbench.store.priors); the run records it.
    """
    method, run, context_ids = _new_run(
        name,
        target,
        prompt_ids,
        params,
        draft=draft,
        prompt_text=prompt_text,
        context=context,
        context_ids=context_ids,
        compression=compression,
        uncompressed_ids=uncompressed_ids,
    )
    if method.external is not None:
        res = method.external(target, draft, run.prompt_ids, run.params, tuple(stop_strings))
        run.output_ids, run.external_accept_lengths = res.output_ids, res.accept_lengths
        run.prefill_seconds, run.decode_seconds = res.prefill_seconds, res.decode_seconds
        run.stop_reason = "eos" if res.output_ids and res.output_ids[-1] in target.eos_ids else "max_new_tokens"
        run.status = "complete"
    else:
        parts = _decoding_parts(method, run, target, draft, context_ids, memory, corpus, prior)
        try:
            res = decode(
                target.model,
                target.tokenizer,
                target.eos_ids,
                run.prompt_ids,
                parts.drafter,
                parts.verifier,
                _decode_config(run, stop_strings),
                target.max_context,
                on_step=on_step,
                should_stop=should_stop,
                sizer=parts.sizer,
                on_prefill=on_prefill,
            )
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
    on_prefill: ProgressCallback | None = None,
    corpus: SuffixCorpus | None = None,
    prior: AcceptancePrior | None = None,
) -> list[RunTrace]:
    """Run method `name` on several prompts in one batch (core.batch): one RunTrace per prompt, as
    run_method would give it (strict methods: the same tokens, bar float near-ties). `max_new_tokens`
    and `row_stop_strings` override the parameter and `stop_strings` per prompt. At most `slots` prompts
    decode at once (all when None); a waiting prompt takes a finished row's place. A run's decode_seconds
    is the batch's decode time until it finished. `on_prefill(done, total)` follows the prefill of every prompt."""
    from core.batch import decode_batch

    method = get_method(name)
    if method.external is not None:
        raise InvalidInputError(
            f"{name} runs through transformers' generate, which cannot batch speculative decoding "
            "(transformers#32165): run it with batch size 1"
        )
    if not prompts:
        raise InvalidInputError("the batch is empty: give at least one prompt")
    texts = list(prompt_texts) if prompt_texts is not None else [""] * len(prompts)
    runs, parts = [], []
    for i, ids in enumerate(prompts):
        row_params = (
            dict(params or {}) if max_new_tokens is None else {**(params or {}), "max_new_tokens": max_new_tokens[i]}
        )
        _, run, context_ids = _new_run(name, target, ids, row_params, draft=draft, prompt_text=texts[i])
        runs.append(run)
        parts.append(_decoding_parts(method, run, target, draft, context_ids, memory, corpus, prior))
        run.params["batch_size"] = min(slots or len(prompts), len(prompts))
    results = decode_batch(
        target.model,
        target.tokenizer,
        target.eos_ids,
        [r.prompt_ids for r in runs],
        [x.drafter for x in parts],
        [x.verifier for x in parts],
        [
            _decode_config(r, row_stop_strings[i] if row_stop_strings is not None else stop_strings)
            for i, r in enumerate(runs)
        ],
        target.max_context,
        sizers=[x.sizer for x in parts],
        should_stop=should_stop,
        slots=slots,
        on_prefill=on_prefill,
    )
    for run, res, x in zip(runs, results, parts):
        run.status = "cancelled" if res.stop_reason == "cancelled" else "complete"
        _finish(run, res, x)
        run.output_text = target.tokenizer.decode(run.output_ids, skip_special_tokens=True)
    return runs


def _new_run(
    name: str,
    target,
    prompt_ids: Sequence[int],
    params: Mapping[str, Any] | None,
    *,
    draft=None,
    prompt_text: str = "",
    context: str | None = None,
    context_ids: Sequence[int] | None = None,
    compression: Compression | None = None,
    uncompressed_ids: Sequence[int] | None = None,
):
    """(method, the run's record with its resolved parameters, the pool's context ids): checked before any decoding."""
    method = get_method(name)
    p = recorded_params(name, target, params, compression)
    if method.needs_draft and draft is None:
        raise InvalidInputError(
            f"method {name!r} needs a draft model: pass --draft (e.g. the qwen2.5-coder-0.5b preset)"
        )
    prompt_ids = [int(t) for t in prompt_ids]
    check_prompt(prompt_ids, target.max_context)
    if compression is not None and is_pool_method(method) and p["pool"] == "full" and context_ids is None:
        if uncompressed_ids is None:
            raise InvalidInputError(f"{name} with pool=full drafts from the uncompressed prompt: pass its ids")
        context_ids = [int(t) for t in uncompressed_ids]
    run = RunTrace(
        method=name,
        params=p,
        model=target.name,
        draft_model=draft.name if draft is not None else None,
        device=str(target.device),
        dtype=str(target.dtype).replace("torch.", ""),
        prompt=prompt_text,
        prompt_ids=prompt_ids,
        context=context,
        model_fingerprint=target.fingerprint,
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
    corpus: SuffixCorpus | None = None  # the suffix corpus drafted from
    corpus_online: bool = False  # the run's output joins it when the run completes


def recorded_params(
    name: str, target, params: Mapping[str, Any] | None, compression: Compression | None = None
) -> dict[str, Any]:
    """The parameters a run of `name` decodes with and records: resolved, with the fit's thresholds for `fitted=1`,
    what rescue_eos exempts and the compression's record. A run being written shows these from its first step
    (workbench.service's header): a header with the unfitted defaults showed aasd[auto] at β 0.1 until it ended."""
    p = resolve_params(name, params)
    if p.get("fitted"):  # the fit's values become the run's own: recorded, and all that rules_of reads
        p.update(fitted_values(target, name))
    if "rescue_eos" in p:  # what rescue_eos=no exempts: recorded, so a re-score can judge with or without it
        p["eos_ids"] = [int(t) for t in target.eos_ids]
    if compression is not None:
        p.update(compression.record())
        if is_pool_method(get_method(name)):
            p["pool"] = p.get("pool", DEFAULT_POOL)
    return p


def _decoding_parts(
    method: Method, run: RunTrace, target, draft, context_ids, memory, corpus=None, prior: AcceptancePrior | None = None
) -> _DecodingParts:
    """The drafter, verifier and tree sizer of one request; what they start from goes into the run's params."""
    p = run.params
    memory = correction_memory(method, target, draft, memory, p)
    if method.reads_memory:  # which memory the run read, and how: a stored run says what made it
        p.update(memory_sha=memory.fingerprint(), memory_pairs=len(memory), memory_observations=memory.total)
        if p.get("keys", 0):  # generalised keys: derived from the exact pairs and the target's token texts
            from core.memory import keyed_memory

            memory = keyed_memory(memory, p["keys"], target)
            p["keys_sha"] = memory.memory.key_fingerprint(memory.keys)
    table = recycle_table(method, p, target)
    if table is not None:  # the table the run starts from: runs are reproducible from it (docs/RESULTS.md)
        p.update(table.state())
    corpus = suffix_corpus(method, p, target, corpus)
    if corpus is not None:  # the corpus the run starts from: a frozen one with this hash decodes alike
        p.update(
            {f"corpus_{k}": v for k, v in corpus.state().items() if k in ("requests", "tokens", "max_tokens", "hash")}
        )
    drafter, verifier = build(
        method, p, target=target, draft=draft, context_ids=context_ids, memory=memory, table=table, corpus=corpus
    )
    sizer = tree_sizer(method, p, target, draft, prior, drafter)
    if sizer is not None:  # what the tree sizes were chosen from: the run is reproducible from it
        p["cost_model_ms"] = cost_grid_text(sizer.cost)
        p.update(sizer.prior.record())
        p["sizer_caution"] = sizer.caution  # recorded also when 0: since the default is cautious, 0 is the exception
    return _DecodingParts(
        drafter,
        verifier,
        sizer,
        table,
        bool(p.get("warm", 0)),
        corpus,
        corpus is not None and not p.get("corpus_mode", 0) and not corpus.frozen,
    )


def cost_grid_text(cost) -> str:
    """t(n, L) as measured, in ms, one length after another: "L=256 0:43.0 1:78.5 ...; L=1024 ..."."""
    return "; ".join(
        f"L={length} " + " ".join(f"{n}:{t * 1e3:.1f}" for n, t in zip(cost.sizes, row))
        for length, row in zip(cost.lengths, cost.seconds)
    )


def _decode_config(run: RunTrace, stop_strings: Sequence[str]) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=run.params["max_new_tokens"], stop_strings=tuple(stop_strings))


def _finish(run: RunTrace, res, parts: _DecodingParts) -> None:
    if parts.table is not None and parts.warm:
        parts.table.save()
    run.output_ids, run.steps = res.output_ids, res.steps
    if parts.corpus is not None and parts.corpus_online and res.stop_reason != "cancelled" and res.output_ids:
        parts.corpus.add(res.output_ids, dedupe=True)
    run.prefill_seconds, run.decode_seconds, run.stop_reason = res.prefill_seconds, res.decode_seconds, res.stop_reason
    run.decode_cpu_seconds = res.decode_cpu_seconds


# A text that repeats itself, so context drafting finds matches and verifies multi-token trees (the shapes of every
# method's forwards: the prompt's prefill, one-token greedy steps, tree verification with its attention mask).
WARM_UP_TEXT = "Copy this line twice: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the"
WARM_UP_TOKENS = 12


def warm_up(target) -> list[RunTrace]:
    """Run the model once, untimed, through the code paths a comparison's timed runs take: a process's first
    forwards pay one-off costs (the CPU kernels' first-use setup, the allocator growing to the working set) that
    would otherwise land on the first timed run, which is greedy's (it always runs first) and makes every speed-up
    after it look larger. A short greedy run and a short AASD run with a fixed tree (no cost-curve measurement,
    no memory, corpus or store) cover prefill, the one-token step and the multi-token tree verification.
    Returns the two runs (thrown away by the caller; a test reads which shapes they took)."""
    from core.models import encode_prompt

    ids = encode_prompt(target.tokenizer, WARM_UP_TEXT, chat=False)
    return [
        run_method("greedy", target, ids, {"max_new_tokens": WARM_UP_TOKENS}),
        run_method("aasd-strict", target, ids, {"max_new_tokens": WARM_UP_TOKENS, "max_nodes": 16, "fallback": 0}),
    ]
