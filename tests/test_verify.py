"""Verification rules and path choice on hand-computed distributions (no model)."""
import math

import pytest
import torch

from core.rules import NodeStats, adaptive, by_source, fixed, mixed, strict, top_k_rule
from core.target_stats import step_stats
from core.tree import DraftTree
from core.walk import choose_path, walk


def verify_by_rule(tree, s, rules):
    return walk(tree, s.nodes, s.logp, rules, argmax=s.row_argmax)


def stats(p, entropy=1.0, max_p=0.5, p_eos=0.0, rank=1, gap=1.0):
    return NodeStats(p=p, entropy=entropy, max_p=max_p, p_eos=p_eos, rank=rank, logit_gap=gap)


def test_strict_accepts_only_the_argmax():
    assert strict(stats(0.3, rank=0)).passed
    assert not strict(stats(0.49, rank=1)).passed


def test_fixed_threshold_with_eos_guard():
    rule = fixed(0.1)
    assert rule(stats(0.11)).passed and rule(stats(0.11)).threshold == 0.1
    assert not rule(stats(0.1)).passed  # strictly greater
    guarded = rule(stats(0.2, p_eos=0.3))
    assert not guarded.passed and guarded.threshold == 0.3  # ending here is likelier than the copy
    assert rule(stats(0.31, p_eos=0.3)).passed


def test_top_k_and_mixed():
    assert top_k_rule(5)(stats(0.01, rank=4)).passed
    assert not top_k_rule(5)(stats(0.9, rank=5)).passed
    rule = mixed(0.1, 5)
    assert rule(stats(0.2, rank=2)).passed
    assert not rule(stats(0.2, rank=5)).passed  # passes δ, fails top-k
    assert not rule(stats(0.05, rank=0)).passed  # passes top-k, fails δ


def test_adaptive_threshold_entropy_and_cap():
    # distribution [0.5, 0.25, 0.25]: H = 1.5 ln 2 = 1.0397 nats
    probs = [0.5, 0.25, 0.25]
    h = -sum(p * math.log(p) for p in probs)
    rule = adaptive(0.1, 0.1)
    r = rule(stats(0.25, entropy=h, max_p=0.5))
    assert r.threshold == pytest.approx(0.1 * h + 0.1) and r.passed  # 0.25 >= 0.204
    strict_rule = adaptive(0.2, 0.1)  # δ = 0.308: the same token now fails (higher α, stricter)
    assert not strict_rule(stats(0.25, entropy=h, max_p=0.5)).passed
    # cap: a flat distribution over 100 tokens has H = ln 100 = 4.6, α·H + β = 0.56 > max p = 0.01
    flat = stats(0.01, entropy=math.log(100), max_p=0.01, rank=0)
    capped = rule(flat)
    assert capped.threshold == pytest.approx(0.01) and capped.passed  # the cap lets the argmax through


def test_source_split_is_strict_for_generated():
    rules = by_source(fixed(0.1))
    n = stats(0.4, rank=1)
    assert rules["context"](n).passed and rules["alignment"](n).passed
    assert not rules["generated"](n).passed


def test_choose_path_longest_then_likeliest():
    t = DraftTree.root_only(0)
    a = t.add(0, 1, "context")      # depth 1
    b = t.add(a, 2, "context")      # depth 2
    c = t.add(0, 3, "context")      # depth 1
    d = t.add(c, 4, "context")      # depth 2, likelier than b
    e = t.add(d, 5, "context")      # depth 3 but fails
    passed = [True, True, True, True, True, False]
    logp = [0.0, -1.0, -1.0, -0.5, -0.4, -0.1]
    assert choose_path(t, passed, logp) == [0, c, d]
    passed[3] = False  # c fails: d is unreachable even though it passes
    assert choose_path(t, passed, logp) == [0, a, b]
    assert choose_path(t, [True] + [False] * 5, logp) == [0]
    assert e == 5


def test_step_stats_with_masked_logits_on_a_chain():
    """-inf logits (a masked vocabulary) have p = 0: finite entropy, right ranks and log p along a chain."""
    ninf = float("-inf")
    logits = torch.tensor([[math.log(0.5), math.log(0.5), ninf, ninf], [ninf, math.log(0.25), math.log(0.75), ninf],
                           [0.0, 0.0, 0.0, 0.0]])
    t = DraftTree.root_only(9)
    t.add(0, 1, "context")
    t.add(1, 1, "context")
    s = step_stats(logits, t, eos_ids=[3])
    assert s.row_entropy[0] == pytest.approx(math.log(2), rel=1e-6)
    assert s.row_entropy[1] == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), rel=1e-6)
    assert s.row_p_eos[:2] == [0.0, 0.0] and s.row_argmax[:2] == [0, 2]
    assert s.nodes[1].rank == 1 and s.nodes[1].p == pytest.approx(0.5)  # tie with id 0: the lower id ranks first
    assert s.nodes[2].rank == 1 and s.logp[2] == pytest.approx(math.log(0.25))
    assert s.logprob(1, 2) == pytest.approx(math.log(0.75)) and s.rank(1, 2) == 0
    assert s.rank(2, 3) == 3 and s.rank(2, 0) == 0  # a uniform row: the lower ids rank first, as argmax picks


def test_step_stats_and_verify_on_logits():
    # root row: probs over 4 tokens; token 2 is the argmax
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.6, 0.1], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    t = DraftTree.root_only(9)
    t.add(0, 1, "context")  # p = 0.2, rank 1
    t.add(0, 2, "generated")  # p = 0.6, argmax
    s = step_stats(logits, t, eos_ids=[3])
    n1, n2 = s.nodes[1], s.nodes[2]
    assert n1.p == pytest.approx(0.2) and n1.rank == 1 and n1.max_p == pytest.approx(0.6) and n1.p_eos == pytest.approx(0.1)
    assert n1.logit_gap == pytest.approx(math.log(3)) and n2.rank == 0
    assert n1.entropy == pytest.approx(-sum(p * math.log(p) for p in [0.1, 0.2, 0.6, 0.1]), rel=1e-5)
    v = verify_by_rule(t, s, strict)
    assert v.path == [0, 2] and v.bonus == 0  # row 2 is uniform: ties go to the lowest id
    assert v.decisions == ["accepted", "rejected", "accepted"]
    relaxed = verify_by_rule(t, s, by_source(fixed(0.1)))
    # both pass (0.2 > 0.1 context; 0.6 argmax generated): same depth, the likelier wins
    assert relaxed.path == [0, 2] and "longer or likelier" in relaxed.reasons[1]
