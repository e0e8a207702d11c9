"""A run written while it decodes: `with store.recording(header) as rec: rec.add_step(step) ...; rec.finish(run)`.

The run is inserted as `running` first; its steps follow in batches; the final batch and the status
change (`complete`, `cancelled`, `failed`) share one transaction, so a `complete` run always has all
its steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.trace import RunTrace, StepTrace
from workbench.store.errors import StoreError
from workbench.store.rows import run_row

if TYPE_CHECKING:
    from workbench.store.repository import Store


class Recording:
    """A run being written while it decodes (see Store.recording)."""

    def __init__(self, store: Store, header: RunTrace, tags: Sequence[str], flush_seconds: float):
        self.store, self.header, self.tags, self.flush_seconds = store, header, tags, flush_seconds
        self.run_id: int | None = None
        self.status: str | None = None
        self._pending: list[StepTrace] = []
        self._next_index = 0  # steps below this index are written
        self._last_flush = time.monotonic()
        self.write_error: StoreError | None = None  # the last failed batch write, retried with the next one

    def __enter__(self) -> Recording:
        self.run_id = self.store._begin_run(self.header, self.tags)
        return self

    def add_step(self, step: StepTrace) -> None:
        """Keep the step; write the batch when it is due. A store that cannot be written right now (locked,
        deleted, read-only) does not stop the generation: the steps wait and go with the next write."""
        self._pending.append(step)
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            try:
                self.flush()
            except StoreError as e:
                self.write_error = e
                self._last_flush = time.monotonic()  # try again after another flush interval

    def flush(self) -> None:
        self._write(self._pending)

    def _write(self, steps: Sequence[StepTrace], final: dict | None = None) -> None:
        todo = [s for s in steps if s.index >= self._next_index]
        self.store._append_steps(self.run_id, todo, final)
        if todo:
            self._next_index = todo[-1].index + 1
        self._pending = []
        self._last_flush = time.monotonic()

    def finish(self, run: RunTrace) -> None:
        """Write the remaining steps and the final run fields in the same transaction as the status."""
        final = run_row(run)
        final["status"] = "complete" if final["status"] == "running" else final["status"]
        self._write(run.steps or self._pending, final)
        self.status = final["status"]

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.status is not None or self.run_id is None:
            return False
        if exc_type is None:
            status, error = "failed", "the recording ended before the run finished"
        elif issubclass(exc_type, KeyboardInterrupt):
            status, error = "cancelled", "interrupted"
        else:
            status, error = "failed", f"{exc_type.__name__}: {exc}"
        try:
            self._write(self._pending, {"status": status, "error": error})
            self.status = status
        except StoreError as e:
            if exc is not None and hasattr(exc, "add_note"):
                exc.add_note(f"(the trace store could not mark run {self.run_id} {status}: {e})")
            elif exc is None:
                raise
        return False
