"""core.suffix against brute force: the suffix array's order, the longest suffix match, continuation
counts, the best-first tree, LRU eviction, frozen / online, the content hash and corpus files."""

from __future__ import annotations

import heapq
import struct
import warnings
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.suffix import (
    CONTEXT,
    HISTORY,
    SORT_DEPTH,
    ContextIndex,
    CorruptCorpusError,
    FrozenCorpusError,
    SuffixArray,
    SuffixCorpus,
    SuffixSpeculator,
    node_budget,
)
from core.suffix.array import SEPARATOR, sort_suffixes
from core.suffix.corpus import FORMAT, MAGIC

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- the brute-force reference
def occurrences(seq, s) -> int:
    k = len(s)
    return sum(1 for i in range(len(seq) - k + 1) if list(seq[i : i + k]) == list(s))


def context_count(text, s, match_len) -> int:
    """Occurrences of s in the request's text whose first match_len tokens end before the text's
    last position (the text's own end is the query, not an occurrence)."""
    k, n = len(s), len(text)
    return sum(1 for i in range(n - k + 1) if i + match_len - 1 <= n - 2 and list(text[i : i + k]) == list(s))


def ref_longest(corpus, text, max_match, use_context=True) -> int:
    best = 0
    for k in range(1, min(max_match, len(text)) + 1):
        s = text[-k:]
        if any(occurrences(seq, s) for seq in corpus) or (use_context and context_count(text, s, k)):
            best = k
    return best


def ref_draft(corpus, text, *, max_match=64, alpha=4.0, max_nodes=64, min_prob=0.1, max_depth=64, use_context=True):
    """SuffixDecoding's greedy tree, counted by scanning: (tokens, parents, probs, counts, ctx counts, sources, k)."""
    k = ref_longest(corpus, text, max_match, use_context)
    if k == 0:
        return [], [], [], [], [], [], 0
    budget = node_budget(k, alpha, max_nodes)
    depth_limit = min(max_depth, SORT_DEPTH - k)
    root = list(text[-k:])

    def counts(s):
        return sum(occurrences(seq, s) for seq in corpus), context_count(text, s, k) if use_context else 0

    out = ([], [], [], [], [], [])
    heap, pushed = [], 0

    def expand(node, string, prob, total, depth):
        nonlocal pushed
        if depth >= depth_limit:
            return
        nexts = set()
        for seq in list(corpus) + ([text] if use_context else []):
            for i in range(len(seq) - len(string)):
                if list(seq[i : i + len(string)]) == string:
                    nexts.add(int(seq[i + len(string)]))
        for tok in sorted(nexts):
            c_corpus, c_ctx = counts(string + [tok])
            c = c_corpus + c_ctx
            if c == 0:
                continue
            p = prob * (c / total)
            if p >= min_prob:
                heapq.heappush(heap, (-p, pushed, node, tok, string + [tok], c, c_ctx, depth + 1))
                pushed += 1

    c0, x0 = counts(root)
    if budget:
        expand(-1, root, 1.0, c0 + x0, 0)
    while heap and len(out[0]) < budget:
        neg_p, _, parent, tok, string, c, c_ctx, depth = heapq.heappop(heap)
        for lst, v in zip(out, (tok, parent, -neg_p, c, c_ctx, CONTEXT if c_ctx else HISTORY)):
            lst.append(v)
        if len(out[0]) < budget:
            expand(len(out[0]) - 1, string, -neg_p, c, depth)
    return (*out, k)


def draft_tuple(d):
    return d.tokens, d.parents, d.probs, d.counts, d.context_counts, d.sources, d.match_len


# ---------------------------------------------------------------- strategies
# a small alphabet (many repeats) mapped onto ids that exercise the byte order and the id range
ID_MAPS = [list(range(6)), [0, 1, 255, 256, 65_536, 2**31 - 1], [7, 3, 2**21 + 5, 9, 2**24, 11]]
alphabet_map = st.sampled_from(ID_MAPS)


