"""Peers' relaxed rules as methods: Medusa's typical acceptance and an entropy-gated deferred check in FLy's
style (core.rules.typical, entropy_gate, deferred_keep; the `typical` and `fly` methods), pure and re-scorable."""

from __future__ import annotations

import math
import random

import pytest

from core.rules import Deferred, NodeStats, by_source, deferred_keep, entropy_gate, rule_for, typical
from core.tree import DraftTree
from core.walk import walk


def stats(p, entropy=1.0, rank=1, max_p=0.5):
    return NodeStats(p=p, entropy=entropy, max_p=max_p, p_eos=0.0, rank=rank, logit_gap=1.0)


# ---------------------------------------------------------------- typical acceptance (pure)


def test_typical_acceptance_threshold_is_the_smaller_of_epsilon_and_alpha_exp_minus_entropy():
    rule = typical(0.09, 0.3)
    # Low entropy: α·exp(−H) = 0.3·exp(−0.1) = 0.27 > ε, so ε = 0.09 decides.
    assert rule(stats(0.1, entropy=0.1)).passed and rule(stats(0.1, entropy=0.1)).threshold == pytest.approx(0.09)
    assert not rule(stats(0.08, entropy=0.1)).passed
    # High entropy: α·exp(−3) = 0.0149 < ε: a token with p = 0.02 is typical enough there, not at H = 0.1.
    assert rule(stats(0.02, entropy=3.0)).threshold == pytest.approx(0.3 * math.exp(-3.0))
    assert rule(stats(0.02, entropy=3.0)).passed and not rule(stats(0.02, entropy=0.1)).passed
    assert not rule(stats(0.3 * math.exp(-3.0), entropy=3.0)).passed  # strictly greater
    assert rule(stats(0.01, entropy=0.1, rank=0)).passed  # the argmax always passes


# ---------------------------------------------------------------- FLy's gate and deferred window (pure)


def test_the_entropy_gate_passes_a_mismatch_only_where_the_target_is_unsure():
    gate = entropy_gate(1.5)
    assert gate(stats(0.001, entropy=0.2, rank=0)).passed
    assert (
        gate(stats(0.001, entropy=1.5, rank=7)).passed and "deferred" in gate(stats(0.001, entropy=1.5, rank=7)).reason
    )
    assert not gate(stats(0.4, entropy=1.49, rank=1)).passed


def test_the_deferred_window_keeps_a_mismatch_only_when_the_next_tokens_match():
    m, ok = stats(0.1, entropy=2.0, rank=2), stats(0.9, rank=0)
    assert deferred_keep([ok, ok], 2) == (2, "")  # no mismatch: all kept
    assert deferred_keep([ok, m, ok, ok], 2) == (4, "")  # confirmed by 2 matches
    keep, why = deferred_keep([ok, m, ok, m, ok, ok], 2)  # the second mismatch sits in the first's window
    assert keep == 1 and "window token 2 of 2" in why
    keep, why = deferred_keep([ok, m, ok], 2)  # the step ends before the window does: cut (checked within the step)
    assert keep == 1 and "only 1 of the 2" in why
    assert deferred_keep([ok, m, ok, ok, m, ok, ok], 2) == (7, "")  # two mismatches, each confirmed
    assert deferred_keep([m, ok, ok, m], 2)[0] == 3  # the last one is unconfirmed: cut before it
    with pytest.raises(ValueError, match="at least 1"):
        deferred_keep([ok], 0)


