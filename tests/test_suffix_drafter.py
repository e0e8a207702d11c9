"""The suffix drafter and its methods: strict suffix is greedy token for token (tiny models, and SmolLM2
in float32, first sight and repeat); the corpus's state (cold, frozen, online, size and hash) in each run's
params and a frozen corpus rerunning alike; aasd[fallback=suffix] and suffix-aasd; `history` nodes through
the store, re-scoring, CSV and OpenInference."""

from __future__ import annotations

import json
import random

import pytest
from conftest import make_tiny, spec_bench_rows

from core.errors import InvalidInputError
from core.methods import get_method, resolve_params, run_method
from core.rules import by_source, rule_for, strict
from core.suffix import SuffixCorpus
from core.suffix import corpus as corpus_module
from core.trace import SOURCES


def prompt(seed: int, n: int = 24) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 96) for _ in range(n)]


def sources(run) -> set[str]:
    return {n.source for s in run.steps for n in s.nodes}


def judged(run, source: str, decision: str) -> int:
    return sum(n.source == source and n.decision == decision for s in run.steps for n in s.nodes)


# ---------------------------------------------------------------- exactness on tiny models
@pytest.mark.parametrize("seed", range(4))
def test_strict_suffix_is_greedy_first_sight_and_repeat(seed):
    model = make_tiny(seed % 3)
    prompts = [prompt(seed), prompt(seed + 10), prompt(seed)]  # the third repeats the first
    refs = [run_method("greedy", model, p, {"max_new_tokens": 40}).output_ids for p in prompts]
    corpus = SuffixCorpus(fingerprint="tiny")
    runs = [run_method("suffix", model, p, {"max_new_tokens": 40, "max_nodes": 16}, corpus=corpus) for p in prompts]
    assert [r.output_ids for r in runs] == refs
    # The repeat drafts its whole answer from the corpus: history nodes accepted, far fewer steps than tokens.
    assert judged(runs[2], "history", "accepted") > 0
    assert len(runs[2].steps) < len(runs[0].steps)
    assert sources(runs[0]) <= {"root", "context", "history", "model"}
    # The second prompt drafts from the first's output where it matches: wrong drafts must be rejected, not kept.
    rejected = sum(judged(r, src, "rejected") for r in runs for src in ("history", "context"))
    assert rejected > 0


def test_auto_size_is_greedy_and_records_the_cost_model():
    model = make_tiny(1)
    p = prompt(3)
    ref = run_method("greedy", model, p, {"max_new_tokens": 32}).output_ids
    corpus = SuffixCorpus(fingerprint="tiny")
    for _ in range(2):
        run = run_method("suffix", model, p, {"max_new_tokens": 32}, corpus=corpus)
        assert run.output_ids == ref
    assert run.params["max_nodes"] == 0 and "cost_model_ms" in run.params and "prior_sha" in run.params


def test_auto_size_drafts_a_repeat_from_the_corpus_where_a_node_costs_most_of_a_forward(monkeypatch):
    """Under max_nodes=auto on a machine where one node costs 0.65 of a forward (SmolLM2 float32 on one EPYC
    thread), the sizer prices suffix nodes by the drafter's confidence: a repeated request drafts its answer
    from the corpus in far fewer steps than tokens, and stays greedy's. Priced by source and depth alone (the
    same run without the drafter's confidences), the repeat gets almost no tree: the failure this guards."""
    from core.cost_model import CostModel
    from core.methods import run as methods_run
    from core.sizing import TreeSizer
    from core.suffix import draft as draft_module

    ratios = (1.0, 1.65, 1.66, 1.66, 1.88, 2.38, 3.5, 5.4)
    cost = CostModel((0, 1, 2, 4, 8, 16, 32, 64), (256,), (tuple(0.03 * r for r in ratios),))
    monkeypatch.setattr(methods_run, "tree_sizer", lambda *a: TreeSizer(cost))
    model = make_tiny(1)
    p = prompt(7)
    ref = run_method("greedy", model, p, {"max_new_tokens": 48}).output_ids

    def repeat() -> tuple[int, int]:
        corpus = SuffixCorpus(fingerprint="tiny")
        runs = [run_method("suffix", model, p, {"max_new_tokens": 48}, corpus=corpus) for _ in range(2)]
        assert [r.output_ids for r in runs] == [ref, ref]
        return len(runs[1].steps), judged(runs[1], "history", "accepted")

    steps, accepted = repeat()
    assert steps <= 10 and accepted >= 36  # 48 tokens (measured: 5 steps, 43 accepted)
    as_tree = draft_module.SuffixDraft.as_tree
    monkeypatch.setattr(draft_module.SuffixDraft, "as_tree", lambda self, root, **kw: as_tree(self, root, half=None))
    steps_unscored, accepted_unscored = repeat()
    assert steps_unscored > 3 * steps and accepted_unscored < accepted / 4  # (46 steps, 2)


