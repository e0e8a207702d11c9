"""Re-scoring stored steps under new parameters: hand-built steps checked against hand-computed rules,
and real runs on a tiny random model re-scored with their own parameters, which must reproduce
every decision the engine made."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from conftest import make_tiny, perturbed

from core.errors import InvalidInputError
from core.memory import CorrectionMemory
from core.methods import METHODS, resolve_params, run_method
from core.trace import NodeTrace, RunTrace, StepTrace
from core.walk import OWN_TOKEN
from workbench.rescore import UNKNOWN, flips_table, rescore_run, rescore_step


# -- hand-built steps ---------------------------------------------------------------------------
def node(
    i,
    parent,
    source,
    decision,
    *,
    p=0.5,
    entropy=1.0,
    max_p=0.5,
    p_eos=0.0,
    rank=0,
    logit_gap=None,
    threshold=None,
    mem_count=None,
    correction_id=None,
    depth=None,
    token=None,
):
    if logit_gap is None:
        logit_gap = 0.0 if rank == 0 else 1.0
    return NodeTrace(
        step=0,
        cache_pos=10,
        node=i,
        parent=parent,
        depth=depth if depth is not None else 0,
        token_id=token or 20 + i,
        token_text=f"t{token or 20 + i}",
        source=source,
        decision=decision,
        reason="original",
        p=p,
        entropy=entropy,
        max_p=max_p,
        p_eos=p_eos,
        rank=rank,
        logit_gap=logit_gap,
        threshold=threshold,
        mem_count=mem_count,
        correction_id=correction_id,
    )


def step_of(nodes, index=0):
    """A step from (root-less) node records: fills the root, depths and the bonus record."""
    root = NodeTrace(
        step=index,
        cache_pos=10,
        node=0,
        parent=-1,
        depth=0,
        token_id=5,
        token_text="t5",
        source="root",
        decision="accepted",
        reason="pending token (root)",
    )
    records = [root] + list(nodes)
    for r in records[1:]:
        r.depth = records[r.parent].depth + 1
        r.step = index
    accepted = sum(1 for r in records[1:] if r.decision in ("accepted", "rescued"))
    last = max((r for r in records if r.decision in ("accepted", "rescued")), key=lambda r: r.depth)
    bonus = NodeTrace(
        step=index,
        cache_pos=10,
        node=len(records),
        parent=last.node,
        depth=last.depth + 1,
        token_id=9,
        token_text="t9",
        source="model",
        decision="bonus",
        reason="bonus",
        p=0.9,
    )
    return StepTrace(
        index=index,
        cache_pos=10,
        tree_size=len(nodes),
        accepted=accepted,
        emitted=[0] * (accepted + 1),
        nodes=records + [bonus],
    )


def by_node(result):
    return {n.node: n for n in result.nodes}


def test_adaptive_thresholds_are_recomputed_from_the_records():
    alpha, beta = 0.2, 0.05
    step = step_of(
        [
            node(1, 0, "context", "rejected", p=0.4, entropy=1.5, max_p=0.6, rank=1),  # δ = 0.2·1.5 + 0.05 = 0.35 ≤ 0.4
            node(2, 0, "alignment", "rejected", p=0.3, entropy=1.5, max_p=0.6, rank=2),  # 0.3 < 0.35
            node(
                3, 1, "context", "unreached", p=0.3, entropy=5.0, max_p=0.3, rank=0
            ),  # 0.2·5 + 0.05 = 1.05, capped at max p 0.3
            node(4, 3, "context", "unreached", p=0.1, entropy=0.2, max_p=0.8, rank=1),  # 0.09 ≤ 0.1
        ]
    )
    r = rescore_step(step, "aasd", {"alpha": alpha, "beta": beta})
    n = by_node(r)
    assert n[1].threshold == pytest.approx(alpha * 1.5 + beta) and n[3].threshold == pytest.approx(0.3)
    assert n[4].threshold == pytest.approx(alpha * 0.2 + beta)
    assert [n[i].decision for i in (1, 2, 3, 4)] == ["accepted", "rejected", "accepted", "accepted"]
    assert (r.old_accepted, r.accepted) == (0, 3) and r.changed and not r.lower_bound
    assert "min(α·H + β, max p)" in n[1].reason


def test_lowering_delta_accepts_a_context_node_and_judges_its_children():
    step = step_of(
        [
            node(1, 0, "context", "rejected", p=0.05, max_p=0.6, rank=1, threshold=0.1),
            node(2, 1, "context", "unreached", p=0.7, max_p=0.7, rank=0),
            node(3, 2, "generated", "unreached", p=0.2, max_p=0.7, rank=1),  # generated: strict, stays out
        ]
    )
    assert rescore_step(step, "casd", {"delta": 0.1}).accepted == 0  # the original parameters: nothing changes
    r = rescore_step(step, "casd", {"delta": 0.01})
    n = by_node(r)
    assert (n[1].decision, n[2].decision, n[3].decision) == ("accepted", "accepted", "rejected")
    assert n[1].old_threshold == 0.1 and n[1].threshold == 0.01
    assert (r.old_accepted, r.accepted) == (0, 2)
    assert [(f.node, f.old_decision, f.decision) for f in r.flips] == [
        (1, "rejected", "accepted"),
        (2, "unreached", "accepted"),
        (3, "unreached", "rejected"),
    ]
    assert "rank 1, not the argmax" in n[3].reason
    rows = flips_table(r)
    assert rows[0] == {
        "step": 0,
        "node": 1,
        "token": "t21",
        "source": "context",
        "p": 0.05,
        "old_threshold": 0.1,
        "new_threshold": 0.01,
        "old_decision": "rejected",
        "new_decision": "accepted",
        "reason": n[1].reason,
    }


def test_a_refused_argmax_says_the_bonus_keeps_its_token():
    """CASD's δ can refuse the target's own token (p ≤ δ at a flat position); the bonus then brings it back, so the
    reason says the text keeps it rather than naming the token as its own "correction" (fifth newcomer pass)."""
    step = step_of(
        [
            node(1, 0, "context", "accepted", p=0.17, max_p=0.17, rank=0),
            node(2, 0, "context", "rejected", p=0.1, max_p=0.17, rank=1),
        ]
    )
    n = by_node(rescore_step(step, "casd", {"delta": 0.5}))
    assert n[1].decision == "rejected" and OWN_TOKEN in n[1].reason and "correction 21" in n[1].reason
    other = step_of([node(1, 0, "context", "rejected", p=0.1, max_p=0.6, rank=1)])
    assert OWN_TOKEN not in by_node(rescore_step(other, "casd", {"delta": 0.5}))[1].reason


@pytest.mark.parametrize(
    "method,params",
    [
        ("casd", {"delta": 1e-5}),
        ("casd", {"delta": 1.0}),
        ("casd-mixed", {"delta": 1e-5, "top_k": 1000}),
        ("aasd", {"alpha": 0.0, "beta": 0.0}),
        ("aasd", {"alpha": 10.0, "beta": 1.0}),
        ("aasd-topk", {"top_k": 1000}),
    ],
)
def test_generated_nodes_stay_strict_under_any_threshold(method, params):
    step = step_of(
        [
            node(1, 0, "generated", "accepted", p=0.5, max_p=0.5, rank=0),
            node(2, 1, "generated", "rejected", p=0.45, max_p=0.46, rank=1),
            node(3, 1, "generated", "accepted", p=0.46, max_p=0.46, rank=0),
        ]
    )
    r = rescore_step(step, method, params)
    assert not r.flips and r.accepted == 2


def test_path_choice_longest_then_likeliest():
    step = step_of(
        [
            node(1, 0, "context", "rejected", p=0.3, max_p=0.5, rank=1),
            node(2, 1, "context", "unreached", p=0.3, max_p=0.5, rank=1),  # branch A: log 0.3 + log 0.3 = -2.41
            node(3, 0, "context", "rejected", p=0.5, max_p=0.5, rank=0),
            node(4, 3, "context", "unreached", p=0.15, max_p=0.5, rank=2),  # branch B: log 0.5 + log 0.15 = -2.59
            node(5, 0, "context", "rejected", p=0.02, max_p=0.5, rank=5),
            node(6, 5, "context", "unreached", p=0.02, max_p=0.5, rank=5),
        ]
    )
    assert math.log(0.3) * 2 > math.log(0.5) + math.log(0.15)
    r = rescore_step(step, "casd", {"delta": 0.1})  # depth 2 for both A and B: the likelier wins
    n = by_node(r)
    assert (n[1].decision, n[2].decision) == ("accepted", "accepted") and n[3].decision == "rejected"
    assert "longer or likelier path" in n[3].reason and n[4].decision == "unreached"
    r = rescore_step(step, "casd", {"delta": 0.01})  # every node passes; branch C goes no deeper, so A still wins
    assert [x.decision for x in r.nodes[1:3]] == ["accepted", "accepted"] and r.accepted == 2
    step.nodes.insert(7, node(7, 6, "context", "unreached", p=0.02, max_p=0.5, rank=5, depth=3))
    step.nodes[-1].node = 8
    r = rescore_step(step, "casd", {"delta": 0.01})  # now C is the longest: length beats likelihood
    assert r.accepted == 3 and [by_node(r)[i].decision for i in (5, 6, 7)] == ["accepted"] * 3
    assert by_node(r)[1].decision == "rejected"


def csd_chain(first_decision, count, *, second="unreached", second_rank=0, second_count=None):
    return step_of(
        [
            node(
                1,
                0,
                "context",
                first_decision,
                p=0.1,
                max_p=0.7,
                rank=2,
                logit_gap=2.0,
                threshold=0.01,
                mem_count=count,
                correction_id=33,
            ),
            node(
                2,
                1,
                "context",
                second,
                p=0.6 if second_rank == 0 else 0.1,
                max_p=0.6,
                rank=second_rank,
                logit_gap=0.0 if second_rank == 0 else 1.5,
                mem_count=second_count,
                correction_id=34 if second_count is not None else None,
            ),
        ]
    )


def test_csd_gate_and_memory_thresholds():
    # z(x) − z(t*) = −2.0: the gate passes for τ ≤ e^−2 ≈ 0.135; the memory read 5 for this pair.
    step = csd_chain("rejected", 5)
    assert rescore_step(step, "csd-context", {"lam": 6, "tau": 0.01}).accepted == 0  # the original: count 5 < λ 6
    r = rescore_step(step, "csd-context", {"lam": 5, "tau": 0.01})
    n = by_node(r)
    assert (n[1].decision, n[2].decision, r.accepted) == ("rescued", "accepted", 2)
    assert n[1].threshold == 0.01 and "count 5 ≥ λ 5" in n[1].reason and "correction 33" in n[1].reason
    r = rescore_step(step, "csd-context", {"lam": 5, "tau": 0.2})  # log 0.2 = −1.61 > −2.0: the gate refuses
    assert by_node(r)[1].decision == "rejected" and r.accepted == 0 and "< log τ" in by_node(r)[1].reason

    rescued = csd_chain("rescued", 6, second="accepted")
    r = rescore_step(rescued, "csd-context", {"lam": 6, "tau": 0.1})  # log 0.1 = −2.30 ≤ −2.0: still rescued
    assert not r.flips and r.accepted == 2
    r = rescore_step(rescued, "csd-context", {"lam": 6, "tau": 0.2})
    assert [(f.node, f.old_decision, f.decision) for f in r.flips] == [
        (1, "rescued", "rejected"),
        (2, "accepted", "unreached"),
    ]
    assert rescore_step(rescued, "csd-context", {"lam": 7, "tau": 0.01}).accepted == 0
    assert rescore_step(rescued, "sd-gating-only", {"tau": 0.1}).accepted == 2  # no memory condition at all


def test_csd_walk_stops_at_a_node_without_a_memory_count():
    step = csd_chain("rejected", 5, second_rank=1)  # node 2 is not the argmax and was never judged: no count
    r = rescore_step(step, "csd-context", {"lam": 5, "tau": 0.01})
    n = by_node(r)
    assert n[1].decision == "rescued" and n[2].decision == UNKNOWN and r.lower_bound
    assert r.accepted == 1 and "lower bound" in r.note and "never judged" in n[2].reason
    assert [f.node for f in r.flips] == [1]  # "unknown" is not a decision: no flip
    # The gate alone needs no count: the walk goes on and decides (−2.0 and −1.5 ≥ log 0.1 = −2.30).
    r = rescore_step(step, "sd-gating-only", {"tau": 0.1})
    assert (by_node(r)[1].decision, by_node(r)[2].decision, r.lower_bound) == ("rescued", "rescued", False)

    step.index = 1
    run = RunTrace(
        method="csd-context",
        params={"lam": 6, "tau": 0.01, "temperature": 0.0},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="",
        prompt_ids=[1],
        steps=[step_of([], 0), step],
    )
    res = rescore_run(run, {"lam": 5})
    assert res.first_divergence == 1 and res.window == 2 and res.predicted_is_lower_bound
    assert (res.original_mal, res.predicted_mal) == (1.0, 1.5) and res.flip_counts == {"rejected -> rescued": 1}


def test_run_summary_and_flip_counts():
    steps = [
        step_of([node(1, 0, "context", "accepted", p=0.5, rank=0)], 0),
        step_of([node(1, 0, "context", "rejected", p=0.05, max_p=0.6, rank=1)], 1),
        step_of([node(1, 0, "context", "rejected", p=0.05, max_p=0.6, rank=1)], 2),
    ]
    run = RunTrace(
        method="casd",
        params=dict(METHODS["casd"].params),
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="",
        prompt_ids=[1],
        steps=steps,
    )
    same = rescore_run(run)
    assert (
        same.first_divergence is None
        and same.window == 3
        and same.original_mal == same.predicted_mal == pytest.approx(4 / 3)
    )
    res = rescore_run(run, {"delta": 0.01})
    assert res.params["delta"] == 0.01 and res.first_divergence == 1 and res.window == 2
    assert (
        res.original_mal == pytest.approx(1.5)
        and res.predicted_mal == pytest.approx(2.0)
        and res.run_mal == pytest.approx(4 / 3)
    )
    assert res.flip_counts == {"rejected -> accepted": 2}  # counted over every stored step
    assert [row["step"] for row in flips_table(res)] == [1, 2]


def test_refusals_say_why():
    step = step_of([node(1, 0, "context", "rejected", p=0.05, rank=1)])
    base = dict(model="m", draft_model=None, device="cpu", dtype="float32", prompt="", prompt_ids=[1])
    sampled = RunTrace(
        method="csd-context", params={**METHODS["csd-context"].params, "temperature": 1.0}, steps=[step], **base
    )
    with pytest.raises(InvalidInputError, match="sampled.*Re-run the method at temperature 0"):
        rescore_run(sampled)
    greedy_run = RunTrace(method="casd", params=dict(METHODS["casd"].params), steps=[step], **base)
    with pytest.raises(InvalidInputError, match="temperature"):
        rescore_step(step, "csd-context", {"temperature": 0.5})
    with pytest.raises(InvalidInputError, match="no effect on casd"):
        rescore_run(greedy_run, {"temperature": 0.5})
    with pytest.raises(InvalidInputError, match="delta = 0 is out of range"):
        rescore_run(greedy_run, {"delta": 0})
    with pytest.raises(InvalidInputError, match="delta = 1.5 is out of range"):
        rescore_step(step, "casd", {"delta": 1.5})
    with pytest.raises(InvalidInputError, match="'tau' has no effect"):
        rescore_run(greedy_run, {"tau": 0.1})
    with pytest.raises(InvalidInputError, match="max_nodes would change what is drafted.*run the method again"):
        rescore_run(greedy_run, {"max_nodes": 4})
    greedy = RunTrace(method="greedy", params=dict(METHODS["greedy"].params), steps=[step_of([], 0)], **base)
    assert (
        rescore_run(greedy, dict(greedy.params)).window == 1
    )  # its own values pass back unchecked (top_k = 0 is greedy's)
    hf = RunTrace(method="hf-generate", params=dict(METHODS["hf-generate"].params), steps=[], **base)
    with pytest.raises(InvalidInputError, match="no stored steps.*generate"):
        rescore_run(hf)
    with pytest.raises(InvalidInputError, match="generate"):
        rescore_step(step, "hf-prompt-lookup", {})


def test_every_engine_method_carries_its_verification():
    """Rules and rescue are data on the method, the same callables for the engine and for re-scoring;
    a method that reads CSD's memory has a rescue rule that reads its counts."""
    from core.rules import Deferred, Rescue

    for m in METHODS.values():
        if not m.in_engine:
            assert m.external is not None, m.name
            continue
        p = resolve_params(m.name)
        rules, rescue = m.rules_of(p), m.rescue_of(p)
        if isinstance(rules, Deferred):  # fly: per-node rules plus a path cut, both data on the method
            assert rules.window >= 1, m.name
            rules = rules.rules
        assert callable(rules) or all(callable(r) for r in rules.values()), m.name
        assert rescue is None or isinstance(rescue, Rescue), m.name
        assert m.reads_memory == (rescue is not None and rescue.lam is not None), m.name


