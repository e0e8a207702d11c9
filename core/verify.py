"""Verification: which draft nodes the target accepts, as pure functions of distributions and trees.

A *rule* looks at one node's statistics (its probability under the parent's target distribution,
that distribution's entropy, max probability, EOS probability, the token's rank) and says pass or
fail with the threshold it used and a reason. The same rules re-score stored traces, so a rule must
need nothing but those numbers. `verify_by_rule` applies a rule per node source and picks the path;
`verify_by_sampling` is lossless speculative sampling for deterministic drafts.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from core.tree import DraftTree


@dataclass(frozen=True)
class NodeStats:
    """What a rule may look at for one draft node; all from the parent's distribution at T = 1."""

    p: float
    entropy: float
    max_p: float
    p_eos: float
    rank: int  # 0 exactly when the token is the argmax (ties broken like torch.argmax: lowest id)
    logit_gap: float


@dataclass(frozen=True)
class RuleResult:
    passed: bool
    threshold: float | None
    reason: str


Rule = Callable[[NodeStats], RuleResult]


def strict(n: NodeStats) -> RuleResult:
    """Greedy verification: accept only the argmax."""
    if n.rank == 0:
        return RuleResult(True, None, "argmax")
    return RuleResult(False, None, f"rank {n.rank}, not the argmax")


def fixed(delta: float) -> Rule:
    """CASD: accept iff p > max(δ, P(eos)): a copied token must beat both δ and ending here."""

    def rule(n: NodeStats) -> RuleResult:
        threshold = max(delta, n.p_eos)
        if n.p > threshold:
            return RuleResult(True, threshold, f"p {n.p:.4g} > max(δ, p_eos) {threshold:.4g}")
        return RuleResult(False, threshold, f"p {n.p:.4g} ≤ max(δ, p_eos) {threshold:.4g}")

    return rule


def top_k_rule(k: int) -> Rule:
    """Ablation: accept iff the token is among the target's k most likely."""

    def rule(n: NodeStats) -> RuleResult:
        if n.rank < k:
            return RuleResult(True, None, f"rank {n.rank} < k {k}")
        return RuleResult(False, None, f"rank {n.rank} ≥ k {k}")

    return rule


def mixed(delta: float, k: int) -> Rule:
    """CASD: the fixed threshold and the top-k test must both pass."""
    by_delta, by_rank = fixed(delta), top_k_rule(k)

    def rule(n: NodeStats) -> RuleResult:
        a, b = by_delta(n), by_rank(n)
        return RuleResult(a.passed and b.passed, a.threshold, f"{a.reason}; {b.reason}")

    return rule


def adaptive(alpha: float, beta: float) -> Rule:
    """AASD Eq. 4-6: δ = min(α·H + β, max p); accept iff p ≥ δ.

    Higher entropy means a stricter threshold; the cap by max p always lets the argmax through.
    """

    def rule(n: NodeStats) -> RuleResult:
        threshold = min(alpha * n.entropy + beta, n.max_p)
        if n.p >= threshold:
            return RuleResult(True, threshold, f"p {n.p:.4g} ≥ δ {threshold:.4g} = min(α·H + β, max p)")
        return RuleResult(False, threshold, f"p {n.p:.4g} < δ {threshold:.4g} = min(α·H + β, max p)")

    return rule


def by_source(relaxed: Rule) -> dict[str, Rule]:
    """AASD's split: the relaxed rule for copied and alignment nodes, strict for generated text."""
    return {"context": relaxed, "alignment": relaxed, "generated": strict, "draft": strict}


@dataclass
class StepStats:
    """Per-row results of one verification forward, converted to Python once per step."""

    row_argmax: list[int]
    row_entropy: list[float]
    row_max_p: list[float]
    row_p_eos: list[float]
    nodes: list[NodeStats | None]  # None for the root
    logp: list[float]  # log p of each node's token (0 for the root)
    logprobs: torch.Tensor = field(repr=False, default=None)  # (Q, V) float32, for the bonus token's record


def step_stats(logits: torch.Tensor, tree: DraftTree, eos_ids: Sequence[int]) -> StepStats:
    """Statistics of every node's token under its parent's distribution, from (Q, V) logits."""
    logits = logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    probs = logprobs.exp()
    entropy = torch.special.entr(probs).sum(-1)
    max_p, argmax = probs.max(-1)
    if eos_ids:
        p_eos = probs[:, list(eos_ids)].max(-1).values
    else:
        p_eos = torch.zeros_like(max_p)
    row_argmax = argmax.tolist()
    row_entropy, row_max_p, row_p_eos = entropy.tolist(), max_p.tolist(), p_eos.tolist()
    nodes: list[NodeStats | None] = [None]
    logp = [0.0]
    if len(tree) > 1:
        rows = torch.tensor(tree.parents[1:], device=logits.device)
        toks = torch.tensor(tree.tokens[1:], device=logits.device)
        row_logits = logits[rows]
        tok_logit = row_logits.gather(1, toks[:, None])
        ids = torch.arange(row_logits.shape[1], device=logits.device)
        rank = ((row_logits > tok_logit) | ((row_logits == tok_logit) & (ids[None, :] < toks[:, None]))).sum(-1)
        gap = row_logits.max(-1).values - tok_logit[:, 0]
        tok_logp = logprobs[rows, toks]
        for i, (lp, r, g) in enumerate(zip(tok_logp.tolist(), rank.tolist(), gap.tolist()), start=1):
            parent = tree.parents[i]
            nodes.append(NodeStats(math.exp(lp), row_entropy[parent], row_max_p[parent], row_p_eos[parent], r, g))
            logp.append(lp)
    return StepStats(row_argmax, row_entropy, row_max_p, row_p_eos, nodes, logp, logprobs)


