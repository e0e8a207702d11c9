"""Trees sized to the hardware (core.sizing, core.timing): pure choices on hand-made trees and costs,
then max_nodes=auto end to end on a tiny model and on SmolLM2."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.sizing import AcceptanceRates, CostCurve, TreeSizer, choose_nodes, path_products
from core.tree import DraftTree


def chain(n: int, source: str = "context") -> DraftTree:
    tree = DraftTree.root_only(0)
    for i in range(n):
        tree.add(i, 100 + i, source)
    return tree


def test_cost_curve_interpolates_and_extends_the_last_slope():
    c = CostCurve((0, 4, 8), (0.010, 0.010, 0.018))
    assert c(2) == pytest.approx(0.010) and c(6) == pytest.approx(0.014) and c(16) == pytest.approx(0.034)
    with pytest.raises(ValueError):
        CostCurve((0,), (0.01,))
    with pytest.raises(ValueError):
        CostCurve((0, 4), (0.01, 0.0))


def test_a_flat_cost_keeps_every_node_that_may_be_accepted_and_a_steep_one_keeps_none():
    tree = chain(6)
    rates = [1.0] + [0.5] * 6
    flat = CostCurve((0, 64), (0.01, 0.01))
    kept, expected = choose_nodes(tree, rates, flat)
    assert kept == [1, 2, 3, 4, 5, 6] and expected == pytest.approx(1 + sum(0.5 ** d for d in range(1, 7)))
    steep = CostCurve((0, 1), (0.01, 0.03))  # a node triples the cost: never pays at a ≤ 1
    assert choose_nodes(tree, rates, steep) == ([], 1.0)
    # t doubles from 2 nodes on: 1 + 0.5 + 0.25 over t(2) = t(0) beats 4 nodes over 2·t(0)
    knee = CostCurve((0, 2, 4), (0.01, 0.01, 0.02))
    assert choose_nodes(tree, rates, knee)[0] == [1, 2]


def test_likelier_branches_come_first():
    tree = DraftTree.root_only(0)
    a = tree.add(0, 1, "context")
    b = tree.add(0, 2, "generated")
    tree.add(a, 3, "context")
    rates = [1.0, 0.9, 0.2, 0.9]
    knee = CostCurve((0, 2, 3), (0.01, 0.01, 0.05))
    assert choose_nodes(tree, rates, knee)[0] == [a, 3]  # the 0.81 grandchild before the 0.2 sibling
    assert b not in choose_nodes(tree, rates, knee)[0]


@st.composite
def trees_and_rates(draw):
    n = draw(st.integers(0, 30))
    tree = DraftTree.root_only(0)
    for i in range(1, n + 1):
        tree.add(draw(st.integers(0, i - 1)), i, "context")
    rates = [1.0] + [draw(st.floats(0.0, 1.0)) for _ in range(n)]
    steps = draw(st.lists(st.floats(0.0, 0.01), min_size=3, max_size=3))
    cost = CostCurve((0, 8, 16, 32), (0.01, 0.01 + steps[0], 0.01 + steps[0] + steps[1], 0.01 + sum(steps)))
    return tree, rates, cost


@settings(max_examples=300, deadline=None)
@given(trees_and_rates())
def test_the_choice_is_prefix_closed_and_no_other_prefix_of_the_order_pays_more(case):
    tree, rates, cost = case
    kept, expected = choose_nodes(tree, rates, cost)
    keep = set(kept) | {0}
    assert all(tree.parents[i] in keep for i in kept)
    products = path_products(tree, rates)
    assert expected == pytest.approx(1 + sum(products[i] for i in kept))
    order = sorted(range(1, len(tree)), key=lambda i: (-products[i], tree.depths[i], i))
    best = max((1 + sum(products[i] for i in order[:k])) / cost(k) for k in range(len(order) + 1))
    assert expected / cost(len(kept)) == pytest.approx(best)
    assert tree.subset(kept).num_draft == len(kept)


def test_acceptance_rates_count_verified_nodes_per_source_and_depth():
    tree = DraftTree.root_only(0)
    a = tree.add(0, 1, "context")
    b = tree.add(0, 2, "alignment")
    tree.add(a, 3, "context")  # node 3
    tree.add(b, 4, "alignment")  # its parent was rejected: never verified
    rates = AcceptanceRates()
    assert rates.rate("context", 1) == 0.5  # the prior
    rates.observe(tree, ["accepted", "accepted", "rejected", "accepted", "unreached"])  # the path 0, a, 3
    assert rates.verified == {("context", 1): 1, ("alignment", 1): 1, ("context", 2): 1}
    assert rates.accepted == {("context", 1): 1, ("context", 2): 1}
    assert rates.rate("context", 1) == pytest.approx(2 / 3) and rates.rate("alignment", 1) == pytest.approx(1 / 3)


def test_the_sizer_learns_to_cut_a_branch_that_is_never_accepted():
    sizer = TreeSizer(CostCurve((0, 1, 2, 3), (0.010, 0.010, 0.011, 0.012)))
    tree = DraftTree.root_only(0)
    good = tree.add(0, 1, "context")
    tree.add(0, 2, "alignment")
    tree.add(good, 3, "context")
    assert sizer.choose(tree, 0).num_draft == 3
    for _ in range(10):
        sizer.observe(tree, ["accepted", "accepted", "rejected", "accepted"])  # path 0, good, 3
    chosen = sizer.choose(tree, 0)
    assert "alignment" not in chosen.sources and chosen.num_draft == 2


def test_auto_sized_strict_decoding_equals_greedy_and_records_the_chosen_sizes(tiny, monkeypatch, tmp_path):
    from core import timing
    from core.methods import run_method

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 24})
    auto = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 24})
    assert auto.params["max_nodes"] == 0
    assert auto.output_ids == greedy.output_ids
    saved = json.loads(timing.timing_path(tiny).read_text())  # measured once, kept in the workbench home
    assert saved["sizes"][0] == 0 and len(saved["seconds"]) == len(saved["lengths"])
    assert all(len(row) == len(saved["sizes"]) for row in saved["seconds"])
    fixed = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 24, "max_nodes": 64})
    assert max(s.tree_size for s in auto.steps) <= max(s.tree_size for s in fixed.steps)


def test_a_cost_curve_that_makes_trees_expensive_gives_greedy_steps(tiny, monkeypatch):
    from core.methods import run as methods_run
    from core.methods import run_method

    monkeypatch.setattr(methods_run, "tree_sizer", lambda *a: TreeSizer(CostCurve((0, 1), (0.01, 1.0))))
    run = run_method("aasd", tiny, [5, 6, 7, 5, 6, 7, 5, 6], {"max_new_tokens": 8})
    assert all(s.tree_size == 0 for s in run.steps)


@pytest.mark.real_model
def test_auto_size_on_smollm2_is_lossless_in_float32_and_varies_by_step(smollm2, monkeypatch, tmp_path):
    from conftest import spec_bench_rows

    from core.methods import run_method
    from core.models import encode_prompt

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    ids = encode_prompt(smollm2.tokenizer, spec_bench_rows(("summarization",), 1)[0]["turns"][0])
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 48})
    auto = run_method("aasd-strict", smollm2, ids, {"max_new_tokens": 48})
    assert auto.output_ids == greedy.output_ids
    assert sum(s.accepted for s in auto.steps) > 0 and len({s.tree_size for s in auto.steps}) > 1


def test_a_batch_shares_one_tree_size_and_a_bigger_batch_takes_smaller_trees():
    from core.sizing import common_size, ranked_nodes

    curve = CostCurve((0, 4, 16, 64), (0.040, 0.042, 0.056, 0.120))
    tree = DraftTree.root_only(1)
    for d in range(12):
        tree.add(d, 100 + d, "context")
    rates = [1.0] + [0.7] * 12
    alone, _ = choose_nodes(tree, rates, curve)
    ranked = ranked_nodes(tree, rates)
    assert common_size([ranked], curve) == len(alone)  # a batch of one sizes as the single-row sizer does
    assert common_size([ranked] * 8, curve) < len(alone)  # eight rows: each node costs eight slots
    poor = ranked_nodes(tree, [1.0] + [0.05] * 12)
    assert common_size([poor] * 4, curve) == 0  # nothing worth a slot in every row
    assert common_size([ranked, ([], [1.0])], curve) >= 1  # a row with no drafts pads, the other still drafts
