"""Issue 33, fourth newcomer pass (the Compare tab's part): an uploaded task's token cap, the first divergence's
tie wording, MAL's meaning, the speed note's estimate, where fitted thresholds come from, stopped columns and
the Task dropdown's label."""

from __future__ import annotations

from workbench.evaluation.tasks.task import Task


def handlers(tasks):
    from workbench.ui.compare_tab import CompareHandlers

    return CompareHandlers(store=None, pool=None, tasks=tasks)


def test_an_uploaded_tasks_cap_fills_the_field_as_written():
    """The newcomer uploaded a task with max_new_tokens 24 and the field showed 128 (the bundled samples' floor)."""
    sample = Task("s", "qa", "a question", max_new_tokens=48)
    uploaded = {"upload:q1": Task("q1", "qa", "a question", max_new_tokens=24), "upload:q2": Task("q2", "qa", "q")}
    h = handlers({"s": sample})
    # the field holds what the last task filled in (128 here): the uploaded task's own cap replaces it
    assert (
        h.pick_task("upload:q1", uploaded, 128, 128)[2] == 24 and h.pick_task("upload:q1", uploaded, 128, 128)[4] == 24
    )
    assert h.pick_task("upload:q2", uploaded, 24, 24)[2] == 128  # no cap in the file: the default
    assert h.pick_task("s", uploaded, 24, 24)[2] == 128  # a bundled sample keeps its floor, so its answer ends
    kept = h.pick_task("upload:q1", uploaded, 300, 128)  # the user's own cap is kept
    assert kept[4] == 128 and kept[2] == {"__type__": "update"}
    huge = {"upload:big": Task("big", "qa", "q", max_new_tokens=5000)}
    assert h.pick_task("upload:big", huge, 128, 128)[2] == 1024  # the field's end, not a value it refuses