# -- real runs: re-scoring with the run's own parameters reproduces the engine ------------------------
@pytest.fixture(scope="module")
def runs():
    target = make_tiny(0)
    rng = random.Random(1)
    x = [rng.randrange(2, 96) for _ in range(10)]
    own = run_method("greedy", target, x, {"max_new_tokens": 30}).output_ids
    # The prompt holds the model's own continuation, so copied drafts are often the argmax.
    prompts = [
        x + own + [rng.randrange(2, 96) for _ in range(4)] + x,
        [rng.randrange(2, 96) for _ in range(12)] * 2 + [rng.randrange(2, 96) for _ in range(6)],
    ]
    configs = [
        ("aasd", {}),
        ("aasd", {"alpha": 0.0, "beta": 0.02}),
        ("aasd", {"alpha": 0.02, "beta": 0.01}),
        ("casd", {}),
        ("casd", {"delta": 0.02}),
        ("casd-mixed", {}),
        ("casd-mixed", {"delta": 0.005, "top_k": 3}),
        ("aasd-topk", {}),
        ("aasd-topk", {"top_k": 8}),
        ("greedy", {}),
        ("csd-context", {"lam": 0, "tau": 0.05}),
        ("csd-context", {"lam": 0, "tau": 0.001}),
        ("csd-context", {"lam": 2, "tau": 0.01}),
    ]
    memory = CorrectionMemory()  # shared across the csd runs: later runs read counts the earlier ones left
    out = []
    for prompt in prompts:
        for name, params in configs:
            kw = {"memory": memory} if name.startswith("csd") else {}
            # A fixed tree size: max_nodes=auto would make the trees (and so which decisions occur) follow this
            # machine's measured cost curve.
            out.append(
                run_method(
                    name,
                    target,
                    prompt,
                    {"max_new_tokens": 40, **({} if name == "greedy" else {"max_nodes": 16}), **params},
                    **kw,
                )
            )
    return out


