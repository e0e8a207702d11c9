"""The one step (core.step) that decode and the batched loop share: prefill progress and Stop between prefill
chunks, the tree sizer told the context length, and a batch of one deciding as decode does."""

from __future__ import annotations

import pytest

from core import cache as kv
from core.batch import decode_batch
from core.cost_model import CostModel
from core.drafters import NoDraft
from core.engine import DecodeConfig, decode
from core.methods import get_method, make_verifier, resolve_params, run_batch, run_method
from core.sizing import TreeSizer
from core.step import Cancelled, prefill_chunks

PROMPT = [5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 5]  # 11 tokens


def greedy_verifier():
    return make_verifier(get_method("greedy"), resolve_params("greedy", {}))


class DecoderCalls:
    """Counts forwards of the model's decoder stack (one per prefill chunk, and one per step's forward)."""

    def __init__(self, model):
        self.n = 0
        self.hook = model.get_decoder().register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.n += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.hook.remove()


def test_decode_reports_prefill_progress_per_chunk_and_decodes_as_unchunked(tiny, monkeypatch):
    whole = decode(
        tiny.model, tiny.tokenizer, [], PROMPT, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=12), 512
    )
    monkeypatch.setattr(kv, "PREFILL_CHUNK", 4)
    seen = []
    res = decode(
        tiny.model,
        tiny.tokenizer,
        [],
        PROMPT,
        NoDraft(),
        greedy_verifier(),
        DecodeConfig(max_new_tokens=12),
        512,
        on_prefill=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(4, 11), (8, 11), (11, 11)]
    assert res.output_ids == whole.output_ids


def test_a_long_prompt_reports_progress_and_honours_stop_more_than_once_by_default():
    """A 3,166-token prompt (a 20,000-character paste) is read in several chunks at the default size, so the status
    moves and Stop acts before the prompt's end (at 4,096 a chunk it was one silent forward)."""
    seen = []
    chunks = list(prefill_chunks(3166, None, lambda done, total: seen.append(done)))
    assert len(chunks) >= 3 and chunks[-1][1] == 3166 and seen[-1] == 3166
    assert max(end - start for start, end in chunks) <= 1024


def test_a_stop_between_prefill_chunks_cancels_with_zero_steps(tiny, monkeypatch):
    monkeypatch.setattr(kv, "PREFILL_CHUNK", 4)
    seen = []
    with DecoderCalls(tiny.model) as calls, pytest.raises(Cancelled) as stopped:
        decode(
            tiny.model,
            tiny.tokenizer,
            [],
            PROMPT,
            NoDraft(),
            greedy_verifier(),
            DecodeConfig(max_new_tokens=12),
            512,
            should_stop=lambda: len(seen) >= 1,
            on_prefill=lambda done, total: seen.append(done),
        )
    partial = stopped.value.partial
    assert calls.n == 1 and seen == [4]  # the second chunk never ran
    assert partial.steps == [] and partial.output_ids == [] and partial.stop_reason == "cancelled"


