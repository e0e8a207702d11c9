"""Teacher-forced calibration (issue 20): the pure pair extraction, corpora and their disjointness,
the loop on tiny models (resuming, metadata), and the shipped memory CSD falls back to."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import SPEC_BENCH, make_tiny, perturbed

import core.memory as memory_mod
from core.errors import InvalidInputError
from core.memory import CorrectionMemory, calibrated_path, memory_path, pair_fingerprint, shared_memory
from workbench.evaluation.calibration import benchmark_memory, check_disjoint, prompt_hash
from workbench.evaluation.forced_calibration import (
    Document,
    _answer_text,
    counted_sequences,
    coverage,
    disagreement_pairs,
    document_sequences,
    forced_calibrate,
    forced_documents,
    gate_passes,
)


# -- the pure part ----------------------------------------------------------------------------
def test_pairs_are_the_valid_positions_where_the_argmaxes_differ():
    draft = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    target = np.array([[5, 9, 7, 1], [2, 2, 3, 0]])
    valid = np.array([[True, True, True, False], [True, True, True, True]])
    # row by row; the last position of row 0 is not valid (padding / past the text)
    assert disagreement_pairs(draft, target, valid) == [(6, 9), (1, 2), (4, 0)]
    assert disagreement_pairs([1, 2], [1, 2], [True, True]) == []  # one row, full agreement
    assert disagreement_pairs([1, 2], [3, 4], [False, False]) == []  # nothing counts
    with pytest.raises(ValueError, match="shapes differ"):
        disagreement_pairs([[1, 2]], [[1]], [[True]])


def test_gate_and_coverage_helpers():
    assert gate_passes([0.0, -1.0, np.log(0.01), -5.0]) == 3  # inclusive, as the rescue rule
    rej = [(1, 2), (1, 2), (3, 4), (5, 6)]
    cov = coverage(rej, Counter({(1, 2): 6, (3, 4): 2}))
    assert cov == {"lam>=2": 0.75, "lam>=4": 0.5, "lam>=6": 0.5}
    assert coverage([], Counter()) == {"lam>=2": 0.0, "lam>=4": 0.0, "lam>=6": 0.0}


def test_gsm8k_answers_read_as_the_benchmark_asks_for_them():
    assert _answer_text("He has 4*1=<<4*1=4>>4 feet.\n#### 40") == "He has 4*1=4 feet.\nThe answer is 40."


# -- corpora ----------------------------------------------------------------------------------
def test_forced_corpus_drops_documents_that_overlap_the_benchmark(tmp_path):
    bench = tmp_path / "question.jsonl"
    shared = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat all day"
    bench.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": [shared]}) + "\n")
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "a", "text": "an unrelated text about compilers and parsers " * 3},
        {"id": "b", "text": "prefix words " + shared + " and more"},  # a 13-word overlap
        {"id": "c", "prompt": "a question", "response": "an answer " + shared},
    ]  # overlap in the answer
    corpus.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    docs, dropped, described = forced_documents(str(corpus), bench)
    assert [d.id for d in docs] == ["a"] and dropped == ["b", "c"] and described == str(corpus)
    # The memory records what was left out.
    target, draft = _tiny_pair()
    target.tokenizer = draft.tokenizer = _CharTokenizer()
    docs, dropped, _ = forced_documents(str(corpus), bench)
    mem = CorrectionMemory()
    forced_calibrate(target, draft, docs, mem, seq_len=64, dropped=dropped)
    assert mem.meta["forced_calibration"]["dropped_for_overlap"] == ["b", "c"]
    from workbench.evaluation.forced_calibration import corpus_counts

    (row,) = corpus_counts(str(corpus), bench)
    assert row["documents"] == 1 and row["dropped"] == ["b", "c"] and row["characters"] == len(rows[0]["text"])
    with pytest.raises(InvalidInputError):
        forced_documents(" , ", bench)


def test_held_out_dataset_documents_carry_their_solutions_and_skip_the_benchmark_share():
    if not SPEC_BENCH.is_file():
        pytest.skip("needs ../shared/data/spec_bench/question.jsonl")
    docs, dropped, _ = forced_documents("gsm8k+humaneval", SPEC_BENCH, skip=40, limit=6)
    docs = list(docs)
    assert [d.id for d in docs] == [
        "gsm8k/441",
        "humaneval/HumanEval/40",
        "gsm8k/442",
        "humaneval/HumanEval/41",
        "gsm8k/443",
        "humaneval/HumanEval/42",
    ] and not dropped
    assert docs[0].chat and docs[0].response.endswith(".") and "The answer is" in docs[0].response
    # The overlap fingerprints read the item and its answer, not the instruction every GSM8K prompt carries.
    assert "Solve the problem" in docs[0].prompt and "Solve the problem" not in docs[0].own_text
    assert docs[0].own_text.endswith(docs[0].response) and docs[1].own_text is None
    # HumanEval: the prompt as the benchmark gives it, the canonical solution as its continuation, one raw text
    assert not docs[1].chat and docs[1].prompt.rstrip().endswith('"""') and "return" in docs[1].response
    assert docs[1].text == docs[1].prompt + docs[1].response


