"""The acceptance prior (core.acceptance_prior, pure) and its counts from a trace store (workbench.store.priors)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from core.acceptance_prior import DEFAULT_RATE, MAX_DEPTH, PRIOR_WEIGHT, AcceptanceEstimate, AcceptancePrior
from core.tree import DraftTree


def test_no_stored_traces_means_the_default_rate_everywhere():
    est = AcceptanceEstimate()
    assert est.rate("context", 1) == est.rate("alignment", 7) == DEFAULT_RATE == 0.3
    assert AcceptancePrior().observations == 0


def test_the_prior_is_centred_on_the_stored_rate_smoothed_by_its_weight():
    prior = AcceptancePrior.from_counts([("context", 1, 600, 1000), ("context", 2, 80, 100), ("alignment", 1, 1, 1)])
    source = (680 + 20 * 0.3) / (1100 + 20)  # context over all depths, smoothed toward 0.3
    assert prior.centre("context", 1) == pytest.approx((600 + 20 * source) / (1000 + 20))  # ≈ 0.6: many observations
    assert prior.centre("context", 2) == pytest.approx((80 + 20 * source) / (100 + 20))
    assert prior.centre("context", 9) == pytest.approx(source)  # a depth never stored: the source's rate
    # One stored alignment node, accepted: barely above the default, not 1.
    assert prior.centre("alignment", 1) == pytest.approx((1 + 20 * (1 + 6) / 21) / 21)
    assert prior.centre("alignment", 1) < 0.4
    assert prior.centre("recycled", 1) == DEFAULT_RATE
    assert prior.observations == 1101


def test_the_request_updates_the_prior_as_a_beta_posterior():
    prior = AcceptancePrior.from_counts([("context", 1, 5000, 10000)])
    centre = prior.centre("context", 1)
    est = AcceptanceEstimate(prior)
    tree = DraftTree.root_only(1)
    tree.add(0, 5, "context")
    est.observe(tree, [0, 1])  # one accepted node at depth 1: a lucky first step
    assert est.rate("context", 1) == pytest.approx((1 + PRIOR_WEIGHT * centre) / (1 + PRIOR_WEIGHT))
    assert est.rate("context", 1) < 0.53  # does not jump toward 1
    for _ in range(400):
        est.observe(tree, [0])  # rejected 400 times: the request's own rate wins
    assert est.rate("context", 1) < 0.03


def test_observe_counts_verified_and_accepted_nodes_per_source_and_capped_depth():
    tree = DraftTree.root_only(1)
    tree.add(0, 5, "context")  # 1: on the path
    tree.add(0, 6, "alignment")  # 2: verified, rejected
    tree.add(1, 7, "context")  # 3: verified (parent 1 accepted), rejected
    tree.add(2, 8, "context")  # 4: parent 2 rejected: never judged
    est = AcceptanceEstimate()
    est.observe(tree, [0, 1])
    assert est.verified == {("context", 1): 1, ("alignment", 1): 1, ("context", 2): 1}
    assert est.accepted == {("context", 1): 1}
    deep = DraftTree.root_only(1)
    for d in range(MAX_DEPTH + 3):
        deep.add(d, 10 + d, "context")
    est.observe(deep, list(range(MAX_DEPTH + 4)))
    assert est.verified[("context", MAX_DEPTH)] == 4 and est.rate("context", 40) == est.rate("context", MAX_DEPTH)


def test_bad_counts_are_refused_and_a_prior_round_trips():
    with pytest.raises(ValueError, match="accepted 5"):
        AcceptancePrior.from_counts([("context", 1, 5, 3)])
    with pytest.raises(ValueError):
        AcceptancePrior(weight=0)
    prior = AcceptancePrior.from_counts(
        [("context", 1, 6, 10), ("context", MAX_DEPTH + 5, 1, 2), ("context", MAX_DEPTH, 1, 1)]
    )
    assert prior.counts[("context", MAX_DEPTH)] == (2, 3)  # deeper rows summed into the last depth
    assert AcceptancePrior.from_dict(json.loads(json.dumps(prior.to_dict()))) == prior


# ---------------------------------------------------------------- counts from a store

PG_URL = os.environ.get("WORKBENCH_TEST_PG_URL")


def _expected(traces) -> dict[tuple[str, int], tuple[int, int]]:
    """core.stats.acceptance_by summed over runs: what the one SQL query must give."""
    from core.stats import acceptance_by

    acc, ver = Counter(), Counter()
    for trace in traces:
        for key, (a, v) in acceptance_by(trace, lambda n: (n.source, n.depth)).items():
            acc[key] += a
            ver[key] += v
    return {k: (acc[k], ver[k]) for k in ver}


@pytest.fixture
def store(tmp_path):
    from workbench.store import Store

    s = Store(f"sqlite:///{tmp_path / 'traces.db'}")
    yield s
    s.close()


def test_stored_counts_equal_the_traces_acceptance_and_filters_keep_other_runs_out(tiny, store):
    from core.methods import run_method
    from workbench.store.priors import acceptance_prior, stored_counts

    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    mine = [run_method("aasd-strict", tiny, prompt[i:], {"max_new_tokens": 12, "max_nodes": 8}) for i in range(3)]
    assert any(n.decision == "rejected" for r in mine for s in r.steps for n in s.nodes)
    ids = [store.save_run(r, tags=["calibration"] if i < 2 else []) for i, r in enumerate(mine)]
    other_method = run_method("pld", tiny, prompt, {"max_new_tokens": 12})
    store.save_run(other_method)
    other_model = run_method("aasd-strict", tiny, prompt, {"max_new_tokens": 12, "max_nodes": 8})
    other_model.model_fingerprint = "another-model"
    store.save_run(other_model)
    relaxed = run_method("aasd", tiny, prompt, {"max_new_tokens": 12, "max_nodes": 8, "alpha": 0.0, "beta": 0.01})
    store.save_run(relaxed)

    rows = stored_counts(store, "aasd-strict", tiny.fingerprint)
    assert {(s, d): (a, v) for s, d, a, v in rows} == _expected(mine)
    tagged = stored_counts(store, "aasd-strict", tiny.fingerprint, tag="calibration")
    assert {(s, d): (a, v) for s, d, a, v in tagged} == _expected(mine[:2])
    assert stored_counts(store, "aasd-strict", "no-such-model") == []
    # Parameters narrow the method: the relaxed aasd run alone, by its thresholds.
    assert {
        (s, d): (a, v) for s, d, a, v in stored_counts(store, "aasd", tiny.fingerprint, params={"beta": 0.01})
    } == _expected([relaxed])
    assert stored_counts(store, "aasd", tiny.fingerprint, params={"beta": 0.1}) == []
    prior = acceptance_prior(store, "aasd-strict", tiny.fingerprint)
    assert prior.observations == sum(v for _, v in _expected(mine).values()) > 0
    assert ids
    # The prior names the query it came from, so a run that starts from it records where its trees came from.
    labelled = acceptance_prior(store, "aasd-strict", tiny.fingerprint, tag="calibration")
    assert labelled.source == f"store:aasd-strict model={tiny.fingerprint} tag=calibration"
    assert labelled.fingerprint() != prior.fingerprint()  # other counts, another hash
    assert AcceptancePrior.from_dict(json.loads(json.dumps(labelled.to_dict()))).fingerprint() == labelled.fingerprint()


def test_rescued_nodes_count_as_accepted_and_unjudged_records_not_at_all(store):
    from core.trace import NodeTrace, RunTrace, StepTrace
    from workbench.store.priors import stored_counts

    def node(i, parent, depth, source, decision):
        return NodeTrace(
            step=0,
            cache_pos=4,
            node=i,
            parent=parent,
            depth=depth,
            token_id=10 + i,
            token_text="x",
            source=source,
            decision=decision,
            reason="",
            p=None if parent == -1 else 0.5,
        )

    nodes = [
        node(0, -1, 0, "root", "accepted"),
        node(1, 0, 1, "context", "accepted"),
        node(2, 1, 2, "context", "rescued"),
        node(3, 0, 1, "alignment", "rejected"),
        node(4, 3, 2, "alignment", "unreached"),
        node(5, 2, 3, "model", "bonus"),
    ]
    run = RunTrace(
        method="csd",
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1, 2, 3, 4],
        output_ids=[11, 12, 15],
        steps=[StepTrace(0, 4, 4, 2, [11, 12, 15], nodes=nodes)],
        status="complete",
        model_fingerprint="fp",
    )
    store.save_run(run)
    assert sorted(stored_counts(store, "csd", "fp")) == [
        ("alignment", 1, 0, 1),
        ("context", 1, 1, 1),
        ("context", 2, 1, 1),
    ]
    assert {(s, d): (a, v) for s, d, a, v in stored_counts(store, "csd", "fp")} == _expected([run])


def test_a_bad_filter_or_a_missing_method_is_one_clear_error(store):
    from core.errors import InvalidInputError
    from workbench.store.priors import stored_counts

    with pytest.raises(InvalidInputError, match="method and a model fingerprint"):
        stored_counts(store, "", "fp")
    with pytest.raises(InvalidInputError, match="must be a number, a string or a boolean"):
        stored_counts(store, "aasd", "fp", params={"alpha": [0.1]})


@pytest.mark.skipif(not PG_URL, reason="no PostgreSQL server: set WORKBENCH_TEST_PG_URL")
def test_stored_counts_on_postgresql(tiny):
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from core.methods import run_method
    from workbench.store import Store
    from workbench.store.priors import stored_counts

    url = make_url(PG_URL)
    db = f"{url.database}_priors"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{db}"'))
    admin.dispose()
    with Store(url.set(database=db).render_as_string(hide_password=False)) as store:
        run = run_method(
            "aasd", tiny, [5, 6, 7, 8, 5, 6, 7, 8, 5, 6], {"max_new_tokens": 10, "max_nodes": 8, "beta": 0.01}
        )
        store.save_run(run)
        rows = stored_counts(store, "aasd", tiny.fingerprint, params={"beta": 0.01})
        assert {(s, d): (a, v) for s, d, a, v in rows} == _expected([run])


@pytest.mark.real_model
def test_a_prior_from_smollm2_runs_is_their_acceptance(smollm2, store):
    from core.methods import run_method
    from core.models import encode_prompt
    from workbench.store.priors import acceptance_prior

    text = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. Repeat the sentence once more:"
    run = run_method(
        "aasd-strict", smollm2, encode_prompt(smollm2.tokenizer, text), {"max_new_tokens": 24, "max_nodes": 8}
    )
    store.save_run(run)
    prior = acceptance_prior(store, "aasd-strict", smollm2.fingerprint)
    expected = _expected([run])
    assert prior.counts == expected and prior.observations > 0
    (a, v) = expected[("context", 1)]
    assert prior.centre("context", 1) == pytest.approx((a + 20 * prior.centre("context", 99)) / (v + 20))


# ---- nodes their drafter scored (a DraftTree's confidence) ------------------------------------------


def scored_chain(confidences, source: str = "history") -> DraftTree:
    tree = DraftTree.root_only(1)
    for i, c in enumerate(confidences):
        tree.add(i, 100 + i, source, confidence=c)
    return tree


def test_a_scored_node_starts_at_its_confidence_and_its_bucket_learns_apart_from_the_others():
    from core.acceptance_prior import CONFIDENCE_EDGES, confidence_bucket

    assert confidence_bucket(0.0) == 0 and confidence_bucket(0.97) == 6 and confidence_bucket(0.99) == 7
    assert confidence_bucket(1.0) == len(CONFIDENCE_EDGES)
    est = AcceptanceEstimate()  # no stored traces: the default 0.3 for unscored nodes
    assert est.rate("history", 5, 0.97) == pytest.approx(0.97)
    assert est.rate("history", 5) == DEFAULT_RATE
    weak = scored_chain([0.25])
    for _ in range(100):
        est.observe(weak, [0])  # weak one-token matches, rejected every time
    assert est.rate("history", 1, 0.25) < 0.05  # their bucket has learned it
    assert est.rate("history", 1, 0.3) == pytest.approx((0 + 20 * 0.3) / (100 + 20))  # one bucket, own centre
    assert est.rate("history", 1, 0.97) == pytest.approx(0.97)  # a long repeat's bucket is untouched
    assert est.rate("history", 1) == pytest.approx(
        20 * 0.3 / 120
    )  # the (source, depth) count saw the rejections too (unscored nodes)
    strong = scored_chain([0.97, 0.97])
    for _ in range(20):
        est.observe(strong, [0, 1])  # first accepted, second rejected: 1 of 2 judged per step
    assert est.rate("history", 1, 0.97) == pytest.approx((20 + 20 * 0.97) / (40 + 20))


def test_unscored_nodes_are_priced_exactly_as_before():
    prior = AcceptancePrior.from_counts([("context", 1, 600, 1000), ("context", 2, 30, 100)])
    plain, scored = AcceptanceEstimate(prior), AcceptanceEstimate(prior)
    tree = DraftTree.root_only(1)
    tree.add(0, 5, "context")
    tree.add(1, 6, "context")
    other = scored_chain([0.9, 0.9], "context")
    for _ in range(7):
        plain.observe(tree, [0, 1])
        scored.observe(tree, [0, 1])
        scored.observe(other, [0])  # scored nodes change only (source, depth) and their bucket counts
    assert plain.rate("context", 1) > scored.rate("context", 1)  # the rejected scored nodes counted per depth
    assert AcceptanceEstimate(prior).rate("context", 2, None) == AcceptanceEstimate(prior).rate("context", 2)


def test_stored_calibration_counts_move_the_confidence_and_round_trip():
    prior = AcceptancePrior.from_counts([("context", 1, 5, 10)])
    calibrated = AcceptancePrior(prior.counts, calibration={("history", 7): (50, 100)})
    assert calibrated.calibrated("history", 0.99) == pytest.approx((50 + 20 * 0.99) / (100 + 20))
    assert calibrated.calibrated("history", 0.5) == 0.5 and calibrated.calibrated("context", 0.99) == 0.99
    assert AcceptanceEstimate(calibrated).rate("history", 3, 0.99) == pytest.approx(
        calibrated.calibrated("history", 0.99)
    )
    back = AcceptancePrior.from_dict(json.loads(json.dumps(calibrated.to_dict())))
    assert back.calibration == {("history", 7): (50, 100)} and back.fingerprint() == calibrated.fingerprint()
    assert prior.fingerprint() != calibrated.fingerprint()
    assert "calibration" not in prior.to_dict()  # priors without one keep the fingerprint they had
    with pytest.raises(ValueError):
        AcceptancePrior(calibration={("history", 7): (5, 4)})


def test_a_cautious_rate_is_below_the_mean_by_less_the_more_evidence_it_rests_on():
    from core.acceptance_prior import AcceptanceEstimate, lower_rate

    assert lower_rate(0.3, 20, 0.0) == 0.3
    assert lower_rate(0.3, 20, 1.0) < lower_rate(0.3, 2000, 1.0) < 0.3
    assert lower_rate(0.3, 20, 1.0) == pytest.approx(0.3 - (0.3 * 0.7 / 21) ** 0.5)
    assert lower_rate(0.02, 1, 5.0) == 0.0
    estimate = AcceptanceEstimate(AcceptancePrior.from_counts([("context", 1, 30, 100)]))
    assert estimate.rate("context", 1, caution=1.0) < estimate.rate("context", 1)


def test_caution_reads_the_stored_evidence_behind_a_centre_so_a_well_known_low_rate_keeps_most_of_it():
    """A low rate resting on 938 stored nodes (recycle's depth 1 in bfloat16) loses a tenth of itself, one resting on
    38 (a `generated` depth) a quarter, one with no stored node (the default) a third: not a spread of 20 pseudo-nodes
    for all three, which took three quarters of the first and stopped its trees for good."""
    from core.acceptance_prior import AcceptanceEstimate, lower_rate

    prior = AcceptancePrior.from_counts([("recycled", 1, 75, 938), ("generated", 1, 11, 38)])
    estimate = AcceptanceEstimate(prior)
    for source, stored in (("recycled", 938), ("generated", 38), ("alignment", 20)):
        mean = estimate.rate(source, 1)
        assert estimate.rate(source, 1, caution=1.0) == pytest.approx(lower_rate(mean, stored, 1.0))
    assert estimate.rate("recycled", 1, caution=1.0) > 0.85 * estimate.rate("recycled", 1)
    assert estimate.rate("generated", 1, caution=1.0) < 0.8 * estimate.rate("generated", 1)
    tree = DraftTree.root_only(0)
    tree.add(0, 5, "generated")
    for _ in range(100):  # the request's own rejections add to the evidence and lower the mean
        estimate.observe(tree, [0])
    assert estimate.rate("generated", 1, caution=1.0) == pytest.approx(
        lower_rate(estimate.rate("generated", 1), 100 + 38, 1.0)
    )