# ---------------------------------------------------------------- the corpus's state
def test_each_run_records_the_corpus_it_drafted_from_and_online_runs_add_once():
    model = make_tiny(0)
    corpus = SuffixCorpus(fingerprint="tiny")
    first = run_method("suffix", model, prompt(1), {"max_new_tokens": 24, "max_nodes": 8}, corpus=corpus)
    assert first.params["corpus_requests"] == 0 and first.params["corpus_tokens"] == 0
    assert first.params["corpus_mode"] == 0 and first.params["corpus_max_tokens"] == corpus.max_tokens
    assert len(corpus) == 1 and corpus.tokens == len(first.output_ids)  # online: the output joined the corpus
    again = run_method("suffix", model, prompt(1), {"max_new_tokens": 24, "max_nodes": 8}, corpus=corpus)
    assert again.params["corpus_requests"] == 1 and again.params["corpus_hash"] != first.params["corpus_hash"]
    assert len(corpus) == 1  # the same output again is not counted twice
    assert again.params["corpus_hash"] == corpus.content_hash()


def test_a_frozen_corpus_reruns_identically_and_is_left_as_it_was():
    model = make_tiny(2)
    corpus = SuffixCorpus(fingerprint="tiny")
    for s in range(3):  # outputs of other prompts: the frozen runs draft from them, rightly and wrongly
        run_method("suffix", model, prompt(20 + s), {"max_new_tokens": 32, "max_nodes": 8}, corpus=corpus)
    before = (corpus.content_hash(), len(corpus), corpus.keys())
    params = {"max_new_tokens": 32, "max_nodes": 8, "corpus_mode": "frozen"}
    a = run_method("suffix", model, prompt(20), params, corpus=corpus)
    b = run_method("suffix", model, prompt(20), params, corpus=corpus)
    assert (corpus.content_hash(), len(corpus), corpus.keys()) == before
    assert a.output_ids == b.output_ids
    tree = lambda run: [[(n.token_id, n.parent, n.source, n.decision) for n in s.nodes] for s in run.steps]
    assert tree(a) == tree(b) and judged(a, "history", "accepted") > 0
    assert a.params["corpus_mode"] == 1 and a.params["corpus_hash"] == before[0]


def test_cold_starts_from_an_empty_corpus_and_leaves_the_shared_one(monkeypatch):
    model = make_tiny(0)
    model.fingerprint = "tiny-shared"
    monkeypatch.setattr(corpus_module, "_SHARED", {})
    first = run_method("suffix", model, prompt(4), {"max_new_tokens": 24, "max_nodes": 8})
    shared = corpus_module._SHARED["tiny-shared"]
    assert len(shared) == 1 and first.params["corpus_requests"] == 0
    warm = run_method("suffix", model, prompt(4), {"max_new_tokens": 24, "max_nodes": 8})
    cold = run_method("suffix", model, prompt(4), {"max_new_tokens": 24, "max_nodes": 8, "cold": 1})
    assert warm.params["corpus_requests"] == 1 and cold.params["corpus_requests"] == 0
    assert judged(warm, "history", "accepted") > 0 and "history" not in sources(cold)
    assert warm.output_ids == cold.output_ids == first.output_ids
    assert len(shared) == 1  # neither the repeat (same output) nor the cold run added to it


