"""The fourteenth newcomer pass: a rescued token's note counted its rank from 1 beside the rule's reason counting
from 0, the max_new_tokens refusal told a cap of 0 that longer generations take `bench`, and the replay header said
"tree 1 nodes · accepted 1" for a token CSD rescued. (Its prefill-estimate defect is tested in
tests/test_ui_thirteenth_pass_rest.py.) Each test failed on the code before its fix."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_ui_eighth_pass import REPORT, _csd_run

from core.errors import InvalidInputError


def test_a_rescued_tokens_note_counts_its_rank_as_the_reason_and_node_table_do():
    """The note said "the target ranked it 7, not first" beside the reason's "rank 6, not the argmax" (the node
    table: rank 6). Mutation caught: the note's rank back to node.rank + 1."""
    from workbench.ui.tokens import divergence_note

    run = _csd_run("rescued", rank=6)
    node = run.steps[1].nodes[2]
    run.steps[1].nodes[2] = replace(node, reason="rank 6, not the argmax; " + node.reason)
    note = divergence_note(REPORT, lossless=False, decode=lambda ids: {7: "<|im_end|>", 99: " The"}[ids[0]], run=run)
    assert "rank in the target's order is 6, not 0" in note and "rank 6, not the argmax" in note, note
    assert "7" not in note.replace("'<|im_end|>'", "").split("correction")[0], note


@pytest.mark.parametrize("typed", [0, -3])
def test_a_cap_below_one_is_refused_without_the_hint_for_long_generations(typed):
    """ "⚠ max_new_tokens = 0 is out of range [1, 1024]: longer generations take the `bench` command". Mutation
    caught: the hint given whatever the value."""
    from workbench.ui.compare_tab import check_max_new_tokens

    with pytest.raises(InvalidInputError) as low:
        check_max_new_tokens(typed, 128)
    assert f"max_new_tokens = {typed} is out of range [1, 1024]" in str(low.value)
    assert "bench" not in str(low.value) and "longer" not in str(low.value), str(low.value)
    with pytest.raises(InvalidInputError, match="longer generations take the `bench` command"):
        check_max_new_tokens(5000, 128)


def test_the_replay_header_says_kept_and_rescued_for_a_rescued_step_and_counts_one_node():
    """Run #134, step 2: "tree 1 nodes · accepted 1 + bonus" while the tree's title said "1 of 1 drafted kept (1
    rescued)". Mutation caught: the header's old wording."""
    from core.trace import StepTrace
    from workbench.ui.replay_view import step_info

    run = _csd_run("rescued", rank=6)
    info = step_info(134, run, 1)
    assert "kept 2 (1 rescued) + bonus" in info and "accepted" not in info, info  # one accepted, one rescued
    one = replace(run, steps=[replace(run.steps[0], tree_size=1)] + run.steps[1:])
    assert "tree 1 node ·" in step_info(134, one, 0), step_info(134, one, 0)
    assert isinstance(run.steps[0], StepTrace) and "tree 2 nodes ·" in step_info(
        134, replace(run, steps=[replace(run.steps[0], tree_size=2)]), 0
    )
