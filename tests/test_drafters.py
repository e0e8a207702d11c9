"""Drafters without a model: PLD's chain, context retrieval into a trie, alignment sampling."""

import numpy as np

from core.drafters import ContextDrafter, PromptLookupDrafter, TopK


def test_pld_takes_the_earliest_longest_match():
    prompt = [1, 2, 3, 10, 11, 12, 5, 2, 3, 20, 21, 9, 2, 3]
    d = PromptLookupDrafter(max_ngram=3, num_tokens=4)
    d.begin(prompt, None)
    tree = d.propose(prompt).tree
    assert tree.tokens == [3, 10, 11, 12, 5]  # "2 3" first occurs at index 1: continuation 10 11 12 5
    assert tree.parents == [-1, 0, 1, 2, 3]
    d.commit([7, 7], None)
    seq = prompt + [7, 7]
    assert d.propose(seq).tree.tokens == [7, 7]  # only "7" matches: its first occurrence is followed by the second 7


def test_context_drafter_merges_hits_and_tags_sources():
    prompt = [5, 6, 7, 8, 9, 1, 5, 6, 7, 30, 31, 2, 5, 6]
    d = ContextDrafter(key_len=3, ngram=3, max_nodes=16)
    d.begin(prompt, None)
    tree = d.propose(prompt).tree
    # key "5 6" hits at 0 and 6: continuations 7 8 9 and 7 30 31 share the 7
    assert tree.tokens[0] == 6 and tree.num_draft == 5
    seven = tree.child(0, 7)
    assert {tree.tokens[c] for c in tree.children()[seven]} == {8, 30}
    assert set(tree.sources[1:]) == {"context"}
    d.commit([7, 8], None)
    tree = d.propose(prompt + [7, 8]).tree  # "6 7 8" occurs in the prompt; generated tokens are in the pool now
    assert tree.tokens[1:3] == [9, 1]


def test_context_drafter_budget():
    prompt = list(range(10, 40)) + [10, 11]
    d = ContextDrafter(key_len=2, ngram=6, max_nodes=3)
    d.begin(prompt, None)
    assert d.propose(prompt).tree.num_draft == 3


def test_alignment_sampling_adds_the_targets_alternatives():
    # pool = prompt; the key "1 2" is followed by 3 4. The prefill says the target expects 3 after "1 2"
    # at position 2 (aligned) but 9 (then 8) instead of 4 at position 3 (misaligned).
    prompt = [1, 2, 3, 4, 0, 1, 2]
    k = 3
    ids = np.zeros((len(prompt) - 1, k), dtype=np.int32)
    ids[:] = [[50, 51, 52]]
    ids[1] = [3, 7, 6]  # row 1 predicts position 2: the token 3 is the argmax -> aligned
    ids[2] = [9, 8, 4]  # row 2 predicts position 3: the token 4 is misaligned
    pre = TopK(ids)
    d = ContextDrafter(key_len=2, ngram=2, max_nodes=16, align_m=2)
    assert d.prefill_topk == 3
    d.begin(prompt, pre)
    tree = d.propose(prompt).tree
    three = tree.child(0, 3)
    assert three is not None and tree.sources[three] == "context"
    kids = {tree.tokens[c]: tree.sources[c] for c in tree.children()[three]}
    assert kids == {4: "context", 9: "alignment", 8: "alignment"}
    assert tree.children()[0] == [three]  # the aligned token got no siblings
    no_align = ContextDrafter(key_len=2, ngram=2, max_nodes=16, align_m=0)
    no_align.begin(prompt, pre)
    assert no_align.propose(prompt).tree.num_draft == 2


def test_a_continuation_the_context_holds_is_context_even_when_generated_text_holds_it():
    """docs/ALGORITHMS.md: source `context` wins, so AASD verifies it with the relaxed rule. The generated
    occurrence is the most recent hit (retrieved first), which used to tag it `generated`."""
    prompt = [1, 2, 3, 4, 0]
    d = ContextDrafter(key_len=2, ngram=2, max_nodes=16)
    d.begin(prompt, None)
    generated = [7, 1, 2, 3, 4, 8, 1, 2, 5, 6, 9, 1, 2]
    d.commit(generated, None)
    tree = d.propose(prompt + generated).tree
    three, five = tree.child(0, 3), tree.child(0, 5)
    assert tree.sources[three] == "context" and tree.sources[tree.child(three, 4)] == "context"
    assert (
        tree.sources[five] == "generated" and tree.sources[tree.child(five, 6)] == "generated"
    )  # only generated text has it


def test_alignment_siblings_have_their_own_share_of_the_budget():
    """Frequent misaligned hits used to fill the budget and push out every alternative AASD adds: the
    retrieved prefixes 3, 3 4, 3 4 5 occur three times each, each alternative once."""
    prompt = [1, 2, 3, 4, 5, 0] * 3 + [1, 2]
    ids = np.array([[prompt[i + 1], 70, 71] for i in range(len(prompt) - 1)], dtype=np.int32)  # aligned everywhere...
    for row, alt in ((1, 9), (7, 19), (13, 29)):  # ...but at each 3, where the target wanted 9, 19 or 29
        ids[row] = [alt, 3, 72]
    d = ContextDrafter(key_len=2, ngram=3, max_nodes=3, align_m=1)
    d.begin(prompt, TopK(ids))
    tree = d.propose(prompt).tree
    assert tree.num_draft == 3
    assert [tree.sources[c] for c in tree.children()[0]] == ["context", "alignment"]
    assert tree.tokens[tree.children()[0][1]] == 29  # ranked among themselves; ties go to the most recent hit
    without = ContextDrafter(key_len=2, ngram=3, max_nodes=3)  # no alignment: the whole budget is the hits'
    without.begin(prompt, TopK(ids))
    assert without.propose(prompt).tree.tokens == [2, 3, 4, 5]