def test_bad_corpus_parameters_are_refused():
    with pytest.raises(InvalidInputError, match="corpus_mode"):
        resolve_params("suffix", {"corpus_mode": "sometimes"})
    with pytest.raises(InvalidInputError, match="spec_factor"):
        resolve_params("suffix", {"spec_factor": -1})
    with pytest.raises(InvalidInputError, match="no effect"):
        resolve_params("pld", {"corpus_mode": "frozen"})
    assert resolve_params("aasd", {"fallback": "suffix"})["fallback"] == 2


# ---------------------------------------------------------------- aasd[fallback=suffix], suffix-aasd
def test_aasd_drafts_from_the_corpus_where_it_matches_more_than_the_pool():
    model = make_tiny(0)
    p = prompt(7, 30)
    ref = run_method("greedy", model, p, {"max_new_tokens": 40}).output_ids
    corpus = SuffixCorpus(fingerprint="tiny")
    params = {"max_new_tokens": 40, "max_nodes": 16, "fallback": "suffix"}
    first = run_method("aasd-strict", model, p, params, corpus=corpus)
    repeat = run_method("aasd-strict", model, p, params, corpus=corpus)
    plain = run_method("aasd-strict", model, p, {"max_new_tokens": 40, "max_nodes": 16}, corpus=corpus)
    assert first.output_ids == repeat.output_ids == plain.output_ids == ref
    assert judged(repeat, "history", "accepted") > 0 and "history" not in sources(plain)
    assert len(repeat.steps) < len(plain.steps)
    assert "corpus_hash" in repeat.params and "corpus_hash" not in plain.params and "table_sha" not in repeat.params
    assert rule_for(by_source(lambda *a: None), "history") is strict  # AASD's split judges history nodes strictly


def test_the_corpus_takes_over_only_where_its_match_beats_the_pools_key_by_the_margin():
    from core.drafters.suffix import FALLBACK_MARGIN, corpus_drafts

    assert corpus_drafts(5, 2, 3) and not corpus_drafts(4, 2, 3)  # 3 longer: yes; 2 longer: no
    assert corpus_drafts(3, 2, 1) and not corpus_drafts(2, 2, 1)  # margin 1: wherever it is longer
    assert corpus_drafts(2, 2, 0) and not corpus_drafts(0, 0, 0)  # margin 0: ties too; no match never
    assert corpus_drafts(4, 0, 4) and not corpus_drafts(3, 0, 4)  # the pool has no match: the margin still holds
    assert resolve_params("aasd", {"fallback": "suffix"})["fallback_margin"] == FALLBACK_MARGIN
    with pytest.raises(InvalidInputError, match="fallback_margin"):
        resolve_params("aasd", {"fallback_margin": -1})
    # The drafter reads it: a margin no match can reach (the corpus holds 40-token outputs) never hands over, and
    # every margin keeps aasd-strict greedy's.
    model = make_tiny(0)
    p = prompt(7, 30)
    ref = run_method("greedy", model, p, {"max_new_tokens": 40}).output_ids
    for margin, hands_over in ((0, True), (1, True), (2, True), (41, False)):
        corpus = SuffixCorpus(fingerprint="tiny")
        params = {"max_new_tokens": 40, "max_nodes": 16, "fallback": "suffix", "fallback_margin": margin}
        runs = [run_method("aasd-strict", model, p, params, corpus=corpus) for _ in range(2)]
        assert [r.output_ids for r in runs] == [ref, ref]
        assert ("history" in sources(runs[1])) == hands_over, margin
        assert runs[1].params["fallback_margin"] == margin