def seqs(max_len=24, min_len=0):
    return st.lists(st.integers(0, 5), min_size=min_len, max_size=max_len)


@st.composite
def random_scenario(draw):
    """A corpus, a prompt and the chunks later committed, all random over a small alphabet."""
    return (
        draw(seqs(12)),
        draw(st.lists(seqs(30), max_size=8)),
        draw(seqs(12, 1)),
        draw(st.lists(seqs(4, 1), max_size=5)),
    )


@st.composite
def repeat_scenario(draw):
    """A request that repeats part of a corpus sequence (with the odd change): the prompt ends with a
    piece of it and the committed chunks continue it, short of its end."""
    corpus = draw(st.lists(seqs(30, 8), min_size=1, max_size=6)) + draw(st.lists(seqs(10), max_size=3))
    seq = draw(st.sampled_from(corpus[:1] + [s for s in corpus if len(s) >= 8]))
    cut = draw(st.integers(1, len(seq) - 3))
    rest = list(seq[cut : draw(st.integers(cut + 1, len(seq) - 1))])
    if draw(st.booleans()):
        rest[draw(st.integers(0, len(rest) - 1))] = draw(st.integers(0, 5))
    steps, i = [], 0
    for size in draw(st.lists(st.integers(1, 4), min_size=1, max_size=6)):
        if i < len(rest):
            steps.append(rest[i : i + size])
            i += size
    return draw(seqs(6)), corpus, draw(seqs(6)) + list(seq[:cut]) or [0], steps


@st.composite
def scenario(draw):
    _, corpus, prompt, steps = draw(st.one_of(random_scenario(), repeat_scenario()))
    ids = draw(alphabet_map)
    m = lambda s: [ids[t] for t in s]  # noqa: E731
    return [m(s) for s in corpus], m(prompt), [m(s) for s in steps]


params = st.fixed_dictionaries(
    {
        "max_match": st.sampled_from([1, 3, 64, 64]),
        "alpha": st.sampled_from([1.0, 4.0]),
        "max_nodes": st.sampled_from([3, 16, 64]),
        "min_prob": st.sampled_from([0.0, 0.1, 0.34]),
        "max_depth": st.sampled_from([2, 64]),
    }
)


# ---------------------------------------------------------------- the suffix array
@given(st.lists(st.integers(0, 4), max_size=60), st.sampled_from([1, 2, 3, 5, 128]))
@settings(max_examples=200, deadline=None)
def test_suffixes_are_sorted_by_their_first_depth_tokens(tokens, depth):
    text = np.array(tokens + [SEPARATOR], dtype=np.uint32)
    sa = sort_suffixes(text, depth)
    assert sorted(sa.tolist()) == list(range(len(text)))
    keys = [tuple(text[p : p + depth].tolist()) for p in sa]
    assert keys == sorted(keys)


@given(scenario(), st.data())
@SETTINGS
def test_ranges_and_children_count_occurrences(sc, data):
    corpus, prompt, _ = sc
    corpus = [s for s in corpus] + [prompt]
    arr = SuffixArray(corpus)
    dead = data.draw(st.lists(st.integers(0, len(corpus) - 1), max_size=2, unique=True))
    arr = arr.without(dead)
    live = [s for i, s in enumerate(corpus) if i not in dead]
    for k in range(1, len(prompt) + 1):
        pattern = prompt[-k:]
        lo, hi = arr.find(np.asarray(pattern, dtype=">u4").tobytes())
        assert arr.count(lo, hi) == sum(occurrences(s, pattern) for s in live)
        expected = {}
        for s in live:
            for i in range(len(s) - k):
                if s[i : i + k] == pattern:
                    expected[s[i + k]] = expected.get(s[i + k], 0) + 1
        min_count = data.draw(st.integers(1, 4))
        got = arr.children(lo, hi, k, min_count)
        assert {t: c for t, a, b, c in got} == {t: c for t, c in expected.items() if c >= min_count}
        # the three ways of finding children agree: scanning, probing with bisection, vectorised
        assert arr.children(lo, hi, k, min_count, scan_below=0, vectorise_above=10**9) == got
        assert arr._children_vectorised(lo, hi, k, min_count) == got
        for t, c in expected.items():
            a, b = arr.child_range(lo, hi, k, t)
            assert arr.count(a, b) == c


