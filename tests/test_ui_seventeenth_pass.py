"""Issue 33, the seventeenth newcomer pass: the pure functions behind its defects. Each failed on the code before its
fix."""

from __future__ import annotations

from browser_util import synthetic_run

from core.trace import StepTrace


def _steps(n: int) -> list[StepTrace]:
    return [StepTrace(index=i, cache_pos=10 + i, tree_size=0, accepted=0, emitted=[100 + i]) for i in range(n)]


def test_node_acceptance_by_depth_is_in_numeric_order():
    """Moderate: Analytics joined pld's depths 1, 10, 2, 3, ... (sorted as text), a diagonal and a flat line."""
    from core.stats import AcceptanceCounts

    counts = AcceptanceCounts()
    for key in (10, 2, 1, 3, "generated", "context"):
        counts.add(key, "accepted")
    assert list(counts.pairs()) == [1, 2, 3, 10, "context", "generated"]


def test_at_a_temperature_the_column_says_the_texts_part_by_chance_not_by_the_rule():
    """Moderate: at temperature 0.8 aasd's note said its rule kept a token the model ranks lower, while greedy's own
    run had sampled a rank-3 token there. A sampled pair now gets the sampling line (and no measured divergence)."""
    from workbench.ui.compare_tab import measured_at_t0, sampling_note

    greedy = synthetic_run("greedy", _steps(4), params={"temperature": 0.8})
    aasd = synthetic_run("aasd", _steps(4), params={"temperature": 0.8})
    note = sampling_note(greedy, aasd, 2)
    assert "token 2" in note and "greedy at temperature 0.8" in note and "by chance" in note
    assert not measured_at_t0(greedy.params, 0)  # the column's measured divergence is skipped for it
    assert sampling_note(synthetic_run("greedy", _steps(4)), synthetic_run("aasd", _steps(4)), 2) == ""  # T = 0
    assert sampling_note(greedy, aasd, None) == ""  # the same text: nothing to say


def test_an_empty_task_file_and_a_json_array_are_refused_with_what_to_write(tmp_path):
    """Minor: an empty file read "loaded 0 task(s) from the file"; a JSON array read only "each line must be a JSON
    object" beside a box labelled ".jsonl or .json"."""
    from workbench.ui.compare_tab import CompareHandlers

    h = CompareHandlers(None, None, {"extract-orders": object()}, None)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    tasks, _, status, error, _ = h.upload(str(empty))
    assert tasks == {} and "empty.jsonl holds no task" in error and "one JSON object a line" in error
    array = tmp_path / "array.json"
    array.write_text('[{"id": "q1", "task": "qa", "input": "What?"}]\n')
    tasks, _, status, error, _ = h.upload(str(array))
    assert tasks == {} and "JSON array" in error and "JSON Lines" in error


def test_a_run_stopped_before_its_first_token_says_so_plainly():
    """Minor: "stopped before diverging: its 0 tokens equal greedy's" (Compare) and "stopped after 0 tokens, all
    equal to #1 greedy's first 0" (Diff)."""
    from workbench.ui.compare_tab import stopped_before_diverging

    greedy = synthetic_run("greedy", _steps(4))
    stopped = synthetic_run("aasd", [], status="cancelled", output_ids=[])
    assert stopped_before_diverging(greedy, stopped) == "\n\n*stopped before writing a token*"
    part = synthetic_run("aasd", _steps(2), status="cancelled")
    assert "its 2 tokens equal greedy's" in stopped_before_diverging(greedy, part)


def test_a_run_still_being_written_is_marked_in_the_replay_header():
    """Moderate: Replay opened a half-written run as "run #39 · greedy · step 0 (of 0–19)" and kept it so after
    the run finished with 40 tokens."""
    from workbench.ui.replay_view import step_info

    running = synthetic_run("greedy", _steps(20), status="running")
    assert "still being written: 20 steps so far" in step_info(39, running, 0)
    assert "drawn again when the run finishes" in step_info(39, running, 0)
    assert "still being written" not in step_info(39, synthetic_run("greedy", _steps(20)), 0)