def test_rescoring_with_the_runs_own_parameters_reproduces_every_decision(runs):
    seen = Counter()
    for run in runs:
        res = rescore_run(run)
        assert (
            res.first_divergence is None
            and res.flip_counts == {}
            and res.predicted_mal == res.original_mal == res.run_mal
        )
        for step, again in zip(run.steps, res.steps):
            assert again.accepted == step.accepted and not again.lower_bound, (run.method, step.index)
            records = [n for n in step.nodes if n.decision != "bonus"]
            assert len(again.nodes) == len(records)
            for old, new in zip(records, again.nodes):
                where = (run.method, run.params, step.index, old.node)
                assert (new.decision, new.reason, new.threshold) == (old.decision, old.reason, old.threshold), where
                seen[(run.method, old.decision)] += 1
                if old.decision in ("accepted", "rescued") and old.node and old.rank > 0:
                    seen["non-argmax"] += 1
                if "longer or likelier" in old.reason:
                    seen["tie-break"] += 1
                if old.decision == "rejected" and old.mem_count is not None and "≥ log τ" in old.reason:
                    seen["refused by the memory alone"] += 1
    # The runs exercise what the rules decide: acceptances, rejections, unreached nodes, rescues.
    for method in ("aasd", "casd", "casd-mixed", "aasd-topk", "csd-context"):
        assert seen[(method, "rejected")] and seen[(method, "unreached")], method
    assert all(
        seen[(m, "accepted")] > len([r for r in runs if r.method == m])
        for m in ("aasd", "casd", "aasd-topk", "csd-context")
    )
    assert seen[("csd-context", "rescued")] and seen["refused by the memory alone"]
    assert seen["non-argmax"] and seen["tie-break"]


