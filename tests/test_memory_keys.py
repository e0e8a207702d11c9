"""Generalised correction keys, `csd[keys=exact|text|prefix|all]` (issue 34 lever 1).

The key functions and the lookup order are pure and tested without a model; the memory's derived counts
(built from the exact pairs and token texts, kept up to date online and after a merge); the walk's reason and
recorded count; tiny random models (keys=exact is today's CSD token for token; a text key rescues what the exact
pair cannot); re-scoring a stored keys=all run; and single-model CSD on SmolLM2 (real_model).
"""

from __future__ import annotations

import math

import pytest
from conftest import IdTokenizer, make_tiny, perturbed

from core.errors import InvalidInputError
from core.memory import (
    CorrectionMemory,
    KeyedMemory,
    PairKeys,
    ends_a_sentence_or_line,
    normalised_text,
    prefix_key,
    same_boundary,
    text_key,
)
from core.methods import METHODS, resolve_params, run_method
from core.rules import (
    KEY_ORDERS,
    KeyCounts,
    NodeStats,
    Rescue,
    fired_key,
    key_lookup,
    recorded_count,
    rescue_decision,
    strict,
)
from core.tree import DraftTree
from core.walk import walk
from workbench.rescore import rescore_run


# -- the key functions ----------------------------------------------------------------------------
def test_normalised_text_folds_case_space_and_unicode_form():
    assert normalised_text(" The") == normalised_text("the") == normalised_text("THE ") == "the"
    assert normalised_text("\uff34he") == "the"  # fullwidth T: NFKC
    assert normalised_text("Straße") == normalised_text("STRASSE")  # case-folding, not lower()
    assert normalised_text("\n\n") == "" and normalised_text("  ") == ""  # whitespace alone: no key
    assert normalised_text("ab\ufffd") == ""  # an incomplete UTF-8 piece: no key


def test_text_key_pairs_normalised_texts_and_skips_whitespace():
    assert text_key(" Solve", "determine") == text_key("solve", " Determine") == ("solve", "determine")
    assert text_key(" The", "the") == ("the", "the")  # a case/space variant of one word is its own key
    assert text_key("\n", " the") is None and text_key(" the", "  ") is None


def test_generalised_keys_never_pair_a_sentence_or_line_end_with_a_continuation():
    # the GSM8K losses of keys=all: a full stop rescued where the target went on ('.\n' for ' to', '.' for ' to'),
    # and a HumanEval bracket with blank lines for the bare bracket; only the exact pair may speak for these
    for draft, target in ((".\n", " to"), (".", " to"), ("?", " and"), (")\n\n\n", ")"), (",", ".")):
        assert not same_boundary(draft, target)
        assert text_key(draft, target) is None, (draft, target)
    assert prefix_key("]\n", "];") is None and prefix_key("];", "]\n") is None  # ']' a prefix of both, no spelling
    assert prefix_key("]", "];") == ("draft shorter", "]")  # neither ends a line: a tokenisation variant
    # pairs of one class still generalise, ends with ends and words with words
    assert text_key(".\n", "!") == (".", "!") and text_key(" .", "?\n\n") == (".", "?")
    assert text_key("#", " if") == ("#", "if") and text_key(" Solve", "determine") == ("solve", "determine")
    assert ends_a_sentence_or_line("done. ") and ends_a_sentence_or_line("x\n    ")
    assert not ends_a_sentence_or_line(" e.g") and not ends_a_sentence_or_line(".get")


def test_prefix_key_is_a_proper_prefix_either_way_keyed_by_the_draft():
    assert prefix_key(" ret", " return") == ("draft shorter", "ret")
    assert prefix_key("RET", "return") == ("draft shorter", "ret")  # normalised first
    assert prefix_key(" returns", " return") == ("draft longer", "returns")
    assert prefix_key(" The", "the") is None  # equal texts: the text key's case
    assert prefix_key(" cat", " dog") is None and prefix_key("\n", " return") is None


# -- the lookup order -----------------------------------------------------------------------------
def test_the_most_specific_key_that_reached_lambda_decides():
    # exact first: an exact pair at λ decides even where a coarser key counts more (a lookup by the largest
    # count, or in reverse order, fails here)
    assert key_lookup(KeyCounts((("exact", 7), ("text", 9), ("prefix", 20))), 6) == ("exact", 7)
    assert key_lookup(KeyCounts((("exact", 2), ("text", 9), ("prefix", 20))), 6) == ("text", 9)
    assert key_lookup(KeyCounts((("exact", 2), ("text", 3), ("prefix", 8))), 6) == ("prefix", 8)
    assert key_lookup(KeyCounts((("exact", 2), ("prefix", 3))), 6) == (None, 3)  # none: the largest, below λ
    assert key_lookup(KeyCounts((("exact", 0),)), 0) == ("exact", 0)
    with pytest.raises(ValueError, match="starts with the exact pair"):
        KeyCounts((("text", 9), ("exact", 2)))
    assert KEY_ORDERS == {0: ("exact",), 1: ("exact", "text"), 2: ("exact", "prefix"), 3: ("exact", "text", "prefix")}


