"""Trees sized to the hardware and the context (core.sizing, core.timing): pure choices on hand-made trees
and synthetic costs t(n, L), then max_nodes=auto end to end on a tiny model and on SmolLM2."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_acceptance_prior import scored_chain

from core.acceptance_prior import AcceptancePrior
from core.cost_model import CostModel
from core.sizing import (
    MARGIN,
    CostCurve,
    DraftPause,
    TreeSizer,
    choose_nodes,
    path_products,
    step_may_pay,
    tree_may_pay,
)
from core.tree import DraftTree

SIZES = (0, 1, 2, 4, 8, 16, 32, 64)


def chain(n: int, source: str = "context") -> DraftTree:
    tree = DraftTree.root_only(0)
    for i in range(n):
        tree.add(i, 100 + i, source)
    return tree


def bushy(n: int, fan: int = 4, source: str = "context") -> DraftTree:
    """n draft nodes, `fan` children per node, filled breadth first (a drafter's wide candidate tree)."""
    tree = DraftTree.root_only(0)
    for i in range(1, n + 1):
        tree.add((i - 1) // fan, 100 + i, source)
    return tree


def flat(n_scale: float = 0.0) -> CostModel:
    """t(n, L) = 10 ms (1 + n_scale·n) at every length: a GPU-like cost where a node is (nearly) free."""
    return CostModel(SIZES, (256, 4096), tuple(tuple(0.010 * (1 + n_scale * n) for n in SIZES) for _ in range(2)))


def flat_short_steep_long() -> CostModel:
    """Flat after 256 tokens; after 4,096 each node costs about a whole forward (attention over the prefix):
    the shape that made trees sized at L = 512 lose at 1.5k-6k tokens of context."""
    return CostModel(SIZES, (256, 4096), (tuple(0.040 for _ in SIZES), tuple(0.070 * (1 + n) for n in SIZES)))


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
    kept, expected = choose_nodes(tree, rates, flat(), 512, margin=0.0)
    assert kept == [1, 2, 3, 4, 5, 6] and expected == pytest.approx(1 + sum(0.5**d for d in range(1, 7)))
    steep = CostModel((0, 1), (256,), ((0.01, 0.03),))  # a node triples the cost: never pays at a ≤ 1
    assert choose_nodes(tree, rates, steep, 512) == ([], 1.0)
    # t doubles from 2 nodes on: 1 + 0.5 + 0.25 over t(2) = t(0) beats 4 nodes over 2·t(0)
    knee = CostModel((0, 2, 4), (256,), ((0.01, 0.01, 0.02),))
    assert choose_nodes(tree, rates, knee, 512)[0] == [1, 2]


def test_under_a_flat_cost_the_sizer_keeps_large_trees_at_every_context_length():
    """The issue's simulated flat-cost case (a GPU, or bf16 on a CPU with native bf16): trees are nearly free, so
    max_nodes=auto must keep most of a 64-node candidate even from the default prior (0.3), at any length."""
    tree = bushy(64)
    for length in (100, 512, 4096, 16000):
        assert TreeSizer(flat()).choose(tree, length).num_draft >= 48
        assert TreeSizer(flat(0.01)).choose(tree, length).num_draft >= 16  # 1 % per node: still a large tree
    stored = AcceptancePrior.from_counts([("context", d, 800, 1000) for d in range(1, 17)])
    # a good prior: a long chain, cut where the rest adds under 2 % (0.8^19 + ... + 0.8^40 ≈ 1.5 % of E ≈ 4.9),
    # priced at the posterior mean (caution 0) so the cut is the one computed here
    assert TreeSizer(flat(), stored, caution=0).choose(chain(40), 4096).num_draft == 18


def test_when_each_node_costs_a_forward_the_sizer_keeps_the_empty_tree():
    """Each node ≈ a full forward at long L: nothing can pay (E(S) ≤ 1 + |S| at a ≤ 1), whatever the prior."""
    steep = CostModel(SIZES, (256, 4096), tuple(tuple(t0 * (1 + n) for n in SIZES) for t0 in (0.04, 0.07)))
    optimistic = AcceptancePrior.from_counts([("context", d, 990, 1000) for d in range(1, 17)])
    for prior in (None, optimistic):
        for tree in (chain(30), bushy(64)):
            for length in (256, 2000, 6000):
                assert TreeSizer(steep, prior).choose(tree, length).num_draft == 0


def test_the_cost_is_read_at_the_requests_current_context_length():
    """The same tree and prior: a large tree after 256 tokens, the empty tree after 4,096 and beyond (a sizer
    that reads t at a fixed L, such as the 512 of the old cost curve, keeps large trees at every length)."""
    cost = flat_short_steep_long()
    prior = AcceptancePrior.from_counts([("context", d, 700, 1000) for d in range(1, 17)])
    tree = bushy(64)
    assert TreeSizer(cost, prior).choose(tree, 256).num_draft >= 32
    assert TreeSizer(cost, prior).choose(tree, 512).num_draft >= 16
    assert TreeSizer(cost, prior).choose(tree, 4096).num_draft == 0
    assert TreeSizer(cost, prior).choose(tree, 6000).num_draft == 0
    told = []
    TreeSizer(lambda n, length: told.append(length) or cost(n, length), prior).choose(tree, 3000)
    assert told and set(told) == {3000}


def test_a_tree_must_beat_greedy_by_the_margin():
    """E = 1.15 over t = 1.13·t(0): 1.8 % more tokens per second, under the 2 % margin: greedy's step; with no
    margin the node is kept."""
    cost = CostModel((0, 1), (256,), ((0.010, 0.0113),))
    prior = AcceptancePrior.from_counts([("context", 1, 150_000, 1_000_000)])  # a(context, 1) ≈ 0.15
    tree = chain(1)
    assert MARGIN == 0.02
    assert TreeSizer(cost, prior, probe=False).choose(tree, 300).num_draft == 0
    assert TreeSizer(cost, prior, margin=0.0, probe=False).choose(tree, 300).num_draft == 1
    with pytest.raises(ValueError):
        TreeSizer(cost, prior, margin=-0.1)


def test_the_prior_sets_the_first_trees_and_the_request_moves_them():
    """Stored traces that accepted most context nodes give the first step a larger tree than the default prior;
    a request whose drafts are all rejected shrinks its trees to nothing (its own counts outweigh the prior's 20 pseudo-observations)."""
    cost = CostModel(SIZES, (256,), (tuple(0.040 + 0.004 * n for n in SIZES),))
    good = AcceptancePrior.from_counts([("context", d, 850, 1000) for d in range(1, 17)])
    tree = chain(20)
    default_first = TreeSizer(cost).choose(tree, 500).num_draft
    sizer = TreeSizer(cost, good)
    assert sizer.choose(tree, 500).num_draft > default_first
    for step in range(200):
        sizer.observe(tree, ["accepted", "rejected"] + ["unreached"] * 19)
        if step == 0:  # one bad step moves the estimate by a twentieth only: still a tree
            assert sizer.choose(tree, 500).num_draft > default_first
    assert sizer.choose(tree, 500).num_draft == 0


def _low_prior(rate: float = 0.05, stored: int = 2000) -> AcceptancePrior:
    """A stored prior of `rate` at every depth, resting on many nodes (runs on other prompts)."""
    return AcceptancePrior.from_counts([("context", d, round(rate * stored / d), stored // d) for d in range(1, 17)])


def test_a_probe_keeps_one_node_where_an_optimistic_rate_would_pay_and_counts_as_a_refusal():
    """A prior of 0.05 on 2,000 stored nodes: no tree pays at the cautious rate when a node costs 5 % of a step, but
    0.05 plus two standard deviations of 20 pseudo-observations (≈ 0.145) would: the step keeps its best node. The
    pause still counts the step as refused, so probes come on its schedule. Where a node costs 90 % of a step no
    rate short of 0.92 pays: no probe. Mutation caught: choose without its probe (no node kept)."""
    flat = CostModel(SIZES, (256,), (tuple(0.040 * (1 + 0.05 * n) for n in SIZES),))
    steep = CostModel(SIZES, (256,), (tuple(0.040 * (1 + 0.9 * n) for n in SIZES),))
    tree = chain(8)
    assert TreeSizer(flat, _low_prior(), probe=False).choose(tree, 300).num_draft == 0
    sizer = TreeSizer(flat, _low_prior())
    probe = sizer.choose(tree, 300)
    assert probe.num_draft == 1 and probe.depths[1] == 1
    assert sizer.pause.refused == 1  # a probe is a refusal to the pause
    assert sizer.drafts(300)
    assert TreeSizer(steep, _low_prior()).choose(tree, 300).num_draft == 0
    steep_sizer = TreeSizer(steep, _low_prior())
    steep_sizer.choose(tree, 300)
    assert not steep_sizer.drafts(300)  # no tree, probe or not, could pay: the drafter is not asked


def test_probes_unlearn_a_low_stored_prior_that_the_request_contradicts():
    """The request accepts every node it is shown, but its stored prior (other prompts) says 0.05. Without probes it
    never verifies a node and never drafts; with them its own counts lift the depth-1 rate until a node pays at the
    cautious rate, every step. (Deeper depths stay at the prior: a probe is one node, tried only when nothing else
    was kept; docs/AUTOMATIC_SETTINGS.md.) Mutation caught: AcceptanceEstimate.optimistic with the stored nodes in
    its spread (no probe: it stays at ≈ 0.05)."""
    flat = CostModel(SIZES, (256,), (tuple(0.040 * (1 + 0.05 * n) for n in SIZES),))
    tree = chain(8)
    for probe in (False, True):
        sizer = TreeSizer(flat, _low_prior(), probe=probe)
        sizes = []
        for _ in range(40):
            if not sizer.drafts(300):
                sizes.append(0)
                continue
            kept = sizer.choose(tree, 300)
            sizes.append(kept.num_draft)
            sizer.observe(kept, ["root"] + ["accepted"] * kept.num_draft)
        cautious = sizer.rates.rate("context", 1, caution=sizer.caution)
        if probe:
            assert min(sizes[-10:]) == 1 and cautious > 0.5, (sizes, cautious)
        else:
            assert max(sizes) == 0 and cautious < 0.06, (sizes, cautious)


def test_the_optimistic_rate_counts_the_requests_own_nodes_not_the_stored_ones():
    from core.acceptance_prior import AcceptanceEstimate

    fresh = AcceptanceEstimate(_low_prior(stored=2000))
    many = AcceptanceEstimate(_low_prior(stored=200_000))
    assert fresh.optimistic("context", 1, 2.0) == pytest.approx(many.optimistic("context", 1, 2.0), rel=0.02)
    assert 0.13 < fresh.optimistic("context", 1, 2.0) < 0.16
    sure = AcceptanceEstimate(AcceptancePrior.from_counts([("context", 1, 990, 1000)]))
    assert sure.optimistic("context", 1, 2.0) <= 1.0
    for _ in range(200):  # the request's own nodes narrow it
        fresh.observe(chain(1), [0])
    assert fresh.optimistic("context", 1, 2.0) < 0.05


@st.composite
def trees_and_rates(draw):
    n = draw(st.integers(0, 30))
    tree = DraftTree.root_only(0)
    for i in range(1, n + 1):
        tree.add(draw(st.integers(0, i - 1)), i, "context")
    rates = [1.0] + [draw(st.floats(0.0, 1.0)) for _ in range(n)]
    rows = []
    for _ in range(2):
        steps = draw(st.lists(st.floats(0.0, 0.01), min_size=3, max_size=3))
        rows.append((0.01, 0.01 + steps[0], 0.01 + steps[0] + steps[1], 0.01 + sum(steps)))
    cost = CostModel((0, 8, 16, 32), (256, 4096), tuple(rows))
    return tree, rates, cost, draw(st.integers(1, 8000)), draw(st.sampled_from([0.0, MARGIN, 0.1]))


@settings(max_examples=300, deadline=None)
@given(trees_and_rates())
def test_the_choice_is_prefix_closed_and_no_prefix_of_the_order_pays_more_than_the_margin(case):
    tree, rates, cost, length, margin = case
    kept, expected = choose_nodes(tree, rates, cost, length, margin=margin)
    keep = set(kept) | {0}
    assert all(tree.parents[i] in keep for i in kept)
    products = path_products(tree, rates)
    assert expected == pytest.approx(1 + sum(products[i] for i in kept))
    order = sorted(range(1, len(tree)), key=lambda i: (-products[i], tree.depths[i], i))
    rate = [(1 + sum(products[i] for i in order[:k])) / cost(k, length) for k in range(len(order) + 1)]
    chosen = expected / cost(len(kept), length)
    assert chosen >= rate[0] * (1 - 1e-12)  # never worse than greedy's step
    assert max(rate) <= chosen * (1 + margin) * (1 + 1e-9)  # no prefix beats it by more than the margin
    if margin == 0.0:
        assert chosen == pytest.approx(max(rate))
    assert tree.subset(kept).num_draft == len(kept)


def test_the_sizer_counts_verified_nodes_per_source_and_depth_from_a_steps_decisions():
    tree = DraftTree.root_only(0)
    a = tree.add(0, 1, "context")
    b = tree.add(0, 2, "alignment")
    tree.add(a, 3, "context")  # node 3
    tree.add(b, 4, "alignment")  # its parent was rejected: never verified
    sizer = TreeSizer(flat())
    sizer.observe(tree, ["accepted", "accepted", "rejected", "rescued", "unreached"])  # the path 0, a, 3
    assert sizer.rates.verified == {("context", 1): 1, ("alignment", 1): 1, ("context", 2): 1}
    assert sizer.rates.accepted == {("context", 1): 1, ("context", 2): 1}


def test_the_sizer_learns_to_cut_a_branch_that_is_never_accepted():
    sizer = TreeSizer(  # the posterior mean (caution 0): the first choice keeps all three nodes
        CostModel((0, 1, 2, 3), (256,), ((0.010, 0.010, 0.010, 0.0105),)),
        AcceptancePrior.from_counts([("context", 1, 5, 10), ("alignment", 1, 5, 10), ("context", 2, 5, 10)]),
        caution=0,
    )
    tree = DraftTree.root_only(0)
    good = tree.add(0, 1, "context")
    tree.add(0, 2, "alignment")
    tree.add(good, 3, "context")
    assert sizer.choose(tree, 0).num_draft == 3
    for _ in range(30):
        sizer.observe(tree, ["accepted", "accepted", "rejected", "accepted"])  # path 0, good, 3
    chosen = sizer.choose(tree, 0)
    assert "alignment" not in chosen.sources and chosen.num_draft == 2


@pytest.fixture
def known_cost(monkeypatch):
    """max_nodes=auto sized from a known t(n, L), a node at 1% of a forward, not from this machine's curve (on
    a machine where a node costs nearly a forward the sizer drafts nothing, and the tests below would check
    greedy against greedy). The measurement and its file are core.timing's own tests (test_cost_model)."""
    from core import timing

    cost = flat(0.01)
    monkeypatch.setattr(timing, "cost_model", lambda target, remeasure=False: cost)
    return cost


def test_auto_sized_strict_decoding_equals_greedy_and_records_the_chosen_sizes(tiny, known_cost, tmp_path):
    from core.methods import run_method
    from core.methods.run import cost_grid_text

    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 24})
    auto = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 24})
    assert auto.params["max_nodes"] == 0
    assert auto.params["cost_model_ms"] == cost_grid_text(known_cost)  # the t(n, L) its trees were sized from
    assert auto.output_ids == greedy.output_ids
    assert any(s.tree_size > 0 for s in auto.steps)  # trees were drafted and verified, not greedy steps only
    fixed = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 24, "max_nodes": 64})
    assert max(s.tree_size for s in auto.steps) <= max(s.tree_size for s in fixed.steps)


