"""The workbench's suffix corpus (workbench.suffix_corpus): opened from the store, brought up to date from
a saved file, cut to its bound with a message, a corrupt or foreign file refused and rebuilt from the
store; stored runs join it as they finish, frozen and cold ones do not; and stream_run drafts from it."""

from __future__ import annotations

import random

import pytest
from conftest import make_tiny

from core.methods import run_method
from core.suffix import SuffixCorpus
from core.suffix import corpus as corpus_module
from workbench import suffix_corpus as sc
from workbench.store import Store
from workbench.store.corpus import run_key, store_id, stored_outputs


def prompt(seed: int, n: int = 20) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 96) for _ in range(n)]


@pytest.fixture
def model():
    m = make_tiny(0)
    m.fingerprint = "tiny-wb"
    return m


@pytest.fixture
def store(tmp_path, model):
    s = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    for seed in range(3):
        s.save_run(run_method("greedy", model, prompt(seed), {"max_new_tokens": 16}))
    return s


@pytest.fixture(autouse=True)
def fresh_registries(monkeypatch, tmp_path):
    monkeypatch.setattr(sc, "_OPENED", {})
    monkeypatch.setattr(corpus_module, "_SHARED", {})
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))


def stored(store, fingerprint="tiny-wb"):
    return sorted(tuple(ids) for _, ids in stored_outputs(store, fingerprint))


def test_opened_from_the_store_then_from_its_file_with_newer_runs(store, model, tmp_path):
    path = tmp_path / "c.corpus"
    corpus, notes = sc.open_corpus(store, "tiny-wb", path=path)
    assert notes == [] and path.is_file() and not corpus.frozen
    assert sorted(tuple(corpus.sequence(k)) for k in corpus.keys()) == stored(store)
    store.save_run(run_method("greedy", model, prompt(9), {"max_new_tokens": 16}))
    again, notes = sc.open_corpus(store, "tiny-wb", path=path)
    assert notes == [] and len(again) == len(corpus) + 1
    assert sorted(tuple(again.sequence(k)) for k in again.keys()) == stored(store)


def test_a_corrupt_or_foreign_file_is_refused_and_rebuilt_from_the_store(store, tmp_path):
    path = tmp_path / "c.corpus"
    sc.open_corpus(store, "tiny-wb", path=path)
    raw = bytearray(path.read_bytes())
    raw[-40] ^= 0xFF  # a flipped byte in the body: the checksum no longer matches
    path.write_bytes(bytes(raw))
    corpus, notes = sc.open_corpus(store, "tiny-wb", path=path)
    assert len(notes) == 1 and "refused" in notes[0] and "checksum" in notes[0] and "rebuilt" in notes[0]
    assert sorted(tuple(corpus.sequence(k)) for k in corpus.keys()) == stored(store)
    SuffixCorpus.load(path)  # the rebuilt file is whole again
    SuffixCorpus([("x", [5, 6, 7])], fingerprint="another-model").save(path)
    corpus, notes = sc.open_corpus(store, "tiny-wb", path=path)
    assert "another-model" in notes[0] and sorted(tuple(corpus.sequence(k)) for k in corpus.keys()) == stored(store)


def test_a_file_over_the_bound_is_cut_with_a_message(store, tmp_path):
    path = tmp_path / "c.corpus"
    full, _ = sc.open_corpus(store, "tiny-wb", path=path)
    newest = full.keys()[-1]
    corpus, notes = sc.open_corpus(store, "tiny-wb", max_tokens=20, path=path)
    assert len(notes) == 1 and "bound of 20 tokens" in notes[0] and "dropped" in notes[0]
    assert corpus.tokens <= 20 and corpus.keys() == [newest]


def test_stored_runs_join_the_installed_corpus_unless_frozen_or_cold(store, model):
    corpus = sc.corpus_for(store, "tiny-wb")
    assert corpus_module.shared_corpus("tiny-wb") is corpus and sc.corpus_for(store, "tiny-wb") is corpus
    before = len(corpus)
    frozen = run_method("suffix", model, prompt(30), {"max_new_tokens": 16, "max_nodes": 8, "corpus_mode": "frozen"})
    assert not sc.record_output(frozen, store.save_run(frozen), store) and len(corpus) == before
    cold = run_method("suffix", model, prompt(31), {"max_new_tokens": 16, "max_nodes": 8, "cold": 1})
    assert not sc.record_output(cold, store.save_run(cold), store) and len(corpus) == before
    # a prompt whose answer does not end at once (a tiny random model often says EOS first)
    seed, plain = next(
        (s, r)
        for s in range(32, 80)
        if len((r := run_method("greedy", model, prompt(s), {"max_new_tokens": 16})).output_ids) >= 12
    )
    rid = store.save_run(plain)
    assert (
        sc.record_output(plain, rid, store) and len(corpus) == before + 1 and corpus.keys()[-1] == run_key(store, rid)
    )
    # The suffix run drafts greedy's stored output: history nodes accepted on its first sight of the prompt.
    again = run_method("suffix", model, prompt(seed), {"max_new_tokens": 16, "max_nodes": 8})
    assert again.output_ids == plain.output_ids and again.params["corpus_requests"] == before + 1
    assert any(n.source == "history" and n.decision == "accepted" for s in again.steps for n in s.nodes)


