"""Acceptance rules: pure functions of one draft node's statistics under its parent's target distribution.

A rule says pass or fail, with the threshold it used and a reason. Rules need nothing but the numbers
in `NodeStats`, which every stored node record carries, so the engine and the offline re-scoring of
stored traces judge with the very same functions (core.walk applies them to a tree).

CSD's rescue (docs/ALGORITHMS.md, "CSD's rescue") is a rule too: `Rescue` + `rescue_decision` decide whether a
rejected draft token is accepted anyway, from the memory count of its (draft, correction) pair and
the logit gap between them.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeStats:
    """What a rule may look at for one draft node; all from the parent's distribution at T = 1."""

    p: float
    entropy: float
    max_p: float
    p_eos: float
    rank: int  # 0 exactly when the token is the argmax (ties broken like torch.argmax: lowest id)
    logit_gap: float  # top logit minus this token's logit (>= 0)


@dataclass(frozen=True)
class RuleResult:
    passed: bool
    threshold: float | None
    reason: str


Rule = Callable[[NodeStats], RuleResult]
Rules = Rule | Mapping[str, Rule]  # one rule for every node, or one per node source


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
    """AASD's split: the relaxed rule for copied and alignment nodes, strict for everything else
    (generated text, draft-model tokens, Token Recycling's `recycled` nodes)."""
    return {"context": relaxed, "alignment": relaxed, "generated": strict, "draft": strict, "recycled": strict}


def rule_for(rules: Rules, source: str) -> Rule:
    """The rule that judges a node of `source`; a per-source table without it judges strictly."""
    return rules if callable(rules) else rules.get(source, strict)


@dataclass(frozen=True)
class Rescue:
    """Which of CSD's two conditions a rejected draft token must meet to be accepted anyway.

    csd: both; sd-memory-only: `lam` only; sd-gating-only and lossy-sd: `tau` only.
    `exempt`: corrections t* never rescued over, whatever the conditions say: empty by default (the paper
    rescues over any t*, end of sequence included); the target's EOS ids under `rescue_eos=no`
    (core.methods.rescue_for builds it from the target, so the decision stays a pure function).
    """

    lam: int | None = None  # memory: rescue needs count ≥ λ (None: not checked)
    tau: float | None = None  # gate: rescue needs p(x)/p(t*) ≥ τ at T = 1 (None: not checked)
    exempt: frozenset[int] = frozenset()  # t* here: never rescued (rescue_eos=no: the target's EOS ids)

    def __post_init__(self):
        if self.lam is None and self.tau is None:
            raise ValueError("a rescue rule needs the memory threshold λ, the gate τ, or both")
        if self.tau is not None and not 0 < self.tau <= 1:
            raise ValueError(f"τ must be in (0, 1], got {self.tau}")
        object.__setattr__(self, "exempt", frozenset(int(t) for t in self.exempt))


def rescue_candidate(rejected: Sequence[int], score: Callable[[int], float]) -> int:
    """CSD's candidate at a rejection: of the rejected children of the path's last node, the one the target
    finds most probable (`score`: its probability or log-probability; ties: the earlier node). The walk
    (core.walk) rescues it or not; calibration from traces (core.memory.rejections) counts its pair."""
    return max(rejected, key=lambda c: (score(c), -c))


EOS_EXEMPT = "t* is EOS: exempt (rescue_eos=no)"  # the reason of a rejection rescue_eos=no keeps


def rescue_decision(rule: Rescue, count: int | None, gap: float, correction: int | None = None) -> tuple[bool, str]:
    """CSD lines 16-19: `count` = M[(x, t*)] read before the update, `gap` = z(x) − z(t*), `correction` = t*.

    The gate compares log-probability ratios, so it is the same at any sampling temperature:
    log p(x)/p(t*) = z(x) − z(t*) at T = 1 (Eq. 3). When t* is the argmax, gap = −logit_gap.
    A t* in `rule.exempt` (rescue_eos=no: an end of sequence) is never rescued, and the reason says so.
    """
    exempt = correction is not None and correction in rule.exempt
    parts, ok = [], True
    if rule.lam is not None:
        if count is None:
            if exempt:  # decided without the count
                return False, EOS_EXEMPT
            raise ValueError("the memory condition needs the pair's count")
        is_freq = count >= rule.lam
        ok &= is_freq
        parts.append(f"count {count} {'≥' if is_freq else '<'} λ {rule.lam}")
    if rule.tau is not None:
        log_tau = math.log(rule.tau)
        is_safe = gap >= log_tau
        ok &= is_safe
        parts.append(f"z(x) − z(t*) {gap:.3f} {'≥' if is_safe else '<'} log τ {log_tau:.3f}")
    if exempt:  # the conditions stay in the reason: they say whether the paper's rule would have rescued
        return False, "; ".join([EOS_EXEMPT, *parts])
    return ok, "; ".join(parts)