def test_the_rescue_reason_names_the_key_and_a_trace_records_the_largest_count():
    rule = Rescue(lam=6, tau=0.01)
    ok, why = rescue_decision(rule, KeyCounts((("exact", 2), ("text", 9))), -0.5, 33)
    assert ok and "count 9 (text key) ≥ λ 6" in why
    ok, why = rescue_decision(rule, KeyCounts((("exact", 7), ("text", 9))), -0.5, 33)
    assert ok and "count 7 (exact key) ≥ λ 6" in why
    ok, why = rescue_decision(rule, KeyCounts((("exact", 2), ("text", 4))), -0.5, 33)
    assert not ok and "count 4 (largest of the keys) < λ 6" in why
    assert not rescue_decision(rule, KeyCounts((("exact", 2), ("text", 9))), -5.0, 33)[0]  # the gate still guards
    assert rescue_decision(rule, 7, -0.5, 33) == (
        True,
        "count 7 ≥ λ 6; z(x) − z(t*) -0.500 ≥ log τ -4.605",
    )  # as before
    assert recorded_count(KeyCounts((("exact", 2), ("text", 9), ("prefix", 4)))) == 9
    assert recorded_count(5) == 5 and recorded_count(None) is None
    assert fired_key(why) == "exact" and fired_key("count 7 ≥ λ 6; z(x) − z(t*) -0.500 ≥ log τ -4.605") == "exact"
    assert fired_key(rescue_decision(rule, KeyCounts((("exact", 2), ("prefix", 9))), -0.5, 33)[1]) == "prefix"


# -- the memory's derived counts --------------------------------------------------------------------
TEXTS = {
    1: " The",
    2: " cat",
    3: "the",
    4: "Cat",
    5: "THE",
    6: "cat",
    7: " ret",
    8: " return",
    9: " re",
    10: "\n",
    11: " rest",
}


def keys(kinds=("exact", "text", "prefix")) -> PairKeys:
    return PairKeys(kinds, TEXTS.__getitem__, "texts")


def test_derived_counts_sum_the_exact_pairs_under_each_key_and_follow_observations():
    mem = CorrectionMemory({(1, 2): 3, (3, 4): 4, (9, 8): 2, (10, 2): 5})
    assert mem.key_counts(1, 2, keys()).counts == (("exact", 3), ("text", 7), ("prefix", 0))
    assert mem.key_counts(5, 6, keys()).counts == (("exact", 0), ("text", 7), ("prefix", 0))  # never seen, same texts
    assert mem.key_counts(7, 8, keys()).counts == (("exact", 0), ("text", 0), ("prefix", 0))
    assert mem.key_counts(9, 8, keys()).counts == (("exact", 2), ("text", 2), ("prefix", 2))  # ' re' → ' return'
    assert mem.key_counts(9, 11, keys()).counts[2] == ("prefix", 2)  # ' re' corrected by any longer text: one key
    assert mem.key_counts(9, 1, keys()).counts[2] == ("prefix", 0)  # ' The' is no extension of ' re'
    before = mem.key_counts(5, 6, keys(), observe=True)  # read before the update, then counted everywhere
    assert before.counts[:2] == (("exact", 0), ("text", 7))
    assert mem.key_counts(1, 2, keys()).counts[:2] == (("exact", 3), ("text", 8)) and mem.count(5, 6) == 1
    mem.observe(3, 2)  # a plain observation updates the derived counts too
    assert mem.key_counts(1, 2, keys()).counts[1] == ("text", 9)
    assert mem.key_counts(10, 2, keys()).counts == (("exact", 5), ("text", 0), ("prefix", 0))  # whitespace: exact only
    assert mem.total == 16  # generalised keys add no observations


