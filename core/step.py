"""One decoding step, for one request or for several that share a KV cache:

    draft   each request's drafter proposes a tree; it is pruned (no deeper than the tokens still wanted,
            nothing at or below EOS) and, under max_nodes=auto, sized (core.sizing)
    forward one target forward over every tree (`Rows.forward`)
    verify  per request: the statistics of every node (core.target_stats) and the verifier's walk (core.walk)
    keep    the accepted rows stay in the cache, the rest is dropped (`Rows.keep`)
    emit    per request: the accepted tokens and the bonus, cut at a stop; the step's trace; the drafter learns

core.engine.decode runs it on one request, core.batch.decode_batch on many, so everything a step does to a
request (pruning, sizing, tracing, timing, stopping) is written here once. Only how the trees go through the
model and how the accepted rows stay in the cache depends on how the requests share it: `Rows` (one request
alone: core.engine.SingleRow; a padded batch: core.batch.PaddedRows).

Invariant: the cache holds every committed token of a request but the last; that pending token is the root of
its next tree, at position `Request.length`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import Drafter, Proposal, TopK, TreeObserver, TreeTopK
from core.errors import InvalidInputError
from core.hot_types import Tokenizer
from core.sizing import TreeSizer, common_size
from core.target_stats import StepStats, step_stats
from core.trace import NodeTrace, StepTrace
from core.tree import DraftTree
from core.types import Decision
from core.walk import Verdict

# Judges one step's proposal from the target's logits and their statistics (core.walk does the deciding).
Verifier = Callable[[Proposal, torch.Tensor, StepStats], Verdict]


@dataclass
class DecodeConfig:
    max_new_tokens: int = 128
    stop_strings: Sequence[str] = ()


@dataclass
class DecodeResult:
    output_ids: list[int]
    steps: list[StepTrace]
    prefill_seconds: float
    decode_seconds: float
    stop_reason: str  # eos | stop_string | max_new_tokens | context_full | cancelled
    prefill: TopK | None = field(default=None, repr=False)  # what the drafter was given at the start
    decode_cpu_seconds: float | None = None  # decoding CPU time over decode_seconds' span (RunTrace's)


class Cancelled(Exception):
    """The caller asked to stop; carries what was decoded so far (None when raised by a prefill, whose
    caller knows the request and raises again with its partial result)."""

    def __init__(self, partial: DecodeResult | None):
        super().__init__("cancelled")
        self.partial = partial


@dataclass
class Request:
    """One prompt being decoded: its drafter, verifier, sizer and limits, and what it has committed so far."""

    prompt: list[int]
    drafter: Drafter
    verifier: Verifier
    cfg: DecodeConfig
    sizer: TreeSizer | None = None
    sequence: list[int] = field(init=False)  # the prompt and every committed token
    generated: list[int] = field(init=False, default_factory=list)
    steps: list[StepTrace] = field(init=False, default_factory=list)
    length: int = field(init=False)  # committed tokens in the cache (the pending root excluded): the root's position
    stop_reason: str | None = field(init=False, default=None)
    decode_seconds: float = field(init=False, default=0.0)
    decode_cpu_seconds: float | None = field(init=False, default=None)
    prefill: TopK | None = field(init=False, default=None)  # the prefill's top-k predictions the drafter began with
    asked: bool = field(init=False, default=False)  # whether this step asked the drafter (draft)
    # Committed tokens the drafter has not been given yet: a step that did not ask it (core.sizing's pause) defers its
    # `commit` when the drafter allows (Drafter.joins_commits) and wants no predictions; it gets them before it is
    # next asked, or when the request stops, so it proposes what it would have.
    unsent: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.sequence = list(self.prompt)
        self.length = len(self.prompt) - 1

    def result(self, prefill_seconds: float) -> DecodeResult:
        return DecodeResult(
            self.generated,
            self.steps,
            prefill_seconds,
            self.decode_seconds,
            self.stop_reason or "cancelled",
            self.prefill,
            self.decode_cpu_seconds,
        )


class TokenText:
    """Per-run memo of token id -> text, so traces do not re-decode the same ids every step."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.memo: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.memo.get(token_id)
        if text is None:
            text = self.memo[token_id] = self.tokenizer.decode([token_id])
        return text


class StepEnv:
    """What every step reads besides its requests: the tokenizer (stop strings, the traces' token texts),
    the target's end-of-sequence ids and its context length."""

    def __init__(self, tokenizer: Tokenizer, eos_ids: Sequence[int], max_context: int):
        self.tokenizer, self.eos_ids, self.max_context = tokenizer, list(eos_ids), max_context
        self.eos = frozenset(self.eos_ids)
        self.text = TokenText(tokenizer)


