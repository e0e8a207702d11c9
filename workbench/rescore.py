"""Re-scoring: what a stored step's verification would have decided under other parameters, without the model.

Every node record carries the statistics a T = 0 verification rule reads (p, entropy, max p, p(eos),
rank, logit gap, and for CSD the correction and the memory count read before the update), so a step's
tree can be rebuilt and judged again by core.walk.walk, the engine's own walk, with the method's own
rule (`Method.rules_of` / `Method.rescue_of`, the same callables the engine verifies with).

What it can and cannot say:
- Up to and including the first step whose accepted length changes, the prediction is exact: the
  earlier steps committed the same tokens, so the next trees would have been the same.
- After it the sequence would differ; later steps are still judged on the trees the run drafted.
- CSD reads a memory count only where the original run judged a node. A walk that goes further (a
  rescue the original refused) reaches a node without one: the walk stops there and the step's
  accepted length is a lower bound.
- Sampled runs (T > 0) were verified by random draws, not by these rules: they are refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import InvalidInputError
from core.rules import NodeStats
from core.trace import NodeTrace, RunTrace, StepTrace
from core.tree import DraftTree
from core.walk import UNKNOWN, walk
from workbench.methods import METHODS, Method, get_method, rescue_for, resolve_params

# Parameters that only change how the target judges the drafts; any other (pool sizes, γ,
# max_new_tokens, temperature, ...) would change the drafts themselves, which needs a new run.
VERIFY_PARAMS = ("delta", "alpha", "beta", "alpha_alignment", "beta_alignment", "top_k", "tau", "lam", "rescue_eos")


@dataclass(frozen=True)
class NodeRescore:
    node: int
    parent: int
    depth: int
    token_id: int
    token_text: str
    source: str
    p: float | None
    old_decision: str
    old_threshold: float | None
    old_reason: str
    decision: str
    threshold: float | None
    reason: str
    rank: int | None = None  # the target's rank of the token (0: its own top token, which any θ ≤ max p passes)

    @property
    def flipped(self) -> bool:
        return self.decision != self.old_decision and self.decision != UNKNOWN


@dataclass
class StepRescore:
    step: int
    old_accepted: int  # draft tokens accepted, the bonus excluded
    accepted: int  # under the new parameters (at least this many when `lower_bound`)
    nodes: list[NodeRescore]  # root and draft nodes (the bonus record excluded)
    lower_bound: bool = False
    note: str | None = None  # why `accepted` is only a lower bound

    @property
    def changed(self) -> bool:
        return self.accepted != self.old_accepted

    @property
    def flips(self) -> list[NodeRescore]:
        return [n for n in self.nodes if n.flipped]


@dataclass
class RunRescore:
    method: str
    params: dict[str, Any]  # the full parameters re-scored with
    steps: list[StepRescore]
    first_divergence: int | None  # first step whose accepted length changes (None: none does)
    window: int  # steps compared: up to and including the first divergence (all when None)
    original_mal: float  # the original run over the window (tokens per step = accepted + 1)
    predicted_mal: float  # the new parameters over the window
    predicted_is_lower_bound: bool
    run_mal: float  # the original run over all its steps (accepted + 1; a stop cut in the last step ignored)
    flip_counts: dict[str, int] = field(default_factory=dict)  # "rejected -> accepted": n, over every stored step


# ---------------------------------------------------------------------------------------------
def _check_rescorable(method: Method, params: Mapping[str, Any]) -> None:
    if not method.in_engine:
        raise InvalidInputError(
            f"method {method.name!r} has no stored verification steps to re-score (it runs through transformers' "
            "generate); re-score a run of one of our engine's methods, e.g. greedy, aasd, casd or csd"
        )
    if params.get("temperature", 0.0) > 0:
        raise InvalidInputError(
            f"re-scoring replays greedy (T = 0) verification, but temperature is {params['temperature']}: a sampled "
            "run's acceptances came from random draws, not from thresholds. Re-run the method at temperature 0 to re-score it"
        )


def _records(step: StepTrace) -> list[NodeTrace]:
    """The step's tree nodes in index order (the bonus record excluded), checked to form a tree."""
    records = sorted((n for n in step.nodes if n.decision != "bonus"), key=lambda n: n.node)
    if not records:
        raise InvalidInputError(f"step {step.index} has no node records: load the run with its nodes to re-score it")
    for i, r in enumerate(records):
        ok = r.node == i and (r.parent == -1 if i == 0 else 0 <= r.parent < i)
        if not ok:
            raise InvalidInputError(
                f"step {step.index}: node records do not form a tree (node {r.node}, parent {r.parent})"
            )
    return records


def _tree(records: Sequence[NodeTrace]) -> DraftTree:
    return DraftTree(
        tokens=[r.token_id for r in records],
        parents=[r.parent for r in records],
        depths=[r.depth for r in records],
        sources=[r.source for r in records],
        draft_probs=[r.draft_p for r in records],
    )


