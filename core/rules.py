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


def adaptive(alpha: float, beta: float, nodes: str = "") -> Rule:
    """AASD Eq. 4-6: θ = min(α·H + β, max p); accept iff p ≥ θ (the paper writes δ; θ here, so it is not read as
    CASD's fixed δ).

    Higher entropy means a stricter threshold; the cap by max p always lets the argmax through. The argmax is
    accepted by its rank, not by comparing p with max p: the two come from different reductions of the same row
    and can differ in the last bits, which would reject the target's own token (and "correct" it to itself).
    The reason names the α, β it used (and `nodes`, the sources they are for, where each source has its own), so a
    re-score under other values says which rule judged a node.
    """
    used = f"{nodes + ' ' if nodes else ''}α {alpha:.4g}, β {beta:.4g}"

    def rule(n: NodeStats) -> RuleResult:
        threshold = min(alpha * n.entropy + beta, n.max_p)
        if n.p >= threshold or n.rank == 0:
            return RuleResult(True, threshold, f"p {n.p:.4g} ≥ θ {threshold:.4g} = min(α·H + β, max p), {used}")
        return RuleResult(False, threshold, f"p {n.p:.4g} < θ {threshold:.4g} = min(α·H + β, max p), {used}")

    return rule


def typical(epsilon: float, alpha: float) -> Rule:
    """Medusa's typical acceptance: accept iff p > min(ε, α·exp(−H)), and always the argmax (Medusa always
    keeps the target's own next token). A near-deterministic position (low H) needs p above ε; a spread-out one
    (high H) accepts anything the target finds at all plausible, down to α·exp(−H)."""

    def rule(n: NodeStats) -> RuleResult:
        threshold = min(epsilon, alpha * math.exp(-n.entropy))
        if n.rank == 0:
            return RuleResult(True, threshold, "argmax")
        if n.p > threshold:
            return RuleResult(True, threshold, f"p {n.p:.4g} > min(ε, α·exp(−H)) {threshold:.4g}")
        return RuleResult(False, threshold, f"p {n.p:.4g} ≤ min(ε, α·exp(−H)) {threshold:.4g}")

    return rule


def entropy_gate(gate: float) -> Rule:
    """FLy's entropy-level gate (a node's rule): the argmax passes; a mismatch passes, provisionally, only where
    the target is unsure, H ≥ gate (nats): at a near-deterministic position a mismatch is an error. A passed
    mismatch still has to survive the deferred window (`deferred_keep`)."""

    def rule(n: NodeStats) -> RuleResult:
        if n.rank == 0:
            return RuleResult(True, gate, "argmax")
        if n.entropy >= gate:
            return RuleResult(True, gate, f"mismatch (rank {n.rank}) at H {n.entropy:.3g} ≥ gate {gate:.3g}: deferred")
        return RuleResult(False, gate, f"mismatch (rank {n.rank}) at H {n.entropy:.3g} < gate {gate:.3g}")

    return rule


def deferred_keep(path: Sequence[NodeStats], window: int) -> tuple[int, str]:
    """FLy's token-level deferred window over an accepted path (root excluded, in order): a mismatch stays only if
    the next `window` tokens on the path all match the target's argmax: had the mismatch derailed the text, the
    target would disagree with what follows it. Returns (tokens kept, the reason for a cut, "" when none): the path
    is cut just before the first mismatch whose window fails, is cut short by the path's end, or holds another
    mismatch (the window is checked within this step, conservatively)."""
    if window < 1:
        raise ValueError(f"the deferred window must be at least 1 token, got {window}")
    for i, n in enumerate(path):
        if n.rank == 0:
            continue
        after = path[i + 1 : i + 1 + window]
        if len(after) < window:
            return i, f"deferred mismatch: only {len(after)} of the {window} window tokens follow it in this step"
        bad = next((j for j, m in enumerate(after) if m.rank != 0), None)
        if bad is not None:
            return i, f"deferred mismatch: window token {bad + 1} of {window} is not the target's argmax"
    return len(path), ""


@dataclass(frozen=True)
class Deferred:
    """Rules with FLy's deferred window: `rules` judge each node, then the walk cuts the chosen path where
    `deferred_keep(path, window)` says."""

    rules: Rules
    window: int


Rules = (
    Rule | Mapping[str, Rule] | Deferred
)  # one rule for every node, one per node source, or either with a deferred window