def test_children_of_a_long_range_take_the_vectorised_path_alike():
    rng = np.random.default_rng(3)
    seqs_ = [rng.integers(0, 40, rng.integers(20, 200)).tolist() for _ in range(300)]
    arr = SuffixArray(seqs_)
    arr = arr.without([5, 17])
    lo, hi = arr.find(struct.pack(">I", 3))
    assert hi - lo > 500
    for min_count in (1, 2, 3, 15, 50):
        probed = arr.children(lo, hi, 1, min_count, vectorise_above=10**9)
        assert probed == arr._children_vectorised(lo, hi, 1, min_count) == arr.children(lo, hi, 1, min_count)
    everything = arr.children(lo, hi, 1)
    probed = arr.children(lo, hi, 1, 25, vectorise_above=10**9)
    assert 0 < len(probed) < len(everything) and probed == [c for c in everything if c[3] >= 25]


# ---------------------------------------------------------------- the longest match
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=50),
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), max_size=8),
    st.sampled_from([1, 2, 4, 256]),
    st.sampled_from([2, 5, 64]),
)
@settings(max_examples=200, deadline=None)
def test_context_longest_match_is_brute_force(prompt, chunks, seal_min, max_match):
    ctx = ContextIndex(prompt, seal_min=seal_min)
    text = list(prompt)
    for chunk in [[]] + chunks:
        ctx.extend(chunk)
        text += chunk
        k, ends = ctx.longest_match(max_match)
        assert k == ref_longest([], text, max_match)
        if k:
            s, n = text[-k:], len(text)
            expected = [e for e in range(k - 1, n - 1) if text[e - k + 1 : e + 1] == s]
            assert ends.tolist() == expected
        assert ctx.longest_match(max_match, upper=k)[0] == k


@given(scenario(), params)
@SETTINGS
def test_speculator_drafts_the_brute_force_tree_at_every_step(sc, prm):
    corpus, prompt, steps = sc
    spec = SuffixSpeculator(SuffixCorpus(enumerate(corpus)), **prm)
    spec.begin(prompt)
    text = list(prompt)
    for chunk in [[]] + steps:
        spec.commit(chunk)
        text += chunk
        got = draft_tuple(spec.propose(text))
        want = ref_draft(corpus, text, **prm)
        assert got == want
        # the incremental search (bounded by the last match) agrees with a fresh one
        fresh = SuffixSpeculator(SuffixCorpus(enumerate(corpus)), **prm)
        fresh.begin(text)
        assert draft_tuple(fresh.propose(text)) == got


@given(scenario(), params)
@SETTINGS
def test_corpus_only_and_context_only(sc, prm):
    corpus, prompt, _ = sc
    corpus_only = SuffixSpeculator(SuffixCorpus(enumerate(corpus)), use_context=False, **prm)
    corpus_only.begin(prompt)
    d = corpus_only.propose(prompt)
    assert draft_tuple(d) == ref_draft(corpus, prompt, use_context=False, **prm)
    assert set(d.sources) <= {HISTORY}
    context_only = SuffixSpeculator(None, **prm)
    context_only.begin(prompt)
    assert draft_tuple(context_only.propose(prompt)) == ref_draft([], prompt, **prm)