def _stats(step: int, r: NodeTrace) -> NodeStats:
    values = (r.p, r.entropy, r.max_p, r.p_eos, r.rank, r.logit_gap)
    if any(v is None for v in values):
        raise InvalidInputError(
            f"step {step} node {r.node} has no target statistics (p, entropy, rank, ...): it cannot be re-scored"
        )
    return NodeStats(*values)


def _logp(p: float) -> float:
    # The engine ranked paths by float32 log-probabilities and stored p = exp(log p); rounding back to
    # float32 recovers them (bit for bit but for |log p| < ~1e-8), so path ties break as they did in the run.
    return float(np.float32(math.log(p))) if p > 0 else -math.inf


def _argmax_rows(step: StepTrace, n: int) -> list[int | None]:
    """The target's own token after each node, where the records tell it: a child of rank 0, a recorded
    correction, or the bonus (T = 0: the argmax after the last accepted node)."""
    argmax: list[int | None] = [None] * n
    # Weakest evidence first, so a recorded correction has the last word.
    for r in sorted(step.nodes, key=lambda r: (r.correction_id is not None, r.rank == 0)):
        if 0 <= r.parent < n:
            if r.correction_id is not None:
                argmax[r.parent] = r.correction_id
            elif r.decision == "bonus" or r.rank == 0:
                argmax[r.parent] = r.token_id
    return argmax


@dataclass(frozen=True)
class StepInputs:
    """What re-judging a stored step needs that no parameter changes: its node records, tree, statistics,
    log-probabilities and the target's own token after each node. Built once per step (prepare_run), so moving a
    slider re-runs only the walks."""

    step: StepTrace
    records: list[NodeTrace]
    tree: DraftTree
    stats: list[NodeStats | None]
    logp: list[float]
    argmax: list[int | None]


def step_inputs(step: StepTrace) -> StepInputs:
    records = _records(step)
    stats = [None] + [_stats(step.index, r) for r in records[1:]]
    return StepInputs(
        step, records, _tree(records), stats, [0.0] + [_logp(s.p) for s in stats[1:]], _argmax_rows(step, len(records))
    )


def prepare_run(run: RunTrace) -> list[StepInputs]:
    """Every step's StepInputs (InvalidInputError for a step that cannot be re-scored): pass them to rescore_run
    to re-score the same run again and again (the replay's sliders) without rebuilding them."""
    return [step_inputs(s) for s in run.steps]


PASSED_BUT = "passed, but"  # core.walk's words for a node that passed its rule and was still not taken
ONE_TOKEN = "only one token can follow at each position"


def sibling_note(node, nodes: Sequence) -> str:
    """For a node the walk did not take while a sibling (same parent) was taken, the sibling in plain words; "" when
    no sibling was taken. Where the node passed its own rule the sibling is why it was not taken ("; not taken:
    sibling node k ('tok') at depth d was accepted first: only one token ..."); where its rule failed it (its
    threshold), that is the reason, and the sibling is said apart, as a fact, not as a second reason.
    `nodes`: the step's nodes with their new decisions (NodeRescore)."""
    if node.parent < 0 or node.decision in ("accepted", "rescued"):
        return ""
    won = next((n for n in nodes if n.parent == node.parent and n.decision in ("accepted", "rescued")), None)
    if won is None:
        return ""
    sibling = f"sibling node {won.node} ({won.token_text!r}) at depth {won.depth}"
    if PASSED_BUT in (node.reason or ""):
        return f"; not taken: {sibling} was accepted first ({ONE_TOKEN})"
    return f". (Its rule decided; apart from that, {sibling} was chosen at this position: {ONE_TOKEN}.)"


def _rescore(
    inputs: StepInputs, method: Method, params: Mapping[str, Any], eos_ids: Sequence[int] | None = None
) -> StepRescore:
    step, records = inputs.step, inputs.records
    verdict = walk(
        inputs.tree,
        inputs.stats,
        inputs.logp,
        method.rules_of(params),
        rescue=rescue_for(method, params, eos_ids),
        argmax=inputs.argmax,
        count_of=lambda node, correction: records[node].mem_count,
    )
    nodes = [
        NodeRescore(
            r.node,
            r.parent,
            r.depth,
            r.token_id,
            r.token_text,
            r.source,
            r.p,
            r.decision,
            r.threshold,
            r.reason,
            verdict.decisions[i],
            verdict.thresholds[i],
            verdict.reasons[i],
            r.rank,
        )
        for i, r in enumerate(records)
    ]
    return StepRescore(
        step.index, step.accepted, len(verdict.path) - 1, nodes, lower_bound=verdict.note is not None, note=verdict.note
    )


