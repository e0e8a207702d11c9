"""core.persist: the one home of the tables a process shares and keeps on disk (CSD's correction memory and
Token Recycling's table use it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.persist import atomic_write, process_table, save_tables


def test_a_table_is_made_once_per_key_and_prepared_on_every_call():
    tables: dict = {}
    made, prepared = [], []
    first = process_table(tables, "a", lambda: made.append(1) or ["table a"], prepared.append)
    again = process_table(tables, "a", lambda: made.append(1) or ["other"], prepared.append)
    other = process_table(tables, "b", lambda: ["table b"])
    assert first is again and other is not first and len(made) == 1 and prepared == [first, first]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "t.bin"
    atomic_write(path, lambda fh: fh.write(b"old"))

    def half(fh):
        fh.write(b"new, but")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, half)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"]


class Table:
    def __init__(self, path: Path | None, unsaved: bool, broken: bool = False):
        self.path, self.unsaved, self.broken, self.saved = path, unsaved, broken, 0

    def save(self) -> Path:
        if self.broken:
            raise PermissionError("read-only home")
        self.saved += 1
        return self.path


def test_saving_at_exit_skips_clean_tables_and_survives_a_broken_one(tmp_path, capsys):
    clean, broken, dirty = (
        Table(tmp_path / "a", False),
        Table(tmp_path / "b", True, broken=True),
        Table(tmp_path / "c", True),
    )
    save_tables([clean, broken, dirty], lambda t: t.unsaved, "test table")
    assert (clean.saved, dirty.saved) == (0, 1)
    assert "warning: could not save the test table" in capsys.readouterr().out