def test_a_run_records_the_prior_and_the_cost_its_trees_were_sized_from(tiny, monkeypatch, tmp_path):
    """The prior is a build argument (core never reads the store); the run keeps its hash, where it came from and
    its counts, and the t(n, L) grid: enough to size the same trees again."""
    from core.methods import run_method

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    prior = AcceptancePrior.from_counts([("context", 1, 70, 100), ("context", 2, 50, 90)], source="test: held-out runs")
    run = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12}, prior=prior)
    p = run.params
    assert p["prior_sha"] == prior.fingerprint() and p["prior_source"] == "test: held-out runs"
    assert p["prior_observations"] == 190
    assert AcceptancePrior.from_dict(json.loads(p["prior"])).fingerprint() == prior.fingerprint()
    assert p["cost_model_ms"].startswith("L=") and p["cost_model_ms"].count("L=") >= 2
    assert p["sizer_caution"] == 1.0  # the default, cautious sizer
    default = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12})
    assert default.params["prior_source"] == "default" and default.params["prior_observations"] == 0
    assert default.params["prior_sha"] != prior.fingerprint()
    assert "prior_sha" not in run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12, "max_nodes": 8}).params
    import core.sizing

    monkeypatch.setattr(core.sizing, "CAUTION", 0.0)  # the posterior mean is recorded too, not left implicit
    assert run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12}, prior=prior).params["sizer_caution"] == 0.0


