"""Prompt compression (issue 22): the pure decisions (sentences, words, which words a budget keeps), the
self-information compressor on a tiny model built in code (its values against the plain log-softmax; the
early-exit scorer `selfinfo[layers=K]` against a Llama and a Qwen2 model cut after K layers), the task's
context split out of its prompt, the `pool=full|compressed` parameter, what a run records, llmlingua's
offline failure, bad input, and the real SmolLM2 model end to end (also early exit)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from conftest import hub_offline, make_tiny

from core.compress import (
    Compression,
    CompressorUnavailable,
    LLMLinguaCompressor,
    SelfInfoCompressor,
    check_compressor,
    check_pool,
    check_rate,
    is_pool_method,
    llmlingua_failure,
    make_compressor,
    parse_compressor,
    select_units,
    self_information,
    split_sentences,
    unit_scores,
    units_of,
    word_starts,
)
from core.drafters.context import ContextDrafter, align_positions, pool_predictions
from core.errors import InvalidInputError, WorkbenchError
from core.methods import METHODS, resolve_params, run_method
from workbench.evaluation.tasks import Task, compress_prompt, prompt_parts

# ---- rates, names, pool ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, 2, float("nan"), float("inf"), "half", None])
def test_a_rate_outside_zero_one_is_refused_with_a_readable_error(bad):
    with pytest.raises(InvalidInputError, match=r"\(0, 1\]"):
        check_rate(bad)


@pytest.mark.parametrize("good", [1, 1.0, 0.5, 0.33, "0.25", 1e-3])
def test_rates_in_zero_one_pass(good):
    assert 0 < check_rate(good) <= 1


def test_compressor_names_and_pool_values():
    assert check_compressor(None) == "selfinfo" and check_compressor("LLMLingua") == "llmlingua"
    with pytest.raises(InvalidInputError, match="unknown compressor"):
        check_compressor("gzip")
    assert check_pool("full") == "full" and check_pool("compressed") == "compressed" and check_pool(1) == "full"
    with pytest.raises(InvalidInputError, match="pool must be full"):
        check_pool("half")


def test_pool_is_a_parameter_of_the_context_drafting_methods_only():
    assert resolve_params("casd", {"pool": "compressed"})["pool"] == "compressed"
    assert resolve_params("aasd", {"pool": "full", "alpha": 0.2})["pool"] == "full"
    assert "pool" not in resolve_params("casd")  # the default (full) applies when a prompt is compressed
    with pytest.raises(InvalidInputError, match="no effect on greedy"):
        resolve_params("greedy", {"pool": "full"})
    with pytest.raises(InvalidInputError, match="pool must be"):
        resolve_params("casd", {"pool": "nope"})
    assert {n for n, m in METHODS.items() if is_pool_method(m)} >= {"casd", "casd-mixed", "aasd", "aasd-strict", "csd"}


# ---- pure decisions -------------------------------------------------------------------------


def test_sentences_concatenate_back_to_the_text():
    text = 'One. Two! "Three?" Four\n\nFive and six.  Seven'
    parts = split_sentences(text)
    assert "".join(parts) == text
    assert parts == ["One. ", "Two! ", '"Three?" ', "Four\n\n", "Five and six.  ", "Seven"]
    assert split_sentences("") == [] and split_sentences("no end") == ["no end"]


def test_word_starts_and_units():
    pieces = ["The", " cat", "s", " sat", ".", " ", "It", "\n", " ran"]
    assert word_starts(pieces) == [True, True, False, True, False, False, True, False, True]
    # a new sentence starts a new unit even inside a word
    assert units_of([True, False, False, True], [0, 0, 1, 1]) == [0, 0, 1, 2]


def test_unit_scores_are_means_per_unit():
    lengths, scores = unit_scores([1.0, 3.0, 5.0, 2.0], [0, 0, 1, 2])
    assert lengths == [2, 1, 1] and scores == [2.0, 5.0, 2.0]


def test_select_units_keeps_the_most_informative_within_each_sentences_budget():
    # two sentences of four one-token words; rate 0.5: two words from each, the highest scores
    keep = select_units([1] * 8, [5, 1, 4, 0, 0, 9, 8, 7], [0, 0, 0, 0, 1, 1, 1, 1], 0.5)
    assert keep == [True, False, True, False, False, True, True, False]


def test_select_units_carries_rounding_forward_and_hits_the_total_budget():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(5, 60))
        sentence_of = sorted(rng.integers(0, 6, n).tolist())
        scores = rng.random(n).tolist()
        for rate in (0.1, 0.33, 0.5, 0.9):
            keep = select_units([1] * n, scores, sentence_of, rate)
            assert sum(keep) == max(1, math.floor(rate * n + 0.5))


def test_select_units_ties_go_to_the_earlier_word_and_a_word_never_splits():
    assert select_units([1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], 0.5) == [True, True, False, False]
    # a 3-token word does not fit a budget of 2: the next words that fit are taken instead
    assert select_units([3, 1, 1], [9, 1, 1], [0, 0, 0], 0.4) == [False, True, True]


def test_select_units_keeps_everything_at_rate_one_and_something_at_tiny_rates():
    assert select_units([2, 1], [0, 0], [0, 0], 1.0) == [True, True]
    assert select_units([3, 4], [1, 2], [0, 1], 0.01) == [False, True]
    assert select_units([], [], [], 0.5) == []


def test_alignment_positions_map_a_compressed_prompt_into_its_full_prompt():
    full = [1, 2, 3, 4, 5, 6, 7, 8]
    assert align_positions([1, 3, 6, 8], full) == [0, 2, 5, 7]
    assert align_positions([1, 99, 4], full) == [0, -1, 3]
    prefill = np.array([[3, 30], [6, 60], [8, 80], [9, 90]], dtype=np.int32)  # row i predicts prompt token i + 1
    pred = pool_predictions([1, 3, 6, 8], full, prefill)
    assert pred[1].tolist() == [3, 30] and pred[4].tolist() == [6, 60] and pred[6].tolist() == [8, 80]
    assert (pred[[0, 2, 3, 5, 7]] == -1).all()  # nothing for the tokens the prompt dropped
    assert pool_predictions([50, 51, 52], full, prefill[:3]) is None  # an unrelated document: no alignment


# ---- the self-information compressor on a tiny model ----------------------------------------


class WordTokenizer:
    """Words (with their leading space) as tokens, ids from a growing table: enough for the compressor."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def _id(self, w):
        if w not in self.vocab:
            self.vocab[w] = 2 + len(self.words) % 90
            self.words.append(w)
        return self.vocab[w]

    def __call__(self, text, add_special_tokens=False):
        import re

        class Out:
            pass

        out = Out()
        out.input_ids = [self._id(w) for w in re.findall(r"\s*\S+|\s+", text)]
        return out

    def decode(self, ids, skip_special_tokens=False):
        by_id = {}
        for w, i in self.vocab.items():
            by_id.setdefault(i, w)
        return "".join(by_id[i] for i in ids)


