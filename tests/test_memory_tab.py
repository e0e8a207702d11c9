"""The CSD memory tab names its two ids for what they are and explains its key column (issue 33, fifth newcomer pass:
Compare said `676cd25f29e6d52e.json.gz`, the tab said fingerprint `a0b51e196e1f8547`, and "rescued by key" was an
empty, unexplained column)."""

from __future__ import annotations

from collections import Counter

from core.memory import CorrectionMemory, pair_fingerprint
from core.trace import RunTrace
from workbench.ui.memory_tab import ENTRY_COLUMNS, KEY_COLUMN, entries_frame, key_kinds, summary_md


def _csd_run(keys: int | None) -> RunTrace:
    params = {"lam": 6, "memory_mode": 2, "memory_sha": "x"} | ({"keys": keys} if keys is not None else {})
    run = RunTrace("csd", params, "target", "draft", "cpu", "float32", "p", [1])
    run.model_fingerprint, run.draft_fingerprint = "t" * 16, "d" * 16
    return run


def test_the_summary_names_the_file_by_the_model_pair_and_the_hash_by_the_content():
    memory = CorrectionMemory({(1, 2): 5, (3, 4): 9})
    run = _csd_run(0)
    pair = pair_fingerprint(run.model_fingerprint, run.draft_fingerprint)
    md = summary_md(["#7"], run, memory, "the table shipped with the package", Counter(), f"{pair}.json.gz")
    assert f"**file** `{pair}.json.gz` (named by the model pair's id, `{pair}`)" in md
    assert f"**content hash** `{memory.fingerprint()}`: of the table's entries and counts" in md
    assert "fingerprint" not in md  # the word named neither id
    assert memory.fingerprint() != pair
    assert f"**no file** (model pair id `{pair}`)" in summary_md(["#7"], run, CorrectionMemory(), "x", Counter())


def test_runs_that_read_exact_pairs_only_get_no_empty_key_column_and_a_line_saying_why():
    memory = CorrectionMemory({(1, 2): 5})
    for keys in (None, 0):  # a run recorded before keys existed, and the paper's exact pairs
        run = _csd_run(keys)
        assert key_kinds([run]) == ("exact",)
        md = summary_md(["#7"], run, memory, "x", Counter(), "f.json.gz", key_kinds([run]))
        assert "**keys**: exact (draft, correction) pairs only" in md and 'no "rescued by key" column' in md
    frame = entries_frame(memory, Counter({(1, 2): 1}), str, by_key={(1, 2): Counter(exact=1)}, keyed=False)
    assert KEY_COLUMN not in frame.columns and list(frame.columns) == ENTRY_COLUMNS[:-1]
    kinds = key_kinds([_csd_run(0), _csd_run(3)])  # csd[keys=all] among them: the column says which key rescued
    assert kinds == ("exact", "text", "prefix")
    md = summary_md(["#7", "#8"], _csd_run(3), memory, "x", Counter(), "f.json.gz", kinds)
    assert "**keys**: exact, text, prefix; **rescued by key** says which key kind rescued each pair" in md
    frame = entries_frame(memory, Counter({(1, 2): 1}), str, by_key={(1, 2): Counter(text=1)}, keyed=True)
    assert list(frame[KEY_COLUMN]) == ["text 1"]