def test_run_ids_of_two_stores_never_meet_in_one_corpus(store, model, tmp_path):
    """Run ids are only unique within one database: a second store (another --db, another test module's) numbers
    its runs from 1 too. Its runs must not be read from the first store's corpus file or join its corpus under the
    same id, and the first store's outputs must not draft for it."""
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    mine = [run_method("greedy", model, prompt(s), {"max_new_tokens": 16}) for s in range(50, 53)]
    ids = [other.save_run(r) for r in mine]
    assert set(ids) & {r for r, _ in stored_outputs(store, "tiny-wb")}  # the same run ids in both stores
    assert store_id(store) != store_id(other) and store_id(store) == store_id(Store(store.url))  # same file, same id
    first = sc.corpus_for(store, "tiny-wb")
    second = sc.corpus_for(other, "tiny-wb")  # the user switches --db: the other store's own corpus
    assert second is not first and corpus_module.shared_corpus("tiny-wb") is second
    assert sorted(tuple(second.sequence(k)) for k in second.keys()) == stored(other) != stored(store)
    assert set(first.keys()).isdisjoint(second.keys())
    # A run stored in `other` never joins the first store's corpus, and vice versa.
    assert sc.corpus_for(store, "tiny-wb") is not second
    held = corpus_module.shared_corpus("tiny-wb")
    before = len(held)
    extra = next(
        r
        for s in range(60, 99)
        if len((r := run_method("greedy", model, prompt(s), {"max_new_tokens": 16})).output_ids) >= 8
        and tuple(r.output_ids) not in set(stored(store))
    )
    assert not sc.record_output(extra, other.save_run(extra), other) and len(held) == before
    # Each store's saved file holds its own runs: reopening `other` from disk gives its outputs, not `store`'s.
    sc._OPENED.clear()
    reopened, notes = sc.open_corpus(other, "tiny-wb")
    assert notes == [] and sc.corpus_file("tiny-wb", other) != sc.corpus_file("tiny-wb", store)
    assert sorted(tuple(reopened.sequence(k)) for k in reopened.keys()) == stored(other)


def test_a_corpus_file_of_another_store_is_refused_and_rebuilt(store, model, tmp_path):
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    other.save_run(run_method("greedy", model, prompt(70), {"max_new_tokens": 16}))
    path = tmp_path / "c.corpus"
    sc.open_corpus(store, "tiny-wb", path=path)
    corpus, notes = sc.open_corpus(other, "tiny-wb", path=path)  # `store`'s file under `other`
    assert len(notes) == 1 and "not runs of" in notes[0] and "rebuilt" in notes[0]
    assert sorted(tuple(corpus.sequence(k)) for k in corpus.keys()) == stored(other)


def test_stream_run_opens_the_corpus_and_adds_the_stored_run(store, model):
    from workbench.service import Models, stream_run

    out = list(
        stream_run("greedy", Models(model, None), prompt(40), {"max_new_tokens": 12}, prompt_text="", store=store)
    )
    key = run_key(store, out[-1].run_id)
    corpus = corpus_module.shared_corpus("tiny-wb")
    assert key in corpus.keys() and len(corpus) == 4
    assert list(corpus.sequence(key)) == out[-1].run.output_ids


def test_the_corpus_view_lists_strings_reused_across_requests():
    from workbench.ui.corpus_view import corpus_markdown, most_reused

    shared = [7, 8, 9, 10]
    corpus = SuffixCorpus(
        [("a", [2, 3] + shared + [4]), ("b", shared + [5, 6]), ("c", [11, 12, 13, 14, 11, 12, 13, 14])],
        fingerprint="tiny-wb",
    )
    rows = most_reused(corpus, length=3, top=5)
    # [11 12 13] occurs twice but in one request only: not reused across requests
    assert rows == [((7, 8, 9), 2, 2), ((8, 9, 10), 2, 2)]
    text = corpus_markdown(corpus, lambda ids: " ".join(f"t{i}" for i in ids), length=3)
    assert "3 requests" in text and "`t7 t8 t9` | 2 | 2" in text and corpus.content_hash() in text
    assert "No 3-token string" in corpus_markdown(SuffixCorpus(), str, length=3)


