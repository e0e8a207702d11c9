"""Token Recycling: the template, its expansion and the table update as pure functions; the drafter and
the engine's tree feedback on tiny models (strict recycle is greedy, token for token); the table's
persistence and record; AASD's recycle fallback; re-scoring and CSV of `recycled` nodes; and exactness
on the real SmolLM2 in float32."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import make_tiny, spec_bench_rows

from core.drafters import recycle as rc
from core.drafters.base import TreeTopK
from core.drafters.recycle import (
    PAPER_TEMPLATE,
    RecycleDrafter,
    RecycleTable,
    by_value,
    expand,
    from_paths,
    rows_to_write,
)
from core.engine import DecodeConfig, decode
from core.errors import InvalidInputError
from core.methods import get_method, make_verifier, resolve_params, run_method
from core.rules import by_source, fixed, strict
from core.trace import SOURCES


def depth_of(template, j):
    d = 0
    while j:
        j = template[j - 1][0]
        d += 1
    return d


# ---------------------------------------------------------------- pure functions
def test_the_papers_template_has_its_shape():
    assert len(PAPER_TEMPLATE) == 80
    assert Counter(depth_of(PAPER_TEMPLATE, j) for j in range(1, 81)) == {1: 8, 2: 21, 3: 25, 4: 15, 5: 8, 6: 3}
    assert all(parent < j for j, (parent, _) in enumerate(PAPER_TEMPLATE, start=1))
    assert PAPER_TEMPLATE[:3] == [(0, 0), (0, 1), (0, 2)] and PAPER_TEMPLATE[8] == (1, 0)  # [0,0] is under [0]
    with pytest.raises(ValueError, match="before its parent"):
        from_paths([[0, 1]])


def test_by_value_orders_prefixes_best_first():
    rates = (0.5, 0.2, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01)
    t = by_value(PAPER_TEMPLATE, rates)
    assert len(t) == 80 and all(parent < j for j, (parent, _) in enumerate(t, start=1))
    # the rank-0 chain comes first down to where rank 1 under the root (0.2) beats 0.5^3
    assert t[:3] == [(0, 0), (1, 0), (0, 1)]
    value = [1.0]
    for parent, rank in t:
        value.append(value[parent] * rates[rank])
    assert value[1:] == sorted(value[1:], reverse=True)


def test_expand_reads_the_table_and_drops_empty_entries_with_their_subtree():
    table = np.full((20, 8), -1, np.int32)
    table[5] = [6, 7, 8, 9, 10, 11, 12, 13]
    table[6] = [14, 15, 16, 17, 18, 19, 1, 2]
    # 7's row is empty: [1, 0] and everything below it go; 14's row is empty: nothing at depth 3 under [0, 0]
    tree = expand(PAPER_TEMPLATE, table, 5)
    assert tree.tokens[0] == 5 and tree.tokens[1:9] == [6, 7, 8, 9, 10, 11, 12, 13]
    kids_of_6 = [tree.tokens[c] for c in tree.children()[1]]
    assert kids_of_6 == [14, 15, 16, 17, 18, 19, 1, 2]
    assert tree.children()[2] == []  # token 7 has no row
    assert set(tree.sources[1:]) == {"recycled"} and tree.num_draft == 16
    small = expand(PAPER_TEMPLATE, table, 5, max_nodes=3)
    assert small.tokens == [5, 6, 7, 8]
    assert expand(PAPER_TEMPLATE, np.full((20, 8), -1, np.int32), 5).num_draft == 0


def test_rows_to_write_path_rows_win_then_later_rows():
    tokens = np.array([4, 9, 4, 9, 3])
    top = np.arange(5)[:, None] * 10 + np.arange(2)[None]
    rows, values = rows_to_write(tokens, top, path=[0, 1])
    got = {int(r): v.tolist() for r, v in zip(rows, values)}
    assert got == {4: [0, 1], 9: [10, 11], 3: [40, 41]}  # rows 0 and 1 are on the path: they win over 2 and 3
    rows, values = rows_to_write(tokens, top)
    assert {int(r): v.tolist() for r, v in zip(rows, values)} == {4: [20, 21], 9: [30, 31], 3: [40, 41]}


def test_the_table_learns_from_the_prompt_and_the_tree():
    table = RecycleTable(12, k=3)
    d = RecycleDrafter(table)
    assert d.prefill_topk == d.tree_topk == 3 and d.generated_topk == 0
    d.begin([2, 3, 4], type("P", (), {"ids": np.array([[5, 6, 7], [8, 9, 10]], np.int32)})())
    assert table.ids[2].tolist() == [5, 6, 7] and table.ids[3].tolist() == [8, 9, 10] and table.ids[4, 0] == -1
    d.observe_tree(TreeTopK(np.array([4, 5], np.int32), np.array([[1, 2, 3], [7, 8, 9]], np.int32), [0]))
    assert table.ids[4].tolist() == [1, 2, 3] and table.ids[5].tolist() == [7, 8, 9]
    assert table.state()["table_rows"] == 4
    assert d.propose([4]).tree.tokens[:4] == [4, 1, 2, 3]


# ---------------------------------------------------------------- the engine and the method on tiny models
def prompt(seed: int, n: int = 24) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 96) for _ in range(n)]


class Recorder(RecycleDrafter):
    def __init__(self, table):
        super().__init__(table)
        self.seen: list[TreeTopK] = []

    def observe_tree(self, forward):
        self.seen.append(forward)
        super().observe_tree(forward)


def test_the_engine_gives_an_observer_every_tree_rows_topk(tiny):
    drafter = Recorder(RecycleTable(tiny.vocab_size))
    verifier = make_verifier(get_method("recycle"), resolve_params("recycle"))
    out = decode(
        tiny.model, tiny.tokenizer, [1], prompt(3) * 2, drafter, verifier, DecodeConfig(max_new_tokens=40), 512
    )
    assert len(drafter.seen) == len(out.steps) and any(s.tree_size for s in out.steps)
    for fwd, step in zip(drafter.seen, out.steps):
        fed = [n.token_id for n in step.nodes if n.decision != "bonus"]  # the tree as verified (pruned)
        assert fwd.tokens.tolist() == fed and fwd.ids.shape == (len(fed), 8) and fwd.ids.dtype == np.int32
        assert fwd.path[0] == 0 and len(fwd.path) == step.accepted + 1
    # row 0 of the first step is the prompt's last row: its top-8 are the target's
    with torch.no_grad():
        logits = tiny.model(torch.tensor([prompt(3) * 2])).logits[0, -1]
    assert drafter.seen[0].ids[0].tolist() == logits.topk(8).indices.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_strict_recycle_is_greedy_on_tiny_models(seed):
    model = make_tiny(seed % 3)
    p = prompt(seed) * 2  # repeated text: the table proposes right drafts, so acceptance is exercised
    ref = run_method("greedy", model, p, {"max_new_tokens": 48}).output_ids
    runs = {}
    for name, params in (("cold", {"cold": 1}), ("fixed", {"cold": 1, "max_nodes": 8}), ("default", {})):
        runs[name] = run_method("recycle", model, p, {"max_new_tokens": 48, **params})
        assert runs[name].output_ids == ref, params
    # A fixed tree size, so acceptance is exercised whatever this machine's cost curve makes max_nodes=auto choose
    # (on a CPU where extra nodes cost almost a full forward, auto may rightly choose greedy's single token).
    assert any(s.accepted for s in runs["fixed"].steps)
    assert {n.source for run in runs.values() for s in run.steps for n in s.nodes} <= {"root", "recycled", "model"}


def test_the_table_persists_across_requests_and_is_recorded(tmp_path, monkeypatch):
    model = make_tiny(1)
    model.fingerprint = "tiny-persist"
    monkeypatch.setattr(rc, "_SHARED", {})
    first = run_method("recycle", model, prompt(1), {"max_new_tokens": 16})
    second = run_method("recycle", model, prompt(2), {"max_new_tokens": 16})
    assert first.params["table_rows"] == 0 and second.params["table_rows"] > 0
    assert first.params["table_sha"] != second.params["table_sha"]
    cold = run_method("recycle", model, prompt(2), {"max_new_tokens": 16, "cold": 1})
    assert cold.params["table_rows"] == 0
    with pytest.raises(InvalidInputError, match="choose one"):
        run_method("recycle", model, prompt(2), {"warm": 1, "cold": 1})
    # warm=1: saved under the workbench home after the run; a new process (a fresh registry) starts from it
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    warm = run_method("recycle", model, prompt(3), {"max_new_tokens": 16, "warm": 1})
    saved = tmp_path / "recycle" / "tiny-persist-k8.npy"
    assert saved.is_file()
    monkeypatch.setattr(rc, "_SHARED", {})
    again = run_method("recycle", model, prompt(4), {"max_new_tokens": 16, "warm": 1})
    assert again.params["table_rows"] >= warm.params["table_rows"] > 0
    assert np.array_equal(np.load(saved)[:, 0] >= 0, rc._SHARED[("tiny-persist", 8)].ids[:, 0] >= 0)


def test_aasd_falls_back_to_the_recycled_table_where_the_pool_has_no_match(monkeypatch):
    # The tiny models share one fingerprint, so an earlier test's table would fill the fallback: a fresh one.
    monkeypatch.setattr(rc, "_SHARED", {})
    model = make_tiny(0)
    p = prompt(12, 30)  # random tokens: few pool hits (prompt 11's output ends at its first token: one step)
    assert resolve_params("aasd", {"fallback": "recycle"})["fallback"] == 1
    with pytest.raises(InvalidInputError):
        resolve_params("aasd", {"fallback": "bogus"})
    ref = run_method("greedy", model, p, {"max_new_tokens": 40}).output_ids
    # Fixed trees: under max_nodes=auto a steep machine drafts nothing, recycled or not.
    off = run_method("aasd-strict", model, p, {"max_new_tokens": 40, "fallback": "none", "max_nodes": 16})
    on = run_method(
        "aasd-strict", model, p, {"max_new_tokens": 40, "fallback": "recycle", "max_nodes": 16}
    )  # off by default (RESULTS.md says why)
    assert on.output_ids == off.output_ids == ref
    assert "recycled" in {n.source for s in on.steps for n in s.nodes}
    assert "recycled" not in {n.source for s in off.steps for n in s.nodes}
    assert "table_sha" in on.params and "table_sha" not in off.params
    assert by_source(fixed(0.1))["recycled"] is strict  # AASD's split judges recycled nodes strictly


def test_recycled_nodes_rescore_and_round_trip_through_csv(tmp_path):
    from workbench.rescore import rescore_run
    from workbench.store import Store

    assert "recycled" in SOURCES
    model = make_tiny(0)
    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    for name in ("recycle-aasd", "aasd"):
        run = run_method(
            name,
            model,
            prompt(5) * 2,
            {"max_new_tokens": 32, "max_nodes": 16} | ({"cold": 1} if name != "aasd" else {"fallback": 1}),
        )
        stored = store.load_run(store.save_run(run)).trace
        again = rescore_run(stored)
        assert again.first_divergence is None and again.flip_counts == {}
        for step, new in zip(run.steps, again.steps):
            assert new.accepted == step.accepted
    assert any(n.source == "recycled" and n.decision == "accepted" for s in stored.steps for n in s.nodes)
    store.export_csv(None, tmp_path / "csv")  # CSV import validates sources against core.trace.SOURCES
    copy = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    [new_id] = copy.import_csv(tmp_path / "csv")[-1:]
    sources = {n.source for s in copy.load_run(new_id).trace.steps for n in s.nodes}
    assert "recycled" in sources


# ---------------------------------------------------------------- the real model (float32)
REAL_CATEGORIES = ("writing", "math", "translation", "roleplay", "coding", "summarization", "qa", "reasoning")


def check_recycle_equals_greedy(smollm2, rows, max_new: int) -> int:
    from test_real_exactness import first_divergence_is_near_tie

    from core.models import encode_prompt

    exact = 0
    for r in rows:
        ids = encode_prompt(smollm2.tokenizer, r["turns"][0])
        ref = run_method("greedy", smollm2, ids, {"max_new_tokens": max_new}).output_ids
        got = run_method("recycle", smollm2, ids, {"max_new_tokens": max_new}).output_ids
        if got == ref:
            exact += 1
            continue
        ok, why = first_divergence_is_near_tie(smollm2, ids, ref, got)
        assert ok, f"recycle is not greedy and the difference is no near-tie: {why}"
    return exact


@pytest.mark.real_model
@pytest.mark.slow
def test_recycle_equals_greedy_on_smollm2(smollm2):
    rows = spec_bench_rows(REAL_CATEGORIES, 1)
    assert check_recycle_equals_greedy(smollm2, rows, 32) >= len(rows) - 1


@pytest.mark.real_model
@pytest.mark.slow
def test_recycle_equals_greedy_on_at_least_40_items(smollm2):
    """The issue's target: identical to greedy on at least 40 items (48 tried; any other must be a near-tie)."""
    rows = spec_bench_rows(REAL_CATEGORIES, 6)
    exact = check_recycle_equals_greedy(smollm2, rows, 48)
    print(f"recycle identical to greedy on {exact} of {len(rows)} Spec-Bench items (SmolLM2-135M float32, 48 tokens)")
    assert exact >= 40