def test_a_cost_curve_that_makes_trees_expensive_gives_greedy_steps(tiny, monkeypatch):
    from core.methods import run as methods_run
    from core.methods import run_method

    monkeypatch.setattr(methods_run, "tree_sizer", lambda *a: TreeSizer(CostModel((0, 1), (256,), ((0.01, 1.0),))))
    run = run_method("aasd", tiny, [5, 6, 7, 5, 6, 7, 5, 6], {"max_new_tokens": 8})
    assert all(s.tree_size == 0 for s in run.steps)


@pytest.mark.real_model
@pytest.mark.parametrize("method", ["aasd-strict", pytest.param("recycle", marks=pytest.mark.slow)])
def test_auto_sized_trees_on_smollm2_stay_greedy_in_float32_at_every_size(smollm2, monkeypatch, method):
    """Strict methods with max_nodes=auto, token for token greedy's in float32, whatever the sizer keeps: a cost
    that is flat after a short context and steep after a long one, and a prior that promises much, so trees of
    many sizes (from none to dozens of nodes) are verified within one request."""
    from conftest import spec_bench_rows

    from core import timing
    from core.methods import run_method
    from core.models import encode_prompt

    # flat up to 400 tokens of context; from 430 on a node costs a whole forward: sizes shrink to none mid-request
    cost = CostModel(SIZES, (400, 430), (tuple(0.040 for _ in SIZES), tuple(0.070 * (1 + n) for n in SIZES)))
    monkeypatch.setattr(timing, "cost_model", lambda target, remeasure=False: cost)
    prior = AcceptancePrior.from_counts(
        [(s, d, 80, 100) for s in ("context", "alignment", "recycled") for d in range(1, 17)]
    )
    ids = encode_prompt(smollm2.tokenizer, spec_bench_rows(("summarization",), 1)[0]["turns"][0])[-380:]
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 64})
    auto = run_method(method, smollm2, ids, {"max_new_tokens": 64}, prior=prior)
    assert auto.output_ids == greedy.output_ids
    early = [s.tree_size for s in auto.steps if s.cache_pos < 400]
    late = [s.tree_size for s in auto.steps if s.cache_pos >= 430]
    assert max(early) >= 8 and sum(s.accepted for s in auto.steps) > 0, early
    assert late and set(late) == {0}, late