class WordTokenizer:
    """Text of integers separated by spaces <-> ids; a chat template that wraps the prompt in 2 ... 3."""

    pad_token_id = 0
    chat_template = "x"

    def __call__(self, text, add_special_tokens=True):
        return SimpleNamespace(input_ids=[int(w) for w in text.split()])

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [2, *self(messages[-1]["content"]).input_ids, 3]

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(i) for i in ids)


def test_sequences_cut_raw_text_into_windows_and_count_only_the_answer_of_chat():
    tok = WordTokenizer()
    raw = Document("r", " ".join(str(4 + i % 50) for i in range(40)))
    seqs = document_sequences(raw, tok, seq_len=16)
    assert [len(s.ids) for s in seqs] == [16, 16] and all(s.start == 0 for s in seqs)  # the 8-token tail is too short
    assert len({s.key for s in seqs}) == 2
    chat = Document("c", "10 11 12", "20 21 22 23", chat=True)
    (s,) = document_sequences(chat, tok, seq_len=64)
    assert s.ids == [2, 10, 11, 12, 3, 20, 21, 22, 23] and s.start == 4  # position 4 predicts the answer's first token


# -- the loop -----------------------------------------------------------------------------------
def _tiny_pair():
    target, draft = make_tiny(0), perturbed(0, 0.3)
    target.tokenizer = draft.tokenizer = WordTokenizer()
    target.name, draft.name = "tiny-target", "tiny-draft"
    return target, draft


def _docs(n=5):
    rng = np.random.default_rng(0)
    return [Document(f"d{i}", " ".join(str(int(x)) for x in rng.integers(4, 96, size=40))) for i in range(n)]


def test_forced_calibration_counts_disagreements_and_resumes(tmp_path):
    target, draft = _tiny_pair()
    path, log = tmp_path / "mem.json", tmp_path / "log.jsonl"
    mem = CorrectionMemory.open(path)
    rep = forced_calibrate(target, draft, _docs(), mem, seq_len=32, batch_size=2, corpus="tiny", log=log)
    assert rep.sequences == 5 and rep.documents == 5 and rep.pairs == mem.total > 0 and rep.positions == 5 * 31
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 5 and sum(len(r["pairs"]) for r in rows) == mem.total
    assert all(len(r["gaps"]) == len(r["pairs"]) and all(g <= 0 for g in r["gaps"]) for r in rows)  # z(x̃) ≤ z(argmax)
    # Batching does not change the counts (padding never counts).
    one = CorrectionMemory()
    forced_calibrate(target, draft, _docs(), one, seq_len=32, batch_size=1)
    assert one.snapshot() == mem.snapshot()
    # Saved with its metadata; a rerun skips every counted sequence, a larger corpus adds only the new ones.
    saved = CorrectionMemory.load(path)
    info = saved.meta["forced_calibration"]
    assert info["corpus"] == "tiny" and info["sequences"] == 5 and info["observations"] == mem.total
    assert info["target_fingerprint"] == target.fingerprint and info["draft_fingerprint"] == draft.fingerprint
    assert len(counted_sequences(saved)) == 5 and saved.snapshot() == mem.snapshot()
    again = forced_calibrate(target, draft, _docs(), saved, seq_len=32)
    assert again.sequences == 0 and again.skipped == 5 and saved.total == mem.total
    more = forced_calibrate(target, draft, _docs(7), saved, seq_len=32, max_sequences=1)
    assert more.sequences == 1 and CorrectionMemory.load(path).meta["forced_calibration"]["sequences"] == 6
    # The documents' hashes let a benchmark check it was not calibrated on its prompts.
    assert check_disjoint(saved, [_docs()[0].text, "something else"]) == [_docs()[0].text]


def test_forced_calibration_needs_a_draft_model():
    target, _ = _tiny_pair()
    with pytest.raises(InvalidInputError, match="draft"):
        forced_calibrate(target, None, _docs(), CorrectionMemory())


# -- the shipped memory -------------------------------------------------------------------------
@pytest.fixture
def homes(tmp_path, monkeypatch):
    """An empty home and an empty package folder of shipped memories; the process-wide tables reset."""
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(memory_mod, "SHIPPED_DIR", tmp_path / "pkg" / "memories")
    monkeypatch.setattr(memory_mod, "_SHARED", {})
    target, draft = make_tiny(0), make_tiny(1)
    target.fingerprint, draft.fingerprint = "tgt-fp", "drf-fp"
    return target, draft, pair_fingerprint("tgt-fp", "drf-fp")