def test_history_and_context_sources_and_the_budget():
    corpus = SuffixCorpus([("a", [10, 11, 12, 13, 14, 15]), ("b", [10, 11, 12, 20])])
    spec = SuffixSpeculator(corpus, alpha=4.0, max_nodes=64, min_prob=0.0)
    spec.begin([1, 12, 13, 2, 10, 11])
    d = spec.propose()
    assert d.match_len == 2 and d.budget == 8
    # 12 follows "10 11" twice in the corpus; "12 13" is also in the request's text
    assert d.tokens[:2] == [12, 13] and d.counts[:2] == [2, 1]
    assert d.sources[0] == HISTORY  # "10 11 12" is not in the request's text
    assert d.probs[0] == 1.0 and d.probs[1] == 0.5
    assert d.accepted_by([12, 13, 14, 99]) == 3 and d.accepted_by([12, 20, 7]) == 2 and d.accepted_by([5]) == 0
    tree = d.as_tree(11)
    assert tree.tokens[1:] == d.tokens and tree.parents[1:] == [p + 1 for p in d.parents]
    spec.commit([12, 13])
    d2 = spec.propose()
    assert d2.match_len == 4 and d2.tokens[0] == 14
    ctx = SuffixSpeculator(corpus, min_prob=0.0)
    ctx.begin([12, 13, 5, 12, 13])
    d3 = ctx.propose()
    assert d3.sources[0] == CONTEXT and d3.context_counts[0] == 1


def test_node_confidence_is_the_continuation_probability_discounted_by_the_matched_length():
    """A continuation every occurrence shares after a long match is nearly certain; after one token it is an
    even bet; a child seen after half its parent's occurrences counts half (the draft's confidences, which the
    tree carries for the sizer)."""
    from core.suffix.draft import MATCH_HALF, node_confidence

    assert node_confidence(1.0, 40, 1.0) == pytest.approx(40 / 41)
    assert node_confidence(1.0, 1, 1.0) == 0.5 and node_confidence(0.5, 1, 1.0) == 0.25
    assert node_confidence(1.0, 0) == 0.0
    assert node_confidence(1.0, 3, 4.0) < node_confidence(1.0, 6, 4.0) < node_confidence(1.0, 6, 2.0)
    repeat = list(range(100, 160))
    corpus = SuffixCorpus([("a", repeat), ("b", [10, 11, 12, 13, 14, 15]), ("c", [10, 11, 12, 20])])
    spec = SuffixSpeculator(corpus, alpha=4.0, max_nodes=16, min_prob=0.0)
    spec.begin([1, 2] + repeat[:30])  # a repeat 30 tokens in: a long match, one occurrence
    d = spec.propose()
    assert d.match_len == 30 and d.tokens == repeat[30:46]
    conf = d.confidences()
    assert conf == pytest.approx([node_confidence(1.0, 30 + i, MATCH_HALF) for i in range(16)])
    assert min(conf) > 0.95
    assert d.as_tree(repeat[29]).confidence[1:] == conf
    spec.begin([1, 10, 11])  # "10 11" twice in the corpus, then 12; 13 and 20 once each after "10 11 12"
    d = spec.propose()
    assert d.match_len == 2 and d.tokens[:3] == [12, 13, 20]
    assert d.conditionals()[:3] == pytest.approx([1.0, 0.5, 0.5])
    assert d.confidences()[:3] == pytest.approx(
        [node_confidence(1.0, 2), node_confidence(0.5, 3), node_confidence(0.5, 3)]
    )
    assert d.as_tree(11, half=None).confidence == []  # no confidence: the sizer prices it by source and depth


def test_a_child_rare_in_the_corpus_but_common_in_the_request_is_counted_in_both():
    """'2' follows '7 8' in 2 of the corpus's 10 occurrences (below min_prob there) and in all 3 of the
    request's: 5 of 13 in the union, above min_prob 0.3; the corpus's 2 must be counted too."""
    corpus = SuffixCorpus([(i, [7, 8, 1]) for i in range(8)] + [(8, [7, 8, 2]), (9, [7, 8, 2])])
    spec = SuffixSpeculator(corpus, min_prob=0.3)
    spec.begin([7, 8, 2, 7, 8, 2, 7, 8, 2, 5, 7, 8])
    d = spec.propose()
    assert (d.match_len, d.match_count) == (2, 13)
    assert d.tokens == [1, 2] and d.counts == [8, 5] and d.context_counts == [0, 3]
    assert d.probs == [8 / 13, 5 / 13] and d.sources == [HISTORY, CONTEXT]