def test_the_walk_cuts_the_path_before_an_unconfirmed_mismatch_and_adds_the_targets_token_there():
    # A chain of 4 context nodes: a match, a high-entropy mismatch, a match, a mismatch at low entropy (fails the gate).
    tree = DraftTree.root_only(0)
    for i in range(4):
        tree.add(i, 10 + i, "context")
    nodes = [
        None,
        stats(0.9, rank=0),
        stats(0.2, entropy=2.5, rank=1),
        stats(0.8, rank=0),
        stats(0.1, entropy=0.3, rank=3),
    ]
    logp = [0.0] + [math.log(n.p) for n in nodes[1:]]
    argmax = [100, 101, 102, 103, 104]
    rules = Deferred(by_source(entropy_gate(1.5)), window=2)
    v = walk(tree, nodes, logp, rules, argmax=argmax)
    # Gate alone accepts nodes 1-3; the window after node 2 has one match, then a failed node: cut before node 2.
    assert v.path == [0, 1] and v.bonus == 101
    assert v.decisions[1:] == ["accepted", "rejected", "unreached", "unreached"] and "deferred mismatch" in v.reasons[2]
    v1 = walk(tree, nodes, logp, Deferred(by_source(entropy_gate(1.5)), window=1), argmax=argmax)
    assert v1.path == [0, 1, 2, 3] and v1.bonus == 103 and v1.decisions[2] == "accepted"  # window 1: node 3 confirms it
    assert rule_for(rules, "generated")(nodes[2]).passed is False  # generated text stays strict


# ---------------------------------------------------------------- the methods, run and re-scored


def _repeating_prompt(model, seed=0):
    from core.methods import run_method

    rng = random.Random(seed)
    own = run_method("greedy", model, [rng.randrange(2, 96) for _ in range(8)], {"max_new_tokens": 24}).output_ids
    return [rng.randrange(2, 96) for _ in range(6)] + own + [rng.randrange(2, 96) for _ in range(3)] + own[:5]


@pytest.mark.parametrize("spec", ["typical[epsilon=0.3,alpha=0.9]", "fly[entropy_gate=0.5,window=1]"])
def test_peer_methods_run_record_their_settings_and_rescore_exactly(tiny, tmp_path, spec):
    from core.methods import parse_method_spec, run_method
    from workbench.rescore import rescore_run
    from workbench.store import Store

    name, overrides = parse_method_spec(spec)
    run = run_method(name, tiny, _repeating_prompt(tiny), {**overrides, "max_new_tokens": 32, "max_nodes": 16})
    assert len(run.output_ids) == 32 and all(
        str(run.params[k]) == str(float(v) if "." in v else int(v)) for k, v in overrides.items()
    )
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    again = rescore_run(store.load_run(store.save_run(run)).trace)  # the same rule from the stored parameters alone
    assert again.first_divergence is None and again.flip_counts == {}


@pytest.mark.real_model
def test_peer_methods_on_smollm2_accept_non_argmax_tokens_and_rescore(smollm2, tmp_path):
    from core.methods import run_method
    from core.models import encode_prompt
    from workbench.rescore import rescore_run
    from workbench.store import Store

    text = (
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
        "Repeat the sentence above three times, then write a short story about the fox."
    )
    ids = encode_prompt(smollm2.tokenizer, text)
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 48})
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    for name, p in [("typical", {"epsilon": 0.3, "alpha": 0.9}), ("fly", {"entropy_gate": 0.5, "window": 1})]:
        run = run_method(name, smollm2, ids, {**p, "max_new_tokens": 48, "max_nodes": 16})
        assert 0 < len(run.output_ids) <= 48
        again = rescore_run(store.load_run(store.save_run(run)).trace)
        assert again.first_divergence is None
        relaxed = [n for s in run.steps for n in s.nodes if n.decision == "accepted" and n.parent != -1 and n.rank]
        # Each relaxed acceptance is one the rule allows: typical's p above its threshold, fly's at H ≥ the gate.
        for n in relaxed:
            if name == "typical":
                assert n.p > min(0.3, 0.9 * math.exp(-n.entropy)) - 1e-9
            else:
                assert n.entropy >= 0.5 - 1e-9
        assert relaxed, f"{name} accepted no token other than the argmax"
        assert run.output_ids[:1] == greedy.output_ids[:1]