def test_gz_tables_round_trip_byte_for_byte(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    CorrectionMemory({(1, 2): 3, (4, 5): 1}, meta={"x": 1}).save(a)
    assert CorrectionMemory.load(a).snapshot() == {(1, 2): 3, (4, 5): 1}
    assert json.loads(gzip.decompress(a.read_bytes()))["observations"] == 4
    CorrectionMemory({(1, 2): 3, (4, 5): 1}, meta={"x": 1}).save(b)
    strip = lambda p: {k: v for k, v in json.loads(gzip.decompress(p.read_bytes())).items() if k != "meta"}  # noqa: E731
    assert strip(a) == strip(b)


def test_csd_falls_back_to_the_shipped_memory_and_never_writes_it(homes):
    target, draft, pair = homes
    assert calibrated_path(pair) == (None, "none") and shared_memory(target, draft).total == 0
    memory_mod._SHARED.clear()
    shipped = memory_mod.shipped_path(pair)
    CorrectionMemory(
        {(3, 4): 7}, meta={"forced_calibration": {"prompt_hashes": [prompt_hash("a benchmark prompt")]}}
    ).save(shipped)
    before = shipped.read_bytes()
    assert calibrated_path(pair) == (shipped, "shipped")
    mem = shared_memory(target, draft)
    assert mem.count(3, 4) == 7 and mem.path == memory_path(pair) and mem.unsaved == 0
    assert mem.meta["seeded_from"]["file"] == shipped.name and mem.meta["pair"] == pair
    # A benchmark's private copy comes from the shipped table too, checked against its prompts.
    assert benchmark_memory(target, draft, ["another prompt"]).count(3, 4) == 7
    with pytest.raises(InvalidInputError, match="calibrated on 1"):
        benchmark_memory(target, draft, ["a benchmark prompt"])
    # Online updates go to the home copy, which starts as the shipped counts; the shipped file is untouched.
    assert mem.observe(3, 4) == 7 and mem.observe(8, 9) == 0
    mem.save()
    assert shipped.read_bytes() == before
    home = CorrectionMemory.load(memory_path(pair))
    assert home.snapshot() == {(3, 4): 8, (8, 9): 1} and home.meta["seeded_from"]["sha256"]
    # From then on the home copy wins.
    assert calibrated_path(pair) == (memory_path(pair), "home")
    memory_mod._SHARED.clear()
    assert shared_memory(target, draft).count(3, 4) == 8


def test_the_users_own_calibration_wins_over_the_shipped_memory(homes):
    target, draft, pair = homes
    CorrectionMemory({(3, 4): 7}).save(memory_mod.shipped_path(pair))
    CorrectionMemory({(5, 6): 2}).save(memory_path(pair))  # calibrate wrote this
    mem = shared_memory(target, draft)
    assert mem.count(5, 6) == 2 and mem.count(3, 4) == 0 and "seeded_from" not in mem.meta


def test_a_table_seeded_from_the_shipped_one_merges_with_a_home_copy_another_process_wrote(homes, tmp_path):
    _, _, pair = homes
    shipped = memory_mod.shipped_path(pair)
    CorrectionMemory({(3, 4): 7}).save(shipped)
    a = CorrectionMemory.open(memory_path(pair), seed=shipped)
    b = CorrectionMemory.open(memory_path(pair), seed=shipped)
    a.observe(1, 1)
    a.save()  # writes seed + a's observation
    b.observe(2, 2)
    b.save()  # the file exists now: b adds only its own observation, the seed is not counted twice
    assert CorrectionMemory.load(memory_path(pair)).snapshot() == {(3, 4): 7, (1, 1): 1, (2, 2): 1}


# -- the real pair --------------------------------------------------------------------------------
@pytest.mark.real_model
@pytest.mark.slow
def test_csd_rescues_out_of_the_box_with_the_shipped_memory(tmp_path, monkeypatch):
    """A fresh home (no calibrated memory): csd on the Qwen pair reads the shipped table and rescues."""
    from core.memory import rescues
    from core.methods import run_method
    from core.models import encode_prompt, is_fetched, load_model, models_dir

    if not (is_fetched("qwen2.5-coder-1.5b") and is_fetched("qwen2.5-coder-0.5b")):
        pytest.skip(
            "needs the Qwen2.5-Coder pair: python -m workbench models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b"
        )
    monkeypatch.setenv("WORKBENCH_MODELS", str(models_dir()))  # keep the fetched models while the home moves
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(memory_mod, "_SHARED", {})
    target = load_model("qwen2.5-coder-1.5b", device="cpu", dtype="bfloat16")
    draft = load_model("qwen2.5-coder-0.5b", device="cpu", dtype="bfloat16")
    pair = pair_fingerprint(target.fingerprint, draft.fingerprint)
    shipped = memory_mod.shipped_memory_path(pair)
    assert shipped is not None, f"the package carries no memory for the Qwen pair ({pair}.json.gz in core/memories/)"
    assert calibrated_path(pair) == (shipped, "shipped")
    before = shipped.read_bytes()
    # Spec-Bench's fifth GSM8K item as the benchmarks prompt it: plain SD's fifth rejection on it, '.\n\n' -> '.',
    # is a pair the shipped table holds more than λ = 6 times.
    question = (
        "Sally went to the seashore for vacation.  Her parents gave her $10 to buy whatever she wanted.  At the "
        'trinket shop, taffy was on sale for "Buy 1 pound at $3, get 1 pound 1/2 off."  She scooped up 2 pounds.  '
        "She also bought a mixed bag of seashells for $1.50 and 4 magnets that were $0.25 each.  How much money "
        "does Sally have left?"
    )
    ids = encode_prompt(
        target.tokenizer,
        question + "\n\nSolve the problem step by step, then give the final answer as 'The answer is <number>'.",
        chat=True,
    )
    run = run_method("csd", target, ids, {"max_new_tokens": 128}, draft=draft)
    assert len(rescues(run.steps)) > 0
    memory_mod._save_shared()
    assert shipped.read_bytes() == before and memory_path(pair).exists()  # updates went to the home copy


# -- the corpus's n-gram fingerprints: the benchmark-overlap check (issue 30, item 4) ---------------
from workbench.evaluation import calibration as calibration_mod  # noqa: E402
from workbench.evaluation.calibration import (  # noqa: E402
    COMMON_DOCUMENTS,
    NGRAM,
    WINNOW,
    Fingerprints,
    ngram_hashes,
    pack_ints,
    unpack_ints,
    winnow,
)
from workbench.evaluation.forced_calibration import (  # noqa: E402
    corpus_sources,
    function_documents,
    read_log,
    reconcile_log,
    sharegpt_kind,
    stdlib_documents,
)


def _words_text(rng, n, vocab=5000):
    return " ".join(f"w{int(x)}" for x in rng.integers(0, vocab, size=n))


def test_packed_integers_round_trip():
    rng = np.random.default_rng(1)
    values = [int(v) for v in rng.integers(0, 2**40, size=2000)] + [0, 2**40 - 1]
    assert unpack_ints(pack_ints(values)) == sorted(set(values))
    assert unpack_ints(pack_ints([])) == []
    # gaps, not values: 2000 random 40-bit hashes (gaps of ~2^29) take 5 bytes each, under half their JSON
    assert len(pack_ints(values)) <= 2002 * 5 * 4 / 3 + 4 < len(json.dumps(values)) / 2


def test_winnowing_keeps_a_hash_of_every_window():
    hashes = [9, 3, 7, 8, 1, 6, 5, 4]
    assert winnow(hashes, 4) == {3, 1}
    assert winnow(hashes[:3], 4) == {3} and winnow([], 4) == set()
    rng = np.random.default_rng(2)
    h = [int(x) for x in rng.integers(0, 2**40, size=500)]
    kept = winnow(h)
    assert all(any(x in kept for x in h[i : i + WINNOW]) for i in range(len(h) - WINNOW + 1))
    assert len(kept) < 0.2 * len(h)  # about 2/(WINNOW+1) of them


def test_fingerprints_find_every_prompt_that_shares_a_long_enough_run_of_words():
    rng = np.random.default_rng(3)
    prints, docs = Fingerprints(), [_words_text(rng, 400) for _ in range(20)]
    for d in docs:
        prints.add(d)
    meta = Fingerprints.from_meta(prints.to_meta())  # what the memory stores
    assert meta.documents == prints.documents
    span = WINNOW + NGRAM - 1  # the guarantee: this many shared words are always found
    for trial in range(200):
        words = docs[trial % 20].split()
        start = int(rng.integers(0, len(words) - span))
        prompt = f"{_words_text(rng, 30, vocab=10**9)} {' '.join(words[start : start + span])} {_words_text(rng, 30, vocab=10**9)}"
        assert any(meta.holds(h) for h in ngram_hashes(prompt)), trial
    # A prompt sharing 12 consecutive words (no 13-gram) with a document is never found.
    words = docs[0].split()
    near = f"{_words_text(rng, 30, vocab=10**9)} {' '.join(words[50:62])} {_words_text(rng, 30, vocab=10**9)}"
    assert not any(meta.holds(h) for h in ngram_hashes(near))


def test_boilerplate_shared_by_many_documents_is_not_evidence():
    rng = np.random.default_rng(4)
    template = _words_text(rng, 40)
    prints = Fingerprints()
    for _ in range(3 * COMMON_DOCUMENTS):
        prints.add(_words_text(rng, 60) + " " + template + " " + _words_text(rng, 60))
    # In every document: a template. (Which of its 13-grams a document keeps depends on the words around it;
    # one first kept late in the corpus would still look rare: with dozens of documents that is unlikely.)
    assert not any(prints.holds(h) for h in ngram_hashes(template))
    # A document that holds a hash another kept counts for it even where winnowing did not keep it there.
    two = Fingerprints()
    two.add("a b c d e f g h i j k l m")
    two.add("z a b c d e f g h i j k l m " + _words_text(rng, 40))
    assert two.documents[ngram_hashes("a b c d e f g h i j k l m")[0]] == 2
    once = Fingerprints()
    once.add(_words_text(rng, 60) + " " + template)
    assert any(once.holds(h) for h in ngram_hashes(template))


def test_a_forced_memory_refuses_the_prompts_of_its_documents_not_only_their_whole_text(tmp_path):
    """Issue 30: the shipped memory hashed whole documents (prompt + solution) and the check hashed prompts,
    so it never fired. The document's prompt, or a long enough part of it, must be found."""
    target, draft = _tiny_pair()
    question = (
        "Tom has 3 apples and buys 4 more at the market near the station on his way home from school; his "
        "sister then gives him 2 more. How many apples does he have now in total, before he eats any of them?"
    )
    instruction = " Solve the problem step by step, then give the final answer as 'The answer is <number>'."
    docs = [
        Document("q1", question + instruction, "He has 3 + 4 + 2 = 9 apples. The answer is 9.", chat=True),
        Document("code", "def add(a, b):\n    return a + b\n" * 4),
    ]
    target.tokenizer = draft.tokenizer = _CharTokenizer()
    mem = CorrectionMemory()
    forced_calibrate(target, draft, docs, mem, seq_len=256)
    other = "Ann reads 12 pages a day for a whole week of her summer holiday at the lake; how many pages does she read?"
    assert check_disjoint(mem, [question + instruction]) == [question + instruction]  # the prompt, by hash
    assert check_disjoint(mem, ["Context first. " + question]) == ["Context first. " + question]  # a part, by 13-grams
    # The instruction every item carries is shared by the benchmark's own prompts: their template, not an item.
    assert check_disjoint(mem, [question + instruction, other + instruction]) == [question + instruction]
    assert check_disjoint(mem, [other + instruction, "a short one"]) == []
    prints = Fingerprints()
    prints.add(instruction)  # a corpus whose only text is the instruction: its 13-grams are held
    template_only = CorrectionMemory(meta={"forced_calibration": {"ngram_fingerprints": prints.to_meta()}})
    assert check_disjoint(template_only, ["Before it. " + instruction]) == ["Before it. " + instruction]
    assert check_disjoint(template_only, [question + instruction, other + instruction]) == []
    # The old check (whole-document hashes only) misses the prompt: the regression this guards.
    whole_only = {"forced_calibration": {"prompt_hashes": [prompt_hash(d.text) for d in docs]}}
    assert check_disjoint(CorrectionMemory(meta=whole_only), [question + instruction]) == []


class _CharTokenizer(WordTokenizer):
    """Any text to ids in [4, 96) (one per character), so real sentences run through the tiny models."""

    def __call__(self, text, add_special_tokens=True):
        return SimpleNamespace(input_ids=[4 + ord(c) % 92 for c in text])

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [2, *self(messages[-1]["content"]).input_ids, 3]


def test_an_old_memory_gets_the_fingerprints_of_its_corpus_without_a_model():
    from workbench.evaluation.forced_calibration import add_fingerprints

    docs = [
        Document("a", "first question " * 5, "first answer " * 10, chat=True),
        Document("b", " ".join(f"word{i}" for i in range(40))),
        Document("c", "not in the memory " * 9),
    ]
    old = CorrectionMemory(
        {(4, 5): 2},
        meta={
            "forced_calibration": {"sequence_hashes": ["k"], "prompt_hashes": [prompt_hash(d.text) for d in docs[:2]]}
        },
    )  # whole texts, as before
    assert check_disjoint(old, [docs[0].prompt]) == []  # the old check misses the prompt
    assert add_fingerprints(old, docs, corpus_spec="x") == 2
    info = old.meta["forced_calibration"]
    assert info["document_hashes"] == [prompt_hash(d.text) for d in docs[:2]] and info["corpus_spec"] == "x"
    assert check_disjoint(old, [docs[0].prompt, "prefix " + docs[1].prompt, docs[2].prompt]) == [
        docs[0].prompt,
        "prefix " + docs[1].prompt,
    ]
    assert old.snapshot() == {(4, 5): 2}
    with pytest.raises(InvalidInputError, match="already"):
        add_fingerprints(old, docs)
    missing = CorrectionMemory(meta={"forced_calibration": {"prompt_hashes": [prompt_hash("elsewhere")]}})
    with pytest.raises(InvalidInputError, match="only 0 of the memory's 1 documents"):
        add_fingerprints(missing, docs)


def test_an_old_memory_without_fingerprints_is_not_resumed():
    target, draft = _tiny_pair()
    old = CorrectionMemory({(4, 5): 2}, meta={"forced_calibration": {"sequence_hashes": ["abc"], "prompt_hashes": []}})
    with pytest.raises(InvalidInputError, match="--fresh"):
        forced_calibrate(target, draft, _docs(), old)


# -- corpus sources ---------------------------------------------------------------------------------
def test_functions_of_python_files_are_documents_of_their_own(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "tests").mkdir(parents=True)
    body = '    """' + "Explain the function at length. " * 8 + '"""\n    return x + 1\n'
    (pkg / "mod.py").write_text(
        f"import os\n\n\n@decorator\ndef top(x):\n{body}\n\nclass K:\n    def method(self, x):\n"
        + "".join("    " + line + "\n" for line in body.splitlines())
        + "\n\ndef short():\n    pass\n"
    )
    (pkg / "tests" / "test_mod.py").write_text("def test_x():\n" + body)  # tests are left out
    (pkg / "broken.py").write_text("def (:\n" + "x" * 300)  # does not parse: left out
    files = list(stdlib_documents(pkg, label="pkg"))
    assert sorted(f.id for f in files) == ["pkg/broken.py", "pkg/mod.py"]
    funcs = list(function_documents(files))
    assert [f.id for f in funcs] == [
        "pkg/mod.py:5",
        "pkg/mod.py:11",
    ]  # decorated top(), K.method(); short() is too short
    assert funcs[0].prompt.startswith("@decorator\ndef top(x):") and funcs[1].prompt.startswith("def method(self, x):")
    assert all(not f.chat and f.response == "" for f in funcs)


def test_sharegpt_kinds_and_corpus_groups(tmp_path):
    assert sharegpt_kind("Here:\n```python\nprint(1)\n```") == "code"
    assert sharegpt_kind("First 12 * 4 = 48, then 48 + 2 = 50, so 50 / 5 = 10.") == "math"
    assert sharegpt_kind("The capital of France is Paris, founded in 250 BC.") == "other"
    assert corpus_sources("a;b,c; ;d") == [["a"], ["b", "c"], ["d"]]
    files = []
    for name in "abc":
        f = tmp_path / f"{name}.jsonl"
        f.write_text(
            "".join(json.dumps({"id": f"{name}{i}", "text": f"text {name} {i} " * 5}) + "\n" for i in range(3))
        )
        files.append(str(f))
    docs, _, _ = forced_documents(f"{files[0]};{files[1]},{files[2]}", None)
    # the first group whole, then the second group's sources in turn
    assert [d.id for d in docs] == ["a0", "a1", "a2", "b0", "c0", "b1", "c1", "b2", "c2"]


# -- a background job: slices, resuming, kill safety ------------------------------------------------
def test_reconcile_log_drops_rows_the_memory_never_saved(tmp_path):
    log = tmp_path / "log.jsonl"
    rows = [
        {"key": "a", "pairs": [[1, 2]]},
        {"key": "b", "pairs": []},
        {"key": "a", "pairs": [[1, 2]]},
        {"key": "c", "pairs": [[3, 4]]},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"key": "d", "pai')  # killed mid-line
    assert reconcile_log(log, {"a", "b"}) == 3  # the repeat of a, c (never saved), the half line
    assert [r["key"] for r in read_log(log)] == ["a", "b"] and log.read_text().endswith("\n")
    assert reconcile_log(log, {"a", "b"}) == 0 and reconcile_log(tmp_path / "none.jsonl", set()) == 0


def test_a_target_reached_in_slices_gives_the_table_of_one_run(tmp_path):
    target, draft = _tiny_pair()
    whole = CorrectionMemory()
    rep = forced_calibrate(target, draft, _docs(12), whole, seq_len=32, target_observations=60)
    assert rep.total_observations >= 60 and rep.sequences < 12  # stopped by the target, before the corpus ended
    path, log = tmp_path / "m.json.gz", tmp_path / "log.jsonl"
    saves = []
    for _ in range(30):  # two sequences a run, a save after each, until the target stops it
        mem = CorrectionMemory.open(path)
        r = forced_calibrate(
            target,
            draft,
            _docs(12),
            mem,
            seq_len=32,
            target_observations=60,
            max_sequences=2,
            save_every=1,
            log=log,
            on_save=lambda rep: saves.append(rep.total_observations),
        )
        if r.sequences == 0:
            break
    final = CorrectionMemory.load(path)
    assert final.snapshot() == whole.snapshot()
    info = final.meta["forced_calibration"]
    assert info["sequences"] == rep.sequences and info["observations"] == whole.total
    assert len(info["sequence_hashes"]) == len(set(info["sequence_hashes"])) == rep.sequences
    assert info["seconds"] > 0 and info["cpu_seconds"] > 0  # cumulative over the runs
    rows = read_log(log)
    assert len(rows) == rep.sequences and sum(len(r["pairs"]) for r in rows) == whole.total
    assert saves == sorted(saves) and saves[-1] == whole.total


_KILL_SCRIPT = """
import sys, time
sys.path[:0] = [{tests!r}, {root!r}]
import torch
torch.set_num_threads(1)
from core.memory import CorrectionMemory
from test_forced_calibration import _tiny_pair, _docs
from workbench.evaluation.forced_calibration import forced_calibrate
target, draft = _tiny_pair()
mem = CorrectionMemory.open({path!r})
forced_calibrate(target, draft, _docs(24), mem, seq_len=32, save_every=3, log={log!r},
                 on_batch=lambda report: time.sleep(0.05))
"""


@pytest.mark.slow
def test_a_job_killed_with_sigkill_mid_slice_resumes_to_the_counts_of_an_uninterrupted_run(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    target, draft = _tiny_pair()
    reference = CorrectionMemory()
    forced_calibrate(target, draft, _docs(24), reference, seq_len=32)
    path, log = tmp_path / "mem.json.gz", tmp_path / "log.jsonl"
    tests = Path(__file__).resolve().parent
    script = _KILL_SCRIPT.format(tests=str(tests), root=str(tests.parent), path=str(path), log=str(log))

    def counted() -> int:
        return len(counted_sequences(CorrectionMemory.load(path))) if path.exists() else 0

    kills = []
    for extra in (0.07, 0.12):  # kill a little after a save: inside the next slice, rows computed and not saved
        proc = subprocess.Popen([sys.executable, "-c", script])
        before, deadline = counted(), time.monotonic() + 120
        while counted() <= before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(extra)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills.append(counted())
    assert 0 < kills[0] < kills[1] < 24 and all(k % 3 == 0 for k in kills)  # killed mid-corpus, after whole slices
    # The log may hold rows of the slice in progress; the rerun drops them and counts those sequences once.
    assert subprocess.run([sys.executable, "-c", script]).returncode == 0
    final = CorrectionMemory.load(path)
    info = final.meta["forced_calibration"]
    assert final.snapshot() == reference.snapshot()
    assert info["sequences"] == 24 and info["observations"] == reference.total
    assert sorted(info["sequence_hashes"]) == sorted(set(info["sequence_hashes"]))
    rows = read_log(log)
    assert len(rows) == 24 == len({r["key"] for r in rows}) and sum(len(r["pairs"]) for r in rows) == reference.total
    assert not list(tmp_path.glob("*.tmp"))


def test_a_second_job_on_the_same_memory_is_refused(tmp_path, monkeypatch):
    from workbench.commands.calibrate import job_lock

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    path = tmp_path / "m.json.gz"
    with job_lock(path):
        with pytest.raises(InvalidInputError, match="another calibration job"):
            with job_lock(path):
                pass
    with job_lock(path):  # released
        pass


# -- the shipped memory's overlap check, on the real file ---------------------------------------------
def test_the_shipped_memory_check_finds_the_benchmark_items_it_holds_and_none_it_does_not():
    """Over every HumanEval prompt and every Spec-Bench GSM8K prompt, as the benchmarks prompt them: the check
    flags exactly the held-out items whose documents the shipped memory counted (its document hashes say
    which), and none of the first 40 of each, which the benchmarks report on. The n-gram fingerprints
    alone find every such prompt long enough for their guarantee."""
    from core.memory import SHIPPED_DIR
    from workbench.evaluation.forced_calibration import dataset_documents
    from workbench.evaluation.tasks import load_dataset_tasks

    if not SPEC_BENCH.is_file():
        pytest.skip("needs ../shared/data/spec_bench/question.jsonl")
    # the Qwen pair's teacher-forced table (the package also ships SmolLM2's SD-calibrated context-draft one)
    (path,) = [p for p in SHIPPED_DIR.glob("*.json.gz") if "forced_calibration" in CorrectionMemory.load(p).meta]
    memory = CorrectionMemory.load(path)
    info = memory.meta["forced_calibration"]
    held = set(info["document_hashes"])
    prompts = {f"{t.category}/{t.id}": t.prompt() for spec in ("humaneval", "gsm8k") for t in load_dataset_tasks(spec)}
    counted = {d.id for d in dataset_documents("gsm8k+humaneval") if prompt_hash(d.text) in held}
    assert counted  # every corpus the memory was built with starts with held-out benchmark items
    first40 = {f"{t.category}/{t.id}" for spec in ("humaneval", "gsm8k") for t in load_dataset_tasks(spec)[:40]}
    assert len(prompts) == 164 + 80 and not counted & first40
    ids = {text: i for i, text in prompts.items()}
    found = {ids[t] for t in check_disjoint(memory, prompts.values())}
    assert found == counted
    # The n-gram part alone (no prompt hashes): nothing outside the counted prompts, and nearly every counted prompt
    # of WINNOW + 12 words or more. Not all: a 13-gram in COMMON_DOCUMENTS documents or more is boilerplate, not
    # evidence, and in a corpus of hundreds of documents a short GSM8K question's words beside the shared
    # instruction, or one of HumanEval's two near-identical bracket problems, can leave no window free of it
    # (4 of 164 at 21,987 observations; the prompt hashes above still find them).
    grams_only = CorrectionMemory(meta={"forced_calibration": {"ngram_fingerprints": info["ngram_fingerprints"]}})
    found = {ids[t] for t in check_disjoint(grams_only, prompts.values())}
    long_enough = {i for i in counted if len(calibration_mod._words(prompts[i])) >= WINNOW + NGRAM - 1}
    assert long_enough and found <= counted and len(long_enough - found) <= 0.05 * len(long_enough)
    # One at a time (no other prompt to reveal a shared template), none of the first 40 is refused either.
    assert not [i for i in first40 if check_disjoint(memory, [prompts[i]])]


def test_ship_from_copies_a_job_file_into_the_package_with_its_hash_and_rebuild_command(tmp_path, monkeypatch, capsys):
    from core.memory import file_sha256
    from workbench.commands.main import main

    monkeypatch.setattr(memory_mod, "SHIPPED_DIR", tmp_path / "pkg")
    target, draft = _tiny_pair()
    job = tmp_path / "job.json.gz"
    mem = CorrectionMemory.open(job, meta={"pair": "p123"})
    forced_calibrate(target, draft, _docs(3), mem, seq_len=32, corpus_spec="a;b,c")
    assert main(["calibrate", "--mode", "forced", "--draft", "d", "--ship-from", str(job)]) == 0
    shipped = tmp_path / "pkg" / "p123.json.gz"
    assert shipped.read_bytes() == job.read_bytes()
    side = shipped.with_name(shipped.name + ".sha256").read_text()
    assert side.startswith(f"{file_sha256(shipped)}  p123.json.gz\n")
    assert f"--target-observations {mem.total} --fresh --ship" in side and "--corpus 'a;b,c'" in side
    assert "--model tiny-target --draft tiny-draft --dtype float32" in side
    # --status reads the job's file (no model) and gives the ETA to a target at the rate so far.
    capsys.readouterr()
    assert (
        main(
            [
                "calibrate",
                "--mode",
                "forced",
                "--draft",
                "d",
                "--status",
                "--out",
                str(job),
                "--target-observations",
                str(2 * mem.total),
            ]
        )
        == 0
    )
    status = json.loads(capsys.readouterr().out)
    assert status["forced_observations"] == mem.total and status["sequences"] == 3 and status["eta_hours"] > 0
    # A memory without the corpus's fingerprints is not shipped; a missing file is a one-line error.
    CorrectionMemory({(1, 2): 3}, meta={"pair": "p123"}).save(tmp_path / "old.json.gz")
    assert main(["calibrate", "--mode", "forced", "--draft", "d", "--ship-from", str(tmp_path / "old.json.gz")]) == 2
    assert main(["calibrate", "--mode", "forced", "--draft", "d", "--ship-from", str(tmp_path / "none.json.gz")]) == 2
    assert "no memory file" in capsys.readouterr().err


def test_the_coverage_curve_and_its_extrapolation():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_forced_calibration import crossing, forced_curve

    log = [
        {"pairs": [[1, 2], [1, 2], [3, 4]], "cpu_seconds": 36.0, "seconds": 72.0},
        {"pairs": [[1, 2], [5, 6]], "cpu_seconds": 36.0, "seconds": 72.0},
    ]
    curve = forced_curve(log, [(1, 2), (5, 6), (7, 8)], marks=[3])
    assert [p["observations"] for p in curve] == [3, 5]
    assert (
        curve[0]["pairs"] == 2
        and curve[0]["lam>=2"] == pytest.approx(1 / 3)
        and curve[0]["unseen"] == pytest.approx(1 / 3)
    )
    assert (
        curve[1]["sequences"] == 2
        and curve[1]["cpu_hours"] == pytest.approx(0.02)
        and curve[1]["wall_hours"] == pytest.approx(0.04)
    )
    # +2 points a doubling from 1 % at 1,000 observations: 20 % after 9.5 more doublings.
    points = [{"observations": 1000 * 2**k, "lam>=6": 0.01 + 0.02 * k} for k in range(4)] + [
        {"observations": 500, "lam>=6": 0.0}
    ]
    c = crossing(points)
    assert (
        c["per_doubling"] == pytest.approx(0.02)
        and c["observations"] == pytest.approx(1000 * 2**9.5)
        and c["points"] == 4
    )
    assert (
        crossing(points[:1]) is None
        and crossing([{"observations": 10, "lam>=6": 0.1}, {"observations": 20, "lam>=6": 0.05}]) is None
    )