TEXT = (
    "The river rises in the north. It flows south through three towns and a lake. "
    "Fishing boats leave at dawn. The lake is deep and cold in winter."
)


@pytest.fixture(scope="module")
def tiny_compressor():
    tiny = make_tiny()
    return SelfInfoCompressor(tiny.model, WordTokenizer())


def test_self_information_is_finite_and_windowed(tiny_compressor):
    ids = tiny_compressor.tokenize(TEXT)[0]
    full = self_information(tiny_compressor.model, ids, window=512)
    windowed = self_information(tiny_compressor.model, ids, window=8)
    assert full.shape == (len(ids),) and np.isfinite(full).all() and (full >= 0).all()
    assert np.allclose(full[1:8], windowed[1:8], atol=1e-4)  # the first window sees the same prefix


def test_the_builtin_compressor_reaches_its_rate_deterministically(tiny_compressor):
    a = tiny_compressor.compress(TEXT, 0.5)
    b = tiny_compressor.compress(TEXT, 0.5)
    assert a == Compression(**{**a.__dict__, "seconds": a.seconds}) and a.text == b.text
    assert a.compressor == "selfinfo" and a.rate == 0.5 and a.tokens_in == len(tiny_compressor.tokenize(TEXT)[0])
    assert abs(a.reached - 0.5) <= 1 / a.tokens_in + 1e-9 and a.tokens_kept == round(a.reached * a.tokens_in)
    kept_words = a.text.split()
    assert all(w in TEXT.split() for w in kept_words)  # words are kept whole, in order
    assert " ".join(kept_words) in " ".join(w for w in TEXT.split() if w in kept_words)
    whole = tiny_compressor.compress(TEXT, 1.0)
    assert whole.text == TEXT and whole.reached == 1.0
    rec = a.record()
    assert rec["compress"] == 0.5 and rec["compressor"] == "selfinfo" and rec["compress_reached"] == round(a.reached, 4)