def test_suffix_aasd_verifies_every_node_with_the_adaptive_rule():
    method = get_method("suffix-aasd")
    assert not method.lossless and get_method("suffix").lossless
    rules = method.rules_of(resolve_params("suffix-aasd"))
    assert callable(rules)  # one rule for every source, history included
    model = make_tiny(1)
    corpus = SuffixCorpus(fingerprint="tiny")
    runs = [
        run_method("suffix-aasd", model, prompt(9), {"max_new_tokens": 32, "max_nodes": 8}, corpus=corpus)
        for _ in range(2)
    ]
    assert judged(runs[1], "history", "accepted") > 0
    assert all(n.threshold is not None for s in runs[1].steps for n in s.nodes if n.source == "history")


# ---------------------------------------------------------------- history nodes through the store and exports
def test_history_nodes_rescore_and_round_trip_through_csv_and_openinference(tmp_path):
    from workbench.rescore import rescore_run
    from workbench.store import Store
    from workbench.store.openinference import export_openinference

    assert "history" in SOURCES
    model = make_tiny(0)
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    corpus = SuffixCorpus(fingerprint="tiny")
    saved = []
    for name in ("suffix", "suffix", "suffix-aasd", "aasd"):
        params = {"max_new_tokens": 32, "max_nodes": 8, **({"fallback": "suffix"} if name == "aasd" else {})}
        run = run_method(name, model, prompt(5), params, corpus=corpus)
        rid = store.save_run(run)
        stored = store.load_run(rid).trace
        assert [[(n.source, n.decision) for n in s.nodes] for s in stored.steps] == [
            [(n.source, n.decision) for n in s.nodes] for s in run.steps
        ]
        again = rescore_run(stored)
        assert again.first_divergence is None and again.flip_counts == {}
        for step, new in zip(run.steps, again.steps):
            assert new.accepted == step.accepted
        saved.append((rid, run))
    assert all(judged(run, "history", "accepted") > 0 for _, run in saved[1:])
    store.export_csv(None, tmp_path / "csv")  # CSV import validates sources against core.trace.SOURCES
    copy = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    ids = copy.import_csv(tmp_path / "csv")
    assert any(n.source == "history" for rid in ids for s in copy.load_run(rid).trace.steps for n in s.nodes)
    export_openinference(store, [rid for rid, _ in saved], tmp_path / "spans.jsonl")
    nodes = [
        n
        for line in (tmp_path / "spans.jsonl").read_text().splitlines()
        for n in json.loads(json.loads(line)["attributes"].get("workbench.step.nodes", "[]"))
    ]
    assert any(n["source"] == "history" and n["decision"] == "accepted" for n in nodes)


# ---------------------------------------------------------------- the real model (float32)
@pytest.fixture(scope="module")
def greedy_24(smollm2):
    """(prompt ids, greedy's 24 tokens) of a coding and a summarization prompt, shared by the tests below."""
    from core.models import encode_prompt

    prompts = [encode_prompt(smollm2.tokenizer, r["turns"][0]) for r in spec_bench_rows(("coding", "summarization"), 1)]
    return [(ids, run_method("greedy", smollm2, ids, {"max_new_tokens": 24}).output_ids) for ids in prompts]


@pytest.mark.real_model
def test_suffix_equals_greedy_on_smollm2_first_sight_and_repeat(smollm2, greedy_24):
    from test_real_exactness import first_divergence_is_near_tie

    corpus = SuffixCorpus(fingerprint=smollm2.fingerprint)
    history = 0
    for ids, ref in greedy_24 * 2:  # each prompt twice: first sight, then from the corpus
        run = run_method("suffix", smollm2, ids, {"max_new_tokens": 24, "max_nodes": 16}, corpus=corpus)
        history += judged(run, "history", "accepted")
        if run.output_ids != ref:
            ok, why = first_divergence_is_near_tie(smollm2, ids, ref, run.output_ids)
            assert ok, f"suffix is not greedy and the difference is no near-tie: {why}"
    assert history > 0