@dataclass
class Verdict:
    path: list[int]  # accepted node ids from the root (included) down
    bonus: int  # the token the target adds after the last accepted node
    decisions: list[str]  # per node: accepted / rejected / rescued / unreached ("accepted" for the root)
    reasons: list[str]
    thresholds: list[float | None]
    extra: list[dict] = field(default_factory=list)  # per node, rule-specific trace fields (CSD)


def choose_path(tree: DraftTree, passed: Sequence[bool], logp: Sequence[float]) -> list[int]:
    """Longest root path whose nodes all pass; ties go to the higher sum of log-probabilities."""
    ok = [True] * len(tree)
    score = [0.0] * len(tree)
    best = 0
    for i in range(1, len(tree)):
        parent = tree.parents[i]
        ok[i] = bool(passed[i]) and ok[parent]
        if not ok[i]:
            continue
        score[i] = score[parent] + logp[i]
        if tree.depths[i] > tree.depths[best] or (tree.depths[i] == tree.depths[best] and score[i] > score[best]):
            best = i
    return tree.path_to(best)


def _decisions(tree: DraftTree, path: Sequence[int], results: Sequence[RuleResult | None]) -> tuple[list[str], list[str]]:
    on_path = set(path)
    decisions, reasons = ["accepted"], ["pending token (root)"]
    for i in range(1, len(tree)):
        parent, res = tree.parents[i], results[i]
        if i in on_path:
            decisions.append("accepted")
            reasons.append(res.reason)
        elif parent in on_path and res is not None and not res.passed:
            decisions.append("rejected")
            reasons.append(res.reason)
        elif parent in on_path:
            decisions.append("rejected")
            reasons.append(f"{res.reason}; passed, but a longer or likelier path was chosen")
        else:
            decisions.append("unreached")
            reasons.append("an ancestor was not accepted")
    return decisions, reasons


def verify_by_rule(tree: DraftTree, stats: StepStats, rules: Rule | Mapping[str, Rule]) -> Verdict:
    """Apply a rule per node (one rule, or one per source), pick the path, add the greedy bonus token."""
    results: list[RuleResult | None] = [None]
    for i in range(1, len(tree)):
        rule = rules if callable(rules) else rules[tree.sources[i]]
        results.append(rule(stats.nodes[i]))
    passed = [True] + [r.passed for r in results[1:]]
    path = choose_path(tree, passed, stats.logp)
    decisions, reasons = _decisions(tree, path, results)
    thresholds = [None] + [r.threshold for r in results[1:]]
    return Verdict(path, stats.row_argmax[path[-1]], decisions, reasons, thresholds)


def sampling_processors(temperature: float, top_k: int = 0, top_p: float = 1.0) -> LogitsProcessorList:
    """transformers' own warpers, so our sampling matches `generate(do_sample=True)`."""
    procs = LogitsProcessorList()
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k and top_k > 0:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    return procs


def verify_by_sampling(
    tree: DraftTree,
    logits: torch.Tensor,
    processors: LogitsProcessorList,
    generator: torch.Generator,
) -> Verdict:
    """Lossless tree speculative sampling for deterministic drafts (q one-hot).

    At the current node draw one sample from the target distribution; if a child carries that
    token, accept it and go on; otherwise the sample is the bonus token. Every emitted token is thus
    a sample from the target given its prefix, exactly as in plain sampling.
    """
    kids = tree.children()
    node, path = 0, [0]
    while True:
        row = processors(None, logits[node : node + 1].float())
        probs = torch.softmax(row, dim=-1)
        sample = int(torch.multinomial(probs[0], 1, generator=generator).item())
        child = next((c for c in kids[node] if tree.tokens[c] == sample), None)
        if child is None:
            break
        node = child
        path.append(node)
    on_path = set(path)
    decisions, reasons = ["accepted"], ["pending token (root)"]
    for i in range(1, len(tree)):
        if i in on_path:
            decisions.append("accepted")
            reasons.append("equals the target's sample")
        elif tree.parents[i] in on_path:
            decisions.append("rejected")
            reasons.append("differs from the target's sample")
        else:
            decisions.append("unreached")
            reasons.append("an ancestor was not accepted")
    return Verdict(path, sample, decisions, reasons, [None] * len(tree))