def test_relaxing_a_real_runs_threshold_never_shortens_a_step(runs):
    for run in (r for r in runs if r.method == "casd"):
        looser, stricter = rescore_run(run, {"delta": 0.001}), rescore_run(run, {"delta": 0.5})
        assert all(s.accepted >= s.old_accepted for s in looser.steps)
        assert all(s.accepted <= s.old_accepted for s in stricter.steps)
        assert looser.predicted_mal >= looser.original_mal and stricter.predicted_mal <= stricter.original_mal
    flips = Counter()
    for run in (r for r in runs if r.method == "aasd"):
        looser = rescore_run(run, {"alpha": 0.0, "beta": 0.001})
        assert all(s.accepted >= s.old_accepted for s in looser.steps)
        flips.update(looser.flip_counts)
    assert flips["rejected -> accepted"] and flips["unreached -> accepted"]


def test_another_rule_judges_the_same_drafts(runs):
    """An AASD run re-scored under CASD's fixed δ (aasd-fixed: the same drafter) equals that rule applied node by node."""
    for run in (r for r in runs if r.method == "aasd" and r.params["alpha"] == 0.1):
        res = rescore_run(run, {"delta": 0.01}, rule="aasd-fixed")
        assert (
            res.method == "aasd-fixed"
            and res.params["delta"] == 0.01
            and res.params["key_len"] == run.params["key_len"]
        )
        for step in res.steps:
            for n in step.nodes:
                if n.source == "context" and n.decision in ("accepted", "rejected") and n.reason.startswith("p "):
                    assert n.threshold == max(
                        0.01,
                        next(x.p_eos for s in run.steps if s.index == step.step for x in s.nodes if x.node == n.node),
                    )
        strict_again = rescore_run(run, {}, rule="aasd-strict")
        assert all(s.accepted <= s.old_accepted for s in strict_again.steps)
    # A rescue rule needs memory counts an AASD run never read: its walk stops at the first rejection.
    counted = rescore_run(next(r for r in runs if r.method == "aasd"), {}, rule="csd-context")
    assert counted.predicted_is_lower_bound and any(n.decision == UNKNOWN for s in counted.steps for n in s.nodes)
    with pytest.raises(InvalidInputError, match="transformers' generate.*choose one of"):
        rescore_run(runs[0], {}, rule="hf-generate")