@pytest.mark.real_model
@pytest.mark.slow
def test_strict_aasd_with_the_corpus_fallback_equals_greedy_on_smollm2(smollm2, greedy_24):
    """aasd-strict[fallback=suffix] at the default margin and at the first approach's (1): greedy's output token for
    token in float32, first sight and repeat, with history drafts accepted on the repeat."""
    from test_real_exactness import first_divergence_is_near_tie

    from core.drafters.suffix import FALLBACK_MARGIN

    for margin in sorted({1, FALLBACK_MARGIN}):
        corpus = SuffixCorpus(fingerprint=smollm2.fingerprint)
        history = 0
        for ids, ref in greedy_24 * 2:  # first sight, then the repeat
            params = {"max_new_tokens": 24, "max_nodes": 16, "fallback": "suffix", "fallback_margin": margin}
            run = run_method("aasd-strict", smollm2, ids, params, corpus=corpus)
            history += judged(run, "history", "accepted")
            if run.output_ids != ref:
                ok, why = first_divergence_is_near_tie(smollm2, ids, ref, run.output_ids)
                assert ok, f"aasd-strict[fallback=suffix] is not greedy and the difference is no near-tie: {why}"
        assert history > 0, margin


def test_history_tokens_are_coloured_and_in_the_legend():
    from workbench.ui.tokens import ORIGIN_COLORS, legend_html, token_origins

    model = make_tiny(0)
    corpus = SuffixCorpus(fingerprint="tiny")
    runs = [
        run_method("suffix", model, prompt(5), {"max_new_tokens": 32, "max_nodes": 8}, corpus=corpus) for _ in range(2)
    ]
    origins = [origin for _, origin in token_origins(runs[1])]
    assert "history" in origins and len(origins) == len(runs[1].output_ids)
    assert (
        'title="from the model&#x27;s previous outputs' in legend_html() and ORIGIN_COLORS["history"] in legend_html()
    )
    assert len(set(ORIGIN_COLORS.values())) == len(ORIGIN_COLORS)  # its own colour


@pytest.mark.real_model
def test_auto_sized_suffix_on_smollm2_is_greedy_and_drafts_repeats_from_the_corpus(smollm2, monkeypatch):
    """max_nodes=auto in float32 on a cost curve like this CPU's (a node costs 0.65 of a forward): every request
    greedy's token for token, first sight and repeat; the repeats' trees are priced by the drafter's confidence,
    so they draft their answers from the corpus in far fewer steps than tokens."""
    from core import timing
    from core.cost_model import CostModel
    from core.models import encode_prompt

    ratios = (1.0, 1.65, 1.66, 1.66, 1.88, 2.38, 3.5, 5.4)
    cost = CostModel((0, 1, 2, 4, 8, 16, 32, 64), (256,), (tuple(0.03 * r for r in ratios),))
    monkeypatch.setattr(timing, "cost_model", lambda target, remeasure=False: cost)
    rows = spec_bench_rows(("coding", "summarization"), 1)
    corpus = SuffixCorpus(fingerprint=smollm2.fingerprint)
    prompts = [encode_prompt(smollm2.tokenizer, r["turns"][0]) for r in rows]
    refs = [run_method("greedy", smollm2, ids, {"max_new_tokens": 24}).output_ids for ids in prompts]
    runs = [run_method("suffix", smollm2, ids, {"max_new_tokens": 24}, corpus=corpus) for ids in prompts + prompts]
    assert [r.output_ids for r in runs] == refs + refs
    for run in runs[len(rows) :]:  # the repeats: 24 tokens in at most 10 steps
        assert judged(run, "history", "accepted") >= 12 and len(run.steps) <= 10, len(run.steps)