class Rows(Protocol):
    """How a step's requests share one KV cache."""

    def forward(self, requests: Sequence[Request], trees: Sequence[DraftTree]) -> list[torch.Tensor]:
        """One target forward over every request's tree: (len(tree), V) logits per request, on the device,
        after the device has finished (so the step's clock measures the forward)."""

    def keep(self, requests: Sequence[Request], paths: Sequence[Sequence[int]]) -> None:
        """Keep each request's accepted path (node ids, root first) in the cache, drop its other tree rows."""


# ---- the step ------------------------------------------------------------------------------


def step(rows: Rows, requests: Sequence[Request], env: StepEnv) -> list[StepTrace]:
    """One step of every request in `requests` (none of them stopped); returns each one's new StepTrace.
    One forward serves every request, so each step records the batch's phase times."""
    t_draft = time.perf_counter()
    proposals = size_trees(requests, [draft(r, env) for r in requests])
    t_forward = time.perf_counter()
    logits = rows.forward(requests, [p.tree for p in proposals])
    t_verify = time.perf_counter()
    judged = [verify(r, p, z, env) for r, p, z in zip(requests, proposals, logits)]
    t_keep = time.perf_counter()
    rows.keep(requests, [verdict.path for _, verdict in judged])
    traces = [
        emit(r, p.tree, stats, verdict, z, env)
        for r, p, (stats, verdict), z in zip(requests, proposals, judged, logits)
    ]
    t_end = time.perf_counter()
    for trace in traces:
        trace.draft_ms, trace.forward_ms = (t_forward - t_draft) * 1e3, (t_verify - t_forward) * 1e3
        trace.verify_ms, trace.bookkeeping_ms = (t_keep - t_verify) * 1e3, (t_end - t_keep) * 1e3
    return traces


def draft(request: Request, env: StepEnv) -> Proposal:
    """The drafter's proposal, pruned: nothing deeper than the tokens still wanted, nor past the model's
    context; no draft of EOS or past it, as in transformers' prompt lookup (if the target wants to stop,
    its bonus token is EOS). Under max_nodes=auto, a step where no tree could pay (TreeSizer.drafts) does not ask
    the drafter: its tree is the root alone, greedy's step."""
    request.asked = request.sizer is None or request.sizer.drafts(request.length)
    if not request.asked:
        return Proposal(DraftTree.root_only(request.sequence[-1]))
    send_unsent(request)
    proposal = request.drafter.propose(request.sequence)
    depth = min(request.cfg.max_new_tokens - len(request.generated) - 1, env.max_context - request.length - 2)
    return Proposal(
        proposal.tree.pruned(depth, env.eos), proposal.q_rows
    )  # q_rows are per depth: a pruned chain keeps its prefix


def size_trees(requests: Sequence[Request], proposals: list[Proposal]) -> list[Proposal]:
    """Under max_nodes=auto (every request has a sizer), each tree cut to the size that pays most. A batch's
    rows pad to the widest tree, so they share one size, chosen for the batch's forward (core.sizing.common_size)."""
    sizers = [r.sizer for r in requests]
    if any(s is None for s in sizers):
        return proposals
    present = [s for s in sizers if s is not None]  # all of them; typed without None
    if len(requests) == 1:
        trees = [present[0].choose(proposals[0].tree, requests[0].length)]
    else:
        ranked = [s.ranked(p.tree) for s, p in zip(present, proposals)]
        k = common_size(ranked, present[0].cost, [r.length for r in requests])
        trees = [p.tree.subset(sorted(order[:k])) for p, (order, _) in zip(proposals, ranked)]
    return [Proposal(tree, p.q_rows) for tree, p in zip(trees, proposals)]


def verify(request: Request, proposal: Proposal, logits: torch.Tensor, env: StepEnv) -> tuple[StepStats, Verdict]:
    """The statistics of every node and the verifier's verdict; the sizer learns from it."""
    stats = step_stats(logits, proposal.tree, env.eos_ids, wanted_topk(request.drafter, request.asked))
    verdict = request.verifier(proposal, logits, stats)
    if request.sizer is not None:
        request.sizer.observe(proposal.tree, verdict.decisions)
    return stats, verdict


