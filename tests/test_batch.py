"""Batched decoding (issue 21, item 1): each row of a batch gives its batch-1 output for strict methods,
whatever the other rows' lengths and acceptance; the mask and cache bookkeeping as pure functions."""

from __future__ import annotations

import pytest
import torch
from conftest import spec_bench_rows

from core import cache as kv
from core.batch import REPACK_SLACK, padded_mask
from core.errors import InvalidInputError
from core.methods import run_batch, run_method
from core.models import encode_prompt
from core.tree import DraftTree

STRICT = ["greedy", "pld", "aasd-strict", "recycle[cold=1]"]


def _tree(parents: list[int]) -> DraftTree:
    t = DraftTree.root_only(1)
    for i, parent in enumerate(parents[1:], start=1):
        t.add(parent, 10 + i, "context")
    return t


def test_padded_mask_gives_each_row_its_cache_and_its_tree():
    valid = torch.tensor([[False, True, True], [True, True, False]])
    trees = [_tree([-1, 0, 0]), _tree([-1, 0])]  # a root with two children; a chain of two
    mask = padded_mask(valid, trees, 3, torch.float32)
    seen = mask[:, 0] == 0
    assert mask.shape == (2, 1, 3, 6)
    # row 0: cache slots 1, 2; node 1 and node 2 are siblings (each sees the root and itself, not the other)
    assert seen[0, 1].tolist() == [False, True, True, True, True, False]
    assert seen[0, 2].tolist() == [False, True, True, True, False, True]
    # row 1: cache slots 0, 1 (slot 2 is a hole); its padding query (node 2) sees only itself
    assert seen[1, 1].tolist() == [True, True, False, True, True, False]
    assert seen[1, 2].tolist() == [False, False, False, False, False, True]
    assert seen.any(-1).all()  # no query row is fully masked (SDPA would give NaN)


def test_keep_paths_moves_each_rows_path_and_leaves_holes():
    from transformers import DynamicCache

    cache = DynamicCache()
    keys = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 1, 6, 1)
    cache.update(keys, keys.clone(), 0)
    kv.keep_paths(cache, 2, [[0, 2, 3], [0]])
    layer = cache.layers[0]
    assert layer.keys[:, 0, :, 0].tolist() == [[0, 1, 2, 4, 5], [6, 7, 8, 8, 8]]
    kv.select_rows(cache, [1])
    assert layer.keys.shape[0] == 1 and cache.layers[0].keys[0, 0, :, 0].tolist() == [6, 7, 8, 8, 8]


@pytest.fixture(scope="module")
def tiny_prompts():
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 96, (n,), generator=g).tolist() for n in (5, 1, 12, 3, 40)]
    prompts[2][6:9] = prompts[2][0:3]  # something for the pool to find
    prompts[4][20:30] = prompts[4][0:10]
    return prompts


@pytest.mark.parametrize("method", STRICT)
def test_each_row_of_a_tiny_batch_is_its_batch_1_output(tiny, tiny_prompts, method):
    single = [
        run_method(method.split("[")[0], tiny, p, {"max_new_tokens": 20, **_params(method)}).output_ids
        for p in tiny_prompts
    ]
    runs = run_batch(method.split("[")[0], tiny, tiny_prompts, {"max_new_tokens": 20, **_params(method)})
    assert [r.output_ids for r in runs] == single
    assert all(r.status == "complete" and len(r.steps) >= 1 for r in runs)
    assert [r.prompt_ids for r in runs] == tiny_prompts  # traces stay per row


def test_rows_that_finish_early_leave_the_batch(tiny, tiny_prompts):
    runs = run_batch("greedy", tiny, tiny_prompts[:2], {"max_new_tokens": 20}, max_new_tokens=[3, 20])
    assert [len(r.output_ids) for r in runs] == [3, 20]
    assert runs[0].decode_seconds <= runs[1].decode_seconds


@pytest.mark.parametrize("method", ["greedy", "pld", "aasd-strict"])
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_waiting_prompts_take_finished_rows_places_with_their_batch_1_output(tiny, tiny_prompts, method, slots):
    """Continuous batching: more prompts than slots, rows of different lengths (so they finish at different
    steps and the cache holds rows admitted at different times); every row still gives its batch-1 tokens."""
    limits = [5, 20, 9, 14, 30]
    single = [run_method(method, tiny, p, {"max_new_tokens": n}).output_ids for p, n in zip(tiny_prompts, limits)]
    runs = run_batch(method, tiny, tiny_prompts, {"max_new_tokens": 30}, max_new_tokens=limits, slots=slots)
    assert [r.output_ids for r in runs] == single
    assert {r.params["batch_size"] for r in runs} == {slots}


