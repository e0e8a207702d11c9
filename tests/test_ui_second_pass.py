"""Issue 33, the second newcomer pass: the pure functions behind its fixes (the browser tests are in
tests/test_browser_second_pass.py)."""

from __future__ import annotations

from core.params import MEMORY_MODES, SHIPPED_MEMORY

# ---------------------------------------------------------------- item 1: a reproducible default csd


def test_the_apps_csd_reads_the_shipped_memory_unless_online_is_asked_for():
    from workbench.ui.compare_tab import app_memory_mode, column_head

    assert app_memory_mode("csd", {}) == SHIPPED_MEMORY
    assert app_memory_mode("csd", {"memory_mode": "online"}) == MEMORY_MODES["online"]
    assert app_memory_mode("csd", {"memory_mode": "frozen"}) == MEMORY_MODES["frozen"]
    assert "shipped table, read only" in column_head("csd", "")
    assert "every rejection adds to it" in column_head("csd[memory_mode=online]", "")
    assert "memory" not in column_head("aasd", "")


def test_a_run_on_a_grown_memory_says_by_how_much_and_how_to_reset():
    from workbench.ui.compare_tab import memory_note

    grown = {"memory_mode": 0, "memory_sha": "b" * 16, "memory_observations": 10_250}
    note = memory_note(grown, 10_000, "a" * 16, "e945.json")
    assert "250 observations added since the shipped table" in note and "memory/e945.json" in note
    assert "reset" in note
    assert memory_note({**grown, "memory_mode": SHIPPED_MEMORY}, 10_000, "a" * 16, "e945.json") == ""
    assert "nothing added" in memory_note({**grown, "memory_sha": "a" * 16}, 10_000, "a" * 16, "e945.json")
    assert memory_note({"tau": 0.1}, 10_000, "a" * 16, "e945.json") == ""  # a run that read no memory


def test_memory_mode_shipped_reads_the_packaged_table_not_the_grown_one(tmp_path, monkeypatch):
    """The shipped mode is what makes the default repeat: counts online runs added to the shared table are not seen."""
    from types import SimpleNamespace

    import core.memory
    from core.memory import pair_fingerprint, shared_memory, shipped_memory, shipped_memory_path
    from core.methods import correction_memory, get_method

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(core.memory, "_SHARED", {})  # this test's tables only: nothing saved at exit
    target = SimpleNamespace(name="t", fingerprint="nofp-" + tmp_path.name)
    csd = get_method("csd")
    shared = correction_memory(csd, target, None, None, {"memory_mode": 0})
    assert shared is shared_memory(target)
    shared.observe(5, 7)
    shipped = correction_memory(csd, target, None, None, {"memory_mode": SHIPPED_MEMORY})
    assert shipped is shipped_memory(target) and shipped.count(5, 7) == 0 and shipped.path is None
    assert shipped_memory_path(pair_fingerprint(target.fingerprint, None)) is None and len(shipped) == 0
