"""The one method factory: a method and its parameters -> the drafter, the verifier and (max_nodes=auto) the
tree sizer of one request, with the tables they read (CSD's correction memory, Token Recycling's table)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from core.acceptance_prior import AcceptancePrior
from core.drafters import DraftEnv, Drafter, RecycleTable, make_drafter
from core.drafters.recycle import shared_table
from core.errors import InvalidInputError
from core.methods.registry import Method
from core.params import SHIPPED_MEMORY, is_auto
from core.rules import Rescue
from core.sizing import TreeSizer
from core.step import Verifier
from core.suffix import SuffixCorpus, shared_corpus
from core.target_stats import sampling_processors
from core.walk import sample_walk, walk


def rescue_for(method: Method, params: Mapping[str, Any], eos_ids: Sequence[int] | None = None) -> Rescue | None:
    """The method's rescue rule for a target whose end-of-sequence ids are `eos_ids` (else the `eos_ids` a
    run recorded in its params): with `rescue_eos=no` a correction t* among them is never rescued over.
    The engine (make_verifier) and the offline re-scoring (workbench.rescore) both build it here."""
    rescue = method.rescue_of(params)
    if rescue is None or params.get("rescue_eos", 1):
        return rescue
    ids = eos_ids if eos_ids is not None else params.get("eos_ids")
    if ids is None:
        raise InvalidInputError(
            f"{method.name}[rescue_eos=no] exempts the target's end-of-sequence ids, which are not "
            "known here: pass the target's eos_ids (a run records them in its params as eos_ids)"
        )
    if not ids:
        warnings.warn(f"{method.name}[rescue_eos=no]: the target has no end-of-sequence id, so nothing is exempt")
    return replace(rescue, exempt=frozenset(int(t) for t in ids))


def make_verifier(
    method: Method,
    params: Mapping[str, Any],
    memory=None,
    generator: torch.Generator | None = None,
    eos_ids: Sequence[int] | None = None,
) -> Verifier:
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
            return walk(
                tree, stats.nodes, stats.logp, rules, rescue=rescue, argmax=stats.row_argmax, count_of=count_of(tree)
            )

        return verify
    procs = sampling_processors(temperature, params.get("top_k", 0), params.get("top_p", 1.0))
    generator = generator if generator is not None else torch.Generator().manual_seed(int(params.get("seed", 0)))

    def verify_sampled(proposal, logits, stats):
        return sample_walk(
            proposal.tree,
            logits,
            procs,
            generator,
            rescue=rescue,
            count_of=count_of(proposal.tree),
            q_rows=proposal.q_rows,
        )

    return verify_sampled


def correction_memory(method: Method, target, draft=None, memory=None, params: Mapping[str, Any] | None = None):
    """The correction memory a run reads and updates: for `memory_mode=shipped` the pair's table shipped with the
    package (core.memory.shipped_memory, read only); else `memory` when given, else for the methods that read one
    the model pair's shared, persisted table (core.memory.shared_memory), else None."""
    if method.reads_memory and int((params or {}).get("memory_mode", 0) or 0) == SHIPPED_MEMORY:
        from core.memory import shipped_memory

        return shipped_memory(target, draft)
    if method.reads_memory and memory is None:
        from core.memory import shared_memory

        return shared_memory(target, draft)
    return memory


def recycle_table(method: Method, params: Mapping[str, Any], target) -> RecycleTable | None:
    """The Token Recycling table a run drafts from (None when it uses none): the model's process-wide
    table (warm=1: also loaded from and saved to the workbench home), or a private empty one (cold=1)."""
    if method.drafter != "recycle" and params.get("fallback", 0) != 1:
        return None
    if params.get("cold", 0):
        if params.get("warm", 0):
            raise InvalidInputError("cold=1 starts from an empty table and warm=1 loads the saved one: choose one")
        return RecycleTable(target.vocab_size)
    return shared_table(target, warm=bool(params.get("warm", 0)))