@pytest.mark.parametrize("empty", ["", "   \n ", None])
def test_compressing_an_empty_context_is_a_clear_error(tiny_compressor, empty):
    with pytest.raises(InvalidInputError, match="nothing to compress"):
        tiny_compressor.compress(empty, 0.5)


# ---- self-information: the fused path, early exit ----------------------------------------------


def reference_self_information(model, ids, window=512):
    """The first implementation: the model's forward, every position's full log-softmax in float32."""
    import torch

    out = np.zeros(len(ids))
    with torch.inference_mode():
        for start in range(0, len(ids), window):
            chunk = [int(t) for t in ids[start : start + window]]
            x = torch.tensor([chunk])
            logits = model(input_ids=x).logits[0].float()
            if len(chunk) > 1:
                values = (-logits[:-1].log_softmax(-1).gather(1, x[0, 1:, None])[:, 0]).numpy().astype(np.float64)
                out[start + 1 : start + len(chunk)] = values
                out[start] = values.max()
    return out


def tiny_llama(layers=4, seed=0):
    return make_tiny(seed=seed, layers=layers).model


def tiny_qwen2(layers=4, seed=0):
    """A Qwen2 with sliding-window layers after the first (layer_types: full, sliding, sliding, sliding)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        use_sliding_window=True,
        max_window_layers=1,
        sliding_window=16,
        initializer_range=0.3,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(cfg).eval().requires_grad_(False)


def cut_after(model, k):
    """A separate copy of `model` with only its first k decoder layers: what early exit must equal."""
    import copy

    short = copy.deepcopy(model)
    short.model.layers = short.model.layers[:k]
    short.config.num_hidden_layers = k
    if getattr(short.config, "layer_types", None):
        short.config.layer_types = short.config.layer_types[:k]
    return short


IDS = np.random.default_rng(3).integers(2, 96, 300).tolist()


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen2])
@pytest.mark.parametrize("window", [512, 64, 7])
def test_self_information_equals_the_plain_log_softmax(build, window):
    from core import compress

    model = build()
    want = reference_self_information(model, IDS, window)
    got = self_information(model, IDS, window)
    assert np.allclose(got, want, atol=1e-5), np.abs(got - want).max()
    # more positions than one block of the head: blocks join up in order
    assert len(IDS) - 1 > compress.HEAD_ROWS


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen2])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_early_exit_equals_the_model_cut_after_k_layers_and_leaves_the_model_whole(build, k):
    import torch

    model = build()
    x = torch.tensor([IDS[:40]])
    with torch.inference_mode():
        before = model(input_ids=x).logits.clone()
    got = self_information(model, IDS, 64, layers=k)
    want = reference_self_information(cut_after(model, k), IDS, 64)
    assert np.allclose(got, want, atol=1e-5), np.abs(got - want).max()
    assert not np.allclose(got, self_information(model, IDS, 64), atol=1e-3)  # it did stop early
    assert len(model.model.layers) == 4 and model.config.num_hidden_layers == 4
    with torch.inference_mode():
        assert torch.equal(model(input_ids=x).logits, before)  # the model itself is unchanged
    assert np.allclose(
        self_information(model, IDS, 64, layers=4), self_information(model, IDS, 64)
    )  # K = L: all layers


def test_compressor_specs_parse_to_one_canonical_label():
    assert parse_compressor("selfinfo[layers=8]") == ("selfinfo", {"layers": 8})
    assert check_compressor(" SelfInfo[ Layers = 8 ] ") == "selfinfo[layers=8]"
    assert check_compressor("selfinfo") == "selfinfo" and check_compressor("selfinfo[]") == "selfinfo"
    for bad, message in [
        ("selfinfo[layers=0]", "whole number >= 1"),
        ("selfinfo[layers=-2]", "whole number >= 1"),
        ("selfinfo[layers=half]", "whole number >= 1"),
        ("selfinfo[layers=2.5]", "whole number >= 1"),
        ("selfinfo[depth=2]", "bad option"),
        ("selfinfo[layers]", "bad option"),
        ("llmlingua[layers=2]", "llmlingua takes: none"),
        ("selfinfo[layers=2", "bad compressor spec"),
        ("gzip[layers=2]", "unknown compressor"),
    ]:
        with pytest.raises(InvalidInputError, match=re_escape(message)):
            check_compressor(bad)


def re_escape(text):
    import re

    return re.escape(text)


def test_the_early_exit_compressor_runs_records_its_label_and_checks_k(tiny_compressor):
    from conftest import make_tiny

    tiny = make_tiny(layers=2)
    tiny.tokenizer = WordTokenizer()
    c = make_compressor("selfinfo[layers=1]", tiny)
    assert c.name == "selfinfo[layers=1]" and c.layers == 1
    a = c.compress(TEXT, 0.5)
    assert a.compressor == "selfinfo[layers=1]" and a.record()["compressor"] == "selfinfo[layers=1]"
    assert abs(a.reached - 0.5) <= 1 / a.tokens_in + 1e-9 and a.text == c.compress(TEXT, 0.5).text
    full = make_compressor("selfinfo[layers=2]", tiny)  # K = L: the whole model, under the label asked for
    assert full.name == "selfinfo[layers=2]"
    assert full.compress(TEXT, 0.5).text == SelfInfoCompressor(tiny.model, tiny.tokenizer).compress(TEXT, 0.5).text
    for k in (3, 0):
        with pytest.raises(InvalidInputError, match=r"has 2 decoder layers.*1\.\.2"):
            SelfInfoCompressor(tiny.model, tiny.tokenizer, layers=k)
    with pytest.raises(InvalidInputError, match=r"1\.\.2"):
        make_compressor("selfinfo[layers=9]", tiny)
    ids, kept, info = c.select(TEXT, 0.5)
    assert len(info) == len(ids) and kept == sorted(kept) and len(kept) == a.tokens_kept


def test_a_model_that_rescales_its_logits_is_scored_by_its_own_forward_and_refuses_early_exit():
    from transformers import LlamaForCausalLM

    base = tiny_llama(layers=2)

    class Halved(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 0.5
            return out

    model = Halved(base.config).eval().requires_grad_(False)
    model.load_state_dict(base.state_dict())
    assert np.allclose(self_information(model, IDS, 64), reference_self_information(model, IDS, 64), atol=1e-5)
    with pytest.raises(CompressorUnavailable, match="not head\\(decoder"):
        self_information(model, IDS, 64, layers=1)

    import torch

    class Plain(torch.nn.Module):  # a causal LM with no get_decoder / get_output_embeddings
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, **kwargs):
            return self.inner(input_ids=input_ids, **kwargs)

    plain = Plain(base)
    assert np.allclose(self_information(plain, IDS, 64), reference_self_information(base, IDS, 64), atol=1e-5)
    with pytest.raises(CompressorUnavailable, match="no separate decoder"):
        self_information(plain, IDS, 64, layers=1)


# ---- the context inside a task's prompt ------------------------------------------------------


def test_prompt_parts_split_templates_plain_contexts_and_spec_bench_rows():
    t = Task(
        id="1", task="qa", input="Who?", context="Doc text.", template="Read {context}\n\nQuestion: {input}\nAnswer:"
    )
    assert prompt_parts(t) == ("Read ", "Doc text.", "\n\nQuestion: Who?\nAnswer:")
    plain = Task(id="2", task="qa", input="Who?", context="Doc.")
    assert "".join(prompt_parts(plain)) == plain.prompt() and prompt_parts(plain)[1] == "Doc."
    summ = Task(id="3", task="summarization", input="Summarize: An article. More.", category="summarization")
    assert prompt_parts(summ) == ("Summarize: ", "An article. More.", "")
    rag = Task(id="4", task="qa", input="Passage one.\nPassage two.\nWho sings it?", category="rag")
    assert prompt_parts(rag) == ("", "Passage one.\nPassage two.", "\nWho sings it?")
    none = Task(id="5", task="chat", input="Hello there")
    assert prompt_parts(none) == ("Hello there", "", "")
    for task in (t, plain, summ, rag, none):
        assert "".join(prompt_parts(task)) == task.prompt()


def test_compress_prompt_keeps_the_instruction_and_question_whole(tiny_compressor):
    t = Task(
        id="1",
        task="qa",
        input="Which towns?",
        context=TEXT,
        template="Passages:\n{context}\n\nQuestion: {input}\nAnswer:",
    )
    text, done = compress_prompt(t, tiny_compressor, 0.4)
    assert text.startswith("Passages:\n") and text.endswith("\n\nQuestion: Which towns?\nAnswer:")
    assert done.text in text and len(done.text) < len(TEXT)
    with pytest.raises(InvalidInputError, match="no context"):
        compress_prompt(Task(id="x", task="chat", input="Hi"), tiny_compressor, 0.5)


# ---- runs record the compression; the pool holds the full prompt ------------------------------

COMPRESSION = Compression("short", "selfinfo", 0.5, 0.5, 40, 20, 0.01)


def test_a_compressed_run_records_compressor_rates_and_pool(tiny):
    full = list(range(2, 60))
    short = full[::2]
    run = run_method("casd", tiny, short, {"max_new_tokens": 6}, compression=COMPRESSION, uncompressed_ids=full)
    assert run.params["compress"] == 0.5 and run.params["compressor"] == "selfinfo"
    assert run.params["compress_reached"] == 0.5 and run.params["pool"] == "full" and run.prompt_ids == short
    run2 = run_method("casd", tiny, short, {"max_new_tokens": 6, "pool": "compressed"}, compression=COMPRESSION)
    assert run2.params["pool"] == "compressed"
    g = run_method("greedy", tiny, short, {"max_new_tokens": 6}, compression=COMPRESSION)
    assert g.params["compress"] == 0.5 and "pool" not in g.params
    with pytest.raises(InvalidInputError, match="uncompressed prompt"):
        run_method("aasd", tiny, short, {"max_new_tokens": 4}, compression=COMPRESSION)


def test_the_full_pool_drafts_what_only_the_uncompressed_prompt_holds():
    full = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6]
    compressed = [5, 9, 12, 5, 6]
    d = ContextDrafter(key_len=2, ngram=4, max_nodes=8, context_ids=full)
    d.begin(compressed, None)
    tree = d.propose([5, 6]).tree
    assert 7 in tree.tokens  # 5 6 -> 7 8 9 10: only the full prompt continues "5 6" this way
    d2 = ContextDrafter(key_len=2, ngram=4, max_nodes=8)
    d2.begin(compressed, None)
    assert 7 not in d2.propose([5, 6]).tree.tokens


# ---- llmlingua ------------------------------------------------------------------------------


def test_llmlingua_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "llmlingua", None)  # import fails as if not installed
    with pytest.raises(CompressorUnavailable, match="pip install llmlingua==0.2.2"):
        LLMLinguaCompressor("/nowhere")


def test_llmlingua_offline_is_a_clear_error(monkeypatch, tmp_path):
    pytest.importorskip("llmlingua")
    import requests
    import tiktoken

    def offline(name):
        raise requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='openaipublic.blob.core.windows.net'): Failed to resolve"
        )

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    with pytest.raises(CompressorUnavailable, match="tiktoken.*BPE.*TIKTOKEN_CACHE_DIR.*selfinfo") as e:
        LLMLinguaCompressor(str(tmp_path))
    assert isinstance(e.value, WorkbenchError)


def test_llmlingua_failure_messages():
    assert "TIKTOKEN_CACHE_DIR" in llmlingua_failure(OSError("openaipublic.blob.core.windows.net unreachable"), "start")
    assert "selfinfo" in llmlingua_failure(AttributeError("no attribute"), "compress")


# ---- the command line: bad input fails before anything loads or is stored ---------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--prompt", "Q?", "--context-file", "{ctx}", "--compress", "0"], "out of range"),
        (["generate", "--prompt", "Q?", "--context-file", "{ctx}", "--compress", "1.5"], "out of range"),
        (["generate", "--prompt", "Q?", "--compress", "0.5"], "context is empty"),
        (
            ["generate", "--prompt", "Q?", "--context-file", "{ctx}", "--compress", "0.5", "--compressor", "zip"],
            "unknown compressor",
        ),
        (["generate", "--prompt", "Q?", "--compressor", "selfinfo"], "need --compress"),
        (
            [
                "generate",
                "--prompt",
                "Q?",
                "--context-file",
                "{ctx}",
                "--compress",
                "0.5",
                "--compressor",
                "selfinfo[layers=0]",
            ],
            "whole number >= 1",
        ),
        (["bench", "--data", "x.jsonl", "--compress", "0.5", "--compressor", "selfinfo[depth=3]"], "bad option"),
        (["generate", "--prompt", "Q?", "--method", "greedy[pool=full]"], "no effect on greedy"),
        (["bench", "--data", "x.jsonl", "--compress", "-1"], "out of range"),
    ],
)
def test_bad_compression_input_fails_before_loading(argv, message, tmp_path, capsys, monkeypatch):
    from workbench.commands import common
    from workbench.commands.main import main

    monkeypatch.setattr(common, "load_models", lambda args: pytest.fail("a model was loaded"))
    ctx = tmp_path / "ctx.txt"
    ctx.write_text("")
    db = tmp_path / "t.db"
    argv = [a.replace("{ctx}", str(ctx)) for a in argv] + ["--db", str(db)]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# ---- the real model ------------------------------------------------------------------------------

DOC = (
    "The Amazon rainforest covers much of the Amazon basin of South America. This basin encompasses seven million square "
    "kilometres, of which five and a half million are covered by the rainforest. The region includes territory belonging "
    "to nine nations. The majority of the forest is contained within Brazil, with sixty percent of the rainforest, "
    "followed by Peru with thirteen percent and Colombia with ten percent. "
) * 3


@pytest.mark.real_model
def test_real_model_compression_generation_and_store(smollm2, tmp_path, monkeypatch, capsys):
    from core.compress import make_compressor
    from core.models import encode_prompt

    c = make_compressor("selfinfo", smollm2)
    a, b = c.compress(DOC, 0.5), c.compress(DOC, 0.5)
    assert a.text == b.text and abs(a.reached - 0.5) < 0.05 and 0 < len(a.text) < len(DOC)
    t = Task(
        id="amazon",
        task="qa",
        input="Which country holds most of the rainforest?",
        context=DOC,
        answers=["Brazil"],
        template="Answer the Question based on the given context.\n\nContext:{context}\n\nQuestion:{input}\n\nAnswer:",
    )
    text, done = compress_prompt(t, c, 0.5)
    assert text.endswith("Question:Which country holds most of the rainforest?\n\nAnswer:")
    full_ids = encode_prompt(smollm2.tokenizer, t.prompt())
    ids = encode_prompt(smollm2.tokenizer, text)
    assert len(ids) < 0.7 * len(full_ids)
    run = run_method("aasd", smollm2, ids, {"max_new_tokens": 12}, compression=done, uncompressed_ids=full_ids)
    assert run.params["pool"] == "full" and run.params["compressor"] == "selfinfo" and run.output_ids

    # generate --compress end to end, stored with what it recorded; a compressor that cannot load stores nothing
    from workbench.commands.main import main
    from workbench.store import Store

    hub_offline(monkeypatch)
    ctx = tmp_path / "doc.txt"
    ctx.write_text(DOC)
    db = tmp_path / "t.db"
    argv = [
        "generate",
        "--method",
        "casd",
        "--context-file",
        str(ctx),
        "--prompt",
        "Which country?",
        "--compress",
        "0.5",
        "--max-new-tokens",
        "8",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--json",
        "--db",
        str(db),
    ]
    assert main(argv) == 0
    import json

    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        out["params"]["compress"] == 0.5
        and out["params"]["pool"] == "full"
        and 0.4 < out["params"]["compress_reached"] < 0.6
    )
    store = Store(str(db))
    assert len(store.list_runs()) == 1
    if "llmlingua" in sys.modules or pytest.importorskip("llmlingua"):
        import tiktoken

        monkeypatch.setattr(
            tiktoken,
            "encoding_for_model",
            lambda name: (_ for _ in ()).throw(OSError("openaipublic.blob.core.windows.net: offline")),
        )
        assert main(argv[:-2] + ["--compressor", "llmlingua", "--db", str(db)]) == 2
        assert "TIKTOKEN_CACHE_DIR" in capsys.readouterr().err
        assert len(store.list_runs()) == 1  # nothing stored half-done


def test_sentence_units_parse_canonically_and_refuse_unknown_units():
    assert parse_compressor("selfinfo[unit=sentence]") == ("selfinfo", {"unit": "sentence"})
    assert check_compressor("selfinfo[unit=word]") == "selfinfo"  # the default is not written
    assert check_compressor("SelfInfo[unit=Sentence, layers=8]") == "selfinfo[layers=8,unit=sentence]"
    for bad, message in [
        ("selfinfo[unit=paragraph]", "unit must be one of word, sentence"),
        ("selfinfo[unit=]", "unit must be one of"),
        ("llmlingua[unit=sentence]", "llmlingua takes: none"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            check_compressor(bad)


def test_the_sentence_compressor_keeps_whole_sentences_of_highest_mean_information(tiny_compressor):
    from conftest import make_tiny

    tiny = make_tiny(layers=2)
    tiny.tokenizer = WordTokenizer()
    c = make_compressor("selfinfo[unit=sentence]", tiny)
    assert c.name == "selfinfo[unit=sentence]" and c.unit == "sentence"
    a = c.compress(TEXT, 0.5)
    assert a.compressor == "selfinfo[unit=sentence]" and 0 < a.tokens_kept <= round(0.5 * a.tokens_in)
    sentences = split_sentences(TEXT)
    ids, kept, info = c.select(TEXT, 0.5)
    _, sentence_of = c.tokenize(TEXT)
    chosen = sorted({sentence_of[i] for i in kept})
    for s in chosen:  # a sentence is kept whole or not at all
        assert all(i in kept for i, x in enumerate(sentence_of) if x == s)
    means = [float(np.mean([info[i] for i, x in enumerate(sentence_of) if x == s])) for s in range(len(sentences))]
    lengths = [sentence_of.count(s) for s in range(len(sentences))]
    budget = round(0.5 * len(ids)) - sum(lengths[s] for s in chosen)
    for s in set(range(len(sentences))) - set(chosen):  # a dropped sentence either scores lower than every kept one
        assert lengths[s] > budget or means[s] <= min(means[t] for t in chosen)  # or did not fit what was left
    assert only_whole_sentences(a.text, [sentences[s] for s in chosen])
    with pytest.raises(InvalidInputError, match="unit must be one of"):
        SelfInfoCompressor(tiny.model, tiny.tokenizer, unit="clause")


@pytest.mark.real_model
def test_real_model_sentence_compression_keeps_readable_sentences(smollm2):
    c = make_compressor("selfinfo[unit=sentence]", smollm2)
    a = c.compress(DOC, 0.5)
    assert a.compressor == "selfinfo[unit=sentence]" and 0.2 < a.reached <= 0.5 + 1e-9
    sentences = split_sentences(DOC)
    _, kept, _ = c.select(DOC, 0.5)
    sentence_of = c.tokenize(DOC)[1]
    chosen = sorted({sentence_of[i] for i in kept})
    assert 1 <= len(chosen) < len(sentences) and only_whole_sentences(a.text, [sentences[s] for s in chosen])
    word = make_compressor("selfinfo", smollm2)  # the word-level compressor cuts inside sentences
    _, kept_words, _ = word.select(DOC, 0.5)
    assert not only_whole_sentences(
        word.compress(DOC, 0.5).text, [sentences[s] for s in sorted({sentence_of[i] for i in kept_words})]
    )


def only_whole_sentences(text, sentences):
    """Whether `text` is exactly the given sentences in order (whitespace aside)."""
    rest = text
    for s in sentences:
        at = rest.find(s.strip())
        if at < 0 or rest[:at].strip():
            return False
        rest = rest[at + len(s.strip()) :]
    return not rest.strip()


@pytest.mark.real_model
def test_real_model_early_exit_compression_is_labelled_and_checked(smollm2):
    c = make_compressor("selfinfo[layers=8]", smollm2)
    a = c.compress(DOC, 0.5)
    assert a.compressor == "selfinfo[layers=8]" and abs(a.reached - 0.5) < 0.05 and 0 < len(a.text) < len(DOC)
    full = make_compressor("selfinfo", smollm2)
    ids, kept, info = c.select(DOC, 0.5)
    _, kept_full, info_full = full.select(DOC, 0.5)
    assert np.isfinite(info).all() and not np.allclose(info, info_full)
    assert len(set(kept) & set(kept_full)) > 0.3 * len(kept)  # related choices, not the same
    t = Task(
        id="amazon",
        task="qa",
        input="Which country?",
        context=DOC,
        template="Context:{context}\n\nQuestion:{input}\n\nAnswer:",
    )
    text, done = compress_prompt(t, c, 0.5)
    from core.models import encode_prompt

    run = run_method(
        "casd",
        smollm2,
        encode_prompt(smollm2.tokenizer, text),
        {"max_new_tokens": 4},
        compression=done,
        uncompressed_ids=encode_prompt(smollm2.tokenizer, t.prompt()),
    )
    assert run.params["compressor"] == "selfinfo[layers=8]"
    with pytest.raises(InvalidInputError, match=r"30 decoder layers.*1\.\.30"):
        make_compressor("selfinfo[layers=31]", smollm2)


def test_the_service_compresses_the_context_box_and_keeps_the_prompt(tiny_compressor):
    from conftest import make_tiny

    from workbench import service

    tiny = make_tiny()
    tiny.tokenizer = WordTokenizer()
    tiny.path = "tiny"
    text, ids, done, full_ids = service.compress_context(tiny, "Which towns?", TEXT, 0.5, "selfinfo", chat=False)
    assert text.endswith("\n\nWhich towns?") and done.text in text and len(ids) < len(full_ids)
    assert done.compressor == "selfinfo" and abs(done.reached - 0.5) < 0.1
    with pytest.raises(InvalidInputError, match="context is empty"):
        service.compress_context(tiny, "Which towns?", "  ", 0.5, chat=False)
    with pytest.raises(InvalidInputError, match="out of range"):
        service.compress_context(tiny, "Which towns?", TEXT, 0, chat=False)


def test_the_legacy_cache_wrapper_lets_llmlingua_continue_from_pairs(tiny):
    """llmlingua 0.2.2 hands the cache back as (key, value) pairs per layer and slices them; under the wrapper a
    continuation from such pairs gives the logits of one whole forward."""
    import torch

    from core.compress import LegacyCacheLM

    lm = LegacyCacheLM(tiny.model)
    ids = torch.tensor([[3, 9, 27, 4, 15, 8]])
    mask = torch.ones_like(ids)
    whole = lm(ids, attention_mask=mask, use_cache=True)
    first = lm(ids[:, :4], attention_mask=mask[:, :4], use_cache=True)
    pairs = first.past_key_values
    assert isinstance(pairs, list) and len(pairs) == 2 and pairs[0][0].shape[2] == 4
    pairs = [(k[..., :4, :], v[..., :4, :]) for k, v in pairs]  # llmlingua's own slicing
    rest = lm(ids[:, 4:], attention_mask=mask, past_key_values=pairs, use_cache=True)
    assert torch.allclose(rest.logits[0], whole.logits[0, 4:], atol=1e-4)
    assert lm.config is tiny.model.config  # everything else is the model's