def rescore_step(
    step: StepTrace, method: str, params: Mapping[str, Any] | None = None, eos_ids: Sequence[int] | None = None
) -> StepRescore:
    """Judge one stored step again with `method`'s rule under `params` (over the method's defaults);
    `eos_ids`: the target's end-of-sequence ids, which `rescue_eos=no` needs (a run records them)."""
    m = get_method(method)
    p = resolve_params(method, params)
    _check_rescorable(m, p)
    return _rescore(step_inputs(step), m, p, eos_ids)


def rescore_run(
    run: RunTrace,
    params: Mapping[str, Any] | None = None,
    rule: str | None = None,
    inputs: Sequence[StepInputs] | None = None,
) -> RunRescore:
    """Re-score every step of `run` with its method under `params` (over the run's own parameters).

    `rule` names another method whose verification rule judges the same stored drafts ("what if this
    AASD run had used CASD's fixed δ?"; any method our engine runs) and takes its own defaults where the
    run's parameters do not apply. A rescue rule needs memory counts, which only CSD runs record: on
    other runs its walk stops at the first rejection it would have to count (a lower bound). `inputs`: the run's
    prepare_run, when the caller keeps it between re-scorings of the same run."""
    m = get_method(rule or run.method)
    if not run.steps:
        raise InvalidInputError(
            f"run of {run.method!r} has no stored steps to re-score"
            + (
                " (transformers' generate runs record no verification steps)"
                if not get_method(run.method).in_engine
                else ""
            )
            + ": re-score a run of one of our engine's methods, e.g. greedy, aasd, casd or csd"
        )
    if not m.in_engine:
        ours = [n for n, x in METHODS.items() if x.in_engine]
        raise InvalidInputError(
            f"{m.name!r} runs through transformers' generate and has no verification rule to judge "
            f"this run's drafts with; choose one of: {', '.join(ours)}"
        )
    base = {**resolve_params(m.name), **{k: v for k, v in run.params.items() if k in m.params}}
    if run.params.get("temperature", 0.0) > 0:
        raise InvalidInputError(
            f"this run sampled (temperature {run.params['temperature']}): its acceptances came from random draws, "
            "not from thresholds, so they cannot be re-scored. Re-run the method at temperature 0 to re-score it"
        )
    # Validate only what changes: a run's own values may lie outside a parameter's user range (greedy's
    # top_k = 0 means "no top-k sampling"), and a UI passes every slider back, changed or not.
    overrides = {k: v for k, v in (params or {}).items() if v is not None and not (k in base and v == base[k])}
    checked = resolve_params(m.name, overrides)
    new = {**base, **{k: checked[k] for k in overrides}}
    redraft = [k for k in overrides if k not in VERIFY_PARAMS]
    if redraft:
        raise InvalidInputError(
            f"re-scoring can change only verification parameters ({', '.join(k for k in VERIFY_PARAMS if k in new)}); "
            f"{', '.join(redraft)} would change what is drafted or decoded: run the method again instead"
        )
    _check_rescorable(m, new)
    eos_ids = run.params.get("eos_ids")  # what rescue_eos=no exempts: recorded by runs of the rescuing methods
    if not new.get("rescue_eos", 1) and eos_ids is None:
        raise InvalidInputError(
            f"rescue_eos=no exempts the target's end-of-sequence ids, which this run of {run.method!r} "
            "did not record (runs of csd, csd-context, lossy-sd, sd-memory-only and sd-gating-only do): "
            "run the method again to judge it with rescue_eos=no"
        )
    steps = [_rescore(i, m, new, eos_ids) for i in (inputs if inputs is not None else prepare_run(run))]
    first = next((i for i, s in enumerate(steps) if s.changed), None)
    window = steps if first is None else steps[: first + 1]
    flips = Counter(f"{n.old_decision} -> {n.decision}" for s in steps for n in s.flips)
    return RunRescore(
        method=m.name,
        params=new,
        steps=steps,
        first_divergence=None if first is None else steps[first].step,
        window=len(window),
        original_mal=_mean(s.old_accepted + 1 for s in window),
        predicted_mal=_mean(s.accepted + 1 for s in window),
        predicted_is_lower_bound=any(s.lower_bound for s in window),
        run_mal=_mean(s.old_accepted + 1 for s in steps),
        flip_counts=dict(flips),
    )


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def flips_table(result: RunRescore | StepRescore) -> list[dict[str, Any]]:
    """One row per flipped node, ready for `pandas.DataFrame(rows)`."""
    steps = result.steps if isinstance(result, RunRescore) else [result]
    return [
        {
            "step": s.step,
            "node": n.node,
            "token": n.token_text,
            "source": n.source,
            "p": n.p,
            "old_threshold": n.old_threshold,
            "new_threshold": n.threshold,
            "old_decision": n.old_decision,
            "new_decision": n.decision,
            "reason": n.reason + sibling_note(n, s.nodes),
        }
        for s in steps
        for n in s.flips
    ]