def sizes_trees(method: Method, params: Mapping[str, Any], draft=None) -> bool:
    """Whether a run sizes its trees from the model's measured t(n, L): `max_nodes=auto` on a tree drafter."""
    return is_auto(params.get("max_nodes")) and drafter_name(method, draft) in ("context", "recycle", "suffix")


def uses_corpus(method: Method, params: Mapping[str, Any]) -> bool:
    """Whether the method drafts from a suffix corpus (suffix, suffix-aasd, fallback=suffix)."""
    return method.drafter == "suffix" or params.get("fallback", 0) == 2


def suffix_corpus(
    method: Method, params: Mapping[str, Any], target, corpus: SuffixCorpus | None = None
) -> SuffixCorpus | None:
    """The suffix corpus a run drafts from (None when it uses none): `corpus` when given, else the model's
    process-wide one (core.suffix.shared_corpus), or with cold=1 an empty one of the run's own."""
    if not uses_corpus(method, params):
        return None
    if params.get("cold", 0):
        return SuffixCorpus(fingerprint=target.fingerprint)
    return corpus if corpus is not None else shared_corpus(target.fingerprint)


def tree_sizer(
    method: Method,
    params: Mapping[str, Any],
    target,
    draft=None,
    prior: AcceptancePrior | None = None,
    drafter: Drafter | None = None,
) -> TreeSizer | None:
    """`max_nodes=auto` for tree drafters (context, recycle, suffix): a sizer over the model's measured t(n, L), read
    at each step's context length, starting from `prior` (the caller's: e.g. workbench.store.priors from
    stored traces of this method and model; None: core.acceptance_prior's default rate), pricing `drafter`'s declared
    sources until it proposes (None: its first step asks it)."""
    if not sizes_trees(method, params, draft):
        return None
    from core.timing import cost_model

    if drafter is None:
        return TreeSizer(cost_model(target), prior)
    return TreeSizer(cost_model(target), prior, drafter_sources=drafter.node_sources, scored=drafter.scores_nodes)


def build(
    method: Method,
    params: Mapping[str, Any],
    *,
    target=None,
    draft=None,
    context_ids: Sequence[int] | None = None,
    memory=None,
    table: RecycleTable | None = None,
    corpus: SuffixCorpus | None = None,
) -> tuple[Drafter, Verifier]:
    """The one method factory: the method's drafter and verifier for one request.

    Methods that read CSD's memory use the model pair's shared, persisted table unless `memory` is given;
    the others touch a memory only when given one (plain SD then counts its rejections, as calibration does). Drafter and sampling verifier share the run's one random stream (two
    streams with one seed would correlate the draft's samples with the acceptance test's). Token Recycling's
    table (`recycle`, `fallback=1`) is the model's shared one unless `table` is given; so is the suffix corpus
    (`suffix`, `fallback=suffix`) unless `corpus` is given."""
    if method.external is not None:
        raise InvalidInputError(f"method {method.name!r} runs outside our engine (transformers' generate)")
    memory = correction_memory(method, target, draft, memory, params)
    if table is None:
        table = recycle_table(method, params, target)
    if corpus is None:
        corpus = suffix_corpus(method, params, target)
    # On the target's device: the sampling walk and a draft model draw where their tensors are.
    generator = torch.Generator(device=getattr(target, "device", None) or "cpu").manual_seed(int(params.get("seed", 0)))
    env = DraftEnv(
        target=target,
        draft=draft,
        context_ids=list(context_ids) if context_ids is not None else None,
        generator=generator,
        table=table,
        corpus=corpus,
    )
    drafter = make_drafter(drafter_name(method, draft), dict(params), env)
    eos_ids = getattr(target, "eos_ids", None)
    return drafter, make_verifier(method, params, memory, generator, eos_ids=eos_ids)


def drafter_name(method: Method, draft=None) -> str:
    """The drafter a method uses: its own, or without a draft model its `drafter_without_draft` (csd: context drafts)."""
    return method.drafter if draft is not None or method.drafter_without_draft is None else method.drafter_without_draft