def test_run_method_passes_prefill_progress_and_stop_through(tiny, monkeypatch):
    monkeypatch.setattr(kv, "PREFILL_CHUNK", 4)
    seen = []
    params = {"max_new_tokens": 8, "max_nodes": 16}  # a fixed size: no cost curve to measure
    run = run_method("aasd", tiny, PROMPT, params, on_prefill=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (11, 11) and len(seen) == 3 and run.status == "complete"
    stopped = run_method(
        "aasd",
        tiny,
        PROMPT,
        params,
        should_stop=lambda: len(seen) >= 5,
        on_prefill=lambda done, total: seen.append((done, total)),
    )
    assert (
        stopped.status == "cancelled" and stopped.stop_reason == "cancelled" and stopped.steps == [] and len(seen) == 5
    )


def test_the_batch_reports_prefill_progress_over_all_its_prompts_and_stops_between_chunks(tiny, monkeypatch):
    monkeypatch.setattr(kv, "PREFILL_CHUNK", 4)
    prompts = [PROMPT, PROMPT[:6], PROMPT[:3]]
    total = sum(
        len(p) - 1 for p in prompts
    )  # the batch feeds every prompt but its last token, which its first step feeds
    seen = []
    runs = run_batch(
        "greedy", tiny, prompts, {"max_new_tokens": 6}, slots=2, on_prefill=lambda d, t: seen.append((d, t))
    )
    assert (
        seen[-1] == (total, total)
        and all(t == total for _, t in seen)
        and [d for d, _ in seen] == sorted(d for d, _ in seen)
    )
    assert [r.output_ids for r in runs] == [
        run_method("greedy", tiny, p, {"max_new_tokens": 6}).output_ids for p in prompts
    ]
    seen.clear()
    with DecoderCalls(tiny.model) as calls:
        stopped = run_batch(
            "greedy",
            tiny,
            prompts,
            {"max_new_tokens": 6},
            should_stop=lambda: len(seen) >= 1,
            on_prefill=lambda d, t: seen.append((d, t)),
        )
    assert calls.n == 1 and len(seen) == 1
    assert all(r.status == "cancelled" and r.stop_reason == "cancelled" and r.steps == [] for r in stopped)


class RecordingSizer(TreeSizer):
    """A sizer that keeps every tree whole and records the context length each call was told."""

    def __init__(self):
        super().__init__(CostModel((0, 64), (256,), ((0.01, 0.0101),)))
        self.told: list[int] = []

    def choose(self, tree, context_len):
        self.told.append(context_len)
        return super().choose(tree, context_len)


def test_the_sizer_is_told_the_tokens_in_the_cache(tiny):
    sizer = RecordingSizer()
    drafter, verifier = _aasd(tiny)
    res = decode(
        tiny.model, tiny.tokenizer, [], PROMPT * 2, drafter, verifier, DecodeConfig(max_new_tokens=16), 512, sizer=sizer
    )
    assert sizer.told == [s.cache_pos for s in res.steps] and sizer.told[0] == len(PROMPT * 2) - 1


def test_the_batch_common_size_is_told_each_rows_context(tiny, monkeypatch):
    import core.step

    told = []
    real = core.step.common_size
    monkeypatch.setattr(
        core.step, "common_size", lambda ranked, cost, lens: told.append(list(lens)) or real(ranked, cost, lens)
    )
    prompts = [PROMPT * 2, PROMPT]
    parts = [_aasd(tiny) for _ in prompts]
    results = decode_batch(
        tiny.model,
        tiny.tokenizer,
        [],
        prompts,
        [d for d, _ in parts],
        [v for _, v in parts],
        DecodeConfig(max_new_tokens=6),
        512,
        sizers=[RecordingSizer() for _ in prompts],
    )
    assert told[0] == [len(p) - 1 for p in prompts]
    assert told[: min(len(r.steps) for r in results)] == [
        [r.steps[i].cache_pos for r in results] for i in range(min(len(r.steps) for r in results))
    ]


def _aasd(tiny):
    from core.methods import build

    method = get_method("aasd-strict")
    params = resolve_params("aasd-strict", {"max_nodes": 16})
    return build(method, params, target=tiny)


@pytest.mark.parametrize("method", ["greedy", "aasd-strict", "pld"])
def test_a_batch_of_one_decides_every_node_as_decode_does(tiny, method):
    prompt = PROMPT * 3
    alone = run_method(method, tiny, prompt, {"max_new_tokens": 20})
    [batched] = run_batch(method, tiny, [prompt], {"max_new_tokens": 20})
    assert batched.output_ids == alone.output_ids
    decisions = [[(n.token_id, n.decision, n.source) for n in s.nodes] for s in alone.steps]
    assert [[(n.token_id, n.decision, n.source) for n in s.nodes] for s in batched.steps] == decisions


@pytest.mark.real_model
def test_smollm2_prefill_in_chunks_reports_progress_and_gives_the_same_tokens(smollm2, monkeypatch):
    from conftest import spec_bench_rows

    from core.models import encode_prompt

    ids = encode_prompt(smollm2.tokenizer, spec_bench_rows(("summarization",), 1)[0]["turns"][0])[-300:]
    whole = run_method("pld", smollm2, ids, {"max_new_tokens": 24})
    monkeypatch.setattr(kv, "PREFILL_CHUNK", 64)
    seen = []
    chunked = run_method("pld", smollm2, ids, {"max_new_tokens": 24}, on_prefill=lambda d, t: seen.append(d))
    assert seen == [min(64 * (i + 1), len(ids)) for i in range(-(-len(ids) // 64))]
    assert chunked.output_ids == whole.output_ids
    stopped = run_method(
        "pld",
        smollm2,
        ids,
        {"max_new_tokens": 24},
        should_stop=lambda: len(seen) > 6,
        on_prefill=lambda d, t: seen.append(d),
    )
    assert stopped.status == "cancelled" and stopped.steps == [] and len(seen) == 7