def emit(
    request: Request, tree: DraftTree, stats: StepStats, verdict: Verdict, logits: torch.Tensor, env: StepEnv
) -> StepTrace:
    """Commit the accepted tokens and the bonus (cut at a stop) to the request; record the step; let the
    drafter learn from it."""
    assert verdict.bonus is not None  # an online walk always chooses one (None is for offline re-scoring)
    new = [tree.tokens[n] for n in verdict.path[1:]] + [verdict.bonus]
    new, request.stop_reason = cut_at_stop(new, request.generated, request.cfg, env)
    trace = StepTrace(
        index=len(request.steps),
        cache_pos=request.length,
        tree_size=tree.num_draft,
        accepted=len(verdict.path) - 1,
        emitted=new,
        nodes=node_traces(len(request.steps), request.length, tree, stats, verdict, env.text),
    )
    request.sequence.extend(new)
    request.generated.extend(new)
    request.length += len(verdict.path)
    predictions = step_predictions(request.drafter, stats, tree, verdict, len(new), request.asked)
    if defers_commit(request, predictions):
        request.unsent.extend(new)
    else:
        send_unsent(request)
        request.drafter.commit(new, predictions)
    if request.stop_reason is not None:
        send_unsent(request)
    request.steps.append(trace)
    return trace


def defers_commit(request: Request, predictions: np.ndarray | None) -> bool:
    """Whether this step's `commit` can wait until the drafter is next asked: the step did not ask it, it wants no
    predictions of this step's forward (nothing of the step would be lost), and its commits join (commit(a) then
    commit(b) leaves it as commit(a + b) does). Pure."""
    return (
        not request.asked
        and predictions is None
        and wanted_topk(request.drafter, asked=False) == 0
        and request.drafter.joins_commits
    )


def send_unsent(request: Request) -> None:
    """Give the drafter the committed tokens it has not seen (one `commit` for all of them)."""
    if request.unsent:
        request.drafter.commit(request.unsent, None)
        request.unsent = []


# ---- stopping ------------------------------------------------------------------------------


def stop_requested(should_stop: Callable[[], bool] | None) -> bool:
    return should_stop is not None and bool(should_stop())


def mark_stops(requests: Sequence[Request], env: StepEnv, cancelled: bool) -> None:
    """Before a step: the requests that must not take it get their stop reason (the caller asked to stop, or
    the context has no room for another token)."""
    for r in requests:
        if cancelled:
            r.stop_reason = "cancelled"
        elif r.length + 1 >= env.max_context:
            r.stop_reason = "context_full"
        if r.stop_reason is not None:
            send_unsent(r)


STOP_WINDOW = 32  # tokens decoded around each new token: more than any stop string spans, and cheap per step


def cut_at_stop(new: list[int], generated: list[int], cfg: DecodeConfig, env: StepEnv) -> tuple[list[int], str | None]:
    """Cut this step's tokens at the first stop condition; return them and the reason, if any."""
    for j, tok in enumerate(new):
        if tok in env.eos:
            return new[: j + 1], "eos"
    remaining = cfg.max_new_tokens - len(generated)
    reason = None
    if len(new) >= remaining:
        new, reason = new[:remaining], "max_new_tokens"
    if cfg.stop_strings:
        recent = generated[-STOP_WINDOW:]  # all the window can reach: no copy of the whole output per step
        end = stop_string_end(env.tokenizer, recent + new, cfg.stop_strings, start=len(recent))
        if end is not None:
            return new[: end - len(recent)], "stop_string"
    return new, reason


def stop_string_end(
    tokenizer: Tokenizer, ids: Sequence[int], stop_strings: Sequence[str], start: int = 0
) -> int | None:
    """The shortest prefix length j > start of `ids` whose last STOP_WINDOW tokens' text holds a stop
    string: cut there, the token that completes the stop string kept. None when no stop string appears.
    The one rule for our engine and for transformers' baselines, so both stop on the same token."""
    for j in range(start + 1, len(ids) + 1):
        tail = tokenizer.decode(list(ids[max(0, j - STOP_WINDOW) : j]))
        if any(s in tail for s in stop_strings):
            return j
    return None


def check_prompt(prompt_ids: Sequence[int], max_context: int) -> None:
    if not prompt_ids:
        raise InvalidInputError("the prompt is empty: give at least one token of text")
    if len(prompt_ids) >= max_context:
        # the app's line before Run says it in the same words (workbench.ui.compare_tab.prompt_note); "truncate its
        # middle" named something neither the app nor the CLI does (twentieth newcomer pass)
        raise InvalidInputError(
            f"the prompt is {len(prompt_ids):,} tokens; the model reads at most {max_context:,}: shorten the prompt "
            "or the context, or compress the context (--compress, or compress under the app's Parameters)"
        )


def check_request(prompt_ids: Sequence[int], cfg: DecodeConfig, max_context: int) -> None:
    """Refuse, before any work, a request that cannot be decoded."""
    check_prompt(prompt_ids, max_context)
    if cfg.max_new_tokens <= 0:
        raise InvalidInputError(f"max_new_tokens must be at least 1 (got {cfg.max_new_tokens})")