def by_source(relaxed: Rule) -> dict[str, Rule]:
    """AASD's split: the relaxed rule for copied and alignment nodes, strict for everything else
    (generated text, draft-model tokens, Token Recycling's `recycled` nodes)."""
    return {"context": relaxed, "alignment": relaxed, "generated": strict, "draft": strict, "recycled": strict}


def rule_for(rules: Rules, source: str) -> Rule:
    """The rule that judges a node of `source`; a per-source table without it judges strictly."""
    if isinstance(rules, Deferred):
        return rule_for(rules.rules, source)
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
    keys: tuple[str, ...] = ("exact",)  # the memory key kinds the run reads (csd[keys=…]), exact first

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


# Generalised correction keys (csd[keys=...]): besides the exact (draft id, correction id) pair, the memory may count a
# rejection under coarser keys that generalise across tokenisations (core.memory derives them from the exact pairs and
# the tokenizer). The lookup reads them most specific first, so an exact pair that reached λ always decides as it does
# with keys=exact, and a coarser key speaks only for pairs the exact table has not seen often enough.
KEY_KINDS = ("exact", "text", "prefix")
KEY_ORDERS = {0: ("exact",), 1: ("exact", "text"), 2: ("exact", "prefix"), 3: ("exact", "text", "prefix")}
KEY_NAMES = {"exact": 0, "text": 1, "prefix": 2, "all": 3}  # csd[keys=all] = 3


@dataclass(frozen=True)
class KeyCounts:
    """The memory's counts of one rejection under each key kind a run reads, in lookup order (exact first)."""

    counts: tuple[tuple[str, int], ...]

    def __post_init__(self):
        if not self.counts or self.counts[0][0] != "exact":
            raise ValueError("a key lookup starts with the exact pair")

    @property
    def largest(self) -> int:
        """What a run records as the node's count: a re-score at any λ then decides as a lookup would (some key
        reaches λ exactly when the largest does)."""
        return max(c for _, c in self.counts)


def key_lookup(counts: KeyCounts, lam: int) -> tuple[str | None, int]:
    """The most specific key whose count reached λ and that count; (None, the largest count) when none did."""
    for kind, count in counts.counts:
        if count >= lam:
            return kind, count
    return None, counts.largest


def recorded_count(count: "int | KeyCounts | None") -> int | None:
    """The count a trace stores for a rescue candidate: the exact count, or the largest under generalised keys."""
    return count.largest if isinstance(count, KeyCounts) else count


def fired_key(reason: str) -> str:
    """The key kind a rescued node's reason names ("count 9 (text key) ≥ λ 6"); a run that read exact pairs only
    (keys=exact, or a run from before generalised keys) names none: exact."""
    return next((kind for kind in KEY_KINDS if f"({kind} key)" in reason), "exact")


EOS_EXEMPT = "t* is EOS: exempt (rescue_eos=no)"  # the reason of a rejection rescue_eos=no keeps


def rescue_decision(
    rule: Rescue, count: int | KeyCounts | None, gap: float, correction: int | None = None
) -> tuple[bool, str]:
    """CSD lines 16-19: `count` = M[(x, t*)] read before the update, `gap` = z(x) − z(t*), `correction` = t*.

    Under generalised keys `count` holds the counts of every key kind; the most specific one that reached λ
    decides (key_lookup), and the reason names it ("text key").

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
        if isinstance(count, KeyCounts):
            kind, count = key_lookup(count, rule.lam)
            key = f" ({kind} key)" if kind is not None else " (largest of the keys)"
        elif len(rule.keys) > 1:  # a recorded count (re-scoring): the largest over the run's key kinds
            key = f" (largest of the {', '.join(rule.keys)} keys)"
        else:
            key = ""
        is_freq = count >= rule.lam
        ok &= is_freq
        parts.append(f"count {count}{key} {'≥' if is_freq else '<'} λ {rule.lam}")
    if rule.tau is not None:
        log_tau = math.log(rule.tau)
        is_safe = gap >= log_tau
        ok &= is_safe
        parts.append(f"z(x) − z(t*) {gap:.3f} {'≥' if is_safe else '<'} log τ {log_tau:.3f}")
    if exempt:  # the conditions stay in the reason: they say whether the paper's rule would have rescued
        return False, "; ".join([EOS_EXEMPT, *parts])
    return ok, "; ".join(parts)
