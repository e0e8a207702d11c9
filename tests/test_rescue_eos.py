"""`rescue_eos` (issue 20 item 5): CSD rescues over an end of sequence as the paper does (`yes`, the default);
`no` exempts a rejection whose correction t* is one of the target's EOS ids. The decision on hand-made
trees (greedy walk and sampling walk, no model), the parameter's plumbing and validation, re-scoring,
and runs on a tiny random model."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
from conftest import make_tiny, perturbed

from core.errors import InvalidInputError
from core.memory import CorrectionMemory
from core.methods import METHODS, get_method, make_verifier, parse_method_spec, rescue_for, resolve_params, run_method
from core.rules import EOS_EXEMPT, NodeStats, Rescue, rescue_decision, strict
from core.target_stats import sampling_processors
from core.trace import NodeTrace, StepTrace
from core.tree import DraftTree
from core.walk import UNKNOWN, sample_walk, walk
from workbench.rescore import rescore_run, rescore_step

EOS = 1
RESCUERS = ("csd", "csd-context", "lossy-sd", "sd-memory-only", "sd-gating-only")


# -- the rule -----------------------------------------------------------------------------------
def test_an_exempt_correction_is_never_rescued_and_the_reason_says_why():
    both, exempt = Rescue(lam=6, tau=0.01), Rescue(lam=6, tau=0.01, exempt=frozenset({EOS, 2}))
    assert rescue_decision(both, 10, -0.1, EOS)[0]  # the paper: t* = EOS is rescued like any other
    ok, why = rescue_decision(exempt, 10, -0.1, EOS)
    assert not ok and why.startswith(EOS_EXEMPT) and "count 10 ≥ λ 6" in why  # the conditions stay in the reason
    assert rescue_decision(exempt, None, -0.1, EOS) == (False, EOS_EXEMPT)  # decided without a count
    for count, gap, t in [(10, -0.1, 33), (5, -0.1, 33), (10, -5.0, 33), (10, -0.1, None)]:  # not EOS: unchanged
        assert rescue_decision(exempt, count, gap, t) == rescue_decision(both, count, gap, t)
    assert not rescue_decision(Rescue(tau=0.6, exempt=frozenset({EOS})), None, 0.0, EOS)[0]  # the gate alone too
    assert Rescue(lam=1, exempt=[3]).exempt == frozenset({3})  # any iterable of ids


# -- the greedy walk on a hand-made tree -------------------------------------------------------------
def chain():
    """root 5 -> 7 -> 8: node 1 (rank 2, z(x) − z(t*) = −0.5) fails the strict rule; node 2 is the argmax."""
    tree = DraftTree([5, 7, 8], [-1, 0, 1], [0, 1, 2], ["root", "draft", "draft"], [None, 0.9, 0.9])
    nodes = [None, NodeStats(0.2, 1.0, 0.35, 0.35, 2, 0.5), NodeStats(0.6, 1.0, 0.6, 0.01, 0, 0.0)]
    return tree, nodes, [0.0, math.log(0.2), math.log(0.6)]


def walk_chain(correction, rescue, p_eos=None):
    tree, nodes, logp = chain()
    if p_eos is not None:
        nodes[1] = dataclasses.replace(nodes[1], p_eos=p_eos)
    seen = []

    def count_of(node, t):
        seen.append((tree.tokens[node], t))
        return 9

    return walk(tree, nodes, logp, strict, rescue=rescue, argmax=[correction, 8, 40], count_of=count_of), seen


@pytest.mark.parametrize("rescue", [Rescue(lam=6, tau=0.01), Rescue(lam=6), Rescue(tau=0.01)])
def test_walk_rescues_over_eos_with_yes_and_not_with_no(rescue):
    yes, _ = walk_chain(EOS, rescue)
    assert yes.path == [0, 1, 2] and yes.decisions[1] == "rescued" and yes.bonus == 40
    no, seen = walk_chain(EOS, dataclasses.replace(rescue, exempt=frozenset({EOS})))
    assert no.path == [0] and no.decisions[1:] == ["rejected", "unreached"] and no.bonus == EOS  # the answer ends here
    assert EOS_EXEMPT in no.reasons[1] and "correction 1" in no.reasons[1]
    assert seen == [(7, EOS)] and no.extra[1] == {"correction_id": EOS, "mem_count": 9}  # the pair is still counted
    # A correction that is not EOS: the exemption changes nothing.
    plain, _ = walk_chain(33, rescue)
    exempt, _ = walk_chain(33, dataclasses.replace(rescue, exempt=frozenset({EOS})))
    assert (exempt.path, exempt.decisions, exempt.reasons) == (plain.path, plain.decisions, plain.reasons)
    assert exempt.decisions[1] == "rescued" and EOS_EXEMPT not in exempt.reasons[1]


def test_an_unrecorded_correction_is_unknown_only_when_it_may_be_eos():
    gate = Rescue(tau=0.01, exempt=frozenset({EOS}))
    maybe, _ = walk_chain(None, gate)  # p_eos = max p: t* (the argmax) may be the EOS id
    assert maybe.decisions[1] == UNKNOWN and maybe.path == [0] and "may be an end of sequence" in maybe.note
    surely_not, _ = walk_chain(None, gate, p_eos=0.1)  # p_eos < max p: the argmax is no EOS id
    assert surely_not.decisions[1] == "rescued" and surely_not.note is None


# -- the sampling walk (T > 0) --------------------------------------------------------------------
def eos_heavy_logits(rows: int, vocab: int = 12) -> torch.Tensor:
    """p(EOS) ≈ 0.98, p(7) ≈ 0.018: a draft of 7 is nearly always refused for EOS, and z(7) − z(EOS) = −4 ≥ log 0.01."""
    z = torch.full((rows, vocab), -30.0)
    z[:, EOS], z[:, 7] = 10.0, 6.0
    return z


@pytest.mark.parametrize("with_q", [False, True])
def test_sample_walk_honours_the_exemption(with_q):
    tree = DraftTree([5, 7], [-1, 0], [0, 1], ["root", "draft"], [None, 1.0])
    q_rows = torch.nn.functional.one_hot(torch.tensor([7]), 12).float() if with_q else None
    procs = sampling_processors(1.0, 0, 1.0)
    seen = 0
    for seed in range(20):
        kw = dict(count_of=lambda node, t: 9, q_rows=q_rows)
        yes = sample_walk(
            tree, eos_heavy_logits(2), procs, torch.Generator().manual_seed(seed), rescue=Rescue(lam=6, tau=0.01), **kw
        )
        no = sample_walk(
            tree,
            eos_heavy_logits(2),
            procs,
            torch.Generator().manual_seed(seed),
            rescue=Rescue(lam=6, tau=0.01, exempt=frozenset({EOS})),
            **kw,
        )
        if yes.extra[1].get("correction_id") != EOS:
            continue
        seen += 1
        assert yes.decisions[1] == "rescued" and yes.path == [0, 1]
        assert no.decisions[1] == "rejected" and no.path == [0] and no.bonus == EOS and EOS_EXEMPT in no.reasons[1]
    assert seen >= 15


# -- the parameter ----------------------------------------------------------------------------------
def test_rescue_eos_is_a_parameter_of_every_rescuing_method_only():
    for name, m in METHODS.items():
        assert ("rescue_eos" in m.params) == (name in RESCUERS), name
    for name in RESCUERS:
        assert resolve_params(name)["rescue_eos"] == 1  # default: the paper
        assert resolve_params(name, {"rescue_eos": "no"})["rescue_eos"] == 0
    assert resolve_params("csd", {"rescue_eos": " No "})["rescue_eos"] == 0
    assert (
        resolve_params("csd", {"rescue_eos": "yes"})["rescue_eos"]
        == 1
        == resolve_params("csd", {"rescue_eos": 1})["rescue_eos"]
    )
    name, overrides = parse_method_spec("csd[lam=2,rescue_eos=no]")
    assert resolve_params(name, overrides)["rescue_eos"] == 0


@pytest.mark.parametrize(
    "value,message",
    [
        ("maybe", "rescue_eos must be an integer or one of yes, no, got 'maybe'"),
        (2, r"rescue_eos = 2 is out of range \[0, 1\]; yes stands for 1, no stands for 0"),
        ("0.5", "rescue_eos must be an integer"),
    ],
)
def test_a_bad_rescue_eos_names_the_allowed_values(value, message):
    with pytest.raises(InvalidInputError, match=message):
        resolve_params("csd", {"rescue_eos": value})


def test_rescue_eos_is_refused_where_nothing_is_rescued():
    for name in ("sd", "greedy", "aasd"):
        with pytest.raises(InvalidInputError, match=f"'rescue_eos' has no effect on {name}"):
            resolve_params(name, {"rescue_eos": "no"})


def test_rescue_for_builds_the_exemption_from_the_targets_eos_ids():
    csd = get_method("csd")
    assert rescue_for(csd, resolve_params("csd"), [1, 2]).exempt == frozenset()  # yes: nothing exempt
    no = resolve_params("csd", {"rescue_eos": "no"})
    assert rescue_for(csd, no, [1, 2]) == Rescue(lam=6, tau=0.01, exempt=frozenset({1, 2}))
    assert rescue_for(csd, {**no, "eos_ids": [3]}).exempt == frozenset({3})  # a run's recorded ids
    with pytest.raises(InvalidInputError, match=r"rescue_eos=no\] exempts the target's end-of-sequence ids"):
        rescue_for(csd, no)
    with pytest.raises(InvalidInputError, match="end-of-sequence ids"):
        make_verifier(csd, no, memory=CorrectionMemory())
    assert rescue_for(get_method("sd"), resolve_params("sd"), [1]) is None


# -- re-scoring -------------------------------------------------------------------------------------
def eos_step(decision="rescued", correction=EOS, count=9):
    """A stored step: node 1 (t7) was refused for `correction`, then rescued (count 9, z gap −0.5), node 2 accepted."""

    def rec(i, parent, depth, token, dec, **kw):
        return NodeTrace(
            step=0,
            cache_pos=10,
            node=i,
            parent=parent,
            depth=depth,
            token_id=token,
            token_text=f"t{token}",
            source="context",
            decision=dec,
            reason="original",
            **kw,
        )

    second = "accepted" if decision == "rescued" else "unreached"
    nodes = [
        rec(0, -1, 0, 5, "accepted"),
        rec(
            1,
            0,
            1,
            7,
            decision,
            p=0.2,
            entropy=1.0,
            max_p=0.35,
            p_eos=0.35 if correction == EOS else 0.01,
            rank=2,
            logit_gap=0.5,
            threshold=0.01,
            mem_count=count,
            correction_id=correction,
        ),
        rec(2, 1, 2, 8, second, p=0.6, entropy=1.0, max_p=0.6, p_eos=0.01, rank=0, logit_gap=0.0),
        rec(
            3,
            2 if decision == "rescued" else 0,
            3 if decision == "rescued" else 1,
            40 if decision == "rescued" else correction,
            "bonus",
            p=0.9,
        ),
    ]
    accepted = 2 if decision == "rescued" else 0
    return StepTrace(index=0, cache_pos=10, tree_size=2, accepted=accepted, emitted=[0] * (accepted + 1), nodes=nodes)


def test_rescoring_honours_rescue_eos():
    step = eos_step()
    assert rescore_step(step, "csd-context", {}, eos_ids=[EOS]).accepted == 2  # yes: as the run did
    r = rescore_step(step, "csd-context", {"rescue_eos": "no"}, eos_ids=[EOS])
    assert r.accepted == 0 and [(f.node, f.decision) for f in r.flips] == [(1, "rejected"), (2, "unreached")]
    assert EOS_EXEMPT in r.nodes[1].reason
    assert rescore_step(eos_step(correction=33), "csd-context", {"rescue_eos": "no"}, eos_ids=[EOS]).accepted == 2
    with pytest.raises(InvalidInputError, match="end-of-sequence ids"):
        rescore_step(step, "csd-context", {"rescue_eos": "no"})


# -- runs on a tiny random model ---------------------------------------------------------------------
def prompt_of(seed: int, n: int = 10) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 96) for _ in range(n)]


def rescued_over(run):
    return [(s.index, n) for s in run.steps for n in s.nodes if n.decision == "rescued"]


def eos_rescued_over(method, prompt, params, draft, memory=None):
    """A tiny target whose end of sequence is a token `method` rescues over before the run emits it (the tiny
    model's own EOS is rarely its argmax): (target, the run with rescue_eos=yes, its rescues over EOS)."""
    base = make_tiny(0)
    mem = (lambda: CorrectionMemory()) if memory else (lambda: None)
    first = run_method(method, base, prompt, params, draft=draft, memory=mem())
    for eos in dict.fromkeys(n.correction_id for _, n in rescued_over(first)):
        target = dataclasses.replace(base, eos_ids=[eos])
        yes = run_method(method, target, prompt, params, draft=draft, memory=mem())
        over = [(i, n) for i, n in rescued_over(yes) if n.correction_id == eos]
        if over:
            return target, yes, over
    pytest.fail("no run rescued over its end of sequence")


@pytest.mark.parametrize("method,memory", [("sd-gating-only", False), ("csd", True)])
def test_runs_with_and_without_rescue_over_eos(method, memory):
    """With rescue_eos=yes the run rescues over its end of sequence; with no it stops there, emitting it.
    Both record the EOS ids, re-scoring either reproduces it, and the memory still counts the exempt pair."""
    draft, prompt = perturbed(0, 0.25), prompt_of(4)
    params = {"max_new_tokens": 50, "tau": 0.05, **({"lam": 0} if memory else {})}
    target, yes, over = eos_rescued_over(method, prompt, params, draft, memory)
    eos = target.eos_ids[0]
    mem = CorrectionMemory() if memory else None
    no = run_method(method, target, prompt, {**params, "rescue_eos": "no"}, draft=draft, memory=mem)
    assert yes.params["eos_ids"] == no.params["eos_ids"] == [eos] and (
        yes.params["rescue_eos"],
        no.params["rescue_eos"],
    ) == (1, 0)
    assert not [n for _, n in rescued_over(no) if n.correction_id == eos]
    step, first = over[0]
    exempt = [n for n in no.steps[step].nodes if n.node == first.node][0]
    assert exempt.decision == "rejected" and EOS_EXEMPT in exempt.reason and exempt.correction_id == eos
    assert no.stop_reason == "eos" and no.output_ids[-1] == eos and len(no.steps) == step + 1
    assert no.output_ids[:-1] == yes.output_ids[: len(no.output_ids) - 1]  # the same text until then
    if memory:  # every rejection is counted, the exempt one included
        judged = [
            n
            for s in no.steps
            for n in s.nodes
            if n.decision in ("rejected", "rescued") and n.correction_id is not None
        ]
        assert exempt.mem_count is not None and mem.total == len(judged) and mem.count(exempt.token_id, eos) >= 1

    # Re-scoring: each run under its own parameters changes nothing; yes judged with no diverges there, and back.
    assert rescore_run(no).first_divergence is None and rescore_run(yes).first_divergence is None
    what_if = rescore_run(yes, {"rescue_eos": "no"})
    assert what_if.first_divergence == step and what_if.params["rescue_eos"] == 0
    assert rescore_run(no, {"rescue_eos": "yes"}).first_divergence == step


def test_sampled_runs_honour_rescue_eos():
    draft, prompt = perturbed(0, 0.25), prompt_of(4)
    exempt = 0
    for seed in range(4):
        params = {"max_new_tokens": 40, "tau": 0.05, "temperature": 1.0, "seed": seed}
        target, yes, over = eos_rescued_over("sd-gating-only", prompt, params, draft)
        no = run_method("sd-gating-only", target, prompt, {**params, "rescue_eos": "no"}, draft=draft)
        assert not [n for _, n in rescued_over(no) if n.correction_id in target.eos_ids]
        refused = [n for s in no.steps for n in s.nodes if EOS_EXEMPT in (n.reason or "")]
        assert all(n.decision == "rejected" and n.correction_id in target.eos_ids for n in refused)
        exempt += len(refused)
    assert exempt  # the sampled runs met the case


@pytest.mark.real_model
def test_smollm2_csd_rescues_over_its_eos_with_yes_and_stops_with_no(smollm2):
    """SmolLM2 over context drafts (csd without a draft model), every pair frequent (λ 0): on this prompt the
    rule rescues a draft over `<|im_end|>` (the case docs/CSD.md noticed, where the answer should have ended and
    went on); rescue_eos=no ends the answer there."""
    from core.models import encode_prompt

    ids = encode_prompt(smollm2.tokenizer, "Repeat after me: the cat sat on the mat.", chat=True)
    # A fixed tree size: under max_nodes=auto the drafts (and so the case) would follow this machine's cost curve.
    params = {"max_new_tokens": 48, "lam": 0, "tau": 0.01, "memory_mode": "frozen", "max_nodes": 16}
    yes, no = (
        run_method("csd", smollm2, ids, {**params, "rescue_eos": v}, memory=CorrectionMemory()) for v in ("yes", "no")
    )
    assert yes.params["eos_ids"] == no.params["eos_ids"] == list(smollm2.eos_ids)
    over = [(i, n) for i, n in rescued_over(yes) if n.correction_id in smollm2.eos_ids]
    assert over and not [n for _, n in rescued_over(no) if n.correction_id in smollm2.eos_ids]
    step, first = over[0]
    exempt = [n for s in no.steps for n in s.nodes if EOS_EXEMPT in (n.reason or "")]
    assert [(n.step, n.node, n.decision) for n in exempt] == [(step, first.node, "rejected")]
    assert no.stop_reason == "eos" and len(no.output_ids) < len(yes.output_ids)
    assert no.output_ids[:-1] == yes.output_ids[: len(no.output_ids) - 1]


def test_bench_csd_reports_csd_beside_its_eos_exempt_variant():
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("bench_csd", ROOT / "benchmarks" / "bench_csd.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for methods in (bench.PAIR_METHODS, bench.SINGLE_METHODS):
        assert "csd" in methods and "csd[rescue_eos=no]" in methods
    summary = {
        m: {"tokens": t, "mal": 2.0, "tps": 10.0, "score": 50.0}
        for m, t in [("greedy", 90), ("csd", 120), ("csd[rescue_eos=no]", 100)]
    }
    rows = [
        {"method": "csd", "rescues": [[4, 7, 2, 30, -0.1], [9, 7, 33, 8, -0.5]]},
        {"method": "csd[rescue_eos=no]", "rescues": [[9, 7, 33, 8, -0.5]]},
    ]
    lines = bench.eos_lines(summary, rows, ["greedy", "csd", "csd[rescue_eos=no]"], [2])
    assert lines[0].startswith("rescue over an end of sequence")
    assert lines[1].startswith("  csd: 120 tokens") and lines[1].endswith("1 rescues over EOS")
    assert lines[2].startswith("  csd[rescue_eos=no]: 100 tokens") and lines[2].endswith("0 rescues over EOS")
    assert bench.eos_lines(summary, rows, ["greedy", "csd"], [2]) == []  # no variant, no lines