# ---- prefill -------------------------------------------------------------------------------

ProgressCallback = Callable[[int, int], None]  # (prompt tokens prefilled so far, all the prefill will feed)


def prefill_chunks(
    n: int,
    should_stop: Callable[[], bool] | None = None,
    on_prefill: ProgressCallback | None = None,
    *,
    done: int = 0,
    total: int | None = None,
) -> Iterator[tuple[int, int]]:
    """The [start, end) columns of each prefill forward over `n` prompt positions (core.cache.PREFILL_CHUNK at a
    time). Before each chunk, a Stop raises Cancelled(None); after each, `on_prefill(done + end, total)`
    reports progress (`done` tokens fed before, `total` of all; the batch counts its real tokens itself)."""
    total = n if total is None else total
    for start in range(0, n, kv.PREFILL_CHUNK):
        if stop_requested(should_stop):
            raise Cancelled(None)
        end = min(n, start + kv.PREFILL_CHUNK)
        yield start, end
        if on_prefill is not None:
            on_prefill(done + end, total)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so a clock around it measures the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- what a step records and hands the drafter ---------------------------------------------


def wanted_topk(drafter: Drafter, asked: bool = True) -> int:
    """How many top ids per row the drafter learns from (0: none): a TreeObserver's `tree_topk` over every tree
    row, `generated_topk` over the rows that chose the committed tokens. core.target_stats.step_stats brings
    them to the host with the step's statistics, in its one transfer. A step that did not ask the drafter
    (`asked` False: under max_nodes=auto no tree could pay) takes no TreeObserver top-k: such a step costs what
    greedy's does, and a table that learns from tree rows (Token Recycling) skips it, as it skips its drafting."""
    tree_topk = drafter.tree_topk if asked and isinstance(drafter, TreeObserver) else 0
    return max(drafter.generated_topk, tree_topk)


def step_predictions(
    drafter: Drafter, stats: StepStats, tree: DraftTree, verdict: Verdict, n_new: int, asked: bool = True
) -> np.ndarray | None:
    """What the drafter declared it wants from this step's forward (`wanted_topk`): a TreeObserver sees the top
    `tree_topk` ids of every tree row (on steps that asked it); the returned `commit` predictions are the top
    `generated_topk` ids of the rows that chose the committed tokens (None when not wanted)."""
    if stats.topk is None:
        return None
    chose = verdict.path[:n_new]  # row path[j] is the distribution that chose new[j] (the bonus: the last row)
    if asked and isinstance(drafter, TreeObserver) and drafter.tree_topk:
        drafter.observe_tree(TreeTopK(np.asarray(tree.tokens, np.int32), stats.topk, list(verdict.path)))
    return stats.topk[chose, : drafter.generated_topk] if drafter.generated_topk else None


def node_traces(
    step: int, past_len: int, tree: DraftTree, stats: StepStats, verdict: Verdict, text: TokenText
) -> list[NodeTrace]:
    """One record per tree node with every number a rule reads, its decision and reason; then the bonus token's."""
    records = []
    for i in range(len(tree)):
        n = stats.nodes[i]
        extra = verdict.extra[i] if verdict.extra else {}
        records.append(
            NodeTrace(
                step=step,
                cache_pos=past_len,
                node=i,
                parent=tree.parents[i],
                depth=tree.depths[i],
                token_id=tree.tokens[i],
                token_text=text(tree.tokens[i]),
                source=tree.sources[i],
                decision=cast(Decision, verdict.decisions[i]),
                reason=verdict.reasons[i],  # online: never UNKNOWN
                p=n.p if n else None,
                entropy=n.entropy if n else None,
                max_p=n.max_p if n else None,
                p_eos=n.p_eos if n else None,
                rank=n.rank if n else None,
                logit_gap=n.logit_gap if n else None,
                threshold=verdict.thresholds[i],
                draft_p=tree.draft_probs[i],
                confidence=tree.confidence_of(i),
                **extra,
            )
        )
    last = verdict.path[-1]
    assert verdict.bonus is not None
    p, rank, gap = stats.token_numbers(last, verdict.bonus)
    records.append(
        NodeTrace(
            step=step,
            cache_pos=past_len,
            node=len(tree),
            parent=last,
            depth=tree.depths[last] + 1,
            token_id=verdict.bonus,
            token_text=text(verdict.bonus),
            source="model",
            decision="bonus",
            reason="the target's own token after the last accepted node",
            p=p,
            entropy=stats.row_entropy[last],
            max_p=stats.row_max_p[last],
            p_eos=stats.row_p_eos[last],
            rank=rank,
            logit_gap=gap,
        )
    )
    return records