# -- stored runs of every relaxed method: the store's records alone reproduce every online decision ----
RELAXED = {  # four parameter settings each; five prompts -> 20 runs per method
    "aasd": [
        {},
        {"alpha": 0.0, "beta": 0.02},
        {"alpha": 0.02, "beta": 0.01},
        {"alpha": 0.05, "beta": 0.05, "align_m": 1},
    ],
    "casd": [{}, {"delta": 0.02}, {"delta": 0.05}, {"delta": 0.005, "max_nodes": 8}],
    "csd": [
        {"lam": 0, "tau": 0.05},
        {"lam": 0, "tau": 0.001},
        {"lam": 2, "tau": 0.01},
        {"lam": 1, "tau": 0.2, "gamma": 3},
    ],
    "csd (single model)": [
        {"lam": 0, "tau": 0.05},
        {"lam": 1, "tau": 0.001},
        {"lam": 2, "tau": 0.01},
        {"lam": 0, "tau": 0.2},
    ],
}


def test_stored_runs_of_every_relaxed_method_rescore_to_their_online_decisions(tmp_path):
    from workbench.store import Store

    target, draft = make_tiny(0), perturbed(0, 0.1)
    rng = random.Random(7)
    own = run_method("greedy", target, [rng.randrange(2, 96) for _ in range(8)], {"max_new_tokens": 24}).output_ids
    prompts = [
        [rng.randrange(2, 96) for _ in range(6)] + own + [rng.randrange(2, 96) for _ in range(3)] + own[:5]
        for _ in range(3)
    ]
    prompts += [
        [rng.randrange(2, 96) for _ in range(10)] * 2 + [rng.randrange(2, 96) for _ in range(4)] for _ in range(2)
    ]
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    memory = CorrectionMemory()  # one memory for all csd runs: later runs read the counts earlier ones left
    judged, runs = Counter(), Counter()
    for label, settings in RELAXED.items():
        name = label.split()[0]
        for prompt in prompts:
            for params in settings:
                kw = {"memory": memory} if name == "csd" else {}
                # Tree drafters get fixed trees (a setting's own max_nodes wins): under max_nodes=auto a
                # steep machine drafts nothing to judge.
                sized = {} if label == "csd" else {"max_nodes": 16}
                if label == "csd":
                    kw["draft"] = draft
                run = run_method(name, target, prompt, {"max_new_tokens": 32, **sized, **params}, **kw)
                stored = store.load_run(store.save_run(run)).trace
                again = rescore_run(stored)
                assert again.first_divergence is None and again.flip_counts == {}, (label, params)
                for step, new in zip(run.steps, again.steps):
                    assert new.accepted == step.accepted and not new.lower_bound, (label, params, step.index)
                    records = [n for n in step.nodes if n.decision != "bonus"]
                    for old, node in zip(records, new.nodes, strict=True):
                        assert (node.decision, node.reason, node.threshold) == (
                            old.decision,
                            old.reason,
                            old.threshold,
                        ), (label, params, step.index, old.node)
                        judged[(label, old.decision)] += 1
                runs[label] += 1
    assert all(n == 20 for n in runs.values()) and len(runs) == 4
    for label in RELAXED:  # the runs exercise what the rules decide
        assert judged[(label, "accepted")] and judged[(label, "rejected")], label
    assert judged[("csd", "rescued")] and judged[("csd (single model)", "rescued")]
    assert judged[("aasd", "unreached")] and judged[("casd", "unreached")]
