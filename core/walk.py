"""The tree walk: which draft nodes the target accepts, as pure functions of per-node statistics.

`walk` is the one verification walk at temperature 0, for every method: the engine calls it on fresh
statistics and workbench.rescore on stored ones, so an offline re-score decides exactly as the run did.
It is parameterised by
- `rules` (core.rules): one rule, or one per node source (AASD's split). Strict verification is
  `walk(..., rules=strict)`; there is no other strict walk.
- `rescue` and `count_of` (docs/ALGORITHMS.md, "CSD's rescue"): where the accepted path ends at a node whose
  children all failed, the child the target finds most probable is the *candidate*; `count_of(node,
  correction)` reads the memory count of (candidate, t*) before updating it (the engine's memory) or
  returns the recorded count (re-scoring), and the rescue rule may accept the candidate anyway, after
  which the walk goes on below it. A correction in `rescue.exempt` (`rescue_eos=no`: the target's EOS
  ids) is never rescued over; its pair is still counted.

`sample_walk` is lossless speculative sampling at T > 0 (random draws, so it is never re-scored),
with the same rescue step at each rejection.

Path choice (docs/ALGORITHMS.md): among root-to-node paths whose nodes all pass, the longest; ties go to the
higher sum of log-probabilities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import LogitsProcessorList

from core.rules import (
    Deferred,
    KeyCounts,
    NodeStats,
    Rescue,
    RuleResult,
    Rules,
    deferred_keep,
    recorded_count,
    rescue_candidate,
    rescue_decision,
    rule_for,
)
from core.tree import DraftTree
from core.types import Decision

ROOT = RuleResult(True, None, "pending token (root)")  # the root is no draft: nothing judges it
UNKNOWN: Literal["unknown"] = (
    "unknown"  # a rescue candidate whose memory count is not known (re-scoring a node the run never judged)
)
# A rejected node that is the target's own token comes back as the bonus: the step is shorter, the text the same.
OWN_TOKEN = "the target's own token: it follows as the bonus, so the text keeps it"
CountOf = Callable[
    [int, "int | None"], "int | KeyCounts | None"
]  # (candidate node, correction t*) -> M[(x, t*)] before the update
# (KeyCounts: under csd[keys=...], the counts of every key kind; core.rules.key_lookup reads them)


@dataclass
class Verdict:
    """What a walk decided for every node of one tree, and the token the target adds after the path."""

    path: list[int]  # accepted node ids from the root (included) down
    decisions: list[
        Decision | Literal["unknown"]
    ]  # per node: accepted / rejected / rescued / unreached (UNKNOWN only offline)
    reasons: list[str]
    thresholds: list[float | None]
    extra: list[dict] = field(default_factory=list)  # per node, trace fields of a rejection: correction_id, mem_count
    bonus: int | None = None  # the target's token after the last accepted node (None offline when not recorded)
    note: str | None = None  # why a walk stopped early (an UNKNOWN node): the accepted length is a lower bound


# A node whose own test passed but whose sibling's path was taken: stored as "rejected" (the path is one), said
# "not taken" where a person reads it (workbench.ui.replay_view.flips_frame)
PASSED_NOT_TAKEN = "passed, but a longer or likelier path was chosen"


def choose_path(tree: DraftTree, passed: Sequence[bool], logp: Sequence[float], start: int = 0) -> list[int]:
    """The longest path down from `start` whose nodes all pass; ties go to the higher sum of log-probabilities."""
    score = {start: 0.0}  # nodes reachable from `start` through passing nodes
    best = start
    for i in range(start + 1, len(tree)):
        parent = tree.parents[i]
        if parent not in score or not passed[i]:
            continue
        score[i] = score[parent] + logp[i]
        if tree.depths[i] > tree.depths[best] or (tree.depths[i] == tree.depths[best] and score[i] > score[best]):
            best = i
    path = tree.path_to(best)
    return path[path.index(start) :]


def _rescued(
    rescue: Rescue | None,
    count: "int | KeyCounts | None",
    gap: float,
    correction: int | None,
    maybe_exempt: bool = False,
) -> tuple[bool | None, str]:
    """CSD's rescue test at one rejection with correction t*: True / False with its reason, or None when
    what it needs is unknown (offline: the memory count, or whether an unrecorded t* is exempt)."""
    if rescue is None:
        return False, ""
    if correction is None and maybe_exempt and rescue.exempt:
        return None, (
            "the correction t* was not recorded and may be an end of sequence (p_eos = max p), which "
            "rescue_eos=no exempts; the walk stops here and the accepted length is a lower bound"
        )
    if rescue.lam is not None and count is None and correction not in rescue.exempt:
        return None, (
            "this node was never judged in the original run, so its memory count M[(x, t*)] is unknown; "
            "the walk stops here and the accepted length is a lower bound"
        )
    return rescue_decision(rescue, count, gap, correction)


Verdicts = list[Decision | Literal["unknown"]]


def _finish(
    tree: DraftTree,
    path: list[int],
    results: Sequence[RuleResult],
    rescued: set[int],
    stopped_at: dict[int, tuple[Decision | Literal["unknown"], str]],
) -> tuple[Verdicts, list[str]]:
    """Decisions and reasons once the path is known; `stopped_at` holds the rescue candidate the walk
    did not take, with its decision (rejected or UNKNOWN) and reason."""
    on_path = set(path)
    decisions: Verdicts = ["accepted"]
    reasons = [ROOT.reason]
    for i in range(1, len(tree)):
        res = results[i]
        if i in on_path:
            decisions.append("rescued" if i in rescued else "accepted")
            reasons.append(res.reason)
        elif i in stopped_at:
            decisions.append(stopped_at[i][0])
            reasons.append(stopped_at[i][1])
        elif tree.parents[i] in on_path:
            decisions.append("rejected")
            reasons.append(res.reason if not res.passed else f"{res.reason}; {PASSED_NOT_TAKEN}")
        else:
            decisions.append("unreached")
            reasons.append("an ancestor was not accepted")
    return decisions, reasons


def walk(
    tree: DraftTree,
    nodes: Sequence[NodeStats | None],
    logp: Sequence[float],
    rules: Rules,
    *,
    rescue: Rescue | None = None,
    argmax: Sequence[int | None] | None = None,
    count_of: CountOf | None = None,
) -> Verdict:
    """Judge every node by its source's rule, take the best passing path, and at its end try CSD's rescue.

    `argmax[row]` is the target's own token after node `row` (the correction t* at a rejection there and
    the bonus after the path); offline it may be None where no record tells it.
    """
    n = len(tree)

    def stats_of(i: int) -> NodeStats:
        stats = nodes[i]
        assert stats is not None, "every draft node has statistics (only the root has none)"
        return stats

    results: list[RuleResult] = [ROOT] + [rule_for(rules, tree.sources[i])(stats_of(i)) for i in range(1, n)]
    passed = [r.passed for r in results]
    thresholds: list[float | None] = [r.threshold for r in results]
    extra: list[dict] = [{} for _ in range(n)]
    kids = tree.children()
    path, rescued, note = [0], set(), None
    stopped_at: dict[int, tuple[Decision | Literal["unknown"], str]] = {}
    while True:
        path += choose_path(tree, passed, logp, start=path[-1])[1:]
        end = path[-1]
        if not kids[end]:
            break
        # Every child of `end` failed its rule: the likeliest is the rejection CSD's memory records.
        cand = rescue_candidate(kids[end], lambda c: logp[c])
        correction = argmax[end] if argmax is not None else None
        count = count_of(cand, correction) if count_of is not None else None
        extra[cand] = {"correction_id": correction, "mem_count": recorded_count(count)}
        # t* is the argmax at T = 0; p_eos is the likeliest EOS id's p, so t* can be one only if p_eos = max p.
        cand_stats = stats_of(cand)
        ok, detail = _rescued(
            rescue, count, -cand_stats.logit_gap, correction, maybe_exempt=cand_stats.p_eos >= cand_stats.max_p
        )
        if rescue is not None:
            thresholds[cand] = rescue.tau
        why = f"{results[cand].reason}; correction {correction if correction is not None else 'not recorded'}"
        if correction is not None and correction == tree.tokens[cand]:  # a rule that can refuse the argmax (CASD's δ)
            why += f"; {OWN_TOKEN}"
        reason = f"{why}; {detail}" if detail else why
        if ok is None:
            stopped_at[cand], note = (UNKNOWN, detail), detail
            break
        if not ok:
            stopped_at[cand] = ("rejected", reason)
            break
        assert rescue is not None  # _rescued passes nothing without a rescue rule
        results[cand] = RuleResult(True, rescue.tau, reason)
        passed[cand] = True
        rescued.add(cand)
        path.append(cand)
    if isinstance(rules, Deferred):  # FLy: cut the path before a mismatch its window did not confirm
        judged = [nodes[i] for i in path[1:]]
        assert all(n is not None for n in judged)  # every node on an accepted path was judged
        keep, why = deferred_keep([n for n in judged if n is not None], rules.window)
        for i in path[1 + keep :]:
            results[i] = RuleResult(False, results[i].threshold, f"{results[i].reason}; {why}")
        path = path[: 1 + keep]
        for i in [i for i in stopped_at if tree.parents[i] not in path]:  # a rejection below the cut: never reached
            del stopped_at[i]
            extra[i] = {}
    decisions, reasons = _finish(tree, path, results, rescued, stopped_at)
    bonus = argmax[path[-1]] if argmax is not None else None
    return Verdict(path, decisions, reasons, thresholds, extra, bonus, note)


def sample_walk(
    tree: DraftTree,
    logits: torch.Tensor,
    processors: LogitsProcessorList,
    generator: torch.Generator,
    *,
    rescue: Rescue | None = None,
    count_of: CountOf | None = None,
    q_rows: torch.Tensor | None = None,
) -> Verdict:
    """T > 0: lossless speculative sampling, with CSD's rescue at each rejection.

    With `q_rows` (a draft model's sampling distributions, row i for the child of chain node i):
    Leviathan et al.: accept x with probability min(1, p(x)/q(x)), else t* ~ norm(max(0, p − q)).
    Without (deterministic drafts, q one-hot, any tree): draw s ~ p; the child equal to s is
    accepted, otherwise t* = s (a sample of p given that it is no child: the residual). Every emitted
    token is thus a sample from the target given its prefix. p is the target under the same warpers as
    the draft; the gate uses the raw logits, as CSD does.

    Everything stays where the logits are (the draws too: `generator` must be on their device); the host
    reads the few numbers each decision needs, never a row of the vocabulary.
    """
    logits = logits.float()
    n = len(tree)
    kids = tree.children()
    decisions: Verdicts = ["unreached"] * n
    decisions[0] = "accepted"
    reasons = [ROOT.reason] + ["an ancestor was not accepted"] * (n - 1)
    thresholds: list[float | None] = [None] * n
    extra: list[dict] = [{} for _ in range(n)]
    node, path = 0, [0]

    def target_probs(row: int) -> torch.Tensor:
        return torch.softmax(processors(None, logits[row : row + 1])[0], dim=-1)  # type: ignore[arg-type]  # warpers read no ids

    def draw(probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=generator).item())

    while True:
        p = target_probs(node)
        if not kids[node]:
            bonus = draw(p)
            break
        if q_rows is not None:
            if len(kids[node]) != 1:
                raise ValueError("draft-model rejection sampling needs a chain (one child per node)")
            cand = kids[node][0]
            x = tree.tokens[cand]
            q = q_rows[tree.depths[cand] - 1].float().to(p.device)
            q = torch.nn.functional.pad(q, (0, max(0, p.shape[0] - q.shape[0])))[
                : p.shape[0]
            ]  # a smaller draft head: q = 0 beyond it
            # p(x), q(x) and the uniform draw in one read
            px, qx, r = torch.stack([p[x], q[x], torch.rand(1, generator=generator, device=p.device)[0]]).tolist()
            alpha = min(1.0, px / qx) if qx > 0 else 1.0
            if r < alpha:
                decisions[cand], reasons[cand] = "accepted", f"r {r:.3f} < min(1, p/q) = {alpha:.3f}"
                node = cand
                path.append(node)
                continue
            residual = (p - q).clamp_min(0.0)
            mass = float(residual.sum())
            correction = draw(residual / mass if mass > 0 else p)
            why = f"r {r:.3f} ≥ min(1, p/q) = {alpha:.3f}"
        else:
            sample = draw(p)
            match = next((c for c in kids[node] if tree.tokens[c] == sample), None)
            for c in kids[node]:
                decisions[c] = "accepted" if c == match else "rejected"
                reasons[c] = "equals the target's sample" if c == match else "differs from the target's sample"
            if match is not None:
                node = match
                path.append(node)
                continue
            correction = sample
            cand = rescue_candidate(kids[node], lambda c: float(p[tree.tokens[c]]))
            why = "differs from the target's sample"
        count = count_of(cand, correction) if count_of is not None else None
        extra[cand] = {"correction_id": correction, "mem_count": recorded_count(count)}
        z = logits[node]
        ok, detail = _rescued(rescue, count, float(z[tree.tokens[cand]] - z[correction]), correction)
        if ok is None:
            raise ValueError("CSD's memory condition (λ) needs a correction memory: pass count_of")
        thresholds[cand] = rescue.tau if rescue is not None else None
        decisions[cand] = "rescued" if ok else "rejected"
        reasons[cand] = f"{why}; correction {correction}" + (f"; {detail}" if detail else "")
        if not ok:
            bonus = correction
            break
        node = cand
        path.append(node)
    return Verdict(path, decisions, reasons, thresholds, extra, bonus)