@pytest.mark.real_model
def test_auto_size_on_smollm2_is_lossless_in_float32_and_varies_by_step(smollm2, known_cost):
    from conftest import spec_bench_rows

    from core.methods import run_method
    from core.models import encode_prompt

    ids = encode_prompt(smollm2.tokenizer, spec_bench_rows(("summarization",), 1)[0]["turns"][0])
    greedy = run_method("greedy", smollm2, ids, {"max_new_tokens": 48})
    auto = run_method("aasd-strict", smollm2, ids, {"max_new_tokens": 48})
    assert auto.output_ids == greedy.output_ids
    assert sum(s.accepted for s in auto.steps) > 0 and len({s.tree_size for s in auto.steps}) > 1


def test_a_batch_shares_one_tree_size_and_a_bigger_batch_takes_smaller_trees():
    from core.sizing import common_size, ranked_nodes

    curve = CostModel((0, 4, 16, 64), (256,), ((0.040, 0.042, 0.056, 0.120),))
    tree = DraftTree.root_only(1)
    for d in range(12):
        tree.add(d, 100 + d, "context")
    rates = [1.0] + [0.7] * 12
    alone, _ = choose_nodes(tree, rates, curve, 300)
    ranked = ranked_nodes(tree, rates)
    assert common_size([ranked], curve, [300]) == len(alone)  # a batch of one sizes as the single-row sizer does
    assert common_size([ranked] * 8, curve, [300] * 8) < len(alone)  # eight rows: each node costs eight slots
    poor = ranked_nodes(tree, [1.0] + [0.05] * 12)
    assert common_size([poor] * 4, curve, [300] * 4) == 0  # nothing worth a slot in every row
    assert (
        common_size([ranked, ([], [1.0])], curve, [300, 900]) >= 1
    )  # a row with no drafts pads, the other still drafts


class FakeClock:
    """Seconds that advance only when the test says a step took so long."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_steps(sizer: TreeSizer, clock: FakeClock, steps: int, seconds_for) -> list[int]:
    """Drive the sizer as the step function does: choose, the step takes seconds_for(size), observe a verdict
    that accepts the tree's first node when there is one (2 tokens: it and the bonus; 1 for an empty step)."""
    sizes = []
    tree = chain(8)
    for _ in range(steps):
        chosen = sizer.choose(tree, 300)
        sizes.append(chosen.num_draft)
        clock.now += seconds_for(chosen.num_draft)
        sizer.observe(
            chosen, ["accepted"] + (["accepted"] + ["rejected"] * (chosen.num_draft - 1) if chosen.num_draft else [])
        )
    return sizes


def test_the_online_check_switches_trees_off_when_measured_steps_lose_and_keeps_them_when_they_pay():
    """The forward model says trees are free; the measured steps say otherwise (a tree step takes 3 s for its 2
    tokens, an empty step 1 s for 1): after the window the check leaves the steps empty. When a tree step takes
    1.2 s for 2 tokens, trees stay, bar the periodic empty probe."""
    from core.sizing import StepClock

    prior = AcceptancePrior.from_counts([("context", d, 500, 1000) for d in range(1, 17)])
    clock = FakeClock()
    losing = TreeSizer(flat(), prior, clock=clock)
    sizes = run_steps(losing, clock, 80, lambda n: 3.0 if n else 1.0)
    assert sizes[0] > 0  # the model alone wants trees
    assert set(sizes[StepClock.PROBE_EVERY : StepClock.PROBE_EVERY + StepClock.BACKOFF]) == {0}  # probe, then off
    assert sum(n == 0 for n in sizes) >= 60 and sizes[-1] == 0  # tried again later, and off again
    clock = FakeClock()
    paying = TreeSizer(flat(), prior, clock=clock)
    sizes = run_steps(paying, clock, 80, lambda n: 1.2 if n else 1.0)
    assert sum(n == 0 for n in sizes) <= 80 // StepClock.PROBE_EVERY + 1 and sum(n > 0 for n in sizes) >= 70
    without = TreeSizer(flat(), prior)  # no clock: the model's choice alone
    assert all(n > 0 for n in run_steps(without, FakeClock(), 40, lambda n: 3.0 if n else 1.0))


# ---- nodes priced by their drafter's confidence ----------------------------------------------------


def fp32_like() -> CostModel:
    """SmolLM2 float32 on one EPYC thread (the cached curve, rounded): t(1) ≈ 1.65 t(0), t(16) ≈ 2.4 t(0)."""
    ratios = (1.0, 1.65, 1.66, 1.66, 1.88, 2.38, 3.5, 5.4)
    return CostModel(SIZES, (256,), (tuple(0.030 * r for r in ratios),))


def test_a_long_repeat_keeps_its_tree_after_weak_short_matches_were_rejected():
    """The failure on repeated requests: a request's first history drafts (one- or two-token matches) are
    rejected. Priced per (source, depth), the history rate falls and a later long repeat gets no tree; priced by
    the drafter's confidence, only the weak matches' bucket falls and the repeat keeps (nearly) all its 16 nodes."""
    sizer = TreeSizer(fp32_like())
    weak = scored_chain([0.2, 0.33, 0.43, 0.5])
    for _ in range(8):
        sizer.observe(weak, ["accepted", "rejected", "unreached", "unreached", "unreached"])
    repeat = scored_chain([0.95] * 16)
    assert sizer.choose(repeat, 300).num_draft >= 12
    assert sizer.choose(weak, 300).num_draft == 0  # a weak match alone does not pay for a node
    unscored = chain(16, "history")  # the same repeat without the drafter's evidence: the old behaviour
    assert sizer.choose(unscored, 300).num_draft == 0


def test_confidence_prices_nodes_and_observed_rejections_in_its_bucket_cut_them():
    sizer = TreeSizer(fp32_like())
    repeat = scored_chain([0.95] * 16)
    assert sizer.choose(repeat, 300).num_draft >= 12
    for _ in range(60):  # the drafter is overconfident in this request: its 0.95 nodes are all rejected
        sizer.observe(repeat, ["accepted", "rejected"] + ["unreached"] * 15)
    assert sizer.choose(repeat, 300).num_draft == 0