def test_alignment_graft_puts_the_continuation_under_alternatives():
    prompt = [1, 2, 3, 4, 5, 0, 1, 2]
    ids = np.tile(np.array([[60, 61, 62]], dtype=np.int32), (len(prompt) - 1, 1))
    ids[1] = [9, 3, 8]  # position 2 (token 3) misaligned: alternatives 9 and 8
    pre = TopK(ids)
    d = ContextDrafter(key_len=2, ngram=3, max_nodes=16, align_m=2, graft=True)
    d.begin(prompt, pre)
    tree = d.propose(prompt).tree
    nine = tree.child(0, 9)
    assert tree.sources[nine] == "alignment"
    assert tree.tokens[tree.children()[nine][0]] == 4  # the retrieved continuation grafted under it


def test_empty_context_drafts_nothing():
    d = ContextDrafter()
    d.context_ids = []
    d.begin([1, 2, 3], None)
    assert d.propose([1, 2, 3]).tree.num_draft == 0


def test_alignment_on_generated_text_uses_verification_predictions():
    prompt = [1, 2, 3]
    pre = TopK(np.tile(np.array([[2, 40, 41]], dtype=np.int32), (2, 1)))
    on = ContextDrafter(key_len=2, ngram=2, max_nodes=16, align_m=2, align_generated=True)
    assert on.generated_topk == 3
    on.begin(prompt, pre)
    # Generated 7 8 9 then 7 8: at the position of 9 the target's own top ids were 30, 31, 9 -> 9 is misaligned.
    on.commit([7, 8, 9], np.array([[7, 0, 0], [8, 0, 0], [30, 31, 9]], dtype=np.int32))
    on.commit([7, 8], np.array([[7, 0, 0], [8, 0, 0]], dtype=np.int32))
    seq = prompt + [7, 8, 9, 7, 8]
    tree = on.propose(seq).tree
    assert {tree.tokens[c]: tree.sources[c] for c in tree.children()[0]} == {
        9: "generated",
        30: "alignment",
        31: "alignment",
    }
    off = ContextDrafter(key_len=2, ngram=2, max_nodes=16, align_m=2)
    assert off.generated_topk == 0
    off.begin(prompt, pre)
    off.commit([7, 8, 9], None)
    off.commit([7, 8], None)
    tree = off.propose(seq).tree
    assert [tree.tokens[c] for c in tree.children()[0]] == [9]


def test_the_documented_drafter_example_runs(monkeypatch):
    """docs/ARCHITECTURE.md's 'Adding a drafter' example, run as written: one class, one registry line,
    one method; strict verification keeps it lossless (its output equals greedy's)."""
    import re
    import types
    from pathlib import Path

    from conftest import make_tiny

    from core import methods
    from core.drafters import DRAFTERS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text()
    source = re.search(r"```python\n# core/drafters/repeat.py\n(.*?)```", doc, re.S).group(1)
    assert len(source.splitlines()) <= 35
    module = types.ModuleType("repeat_example")
    exec(compile(source, "repeat_example", "exec"), module.__dict__)
    monkeypatch.setitem(DRAFTERS, "repeat", module.RepeatDrafter.from_params)
    monkeypatch.setitem(
        methods.METHODS,
        "repeat",
        methods.Method(
            "repeat",
            "repeats the last token",
            methods.param_defaults("max_new_tokens", "gamma"),
            True,
            drafter="repeat",
        ),
    )
    tiny = make_tiny(0)
    prompt = [5, 9, 9, 9, 9, 9, 9, 4]
    ours = methods.run_method("repeat", tiny, prompt, {"max_new_tokens": 24, "gamma": 3})
    assert ours.output_ids == methods.run_method("greedy", tiny, prompt, {"max_new_tokens": 24}).output_ids
    assert all(n.source == "context" for s in ours.steps for n in s.nodes if 0 < n.node and n.decision != "bonus")
    assert sum(s.tree_size for s in ours.steps) > 0


def test_context_drafter_falls_back_to_the_recycled_table_without_hits():
    from core.drafters import RecycleTable

    table = RecycleTable(64, k=8)
    table.ids[7] = np.arange(20, 28)
    prompt = [1, 2, 3, 4, 0, 1, 2]
    ids = np.tile(np.arange(40, 48, dtype=np.int32), (len(prompt) - 1, 1))
    ids[1, :3] = [3, 7, 6]  # alignment reads the first align_m + 1 columns of the wider prefill rows
    d = ContextDrafter(key_len=2, ngram=2, max_nodes=4, align_m=2, table=table)
    assert d.prefill_topk == 8 and d.tree_topk == 8
    d.begin(prompt, TopK(ids))
    assert table.ids[2].tolist() == [3, 7, 6, 43, 44, 45, 46, 47]  # the prompt's rows reached the table
    hit = d.propose(prompt).tree  # "1 2" is in the pool: context drafting as before
    assert set(hit.sources[1:]) <= {"context", "alignment"} and hit.num_draft > 0
    miss = d.propose(prompt + [9, 7]).tree  # "9 7" is nowhere: Token Recycling's tree from 7's row
    assert miss.tokens[:3] == [7, 20, 21] and set(miss.sources[1:]) == {"recycled"} and miss.num_draft <= 4
    plain = ContextDrafter(key_len=2, ngram=2, max_nodes=4)
    plain.begin(prompt, None)
    assert plain.propose(prompt + [9, 7]).tree.num_draft == 0 and plain.tree_topk == 0