def test_a_child_exactly_at_min_prob_is_kept():
    corpus = SuffixCorpus([(i, [5, 6, 10 + i]) for i in range(10)])  # each of 10 continuations: p = 1/10
    spec = SuffixSpeculator(corpus, min_prob=0.1, alpha=5.0)
    spec.begin([1, 5, 6])
    d = spec.propose()
    assert d.budget == 10 and d.tokens == list(range(10, 20)) and d.probs == [0.1] * 10
    spec = SuffixSpeculator(corpus, min_prob=0.1000001, alpha=5.0)
    spec.begin([1, 5, 6])
    assert len(spec.propose()) == 0


def test_no_match_no_draft_and_a_mismatched_sequence_is_refused():
    spec = SuffixSpeculator(SuffixCorpus([(1, [1, 2, 3])]))
    spec.begin([7, 8])
    assert len(spec.propose([7, 8])) == 0 and spec.propose().match_len == 0
    with pytest.raises(ValueError, match="does not end with the committed tokens"):
        spec.propose([7, 9])


# ---------------------------------------------------------------- eviction, modes, hash
class RefLRU:
    def __init__(self, bound):
        self.bound, self.reqs = bound, OrderedDict()

    def add(self, key, toks):
        self.reqs.pop(key, None)
        self.reqs[key] = list(toks[: self.bound])
        while sum(map(len, self.reqs.values())) > self.bound and len(self.reqs) > 1:
            self.reqs.popitem(last=False)


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "touch", "evict"]),
        st.integers(0, 7),
        st.lists(st.integers(0, 4), min_size=1, max_size=12),
    ),
    max_size=25,
)