def test_subset_and_pruning_keep_each_nodes_confidence():
    tree = scored_chain([0.9, 0.8, 0.7])
    tree.add(0, 7, "context")  # unscored
    assert tree.confidence == [None, 0.9, 0.8, 0.7, None]
    assert tree.subset([1, 2, 4]).confidence == [None, 0.9, 0.8, None]
    assert tree.pruned(1).confidence == [None, 0.9, None]
    assert chain(3).confidence == [] and chain(3).confidence_of(2) is None


def each_node_a_forward() -> CostModel:
    """t(n, L) = t(0, L)·(1 + n): every draft node costs a whole single-token step (float32 on one core, roughly)."""
    return CostModel(SIZES, (256, 4096), tuple(tuple(0.04 * (1 + n) for n in SIZES) for _ in range(2)))


def test_no_tree_pays_when_each_node_costs_a_forward_and_any_may_pay_on_a_flat_cost():
    assert not tree_may_pay(each_node_a_forward(), 1000, 0.9, 64)  # (1 + 0.9k) / (1 + k) < 1
    assert tree_may_pay(flat(0.01), 1000, 0.1, 64)
    assert not tree_may_pay(flat(0.01), 1000, 0.0, 64)  # nothing can be accepted: nothing pays
    assert not tree_may_pay(flat(0.01), 1000, 0.9, 0)  # no nodes allowed
    # one node costs a whole step, 64 cost three: only the large tree can pay, and it may
    float32_like = CostModel(SIZES, (256,), ((0.04, 0.08, 0.082, 0.084, 0.088, 0.096, 0.104, 0.12),))
    assert tree_may_pay(float32_like, 256, 0.1, 64, sizes=SIZES) and tree_may_pay(float32_like, 256, 0.1, 64)
    assert not tree_may_pay(float32_like, 256, 0.1, 8, sizes=SIZES)
    # the steep-long shape: trees may pay at 256 tokens, none at 4,096
    assert tree_may_pay(flat_short_steep_long(), 256, 0.3, 64)
    assert not tree_may_pay(flat_short_steep_long(), 4096, 0.3, 64)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 0.3), min_size=7, max_size=7),
    st.floats(0.0, 1.0),
    st.integers(0, 100),
    st.sampled_from((300, 2000, 5000)),
)
def test_checking_the_measured_sizes_decides_as_checking_every_size(steps, rate, max_nodes, length):
    """t is linear in n between measured sizes, where (1 + k·r) / t(k) is monotone: the ends decide."""
    seconds = [0.02]
    for step in steps:
        seconds.append(seconds[-1] + step * 0.02)
    cost = CostModel(SIZES, (256, 4096), (tuple(seconds), tuple(2 * t for t in seconds)))
    assert tree_may_pay(cost, length, rate, max_nodes, sizes=cost.sizes) == tree_may_pay(cost, length, rate, max_nodes)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 10), min_size=1, max_size=40),
    st.lists(st.floats(0.0, 1.0), min_size=40, max_size=40),
    st.floats(0.0, 2.0),
    st.sampled_from((300, 5000)),
)
def test_when_no_tree_may_pay_the_sizer_would_keep_none_of_any_tree(parents, rates, scale, length):
    """The bound is sound for the sizer's own choice: below it, choose_nodes keeps the empty tree."""
    tree = DraftTree.root_only(0)
    for i, p in enumerate(parents):
        tree.add(min(p, i), 100 + i, "context")
    node_rates = [1.0] + rates[: tree.num_draft]
    cost = CostModel(SIZES, (256, 4096), tuple(tuple(0.04 * (1 + scale * n) for n in SIZES) for _ in range(2)))
    if not tree_may_pay(cost, length, max(node_rates[1:]), tree.num_draft, sizes=cost.sizes):
        assert choose_nodes(tree, node_rates, cost, length)[0] == []


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 10), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 40)), min_size=1, max_size=4),
    st.floats(0.0, 2.0),
    st.floats(0.0, 1.5),
    st.sampled_from((300, 5000)),
)
def test_a_step_the_sizer_skips_is_one_where_it_would_keep_no_node_probes_included(
    parents, stored, scale, caution, length
):
    """Property: `drafts` says False only where `choose` would keep nothing of any tree, its probe included (the
    probe's optimistic rate bounds one node, the regular rates every node of a tree): skipping the drafter there
    changes no step. Random trees, stored priors (accepted of 40 per depth), cost slopes and cautions."""
    tree = DraftTree.root_only(0)
    for i, p in enumerate(parents):
        tree.add(min(p, i), 100 + i, "context")
    prior = AcceptancePrior.from_counts([("context", depth, accepted, 40) for depth, accepted in stored])
    cost = CostModel(SIZES, (256, 4096), tuple(tuple(0.04 * (1 + scale * n) for n in SIZES) for _ in range(2)))
    sizer = TreeSizer(cost, prior, caution=caution, pause=False, probe=True, drafter_sources={"context"})
    if not sizer.drafts(length, tree.num_draft):
        assert sizer.choose(tree, length).num_draft == 0


@pytest.mark.parametrize(
    "method", ["aasd", "casd", "recycle", "suffix", "aasd[fallback=recycle]", "aasd[fallback=suffix]"]
)
def test_every_proposed_node_comes_from_a_source_its_drafter_declares(tiny, monkeypatch, method):
    """The sizer prices a drafter's declared sources before its first proposal (Drafter.node_sources, scores_nodes),
    so a step may go undrafted on them alone: every node a drafter proposes must carry a declared source, and
    confidences only where it declares it scores its nodes. On a flat cost, where every tree is proposed whole."""
    from core import timing
    from core.methods import parse_method_spec, run_method

    shown: list[tuple[set, frozenset, bool, bool]] = []
    choose = TreeSizer.choose

    def recorded(self, tree, context_len):
        confident = any(c is not None for c in tree.confidence)
        shown.append((set(tree.sources[1:]), self.declared, confident, self.declared_scored))
        return choose(self, tree, context_len)

    monkeypatch.setattr(timing, "cost_model", lambda target: flat())
    monkeypatch.setattr(TreeSizer, "choose", recorded)
    name, params = parse_method_spec(method)
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    run_method(name, tiny, prompt, {**params, "max_new_tokens": 16, "max_nodes": "auto"})
    assert any(sources for sources, *_ in shown)  # trees were proposed
    for sources, declared, confident, scored in shown:
        assert sources <= declared
        assert scored or not confident


