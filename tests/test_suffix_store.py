"""The suffix corpus read from the trace store (workbench.store.corpus), on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from test_store import new_url, stores  # noqa: F401  (fixtures: every backend the store tests use)

from core.errors import InvalidInputError
from core.suffix import SuffixSpeculator
from core.trace import RunTrace
from workbench.store.corpus import load_corpus, run_id_of, run_key, store_id, stored_outputs


def run(output_ids, fingerprint="fp-a", status="complete", method="greedy") -> RunTrace:
    return RunTrace(
        method=method,
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1, 2],
        output_ids=list(output_ids),
        status=status,
        model_fingerprint=fingerprint,
    )


def test_outputs_of_one_fingerprint_newest_first_within_the_bound(new_url, stores):  # noqa: F811
    store = stores(new_url())
    ids = {}
    ids["tiny"] = store.save_run(run([20]))
    ids["old"] = store.save_run(run([1, 2, 3]))
    ids["other model"] = store.save_run(run([4, 5, 6], fingerprint="fp-b"))
    ids["failed"] = store.save_run(run([7, 8], status="failed"))
    ids["empty"] = store.save_run(run([]))
    ids["mid"] = store.save_run(run([9, 10, 11, 12]))
    ids["repeat"] = store.save_run(run([1, 2, 3], method="pld"))  # the same output under another method
    ids["new"] = store.save_run(run([13, 14]))

    assert stored_outputs(store, "fp-a") == [
        (ids["new"], [13, 14]),
        (ids["repeat"], [1, 2, 3]),
        (ids["mid"], [9, 10, 11, 12]),
        (ids["tiny"], [20]),
    ]
    assert stored_outputs(store, "fp-a", dedupe=False)[-2:] == [(ids["old"], [1, 2, 3]), (ids["tiny"], [20])]
    # the bound: newest first, and the first run that does not fit ends the list (the older, shorter
    # "tiny" would fit in what is left, but a corpus is the newest runs, without gaps)
    assert [r for r, _ in stored_outputs(store, "fp-a", max_tokens=6)] == [ids["new"], ids["repeat"]]
    assert [r for r, _ in stored_outputs(store, "fp-a", max_tokens=5)] == [ids["new"], ids["repeat"]]
    assert [r for r, _ in stored_outputs(store, "fp-a", max_tokens=4)] == [ids["new"]]
    assert stored_outputs(store, "fp-a", before_run=ids["mid"]) == [(ids["old"], [1, 2, 3]), (ids["tiny"], [20])]
    assert stored_outputs(store, "nobody") == []

    corpus = load_corpus(store, "fp-a")
    # least recently used first; keyed by the store's id and the run id (run ids repeat across stores)
    assert corpus.keys() == [run_key(store, ids[k]) for k in ("tiny", "mid", "repeat", "new")]
    assert [run_id_of(k, store) for k in corpus.keys()] == [ids["tiny"], ids["mid"], ids["repeat"], ids["new"]]
    assert corpus.frozen and corpus.fingerprint == "fp-a" and corpus.tokens == 10
    spec = SuffixSpeculator(corpus)
    spec.begin([0, 9, 10])
    assert spec.propose().tokens[:2] == [11, 12]


def test_loading_needs_a_fingerprint(new_url, stores):  # noqa: F811
    with pytest.raises(InvalidInputError, match="fingerprint"):
        stored_outputs(stores(new_url()), "")


def test_a_store_id_names_the_database_not_the_object(tmp_path):
    from workbench.store import Store

    a = Store(f"sqlite:///{tmp_path / 'a.db'}")
    assert store_id(a) == store_id(Store(a.url))  # two handles on one database
    assert store_id(a) == store_id(Store(f"sqlite:///{tmp_path / '.' / 'a.db'}"))  # one file, two spellings
    b = Store(f"sqlite:///{tmp_path / 'b.db'}")
    assert store_id(a) != store_id(b)  # another database
    memory = Store("sqlite://")
    assert store_id(memory) == store_id(memory) != store_id(Store("sqlite://"))  # each in-memory store is its own
    assert run_id_of(run_key(a, 7), a) == 7 and run_id_of(run_key(a, 7), b) is None and run_id_of("local-1", a) is None


def _bucket_counts(runs) -> dict:
    from core.acceptance_prior import confidence_bucket
    from core.stats import JUDGED

    out: dict = {}
    for r in runs:
        for s in r.steps:
            for n in s.nodes:
                if n.parent != -1 and n.decision in JUDGED and n.confidence is not None:
                    key = (n.source, confidence_bucket(n.confidence))
                    a, v = out.get(key, (0, 0))
                    out[key] = (a + (n.decision in ("accepted", "rescued")), v + 1)
    return out


def test_the_suffix_drafters_confidence_is_stored_and_calibrates_the_prior(tmp_path):
    """Each suffix node's confidence reaches the store (the trace's `confidence`, in the nodes' attributes), and
    acceptance_prior reads per (source, confidence bucket) what verification did with it, so a suffix run's sizer
    starts calibrated (it started from the bare confidence before: the calibration was never read)."""
    import random

    from conftest import make_tiny

    from core.methods import run_method
    from core.suffix import SuffixCorpus
    from workbench.store import Store
    from workbench.store.priors import acceptance_prior, stored_calibration

    model = make_tiny(1)
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    rng = random.Random(4)
    prompts = [[rng.randrange(2, 96) for _ in range(24)] for _ in range(3)]
    corpus = SuffixCorpus(fingerprint=model.fingerprint)
    runs = [
        run_method("suffix", model, p, {"max_new_tokens": 32, "max_nodes": 16}, corpus=corpus)
        for p in prompts + prompts[:2]  # the repeats draft from the corpus
    ]
    ids = [store.save_run(r) for r in runs]
    store.save_run(run_method("pld", model, prompts[0], {"max_new_tokens": 16}))  # no confidence: not counted
    expected = _bucket_counts(runs)
    assert len(expected) >= 2 and sum(v for _, v in expected.values()) > 10  # several buckets, judged nodes
    assert any(a < v for a, v in expected.values()) and any(a > 0 for a, _ in expected.values())
    # the stored nodes give their confidence back
    back = store.load_run(ids[3]).trace
    assert [n.confidence for s in back.steps for n in s.nodes] == [n.confidence for s in runs[3].steps for n in s.nodes]
    assert any(n.confidence is not None for s in back.steps for n in s.nodes)
    assert stored_calibration(store, "suffix", model.fingerprint) == expected
    assert stored_calibration(store, "pld", model.fingerprint) == {}
    prior = acceptance_prior(store, "suffix", model.fingerprint)
    assert dict(prior.calibration) == expected
    # A run started from it records the calibration it started from (a run can be reproduced from its params).
    run = run_method("suffix", model, prompts[2], {"max_new_tokens": 16}, corpus=corpus, prior=prior)
    assert json.loads(run.params["prior"])["calibration"] == [
        [s, b, a, v] for (s, b), (a, v) in sorted(expected.items())
    ]