def test_keyed_memory_answers_in_the_order_of_its_kinds_and_updates_the_table():
    mem = CorrectionMemory({(3, 4): 6})
    view = KeyedMemory(mem, keys(("exact", "prefix")))
    assert view.count(1, 2).counts == (("exact", 0), ("prefix", 0))
    assert view.observe(1, 2).counts == (("exact", 0), ("prefix", 0)) and mem.count(1, 2) == 1
    both = KeyedMemory(mem, keys())
    assert [k for k, _ in both.count(1, 2).counts] == ["exact", "text", "prefix"]
    assert both.count(1, 2).counts[1] == ("text", 7)
    with pytest.raises(ValueError, match="start with 'exact'"):
        PairKeys(("text", "exact"), TEXTS.__getitem__, "texts")
    with pytest.raises(ValueError, match="start with 'exact'"):
        PairKeys(("exact", "stem"), TEXTS.__getitem__, "texts")


def test_a_save_that_adopts_another_process_counts_rebuilds_the_derived_counts(tmp_path):
    path = tmp_path / "m.json"
    a = CorrectionMemory({(1, 2): 1}, path=path)
    a.save()
    b = CorrectionMemory.load(path)
    assert a.key_counts(5, 6, keys()).counts[1] == ("text", 1)  # derived now, from a's counts
    b.observe(3, 4)
    b.observe(3, 4)
    b.save()
    a.observe(1, 2)
    a.save()  # merges b's two observations into a's table
    assert a.count(3, 4) == 2 and a.key_counts(5, 6, keys()).counts[1] == ("text", 4)


def test_the_key_fingerprint_follows_the_derived_counts():
    mem = CorrectionMemory({(1, 2): 3})
    first = mem.key_fingerprint(keys())
    assert (
        first == CorrectionMemory({(1, 2): 3}).key_fingerprint(keys()) != mem.key_fingerprint(keys(("exact", "text")))
    )
    mem.observe(3, 4)
    assert mem.key_fingerprint(keys()) != first


# -- the parameter ----------------------------------------------------------------------------------
def test_keys_is_a_parameter_of_the_memory_reading_methods_only():
    readers = {name for name, m in METHODS.items() if m.reads_memory}
    assert readers == {"csd", "csd-context", "sd-memory-only"}
    for name, m in METHODS.items():
        assert ("keys" in m.params) == (name in readers), name
    assert resolve_params("csd")["keys"] == 0
    assert [resolve_params("csd", {"keys": w})["keys"] for w in ("exact", "text", "prefix", "all")] == [0, 1, 2, 3]
    with pytest.raises(InvalidInputError, match="keys must be an integer or one of exact, text, prefix, all"):
        resolve_params("csd", {"keys": "stem"})
    with pytest.raises(InvalidInputError, match="has no effect on sd"):
        resolve_params("sd", {"keys": "all"})


# -- the walk -----------------------------------------------------------------------------------------
def test_the_walk_rescues_by_a_coarser_key_and_records_it():
    tree = DraftTree([5, 7, 8], [-1, 0, 1], [0, 1, 2], ["root", "draft", "draft"], [None, 0.9, 0.9])
    nodes = [None, NodeStats(0.2, 1.0, 0.35, 0.01, 2, 0.5), NodeStats(0.6, 1.0, 0.6, 0.01, 0, 0.0)]
    logp = [0.0, math.log(0.2), math.log(0.6)]
    v = walk(
        tree,
        nodes,
        logp,
        strict,
        rescue=Rescue(lam=6, tau=0.01),
        argmax=[33, 8, 40],
        count_of=lambda node, t: KeyCounts((("exact", 1), ("text", 8))),
    )
    assert v.decisions[1] == "rescued" and v.path == [0, 1, 2] and "count 8 (text key) ≥ λ 6" in v.reasons[1]
    assert v.extra[1] == {"correction_id": 33, "mem_count": 8}
    v = walk(
        tree,
        nodes,
        logp,
        strict,
        rescue=Rescue(lam=6, tau=0.01),
        argmax=[33, 8, 40],
        count_of=lambda node, t: KeyCounts((("exact", 1), ("text", 5))),
    )
    assert (
        v.decisions[1] == "rejected" and "(largest of the keys) < λ 6" in v.reasons[1] and v.extra[1]["mem_count"] == 5
    )