def test_steps_that_do_not_draft_take_no_top_k_and_teach_the_recycle_table_nothing(tiny, monkeypatch):
    """Token Recycling learns from every tree row of the steps it drafts (TreeObserver); a step the sizer leaves
    undrafted is greedy's, so it takes no top-k over the vocabulary and the table learns nothing from it. Under a
    cost where no tree pays, no step is drafted: observe_tree is never called and no step asks step_stats for a
    top-k (with a fixed tree size, every step observes)."""
    from core import step as core_step
    from core import timing
    from core.drafters.recycle import RecycleDrafter
    from core.methods import run_method

    calls = {"observe": 0, "topk": []}
    observe, step_stats = RecycleDrafter.observe_tree, core_step.step_stats

    def counted_observe(self, forward):
        calls["observe"] += 1
        return observe(self, forward)

    def recorded_stats(logits, tree, eos_ids, topk=0):
        calls["topk"].append(topk)
        return step_stats(logits, tree, eos_ids, topk)

    monkeypatch.setattr(RecycleDrafter, "observe_tree", counted_observe)
    monkeypatch.setattr(core_step, "step_stats", recorded_stats)
    monkeypatch.setattr(timing, "cost_model", lambda target: each_node_a_forward())
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 12})
    calls["topk"].clear()
    run = run_method("recycle", tiny, prompt, {"max_new_tokens": 12, "max_nodes": "auto"})
    assert run.output_ids == greedy.output_ids
    assert calls["observe"] == 0 and set(calls["topk"]) == {0}
    fixed = run_method("recycle", tiny, prompt, {"max_new_tokens": 12, "max_nodes": 8})
    assert calls["observe"] == len(fixed.steps) and min(calls["topk"][-len(fixed.steps) :]) > 0


def test_a_probe_bounds_one_node_so_a_steep_cost_leaves_a_low_prior_undrafted():
    """Recycle's stored depth-1 rate 0.06 on an AVX2 CPU, where one node costs 0.6 of a forward: a probe's optimistic
    rate (about 0.15) could pay for a 16-node tree at the bound's k·rate, but a probe keeps one node, which cannot
    pay; the regular rate pays for no tree. So the sizer asks the drafter for nothing (before, it asked it
    every step it was not paused, and priced a 60-node template each time)."""
    # t(n)/t(0) as measured on an AMD EPYC (AVX2 only, float32, one thread) at 256 tokens: 1.61 at n = 1, 3.0 at 16
    shape = (1.0, 1.61, 1.75, 1.95, 2.3, 3.0, 4.5, 7.5)
    steep = CostModel(SIZES, (256, 4096), (tuple(0.084 * r for r in shape), tuple(0.16 * r for r in shape)))
    prior = AcceptancePrior.from_counts([("recycled", d, 6 if d == 1 else 1, 100) for d in range(1, 9)])
    sizer = TreeSizer(steep, prior, pause=False, drafter_sources={"recycled"})
    best, probe = sizer.best_rate(), sizer.probe_rate()
    assert probe is not None and best is not None and probe > best
    assert tree_may_pay(steep, 800, probe, 16) and not tree_may_pay(steep, 800, probe, 1)
    assert not step_may_pay(steep, 800, best, probe, 16)
    assert not any(sizer.drafts(800 + i, 16) for i in range(20))


def test_a_drafter_that_declares_confidences_drafts_at_once_and_its_proposals_decide_after():
    """A drafter that may score its nodes (the suffix fallback) is priced near certainty before its first proposal,
    so it drafts at once even where plain rates cannot pay; once its proposals carry no confidence, plain rates price
    it again (as before drafters declared anything)."""
    half = CostModel(SIZES, (256, 4096), tuple(tuple(0.04 * (1 + 0.5 * n) for n in SIZES) for _ in range(2)))
    sizer = TreeSizer(half, drafter_sources={"context", "history"}, scored=True, pause=False)
    assert sizer.best_rate() == 1.0 and sizer.drafts(1000, 16)
    sizer.choose(chain(4), 1000)  # no confidences
    best = sizer.best_rate()
    assert best is not None and best < 0.5 and not sizer.drafts(1000, 16)


def test_a_step_where_no_tree_pays_skips_the_drafter_and_forwards_the_root_alone(tiny, monkeypatch):
    """Under max_nodes=auto a step where no tree could pay is greedy's step, the first one too (the sizer prices the
    drafter's declared sources): the drafter is not asked, no tree mask is built, one token goes through the model;
    the output is greedy's and the trace records an empty tree."""
    from core import engine, timing
    from core.drafters.context import ContextDrafter
    from core.methods import run_method

    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 12})
    calls = {"propose": 0, "mask": 0, "forwarded": []}
    propose, mask, forward_tree = ContextDrafter.propose, engine.tree_attention_mask, engine.forward_tree

    def counted_propose(self, sequence):
        calls["propose"] += 1
        return propose(self, sequence)

    def counted_mask(*args, **kwargs):
        calls["mask"] += 1
        return mask(*args, **kwargs)

    def recorded_forward(model, tree, *args, **kwargs):
        calls["forwarded"].append(len(tree))
        return forward_tree(model, tree, *args, **kwargs)

    monkeypatch.setattr(ContextDrafter, "propose", counted_propose)
    monkeypatch.setattr(engine, "tree_attention_mask", counted_mask)
    monkeypatch.setattr(engine, "forward_tree", recorded_forward)
    monkeypatch.setattr(timing, "cost_model", lambda target: each_node_a_forward())
    run = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12})
    assert run.output_ids == greedy.output_ids
    assert calls["propose"] == 0
    assert calls["mask"] == 0 and set(calls["forwarded"]) == {1}
    assert len(run.steps) == len(greedy.steps) and all(s.tree_size == 0 for s in run.steps)


def test_a_cautious_sizer_keeps_smaller_trees_while_its_rates_rest_on_little_evidence():
    prior = AcceptancePrior.from_counts([("context", d, 6, 10) for d in range(1, 9)])
    cost = flat(0.02)  # a node costs 2 % of a step
    plain, cautious = TreeSizer(cost, prior, caution=0.0), TreeSizer(cost, prior, caution=1.0)
    tree = bushy(32)
    assert 0 < cautious.choose(tree, 256).num_draft < plain.choose(tree, 256).num_draft


