"""Draft trees without a model: tries, budgets, masks, positions."""

import torch

from core.tree import DraftTree, ancestor_matrix, is_chain, merge_sequences, position_ids, tree_attention_mask


def test_add_shares_existing_children_and_keeps_parents_first():
    t = DraftTree.root_only(7)
    a = t.add(0, 1, "context")
    assert t.add(0, 1, "generated") == a  # same token under the same parent: same node
    b = t.add(a, 2, "context")
    c = t.add(0, 3, "alignment")
    assert t.tokens == [7, 1, 2, 3]
    assert t.parents == [-1, 0, 1, 0]
    assert t.depths == [0, 1, 2, 1]
    assert t.sources == ["root", "context", "context", "alignment"]
    assert t.path_to(b) == [0, a, b]
    assert t.children() == [[1, 3], [2], [], []]
    assert t.num_draft == 3 and c == 3


def test_merge_keeps_most_frequent_prefixes_under_budget():
    cands = [([1, 2, 3], "context"), ([1, 2, 4], "context"), ([1, 5], "generated"), ([9], "context")]
    tree = merge_sequences(0, cands, max_nodes=3)
    # prefix counts: (1)=3, (1,2)=2, then ties of 1 broken by depth then order: (9) depth 1 wins
    assert sorted(zip(tree.depths[1:], tree.tokens[1:])) == [(1, 1), (1, 9), (2, 2)]
    assert tree.num_draft == 3
    for i in range(1, len(tree)):
        assert tree.parents[i] < i
    full = merge_sequences(0, cands, max_nodes=100)
    assert full.num_draft == 6
    assert full.sources[full.child(0, 1)] == "context"
    node5 = full.child(full.child(0, 1), 5)
    assert full.sources[node5] == "generated"


def test_merge_with_zero_budget_is_root_only():
    assert len(merge_sequences(4, [([1, 2], "context")], max_nodes=0)) == 1


def test_ancestor_matrix_and_mask():
    parents = [-1, 0, 1, 0, 3, 3]
    anc = ancestor_matrix(parents)
    assert anc[2].tolist() == [True, True, True, False, False, False]
    assert anc[5].tolist() == [True, False, False, True, False, True]
    mask = tree_attention_mask(parents, past_len=4, dtype=torch.float32)
    assert mask.shape == (1, 1, 6, 10)
    assert (mask[0, 0, :, :4] == 0).all()  # everyone sees the committed prefix
    blocked = torch.finfo(torch.float32).min
    assert mask[0, 0, 4, 4 + 1] == blocked and mask[0, 0, 4, 4 + 3] == 0 and mask[0, 0, 4, 4 + 4] == 0
    assert ((mask[0, 0] == 0).sum(-1) > 0).all()  # no fully masked row
    half = tree_attention_mask(parents, 0, torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half.min() == torch.finfo(torch.bfloat16).min


def test_positions_follow_depth_and_siblings_share():
    assert position_ids([0, 1, 2, 1, 2, 2], 10).tolist() == [[10, 11, 12, 11, 12, 12]]


def test_is_chain_and_pruned():
    assert is_chain([-1, 0, 1, 2])
    assert not is_chain([-1, 0, 0])
    t = DraftTree.root_only(0)
    t.add_chain(0, [1, 2, 3, 4], "context")
    t.add_chain(0, [1, 9], "generated")
    p = t.pruned(2)
    assert max(p.depths) == 2 and p.tokens == [0, 1, 2, 9]
    assert p.sources == ["root", "context", "context", "generated"]
    assert t.pruned(10) is t
    assert t.pruned(10, stop_tokens=[7]) is t


def test_pruned_drops_stop_tokens_and_their_subtrees():
    t = DraftTree.root_only(2)  # the root may be a stop token: it is already committed
    t.add_chain(0, [1, 2, 3], "context")  # 2 is the stop token: 2 and 3 go, 1 stays
    t.add_chain(0, [4, 5], "generated")
    p = t.pruned(10, stop_tokens={2})
    assert p.tokens == [2, 1, 4, 5] and p.parents == [-1, 0, 0, 2]
    assert p.sources == ["root", "context", "generated", "generated"]


def test_add_chain_respects_budget():
    t = DraftTree.root_only(0)
    t.add_chain(0, [1, 2, 3], "context", budget=2)
    t.add_chain(0, [1, 2, 5], "context", budget=2)  # shares 1, 2; 5 would exceed the budget
    assert t.tokens == [0, 1, 2]
