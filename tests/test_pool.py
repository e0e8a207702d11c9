"""The draft pool against hand-made cases and a brute-force reference."""

import random

import numpy as np
import pytest

from core.pool import DraftPool


def brute(seq, n_context, suffix, key_len, ngram, max_hits, order):
    for k in range(min(key_len, len(suffix)), 0, -1):
        key = list(suffix[-k:])
        starts = [s for s in range(len(seq) - k + 1) if seq[s : s + k] == key and s + k < len(seq)]
        if starts:
            if order == "recent":
                starts = starts[::-1]
            hits = []
            for s in starts[:max_hits]:
                pos = s + k
                toks = seq[pos : pos + ngram]
                hits.append(
                    (pos, toks, ["context" if p < n_context else "generated" for p in range(pos, pos + len(toks))])
                )
            return k, hits
    return 0, []


def as_tuples(result):
    k, hits = result
    return k, [(h.position, h.tokens.tolist(), h.sources) for h in hits]


def test_longest_key_wins_and_truncation():
    pool = DraftPool([1, 2, 3, 4, 9, 2, 3, 5, 6], key_len=3, ngram=4)
    k, hits = pool.lookup([1, 2, 3])
    assert k == 3 and [h.position for h in hits] == [3] and hits[0].tokens.tolist() == [4, 9, 2, 3]
    k, hits = pool.lookup([7, 2, 3], order="earliest")  # "7 2 3" absent; "2 3" twice
    assert k == 2 and [h.tokens.tolist() for h in hits] == [[4, 9, 2, 3], [5, 6]]
    # "5 6" and "6" occur only at the very end: no key has a continuation, so nothing matches (as the
    # brute-force reference says: a key counts only where a token follows it)
    assert pool.lookup([5, 6]) == (0, [])
    assert as_tuples(pool.lookup([5, 6])) == brute([1, 2, 3, 4, 9, 2, 3, 5, 6], 9, [5, 6], 3, 4, 64, "recent")


def test_generated_tokens_are_found_and_tagged():
    pool = DraftPool([1, 2, 3], key_len=2, ngram=3)
    pool.extend([4, 1, 2])
    k, hits = pool.lookup([1, 2], order="earliest")
    assert k == 2 and hits[0].tokens.tolist() == [3, 4, 1] and hits[0].sources == ["context", "generated", "generated"]
    pool.extend([8])
    k, hits = pool.lookup([1, 2], order="recent")
    assert [h.position for h in hits] == [6, 2] and hits[0].sources == ["generated"]
    assert len(pool) == 7 and pool.context_len == 3


def test_max_hits_order_and_large_ids():
    big = 151_000
    seq = [big, 2**31 - 1] * 10 + [big]
    pool = DraftPool(seq, key_len=1, ngram=2)
    k, hits = pool.lookup([big], max_hits=3, order="earliest")
    assert [h.position for h in hits] == [1, 3, 5] and hits[0].tokens.tolist() == [2**31 - 1, big]
    k, hits = pool.lookup([big], max_hits=2, order="recent")
    assert [h.position for h in hits] == [19, 17]


def test_empty_context_and_validation():
    assert DraftPool([]).lookup([1, 2, 3]) == (0, [])
    with pytest.raises(ValueError, match="key_len"):
        DraftPool([1], key_len=0)
    with pytest.raises(ValueError, match="ngram"):
        DraftPool([1], ngram=0)
    with pytest.raises(ValueError, match="token ids"):
        DraftPool([-1])
    with pytest.raises(ValueError, match="token ids"):
        DraftPool([1]).extend([2**31])
    with pytest.raises(ValueError, match="order"):
        DraftPool([1]).lookup([1], order="best")
    with pytest.raises(ValueError, match="max_hits"):
        DraftPool([1]).lookup([1], max_hits=0)


@pytest.mark.parametrize("seed", range(30))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    vocab = rng.choice([2, 3, 5, 50])
    context = [rng.randrange(vocab) for _ in range(rng.randint(0, 60))]
    key_len, ngram = rng.randint(1, 5), rng.randint(1, 6)
    pool = DraftPool(np.array(context, dtype=np.int64), key_len=key_len, ngram=ngram)
    seq = list(context)
    for _ in range(8):
        suffix = (
            seq[-key_len:]
            if seq and rng.random() < 0.7
            else [rng.randrange(vocab) for _ in range(rng.randint(1, key_len))]
        )
        for order in ("recent", "earliest"):
            max_hits = rng.randint(1, 6)
            assert as_tuples(pool.lookup(suffix, max_hits, order)) == brute(
                seq, len(context), suffix, key_len, ngram, max_hits, order
            )
        new = [rng.randrange(vocab) for _ in range(rng.randint(0, 4))]
        pool.extend(new)
        seq += new