def test_the_default_sizer_is_cautious():
    """Caution is on by default (one standard deviation): a sizer built without the argument, as max_nodes=auto
    builds it, keeps the cautious tree, not the posterior mean's larger one."""
    import core.sizing

    prior = AcceptancePrior.from_counts([("context", d, 6, 10) for d in range(1, 9)])
    cost, tree = flat(0.02), bushy(32)
    default = TreeSizer(cost, prior)
    assert core.sizing.CAUTION == 1.0 and default.caution == 1.0
    cautious = TreeSizer(cost, prior, caution=1.0).choose(tree, 256).num_draft
    assert (
        default.choose(tree, 256).num_draft
        == cautious
        < TreeSizer(cost, prior, caution=0.0).choose(tree, 256).num_draft
    )


def test_drafting_pauses_after_refused_proposals_for_longer_and_longer_and_a_kept_tree_ends_it():
    pause = DraftPause(refusals=4, longest=8)
    asked = []
    for _ in range(40):
        asked.append(pause.drafts())
        if asked[-1]:
            pause.chose(candidates=8, kept=0)
    # 4 refusals, then pauses of 1, 2, 4, 8, 8 steps, each after one more refused step
    skipped = [i for i, a in enumerate(asked) if not a]
    assert asked[:5] == [True, True, True, True, False]
    assert skipped[: 1 + 2 + 4] == [4, 6, 7, 9, 10, 11, 12] and asked.count(True) == 4 + 5
    pause.chose(candidates=0, kept=0)  # an empty proposal says nothing about the prices
    assert pause.refused >= 4
    pause.left = 0
    pause.chose(candidates=8, kept=3)  # a kept tree ends it
    assert pause.refused == 0 and pause.pause == 0 and all(pause.drafts() for _ in range(10))


def test_a_sizer_whose_proposals_are_refused_asks_the_drafter_rarely_and_one_without_the_pause_every_step():
    """Trees may pay by the sizer's bound (64 nodes at the prior's rate could) but every proposal it sees is refused:
    with the pause the drafter is asked on a fraction of the steps, without it on every step; the choices are the
    same empty trees either way."""
    prior = AcceptancePrior.from_counts([("context", d, 5, 100) for d in range(1, 9)])
    cost = CostModel(SIZES, (256,), ((0.010,) + (0.020,) * (len(SIZES) - 1),))  # a first node doubles the step
    asked = {}
    for pause in (True, False):
        sizer, asked[pause] = TreeSizer(cost, prior, pause=pause), 0
        for _ in range(60):
            drafted = sizer.drafts(256)
            asked[pause] += drafted
            assert sizer.choose(bushy(8) if drafted else DraftTree.root_only(0), 256).num_draft == 0
    assert asked[False] == 60 and asked[True] <= 15


@pytest.mark.parametrize("caution", [0.0, 1.0])
def test_under_a_flat_cost_a_cautious_pausing_sizer_drafts_every_step_and_keeps_large_trees(caution):
    """The simulated flat-cost case with the options on: caution lowers the rates but a free node still pays, so
    no proposal is refused and drafting never pauses, even while every tree is rejected."""
    sizer = TreeSizer(flat(), caution=caution, pause=True)
    for step in range(30):
        assert sizer.drafts(1024)
        tree = sizer.choose(bushy(64), 1024 + step)
        assert tree.num_draft >= 48
        sizer.observe(tree, ["root"] + ["rejected"] * tree.num_draft)


def test_the_default_pause_keeps_doubling_past_eight_steps_so_refused_requests_rarely_draft():
    """The default pause (PAUSE_MAX 64): over 300 steps whose every proposal is refused, the drafter is asked on at
    most 15 (4 refusals, then one step after each pause of 1, 2, ..., 64); a pause capped at 8 asks it on ~38."""
    import core.sizing

    pause = DraftPause()
    assert pause.longest == core.sizing.PAUSE_MAX >= 64
    asked = 0
    for _ in range(300):
        if pause.drafts():
            asked += 1
            pause.chose(candidates=8, kept=0)
    assert pause.pause == 64 and asked <= 15


def test_a_paused_step_prices_nothing():
    """While drafting pauses, `drafts` answers before any rate is priced or cost read (a paused step costs what
    greedy's does); the step after the pause prices as before."""
    prior = AcceptancePrior.from_counts([("context", d, 5, 100) for d in range(1, 9)])
    reads = {"cost": 0}
    model = CostModel(SIZES, (256,), ((0.010,) + (0.020,) * (len(SIZES) - 1),))

    def cost(n, length):
        reads["cost"] += 1
        return model(n, length)

    sizer = TreeSizer(cost, prior, pause=True)
    while sizer.pause.left == 0:  # refused drafted steps until a pause starts
        assert sizer.drafts(256)
        assert sizer.choose(bushy(8), 256).num_draft == 0
    rates, reads["cost"] = sizer.rates.rate, 0
    sizer.rates.rate = lambda *a, **k: pytest.fail("a paused step priced a rate")
    while sizer.pause.left:
        assert not sizer.drafts(256)
    assert reads["cost"] == 0
    sizer.rates.rate = rates
    assert sizer.drafts(256) and reads["cost"] > 0


class ScriptedSizer(TreeSizer):
    """A sizer that asks the drafter on the steps `ask(step)` says (a pause of another shape) and keeps no tree."""

    def __init__(self, ask):
        super().__init__(each_node_a_forward(), pause=False)
        self.ask, self.step = ask, 0

    def drafts(self, context_len, max_nodes=64):
        self.step += 1
        return self.ask(self.step - 1)


@pytest.mark.parametrize(("every", "commits"), [(1, 12), (3, 8), (100, 2)])
def test_steps_that_do_not_ask_the_drafter_defer_its_commit_and_it_catches_up_before_it_proposes(
    tiny, monkeypatch, every, commits
):
    """A step that does not ask a context drafter hands it nothing; when it is next asked it first gets every token it
    missed (one commit), so its pool is the whole text whenever it proposes, and at the end of the request it holds
    the whole output. Outputs equal greedy's. Without the deferral the drafter commits on every step."""
    from core.drafters.context import ContextDrafter
    from core.methods import run as methods_run
    from core.methods import run_method

    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    greedy = run_method("greedy", tiny, prompt, {"max_new_tokens": 12})
    seen = {"commits": 0, "proposes": 0, "drafter": None}
    propose, commit = ContextDrafter.propose, ContextDrafter.commit

    def checked_propose(self, sequence):
        assert len(self.pool) == len(sequence)  # every committed token reached the pool before this proposal
        seen["proposes"] += 1
        seen["drafter"] = self
        return propose(self, sequence)

    def counted_commit(self, new_tokens, predictions):
        seen["commits"] += 1
        return commit(self, new_tokens, predictions)

    monkeypatch.setattr(ContextDrafter, "propose", checked_propose)
    monkeypatch.setattr(ContextDrafter, "commit", counted_commit)
    monkeypatch.setattr(methods_run, "tree_sizer", lambda *a: ScriptedSizer(lambda step: step % every == 0))
    run = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12})
    assert run.output_ids == greedy.output_ids and len(run.steps) == len(greedy.steps) == 12
    asked = len(range(0, 12, every))
    assert seen["proposes"] == asked
    # every 3rd step asked (0, 3, 6, 9): its own commit, the missed tokens before 3, 6 and 9, the last two at the end
    assert seen["commits"] == commits
    assert len(seen["drafter"].pool) == len(prompt) + len(run.output_ids)


