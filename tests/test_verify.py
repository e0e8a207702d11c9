"""Verification rules and path choice on hand-computed distributions (no model)."""

import math

import pytest
import torch

from core import target_stats
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
    # The argmax whose p comes out a few ulps under max p (two reductions of one row: seen on SmolLM2 as
    # p 0.52233880 against max p 0.52233922) is still accepted: the cap means it, whatever the last bits say
    near = stats(0.52233880, entropy=4.6, max_p=0.52233922, rank=0)
    assert rule(near).passed and "≥ θ" in rule(near).reason
    assert not rule(stats(0.52233880, entropy=4.6, max_p=0.52233922, rank=1)).passed  # a tie's loser is not argmax


def test_source_split_is_strict_for_generated():
    rules = by_source(fixed(0.1))
    n = stats(0.4, rank=1)
    assert rules["context"](n).passed and rules["alignment"](n).passed
    assert not rules["generated"](n).passed


def test_choose_path_longest_then_likeliest():
    t = DraftTree.root_only(0)
    a = t.add(0, 1, "context")  # depth 1
    b = t.add(a, 2, "context")  # depth 2
    c = t.add(0, 3, "context")  # depth 1
    d = t.add(c, 4, "context")  # depth 2, likelier than b
    e = t.add(d, 5, "context")  # depth 3 but fails
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
    logits = torch.tensor(
        [[math.log(0.5), math.log(0.5), ninf, ninf], [ninf, math.log(0.25), math.log(0.75), ninf], [0.0, 0.0, 0.0, 0.0]]
    )
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
    assert (
        n1.p == pytest.approx(0.2)
        and n1.rank == 1
        and n1.max_p == pytest.approx(0.6)
        and n1.p_eos == pytest.approx(0.1)
    )
    assert n1.logit_gap == pytest.approx(math.log(3)) and n2.rank == 0
    assert n1.entropy == pytest.approx(-sum(p * math.log(p) for p in [0.1, 0.2, 0.6, 0.1]), rel=1e-5)
    v = verify_by_rule(t, s, strict)
    assert v.path == [0, 2] and v.bonus == 0  # row 2 is uniform: ties go to the lowest id
    assert v.decisions == ["accepted", "rejected", "accepted"]
    relaxed = verify_by_rule(t, s, by_source(fixed(0.1)))
    # both pass (0.2 > 0.1 context; 0.6 argmax generated): same depth, the likelier wins
    assert relaxed.path == [0, 2] and "longer or likelier" in relaxed.reasons[1]


def random_tree(gen, size, vocab):
    """A random draft tree of `size` nodes: each new node under a random earlier one (parents[i] < i)."""
    t = DraftTree.root_only(int(torch.randint(vocab, (), generator=gen)))
    while len(t) < size:
        t.add(int(torch.randint(len(t), (), generator=gen)), int(torch.randint(vocab, (), generator=gen)), "context")
    return t


def tie_with_the_top(logits, t, parent):
    """Two children of `parent` whose logits equal the row's maximum: one at a lower id than every other
    maximum (rank 0, the argmax), one at a higher id (ranked behind all the lower maxima)."""
    row = logits[parent]
    top_ids = torch.nonzero(row == row.max()).flatten().tolist()
    low, high = top_ids[0] // 2, (top_ids[-1] + row.numel()) // 2
    if low != top_ids[0]:
        row[low] = row.max()
        t.add(parent, low, "context")
    if high != top_ids[-1]:
        row[high] = row.max()
        t.add(parent, high, "context")


def direct_stats(logits, t, eos_ids):
    """Everything from its definition, in float64 on each row: p = softmax(row)[token], rank by counting
    the higher logits and the equal ones at lower ids, entropy = -Σ p log p."""
    z = logits.double()
    probs = torch.softmax(z, -1)
    plogp = torch.where(probs > 0, probs * probs.log(), torch.zeros_like(probs))
    rows = []
    for r in range(z.shape[0]):
        top = z[r].max()
        rows.append(
            {
                "argmax": int(torch.nonzero(z[r] == top)[0]),
                "entropy": float(-plogp[r].sum()),
                "max_p": float(probs[r].max()),
                "p_eos": max((float(probs[r, e]) for e in eos_ids), default=0.0),
            }
        )
    nodes = [None]
    for i in range(1, len(t)):
        row, tok = z[t.parents[i]], t.tokens[i]
        v = row[tok]
        rank = int((row > v).sum() + (row[:tok] == v).sum())
        nodes.append(
            {
                "p": float(probs[t.parents[i], tok]),
                "logp": float(v - torch.logsumexp(row, 0)),
                "rank": rank,
                "gap": float(row.max() - v),
            }
        )
    return rows, nodes