@given(
    ops,
    st.sampled_from([5, 20, 60]),
    st.sampled_from([1, 8, 4096]),
    st.lists(st.integers(0, 4), min_size=1, max_size=12),
)
@SETTINGS
def test_lru_eviction_and_in_place_drops_match_a_fresh_build(operations, bound, fresh_min, query):
    corpus = SuffixCorpus(max_tokens=bound)
    corpus.fresh_min = fresh_min
    ref = RefLRU(bound)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op, key, toks in operations:
            if op == "add":
                corpus.add(toks, key=key)
                ref.add(key, toks)
                # the fresh array stays small: past max(fresh_min, sealed / 16) it is merged in
                arrays = corpus.arrays()
                assert len(arrays) <= 2
                if len(arrays) == 2:
                    assert arrays[1].live_tokens <= max(fresh_min, arrays[0].live_tokens // 16)
            elif op == "touch" and key in ref.reqs:
                corpus.touch(key)
                ref.reqs.move_to_end(key)
            elif op == "evict" and key in ref.reqs:
                corpus.evict(key)
                del ref.reqs[key]
    assert corpus.keys() == list(ref.reqs)
    assert corpus.tokens == sum(map(len, ref.reqs.values())) <= bound
    rebuilt = SuffixCorpus(list(ref.reqs.items()), max_tokens=bound)
    assert corpus.content_hash() == rebuilt.content_hash()
    for prm in ({"min_prob": 0.0}, {"min_prob": 0.2, "max_nodes": 5}):
        a, b = SuffixSpeculator(corpus, use_context=False, **prm), SuffixSpeculator(rebuilt, use_context=False, **prm)
        a.begin(query)
        b.begin(query)
        got = draft_tuple(a.propose())
        assert got == draft_tuple(b.propose())
        assert got == ref_draft(list(ref.reqs.values()), query, use_context=False, **prm)


def test_frozen_and_online_modes():
    frozen = SuffixCorpus([(1, [1, 2, 3])], frozen=True)
    assert frozen.mode == "frozen" and not frozen.cold
    with pytest.raises(FrozenCorpusError, match="frozen"):
        frozen.add([4, 5])
    with pytest.raises(FrozenCorpusError):
        frozen.evict(1)
    frozen.touch(1)  # no change, no error
    spec = SuffixSpeculator(frozen)
    spec.begin([0, 1])
    spec.commit([2, 3])
    assert spec.end_request([2, 3]) is None and len(frozen) == 1
    online = SuffixCorpus(max_tokens=100)
    assert online.cold and online.mode == "online"
    spec = SuffixSpeculator(online)
    spec.begin([9, 4])
    assert spec.propose().match_len == 0
    assert spec.end_request([4, 5, 6, 7]) == "local-0"
    assert online.keys() == ["local-0"] and online.tokens == 4
    spec.begin([8, 4, 5])  # the next request drafts from the first one's output
    d = spec.propose()
    assert d.tokens[:2] == [6, 7] and d.sources[0] == HISTORY
    assert online.state() == {
        "mode": "online",
        "requests": 1,
        "tokens": 4,
        "max_tokens": 100,
        "hash": online.content_hash(),
        "fingerprint": None,
    }
    # a lookup's snapshot of the arrays is not changed by a later eviction
    snapshot = online.arrays()
    online.evict("local-0")
    pattern = np.asarray([4, 5], dtype=">u4").tobytes()
    assert snapshot[0].count(*snapshot[0].find(pattern)) == 1
    assert online.cold and sum(a.count(*a.find(pattern)) for a in online.arrays()) == 0


def test_content_hash_is_stable_and_depends_only_on_the_multiset():
    a = SuffixCorpus([("x", [1, 2, 3]), ("y", [4, 5]), ("z", [1, 2, 3])])
    b = SuffixCorpus([(7, [4, 5]), (8, [1, 2, 3]), (9, [1, 2, 3])], frozen=True)
    assert a.content_hash() == b.content_hash()
    assert a.content_hash() == "4a14bfbf6e39567a"  # pinned: a change of hashing shows up here
    assert SuffixCorpus([("x", [1, 2, 3]), ("y", [4, 5])]).content_hash() != a.content_hash()
    assert SuffixCorpus([("x", [1, 2, 3]), ("y", [5, 4]), ("z", [1, 2, 3])]).content_hash() != a.content_hash()
    assert SuffixCorpus().content_hash() == SuffixCorpus(frozen=True).content_hash()


def test_a_corpus_larger_than_its_bound_is_cut_with_a_message():
    with pytest.warns(UserWarning, match="more than the corpus bound of 5 tokens"):
        c = SuffixCorpus([(1, [1, 2, 3]), (2, [4, 5]), (3, [6, 7, 8])], max_tokens=5)
    assert c.keys() == [2, 3] and c.tokens == 5 and "dropped the 1 least recently used" in c.notices[-1]
    with pytest.warns(UserWarning, match="kept its first 5"):
        big = SuffixCorpus([(1, list(range(9)))], max_tokens=5)
    assert big.sequence(1).tolist() == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------- files
def test_save_load_round_trip(tmp_path):
    c = SuffixCorpus([(3, [1, 2, 3]), ("r7", [4, 5, 6, 7])], max_tokens=50, fingerprint="fp", frozen=True)
    path = c.save(tmp_path / "c.corpus")
    d = SuffixCorpus.load(path)
    assert d.keys() == [3, "r7"] and d.content_hash() == c.content_hash()
    assert d.mode == "frozen" and d.max_tokens == 50 and d.fingerprint == "fp"
    assert SuffixCorpus.load(path, frozen=False).mode == "online"
    with pytest.warns(UserWarning, match="more than the corpus bound of 4 tokens"):
        cut = SuffixCorpus.load(path, max_tokens=4)
    assert cut.keys() == ["r7"] and f"the corpus file {path}" in cut.notices[-1]


def _rewrite(path, mutate):
    """Apply `mutate` to the file's payload and give it a valid checksum again."""
    import hashlib

    raw = path.read_bytes()[:-32]
    raw = mutate(raw)
    path.write_bytes(raw + hashlib.sha256(raw).digest())


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-40]), "checksum does not match"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:-5] + bytes([p.read_bytes()[-5] ^ 1]) + p.read_bytes()[-4:]),
            "checksum",
        ),
        (lambda p: p.write_bytes(b"not a corpus at all"), "wrong magic"),
        (lambda p: p.write_bytes(MAGIC + b"\x01"), "truncated"),
        (
            lambda p: _rewrite(p, lambda r: r[: len(MAGIC)] + struct.pack("<I", FORMAT + 1) + r[len(MAGIC) + 4 :]),
            "has format 2",
        ),
        (lambda p: _rewrite(p, lambda r: r[:-4]), "header is invalid"),
        (lambda p: _rewrite(p, lambda r: r[:-4] + struct.pack("<i", 99)), "does not hold what its header says"),
        (lambda p: _rewrite(p, lambda r: r.replace(b'"keys":[3,"r7"]', b'"keys":[3,3.5]')), "header is invalid"),
        (
            lambda p: _rewrite(p, lambda r: r.replace(b'"max_tokens":1000000', b'"max_tokens":      0')),
            "header is invalid .bound 0",
        ),
        (lambda p: _rewrite(p, lambda r: r.replace(b'"mode":"online"', b'"mode":"banana"')), "header is invalid .mode"),
    ],
)
def test_a_damaged_file_is_refused_with_a_clear_error(tmp_path, damage, message):
    path = SuffixCorpus([(3, [1, 2, 3]), ("r7", [4, 5, 6, 7])]).save(tmp_path / "c.corpus")
    damage(path)
    with pytest.raises(CorruptCorpusError, match=message) as err:
        SuffixCorpus.load(path)
    assert "rebuild" in str(err.value)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CorruptCorpusError, match="cannot read the suffix corpus"):
        SuffixCorpus.load(tmp_path / "none.corpus")


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 2\*\*31\)"):
        SuffixCorpus([(1, [1, -2])])
    with pytest.raises(ValueError, match="whole number of tokens"):
        SuffixCorpus(max_tokens=0)
    with pytest.raises(ValueError, match="string or an integer"):
        SuffixCorpus([(1.5, [1])])
    with pytest.raises(ValueError, match="max_match"):
        SuffixSpeculator(max_match=65)