def test_a_commit_is_deferred_only_when_nothing_is_lost():
    """Pure: a step defers its commit only if it did not ask the drafter, has no predictions for it, and the
    drafter's commits join (a draft model's do not: it compares the tokens with the chain it drafted)."""
    import numpy as np

    from core.drafters.base import NoDraft
    from core.drafters.draft_model import DraftModelDrafter
    from core.step import DecodeConfig, Request, defers_commit

    def request(drafter, asked):
        r = Request([1, 2, 3], drafter, lambda *a: None, DecodeConfig())
        r.asked = asked
        return r

    assert defers_commit(request(NoDraft(), asked=False), None)
    assert not defers_commit(request(NoDraft(), asked=True), None)
    assert not defers_commit(request(NoDraft(), asked=False), np.zeros((1, 2), np.int32))
    assert DraftModelDrafter.joins_commits is False
    wants = NoDraft()
    wants.generated_topk = 2
    assert not defers_commit(request(wants, asked=False), None)


def test_a_sizer_that_cannot_pay_reads_no_cost_again_until_the_rate_or_the_stretch_of_lengths_changes():
    """Once no tree pays at a rate at both ends of a stretch of lengths where t is linear in L, `drafts` answers from
    that without reading t (recycle's steps at float32: every step asked the bound before); past the stretch it reads
    again."""
    prior = AcceptancePrior.from_counts([("recycled", d, 7, 100) for d in range(1, 9)])
    model = each_node_a_forward()
    reads = {"cost": 0}

    class Counted(CostModel):
        def __call__(self, n, length):
            reads["cost"] += 1
            return super().__call__(n, length)

    cost = Counted(model.sizes, model.lengths, model.seconds)
    sizer = TreeSizer(cost, prior, pause=False)
    assert sizer.drafts(300)  # the first step drafts: it shows the sizer the sources
    sizer.choose(chain(8, "recycled"), 300)
    assert not sizer.drafts(301)
    first = reads["cost"]
    assert all(not sizer.drafts(length) for length in range(302, 4096))
    assert reads["cost"] == first  # no read inside [301, 4096]
    assert not sizer.drafts(4097) and reads["cost"] > first


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.0, 0.3), min_size=len(SIZES) - 1, max_size=len(SIZES) - 1), min_size=3, max_size=3),
    st.floats(0.0, 0.6),
    st.integers(1, 64),
)
def test_the_remembered_answer_is_the_bound_s_answer_at_every_length(steps, rate, max_nodes):
    """Property: over a request's growing context (100 to 9,000 tokens), `drafts` with its remembered answers says
    what `tree_may_pay` says at each length, on random cost grids (times growing with n and with L, each length's
    curve of its own shape, so the answer changes along the way)."""
    lengths = (256, 1024, 4096)
    grid = []
    for j, per_length in enumerate(steps):
        row = [0.01 * (1 + j)]
        for step in per_length:
            row.append(row[-1] * (1 + step) + 1e-4)
        grid.append(tuple(row))
    cost = CostModel(SIZES, lengths, tuple(grid))
    prior = AcceptancePrior.from_counts([("recycled", d, int(rate * 100), 100) for d in range(1, 9)])
    sizer = TreeSizer(cost, prior, caution=0.0, pause=False)
    sizer.sources.add("recycled")
    best, probe = sizer.best_rate(), sizer.probe_rate()
    answers = []
    for length in range(100, 9000, 37):
        answers.append(step_may_pay(cost, length, best, probe, max_nodes, sizes=SIZES))
        assert sizer.drafts(length, max_nodes) == answers[-1]


@pytest.mark.real_model
def test_probes_let_smollm2_unlearn_a_low_stored_prior(smollm2, monkeypatch):
    """The app's first sample (a copying task) from a stored prior of 0.05 for the context drafter's sources: without
    probes aasd[auto] kept only nodes of the source the prior says nothing of (alignment, 62 of 64 rejected on an
    Intel Xeon) and never a context node, which this prompt accepts (benchmarks/bench_prior_pull.py: MAL 1.03
    against 2.21 from the default rate); with them its context nodes are tried, accepted, and its MAL rises. On a
    machine where even an optimistic rate cannot pay for a node (a node costs nearly a forward) no probe is made:
    the runs are alike."""
    from core import sizing, timing
    from core.acceptance_prior import AcceptanceEstimate
    from core.methods import run_method
    from workbench import service
    from workbench.ui.compare_tab import task_fields

    context, prompt, _, chat = task_fields(service.sample_tasks()[0])
    _, ids = service.build_prompt(smollm2.tokenizer, prompt, context, chat)
    cost = timing.cost_model(smollm2)
    optimistic = AcceptanceEstimate(_low_prior()).optimistic("context", 1, sizing.PROBE_OPTIMISM)
    can_probe = tree_may_pay(cost, len(ids), optimistic, 1, MARGIN, cost.sizes)
    mal, context = {}, {}
    for probe in (False, True):
        monkeypatch.setattr(sizing, "PROBE", probe)
        run = run_method("aasd", smollm2, ids, {"max_new_tokens": 48, "max_nodes": "auto"}, prior=_low_prior())
        mal[probe] = len(run.output_ids) / len(run.steps)
        context[probe] = sum(n.source == "context" and n.decision == "accepted" for s in run.steps for n in s.nodes)
    if can_probe:
        assert mal[True] > mal[False] + 0.2 and context[True] > context[False], (mal, context)
    else:
        assert mal[True] == mal[False], (mal, context)