# ---------------------------------------------------------------- the CLI's bench and report
def test_bench_installs_the_stores_corpus_for_suffix_methods_and_says_when_it_is_cold(store, model):
    from core.suffix import shared_corpus

    note, state = sc.install_for_bench(store, "tiny-wb", ["greedy", "pld"], {})
    assert note is None and state is None  # no method drafts from a corpus: nothing installed or said
    assert len(shared_corpus("tiny-wb")) == 0
    note, state = sc.install_for_bench(store, "tiny-wb", ["greedy", "aasd[fallback=suffix]", "suffix"], {})
    assert state["requests"] == 3 and "3 stored outputs" in note and "suffix" in note
    assert shared_corpus("tiny-wb") is sc._OPENED["tiny-wb"][0] and len(shared_corpus("tiny-wb")) == 3
    note, state = sc.install_for_bench(None, "other", ["suffix"], {})
    assert note.startswith("suffix corpus: cold: no trace store") and state["requests"] == 0
    note, state = sc.install_for_bench(store, "tiny-wb", ["suffix"], {"cold": 1})
    assert note.startswith("suffix corpus: cold:") and "cold=1" in note and state is None
    note, _ = sc.install_for_bench(store, "no-runs-of-this-model", ["suffix"], {})
    assert note.startswith("suffix corpus: cold:") and "holds no output of this model" in note


def test_the_bench_command_drafts_suffix_from_the_stores_corpus(store, model, tmp_path, monkeypatch, capsys):
    """`python -m workbench bench --methods suffix` on a store holding the model's outputs: the note on stderr, the
    corpus's state in --out's config, and the suffix run's params record the stored corpus it started from."""
    import json

    import workbench.evaluation.bench as bench
    from workbench.commands import common
    from workbench.commands.main import main

    monkeypatch.setattr(common, "load_models", lambda args: (model, None))
    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t1", "task": "qa", "input": "abc abc abc", "answers": ["x"]}) + "\n")
    out = tmp_path / "bench.json"
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(
        [
            "bench",
            "--db",
            db,
            "--data",
            str(data),
            "--methods",
            "greedy,suffix",
            "--max-new-tokens",
            "8",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "suffix corpus: 3 stored outputs" in err
    result = json.loads(out.read_text())
    assert result["config"]["suffix_corpus"]["requests"] == 3
    runs = Store(db).list_runs(tag="bench", limit=None)
    suffix_runs = [Store(db).load_run(r.id, nodes=False).trace for r in runs if r.method == "suffix"]
    assert suffix_runs and suffix_runs[0].params["corpus_requests"] == 3
    code = main(["bench", "--no-store", "--data", str(data), "--methods", "suffix", "--max-new-tokens", "8"])
    assert code == 0 and "suffix corpus: cold: no trace store" in capsys.readouterr().err


def test_the_bench_command_starts_suffix_from_the_stores_confidence_calibration(store, model, tmp_path, monkeypatch):
    """A store holding suffix runs calibrates the next suffix runs' confidence: confidence_priors reads it per method
    that drafts from a corpus, and `bench` passes it to the run, whose params record it."""
    import json

    import workbench.evaluation.bench as bench
    from workbench.commands import common
    from workbench.commands.main import main
    from workbench.store.priors import stored_calibration

    assert sc.confidence_priors(store, "tiny-wb", ["greedy", "suffix"], {}) == {}  # greedy runs only: no calibration
    corpus = SuffixCorpus(fingerprint="tiny-wb")
    for seed in (3, 4, 3, 4):  # repeats: history nodes with confidences, some rejected, some accepted
        store.save_run(run_method("suffix", model, prompt(seed), {"max_new_tokens": 24, "max_nodes": 8}, corpus=corpus))
    calibration = stored_calibration(store, "suffix", "tiny-wb")
    assert calibration
    priors = sc.confidence_priors(store, "tiny-wb", ["greedy", "suffix", "aasd[fallback=suffix]", "pld"], {})
    assert list(priors) == ["suffix"]  # aasd has no scored nodes stored; greedy and pld draft from no corpus
    assert dict(priors["suffix"].calibration) == calibration and priors["suffix"].counts == {}
    assert sc.confidence_priors(store, "tiny-wb", ["suffix"], {"cold": 1}) != {}  # cold: an empty corpus, calibrated

    monkeypatch.setattr(common, "load_models", lambda args: (model, None))
    monkeypatch.setattr(bench, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][:40])
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t1", "task": "qa", "input": "abc abc abc", "answers": ["x"]}) + "\n")
    args = ["bench", "--db", store.url, "--data", str(data), "--methods", "suffix", "--max-new-tokens", "8"]
    assert main([*args, "--out", str(tmp_path / "b.json")]) == 0
    runs = [r for r in store.list_runs(tag="bench", limit=None) if r.method == "suffix"]
    recorded = json.loads(store.load_run(runs[0].id, nodes=False).trace.params["prior"])
    assert recorded["calibration"] == [[s, b, a, v] for (s, b), (a, v) in sorted(calibration.items())]