# ---------------------------------------------------------------- real text
@pytest.mark.real_model
def test_real_text_drafts_the_repeated_output_and_matches_brute_force():
    """SmolLM2 token ids of standard-library source: a request that repeats an earlier output with a
    small change drafts the rest of that output from the corpus."""
    import inspect
    import textwrap

    from core.models import is_fetched, preset_path

    if not is_fetched("smollm2-135m"):
        pytest.skip("smollm2-135m is not fetched")
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(preset_path("smollm2-135m"))
    outputs = [
        tok.encode(inspect.getsource(f)) for f in (json.dumps, textwrap.dedent, textwrap.fill, inspect.getsource)
    ]
    corpus = SuffixCorpus(enumerate(outputs), fingerprint="smollm2")
    # the new output: textwrap.dedent's source with a renamed variable (a small change to an old output)
    target = tok.encode(inspect.getsource(textwrap.dedent).replace("margin", "indent_prefix"))
    prompt = tok.encode("Rewrite this function:\n")
    spec = SuffixSpeculator(corpus, max_nodes=16)
    spec.begin(prompt)
    text = list(prompt)
    accepted = drafted = steps = 0
    pos = 0
    while pos < len(target):
        d = spec.propose(text)
        # what strict verification accepts along the target, then the bonus token
        n_ok = d.accepted_by(target[pos : len(target) - 1])
        drafted += len(d)
        accepted += n_ok
        new = target[pos : pos + n_ok + 1]
        spec.commit(new)
        text += new
        pos += len(new)
        steps += 1
        if steps % 25 == 0:  # brute force agrees on real ids too (it is slow, so only now and then)
            assert draft_tuple(spec.propose(text)) == ref_draft(outputs, text, max_nodes=16)
    assert steps < len(target) / 4  # the repeat is drafted from the corpus: > 4 tokens per step
    assert accepted / len(target) > 0.75
