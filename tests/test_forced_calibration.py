"""Teacher-forced calibration (issue 20): the pure pair extraction, corpora and their disjointness,
the loop on tiny models (resuming, metadata), and the shipped memory CSD falls back to."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

import core.memory as memory_mod
from conftest import SPEC_BENCH, make_tiny, perturbed
from core.errors import InvalidInputError
from core.memory import CorrectionMemory, calibrated_path, memory_path, pair_fingerprint, shared_memory
from workbench.evaluation.calibration import benchmark_memory, check_disjoint, prompt_hash
from workbench.evaluation.forced_calibration import (Document, _answer_text, counted_sequences, coverage,
                                                     disagreement_pairs, document_sequences, forced_calibrate,
                                                     forced_documents, gate_passes)


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
    rows = [{"id": "a", "text": "an unrelated text about compilers and parsers " * 3},
            {"id": "b", "text": "prefix words " + shared + " and more"},  # a 13-word overlap
            {"id": "c", "prompt": "a question", "response": "an answer " + shared}]  # overlap in the answer
    corpus.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    docs, dropped, described = forced_documents(str(corpus), bench)
    assert [d.id for d in docs] == ["a"] and dropped == ["b", "c"] and described == str(corpus)
    with pytest.raises(InvalidInputError):
        forced_documents(" , ", bench)


def test_held_out_dataset_documents_carry_their_solutions_and_skip_the_benchmark_share():
    if not SPEC_BENCH.is_file():
        pytest.skip("needs ../shared/data/spec_bench/question.jsonl")
    docs, dropped, _ = forced_documents("gsm8k+humaneval", SPEC_BENCH, skip=40, limit=6)
    docs = list(docs)
    assert [d.id for d in docs] == ["gsm8k/441", "humaneval/HumanEval/40", "gsm8k/442", "humaneval/HumanEval/41",
                                    "gsm8k/443", "humaneval/HumanEval/42"] and not dropped
    assert docs[0].chat and docs[0].response.endswith(".") and "The answer is" in docs[0].response
    assert not docs[1].chat and "def " in docs[1].prompt and docs[1].response == ""


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
    CorrectionMemory({(3, 4): 7}, meta={"forced_calibration": {"prompt_hashes": [prompt_hash("a benchmark prompt")]}}).save(shipped)
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
        pytest.skip("needs the Qwen2.5-Coder pair: python -m workbench models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b")
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
    question = ("Sally went to the seashore for vacation.  Her parents gave her $10 to buy whatever she wanted.  At the "
                "trinket shop, taffy was on sale for \"Buy 1 pound at $3, get 1 pound 1/2 off.\"  She scooped up 2 pounds.  "
                "She also bought a mixed bag of seashells for $1.50 and 4 magnets that were $0.25 each.  How much money "
                "does Sally have left?")
    ids = encode_prompt(target.tokenizer, question + "\n\nSolve the problem step by step, then give the final answer as "
                        "'The answer is <number>'.", chat=True)
    run = run_method("csd", target, ids, {"max_new_tokens": 128}, draft=draft)
    assert len(rescues(run.steps)) > 0
    memory_mod._save_shared()
    assert shipped.read_bytes() == before and memory_path(pair).exists()  # updates went to the home copy
