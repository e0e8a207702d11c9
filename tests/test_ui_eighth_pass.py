"""Issue 33, eighth newcomer pass: the first-divergence note names the rule that chose a token, the prefill estimate,
the waiting status, speed labels against bars, analytics, export labels, and the README's figures."""

from __future__ import annotations

from core.trace import NodeTrace, RunTrace, StepTrace


def _node(step, node, parent, depth, token, text, decision, rank=0, gap=0.0, reason="", source="context"):
    return NodeTrace(
        step, 40, node, parent, depth, token, text, source, decision, reason, p=0.3, rank=rank, logit_gap=gap
    )


def _csd_run(decision: str, rank: int) -> RunTrace:
    """Two steps: step 0 emits tokens 0-1 (plain), step 1 emits tokens 2-4, the divergent token 3 by node 2, which
    `decision` put there at the target's rank `rank`."""
    s0 = StepTrace(
        0,
        40,
        0,
        0,
        [11, 12],
        nodes=[
            _node(0, 0, -1, 0, 10, "r", "accepted"),
            _node(0, 1, 0, 1, 11, "a", "accepted"),
            _node(0, 2, 1, 2, 12, "b", "bonus", source="model"),
        ],
    )
    reason = "differs from the target's sample; correction 7; count 16 ≥ λ 6; z(x) − z(t*) -0.500 ≥ log τ -4.605"
    s1 = StepTrace(
        1,
        42,
        2,
        2,
        [13, 99, 15],
        nodes=[
            _node(1, 0, -1, 0, 12, "b", "accepted"),
            _node(1, 1, 0, 1, 13, "c", "accepted"),
            _node(1, 2, 1, 2, 99, " The", decision, rank=rank, gap=0.5, reason=reason),
            _node(1, 3, 2, 3, 15, "d", "bonus", source="model"),
        ],
    )
    return RunTrace(
        "csd",
        {"temperature": 0.0},
        "m",
        None,
        "cpu",
        "bfloat16",
        "p",
        [1, 2, 3],
        output_ids=[11, 12, 13, 99, 15],
        steps=[s0, s1],
    )


REPORT = {"position": 3, "greedy_token": 7, "token": 99, "gap": 0.25, "dtype": "bfloat16", "near_tie": True}
DECODE = {7: "<|im_end|>", 99: " The"}.get


def test_a_rescued_divergent_token_is_the_rules_choice_not_a_near_tie():
    """Run 441: CSD rescued the divergent token (rank 1, count 16 ≥ λ 6) and the note said "a near-tie … not because
    of the method's rule". Mutation caught: dropping the `_rule_chose` branch (or its "rescued" test) in
    tokens.divergence_note brings the near-tie wording back."""
    from workbench.ui.tokens import divergence_note, emitting_node

    run = _csd_run("rescued", rank=1)
    assert emitting_node(run.steps, 3).token_id == 99 and emitting_node(run.steps, 1).decision == "bonus"
    note = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=run)
    assert "not because of the method's rule" not in note and "near-tie" not in note, note
    assert (
        "rescued" in note and "count 16 ≥ λ 6" in note and "ranked it 2" in note and "correction '<|im_end|>'" in note
    )
    # both gaps are stated, each with its logits: greedy's one-token forward 0.25, the run's own step 0.5
    assert (
        "0.25 apart in the model's logits on greedy's text" in note
        and "0.5 below the top logit in this run's own step 1" in note
    )
    # a relaxed rule's acceptance of a lower-ranked token is the rule's too
    relaxed = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=_csd_run("accepted", 2))
    assert "relaxed rule accepted it" in relaxed and "ranked it 3" in relaxed and "near-tie" not in relaxed
    # where the method's own step took the target's argmax, a near-tie is rounding, as before
    top = divergence_note(REPORT, lossless=False, decode=lambda ids: DECODE(ids[0]), run=_csd_run("accepted", 0))
    assert "near-tie" in top and "not because of the method's rule" in top and "took the target's top token" in top