def assert_matches_direct(s, logits, t, eos_ids):
    rows, nodes = direct_stats(logits, t, eos_ids)
    assert s.row_argmax == [r["argmax"] for r in rows]  # the first maximum, as torch.argmax
    assert s.row_entropy == pytest.approx([r["entropy"] for r in rows], rel=1e-4, abs=1e-5)
    assert all(math.isfinite(h) for h in s.row_entropy)
    assert s.row_max_p == pytest.approx([r["max_p"] for r in rows], rel=1e-5)
    assert s.row_p_eos == pytest.approx([r["p_eos"] for r in rows], rel=1e-5, abs=1e-12)
    for i in range(1, len(t)):
        n, want, parent = s.nodes[i], nodes[i], t.parents[i]
        assert n.rank == want["rank"] and (n.rank == 0) == (t.tokens[i] == s.row_argmax[parent])
        assert n.rank == s.rank(parent, t.tokens[i])  # the per-row `token_rank` the bonus record uses
        assert n.p == pytest.approx(want["p"], rel=1e-5, abs=1e-12) and s.logp[i] == pytest.approx(
            want["logp"], abs=1e-5
        )
        assert n.logit_gap == pytest.approx(want["gap"], abs=1e-5)
        assert (n.entropy, n.max_p, n.p_eos) == (s.row_entropy[parent], s.row_max_p[parent], s.row_p_eos[parent])


@pytest.mark.parametrize("block", [None, 7])  # the CPU ranks go a block of columns at a time: many, uneven blocks
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_step_stats_matches_a_direct_computation_with_ties(dtype, block, monkeypatch):
    if block:
        monkeypatch.setattr(target_stats, "_CPU_BLOCK", block)
    gen = torch.Generator().manual_seed(18)
    for trial in range(6):
        vocab = [300, 1000, 9001][trial % 3]
        t = random_tree(gen, [2, 9, 17][trial % 3], vocab)
        # few distinct values (quarter steps, and bf16's 8 bits): ties everywhere, also with the row maximum
        logits = (torch.randn(len(t) + 4, vocab, generator=gen) * 3 * 4).round() / 4
        logits = logits.to(dtype).float()
        for parent in {0, t.parents[-1]}:  # up to 4 more nodes
            tie_with_the_top(logits, t, parent)
        logits = logits[: len(t)].contiguous()
        if trial % 2:  # a masked vocabulary: -inf logits, some draft tokens among them
            logits[torch.rand(logits.shape, generator=gen) < 0.3] = float("-inf")
        eos_ids = [3, vocab - 1]
        s = step_stats(logits.to(dtype), t, eos_ids)
        assert_matches_direct(s, logits, t, eos_ids)


def test_batched_ranks_on_the_gpu_path_count_ties_like_argmax():
    """The (N, V) torch comparison used off CPU gives the same ranks as counting, on CPU tensors."""
    gen = torch.Generator().manual_seed(3)
    logits = (torch.randn(6, 500, generator=gen) * 8).round()
    logits[2, :250] = float("-inf")
    parents = torch.tensor([0, 0, 1, 2, 2, 3, 5])
    tokens = torch.tensor([int(logits[0].argmax()), 499, 0, 10, 400, 7, 250])
    values = logits[parents, tokens]
    want = [int((logits[p] > v).sum() + (logits[p, :tok] == v).sum()) for p, tok, v in zip(parents, tokens, values)]
    assert target_stats._ranks_torch(logits, parents, tokens, values).tolist() == want
    assert target_stats._ranks_numpy(logits.numpy(), parents.numpy(), tokens.numpy(), values.numpy()).tolist() == want
    assert want[0] == 0


def test_step_stats_entropy_is_finite_with_minus_inf_logits():
    ninf = float("-inf")
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    logits[0, ::2] = ninf  # half the vocabulary masked
    logits[1, 1:] = ninf  # one token left: p = 1, entropy 0
    t = DraftTree.root_only(5)
    t.add(0, 2, "context")  # a masked token: p = 0
    t.add(1, 0, "context")
    s = step_stats(logits, t, eos_ids=[4])
    assert all(math.isfinite(h) for h in s.row_entropy)
    assert s.row_entropy[1] == 0.0 and s.row_max_p[1] == 1.0 and s.nodes[2].rank == 0 and s.nodes[2].p == 1.0
    assert s.nodes[1].p == 0.0 and s.logp[1] == ninf and s.nodes[1].rank == 501  # 500 finite, -inf at id 0
    assert_matches_direct(s, logits, t, [4])


def test_step_stats_converts_to_python_once(monkeypatch):
    """On a GPU each conversion to Python waits for the device: one per step."""
    gen = torch.Generator().manual_seed(1)
    t = random_tree(gen, 12, 400)
    logits = torch.randn(len(t), 400, generator=gen)
    calls = []
    for name in ("tolist", "item", "__bool__", "__float__", "__int__"):
        method = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _m=method, _n=name: calls.append(_n) or _m(self, *a))
    step_stats(logits, t, eos_ids=[0, 1])
    assert calls == ["tolist"]