def test_append_rows_left_pads_the_shorter_cache():
    from transformers import DynamicCache

    a, b = DynamicCache(), DynamicCache()
    a.update(torch.ones(2, 1, 3, 4), torch.ones(2, 1, 3, 4), 0)
    b.update(torch.full((1, 1, 5, 4), 2.0), torch.full((1, 1, 5, 4), 2.0), 0)
    kv.append_rows(a, b, 2, 1)
    keys = a.layers[0].keys
    assert keys.shape == (3, 1, 5, 4)
    assert keys[:2, :, :2].eq(0).all() and keys[:2, :, 2:].eq(1).all() and keys[2].eq(2).all()
    empty = DynamicCache()  # a row of a one-token prompt has seen nothing yet: zero slots of its own
    kv.append_rows(a, empty, 3, 2)
    assert a.layers[0].keys.shape == (5, 1, 5, 4) and a.layers[0].keys[3:].eq(0).all()


def test_holes_are_squeezed_out_without_changing_outputs(tiny, tiny_prompts, monkeypatch):
    import core.batch

    monkeypatch.setattr(core.batch, "REPACK_SLACK", 0)  # repack after every step
    single = [run_method("pld", tiny, p, {"max_new_tokens": 24}).output_ids for p in tiny_prompts]
    assert [r.output_ids for r in run_batch("pld", tiny, tiny_prompts, {"max_new_tokens": 24})] == single
    assert REPACK_SLACK > 0


def test_bad_batches_are_clear_errors(tiny):
    with pytest.raises(InvalidInputError, match="empty"):
        run_batch("greedy", tiny, [], {"max_new_tokens": 4})
    with pytest.raises(InvalidInputError, match="prompt is empty"):
        run_batch("greedy", tiny, [[1, 2], []], {"max_new_tokens": 4})
    with pytest.raises(InvalidInputError, match="cannot batch"):
        run_batch("hf-prompt-lookup", tiny, [[1, 2]], {"max_new_tokens": 4})


def _params(method: str) -> dict:
    return {"cold": 1} if "cold=1" in method else {}


@pytest.mark.real_model
@pytest.mark.parametrize("size", [1, pytest.param(3, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_smollm2_float32_rows_match_batch_1(smollm2, size):
    """Strict methods on SmolLM2 in float32, prompts of different lengths: each row gives its batch-1 tokens."""
    rows = spec_bench_rows(("summarization", "rag", "writing", "math_reasoning"), 2)
    full = sorted((encode_prompt(smollm2.tokenizer, r["turns"][0]) for r in rows), key=len)
    prompts = [p[-min(len(p), 40 + 20 * i) :] for i, p in enumerate(full)][::-1][:size]
    assert len({len(p) for p in prompts}) == len(prompts)
    for method in ("greedy", "aasd-strict") if size != 8 else ("greedy", "pld", "aasd-strict", "recycle"):
        params = {"max_new_tokens": 16, **({"cold": 1} if method == "recycle" else {})}
        single = [run_method(method, smollm2, p, params).output_ids for p in prompts]
        assert [r.output_ids for r in run_batch(method, smollm2, prompts, params)] == single, method


def test_a_batch_larger_than_memory_is_refused_before_any_work(tiny, monkeypatch):
    import core.batch
    from core.batch import batch_bytes

    cfg = tiny.model.config
    small = batch_bytes(cfg, torch.float32, 2, 100, 32)
    assert batch_bytes(cfg, torch.float32, 8, 100, 32) > 3 * small  # grows with the rows
    assert batch_bytes(cfg, torch.float32, 2, 1000, 32) > 5 * small  # and with the prompt
    monkeypatch.setattr(core.batch, "free_bytes", lambda device: small)  # as if the machine had little free
    with pytest.raises(InvalidInputError, match="smaller --batch-size"):
        run_batch("greedy", tiny, [[1, 2, 3]] * 8, {"max_new_tokens": 32})
    run_batch("greedy", tiny, [[1, 2, 3]], {"max_new_tokens": 4})  # one small row still fits
