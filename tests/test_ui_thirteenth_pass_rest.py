"""Issue 33, thirteenth newcomer pass: the prefill estimate for a long prompt after short noisy reads (about twice
the real time), and the replay tab opening on a run with nothing to draw."""

from __future__ import annotations

import pandas as pd

from workbench.ui.builder import newest_run_id


def _frame(rows):
    return pd.DataFrame(rows, columns=["id", "status", "tokens"])


def test_the_replay_tab_opens_on_the_newest_run_with_steps_to_draw():
    """The pass: the tab opened on "run #111 (greedy) was cancelled before it wrote a token: nothing to replay", an
    empty tree and node table, above complete runs. Runs cancelled or failed before a token are skipped; with only
    such runs the newest is still shown (the header says why it is empty). Mutation caught: the newest id, whatever
    its run (the old rule), gives 111."""
    frame = _frame(
        [
            (111, "cancelled", 0),
            (110, "failed", None),
            (109, "cancelled", 12),  # Stopped while writing: it has steps
            (108, "complete", 40),
        ]
    )
    assert newest_run_id(frame, None) == 109
    assert newest_run_id(frame.iloc[[0, 1, 3]], None) == 108
    assert newest_run_id(frame, 0) == 109 and newest_run_id(frame, float("nan")) == 109
    assert newest_run_id(frame, 111) == 111  # a chosen run stays chosen
    assert newest_run_id(frame.iloc[:2], None) == 111  # nothing drawable: the newest, as before
    # a run still being written has no token count yet: it is not skipped
    assert newest_run_id(_frame([(7, "running", None), (6, "complete", 5)]), None) == 7
    assert newest_run_id(_frame([]), None) is None


def test_the_replay_tab_skips_an_empty_run_in_the_stored_runs_frame(tmp_path):
    """The same through runs_frame over a store: a run cancelled in its prefill, stored after a complete one."""
    from core.trace import RunTrace, StepTrace
    from workbench.store import Store
    from workbench.ui.shared import runs_frame

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")

    def run(status: str, steps):
        return RunTrace(
            method="greedy",
            params={},
            model="m",
            draft_model=None,
            device="cpu",
            dtype="float32",
            prompt="p",
            prompt_ids=[1, 2],
            output_ids=[t for s in steps for t in s.emitted],
            steps=steps,
            status=status,
            decode_seconds=1.0,
        )

    complete = store.save_run(run("complete", [StepTrace(0, 2, 0, 0, [5])]))
    store.save_run(run("cancelled", []))
    assert newest_run_id(runs_frame(store), None) == complete