# -- tiny random models -------------------------------------------------------------------------------
class FoldingTokenizer(IdTokenizer):
    """Token i's text is 'w<i mod 48>', upper-cased with a leading space from 48 on: ids i and i + 48 are one word
    to the text key, and no exact pair knows one from the other."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f" W{i % 48}" if i >= 48 else f"w{i}" for i in ids)


def tiny_pair():
    target, draft = make_tiny(0), perturbed(0, 0.1)
    target.tokenizer = draft.tokenizer = FoldingTokenizer()
    return target, draft


PROMPT = [2, 3, 4, 5, 6, 7, 8, 9]


def rescued(run) -> list:
    return [n for s in run.steps for n in s.nodes if n.decision == "rescued"]


def test_keys_exact_is_todays_csd_token_for_token_on_a_tiny_pair():
    target, draft = tiny_pair()
    seed = CorrectionMemory()
    run_method("sd", target, PROMPT, {"max_new_tokens": 40}, draft=draft, memory=seed)  # calibration: sd's rejections
    assert seed.total > 3
    runs = {}
    for spec in ({}, {"keys": "exact"}):
        mem = seed.copy()
        runs[str(spec)] = (
            run_method("csd", target, PROMPT, {"max_new_tokens": 40, "lam": 1, **spec}, draft=draft, memory=mem),
            mem,
        )
    (plain, m0), (exact, m1) = runs.values()
    assert plain.output_ids == exact.output_ids and rescued(plain)
    assert [[n.decision for n in s.nodes] for s in plain.steps] == [[n.decision for n in s.nodes] for s in exact.steps]
    assert [[n.reason for n in s.nodes] for s in plain.steps] == [[n.reason for n in s.nodes] for s in exact.steps]
    assert m0.snapshot() == m1.snapshot()  # the same online updates
    assert "keys_sha" not in exact.params and exact.params["keys"] == 0


def test_a_text_key_rescues_what_the_exact_pair_never_saw_on_a_tiny_pair():
    target, draft = tiny_pair()
    probe = CorrectionMemory()
    sd = run_method("sd", target, PROMPT, {"max_new_tokens": 40}, draft=draft, memory=probe)
    # The memory knows every rejection only under the other spelling of its draft token: (x ± 48, t*).
    moved = CorrectionMemory({((d + 48) % 96, t): 3 for (d, t) in probe.snapshot()})
    assert all(moved.count(d, t) == 0 for d, t in probe.snapshot())
    frozen = {"max_new_tokens": 40, "lam": 3, "tau": 1e-9, "memory_mode": "frozen"}
    exact = run_method("csd", target, PROMPT, frozen, draft=draft, memory=moved)
    text = run_method("csd", target, PROMPT, {**frozen, "keys": "text"}, draft=draft, memory=moved)
    assert exact.output_ids == sd.output_ids and not rescued(exact)  # nothing known exactly: csd is sd
    assert rescued(text) and all("(text key)" in n.reason for n in rescued(text))
    assert text.params["keys"] == 1 and len(text.params["keys_sha"]) == 16
    assert moved.snapshot() == {((d + 48) % 96, t): 3 for (d, t) in probe.snapshot()}  # frozen: unchanged
    # A stored keys=text run re-scores to the same decisions (the trace holds the largest count).
    again = rescore_run(text)
    judged = [n for s in again.steps for n in s.nodes]
    assert all(n.decision == n.old_decision for n in judged) and not again.flip_counts
    assert sum(n.decision == "rescued" for n in judged) == len(rescued(text))
    assert all("(text key)" in n.old_reason for n in judged if n.decision == "rescued")  # the stored reason names it
    # and the re-score's own reason says its count is the largest over the run's keys (it cannot know which fired)
    assert all("(largest of the exact, text keys)" in n.reason for n in judged if n.decision == "rescued")
    assert all("key" not in n.reason for n in rescore_run(exact).steps for n in [*n.nodes] if n.reason)
    # The memory view lists, for every rescuing pair, the key kind that rescued it.
    from workbench.ui.memory_tab import entries_frame, rescue_counts, rescue_keys

    by_key = rescue_keys([text, exact])
    assert by_key and all(set(c) == {"text"} for c in by_key.values())
    assert sum(sum(c.values()) for c in by_key.values()) == len(rescued(text))
    frame = entries_frame(moved, rescue_counts([text]), str, by_key=by_key)
    shown = frame[frame["rescued in the runs"] > 0]
    assert len(shown) == len(by_key) and all(k.startswith("text ") for k in shown["rescued by key"])
    assert (shown["count"] == 0).all()  # rescued although the exact pair was never counted


# -- SmolLM2: single-model CSD over context drafts -------------------------------------------------------
@pytest.mark.real_model
@pytest.mark.slow
def test_single_model_csd_keys_on_smollm2(smollm2):
    """keys=exact is today's csd token for token; a memory that knows the run's rejections only under another
    spelling of the draft token (' The' for 'the': another id, one normalised text, found in SmolLM2's own
    vocabulary) rescues nothing exactly and something under keys=all, naming the text key."""
    from conftest import spec_bench_rows

    from core.models import encode_prompt

    tok = smollm2.tokenizer
    prompt = encode_prompt(tok, spec_bench_rows(("summarization",), 1)[0]["turns"][0])
    fixed = {"max_new_tokens": 48, "max_nodes": 16}  # a fixed tree: no t(n) timing on a busy machine
    probe = CorrectionMemory()
    run_method("csd", smollm2, prompt, {**fixed, "lam": 10**6}, memory=probe)  # rescues nothing, counts every rejection
    by_text: dict[str, list[int]] = {}
    for i in range(len(tok)):
        by_text.setdefault(normalised_text(tok.decode([i])), []).append(i)
    respelt = {}
    for d, t in probe.snapshot():
        other = [i for i in by_text.get(normalised_text(tok.decode([d])), []) if i != d]
        if normalised_text(tok.decode([d])) and other:
            respelt[(other[0], t)] = 2
    assert len(respelt) >= 3, respelt  # the run's rejections include words with another spelling in the vocabulary
    memory = CorrectionMemory(respelt)
    frozen = {**fixed, "lam": 2, "memory_mode": "frozen"}
    plain = run_method("csd", smollm2, prompt, frozen, memory=memory)
    exact = run_method("csd", smollm2, prompt, {**frozen, "keys": "exact"}, memory=memory)
    every = run_method("csd", smollm2, prompt, {**frozen, "keys": "all"}, memory=memory)
    assert exact.output_ids == plain.output_ids  # keys=exact is today's csd, token for token
    assert [n.reason for s in exact.steps for n in s.nodes] == [n.reason for s in plain.steps for n in s.nodes]
    assert not rescued(exact)  # no pair is known exactly
    assert len(rescued(every)) >= max(1, len(rescued(exact)))
    assert all("(text key)" in n.reason for n in rescued(every)), [n.reason for n in rescued(every)]
    assert every.params["keys"] == 3 and every.params["keys_sha"] != exact.params.get("keys_sha")


@pytest.mark.real_model
def test_the_shipped_memory_loads_with_generalised_keys_over_the_qwen_tokenizer():
    """The shipped table is exact pairs only: its text and prefix keys are derived at load from the tokenizer."""
    from transformers import AutoTokenizer

    from core.memory import SHIPPED_DIR
    from core.models import is_fetched, preset_path

    if not is_fetched("qwen2.5-coder-1.5b"):
        pytest.skip("qwen2.5-coder-1.5b is not fetched (python -m workbench models fetch qwen2.5-coder-1.5b)")
    tok = AutoTokenizer.from_pretrained(preset_path("qwen2.5-coder-1.5b"))
    # the Qwen pair's teacher-forced table (the package also ships SmolLM2's SD-calibrated context-draft one)
    (shipped,) = [p for p in SHIPPED_DIR.glob("*.json.gz") if "forced_calibration" in CorrectionMemory.load(p).meta]
    memory = CorrectionMemory.load(shipped)
    every = PairKeys.of(3, tok, "qwen")
    text_total = sum(memory._derived_counts("text", every).counts.values())
    exact_keyed = sum(n for (d, t), n in memory.snapshot().items() if text_key(tok.decode([d]), tok.decode([t])))
    assert text_total == exact_keyed > 0  # every observation with a text key counted once, none invented
    ids = {s: tok.encode(s) for s in ("#", "if", " if", " #")}
    assert all(len(v) == 1 for v in ids.values())
    hash_if = [memory.count(ids[d][0], ids[t][0]) for d, t in (("#", "if"), ("#", " if"), (" #", "if"), (" #", " if"))]
    counts = memory.key_counts(ids["#"][0], ids["if"][0], every).counts
    # '#'→'if' falls under the text key of all four spellings (and of any other token that normalises alike)
    assert counts[0] == ("exact", hash_if[0]) and counts[1][1] >= sum(hash_if) > hash_if[0]
    # a full stop for a word (GSM8K's losses under keys=all) is left to its exact pair: no text or prefix key counts
    # for it, though its normalised texts ('.', 'to') hold observations in the table
    stop, to = tok.encode(".\n"), tok.encode(" to")
    assert len(stop) == len(to) == 1
    assert memory.key_counts(stop[0], to[0], every).counts == (
        ("exact", memory.count(stop[0], to[0])),
        ("text", 0),
        ("prefix", 0),
    )
    unguarded = sum(
        n
        for (d, t), n in memory.snapshot().items()
        if (normalised_text(tok.decode([d])), normalised_text(tok.decode([t]))) == (".", "to")
    )
    assert unguarded > memory.count(stop[0], to[0])
