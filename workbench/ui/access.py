"""Who may see which stored run in the app.

A run made in the app belongs to the browser session (Gradio's session) that made it: it carries the tag
`owner:<digest>`, a keyed hash of the session id (the key is random per server process, so the tag,
which a shared run shows, cannot be turned back into the session id). A session sees its own runs and
the runs tagged `shared` (the owner's Share button); every other run, including those the command
line stored, is invisible to it, exactly as if it did not exist. Single-user mode (`serve --single-user`,
`build_app(single_user=True)`) is the local workbench: every run in the store is visible to everyone who
can reach the app, so use it only on 127.0.0.1 or a trusted network.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.store import RunNotFoundError

SHARED_TAG = "shared"
OWNER_PREFIX = "owner:"
_KEY = secrets.token_bytes(32)


@dataclass(frozen=True)
class Viewer:
    owner: str | None  # the session's owner tag; None in single-user mode (every run is visible)

    def can_see(self, tags: Sequence[str]) -> bool:
        return self.owner is None or self.owner in tags or SHARED_TAG in tags

    def owns(self, tags: Sequence[str]) -> bool:
        return self.owner is None or self.owner in tags

    @property
    def visible_tags(self) -> list[str] | None:
        """Runs with any of these tags are visible; None: all runs."""
        return None if self.owner is None else [self.owner, SHARED_TAG]

    @property
    def run_tags(self) -> tuple[str, ...]:
        """Tags a run made by this viewer carries."""
        return () if self.owner is None else (self.owner,)

    def check(self, run_id: int, tags: Sequence[str]) -> None:
        if not self.can_see(tags):
            raise not_visible(run_id, self)


NOBODY = Viewer(OWNER_PREFIX + "-")  # what a page shows before a session asks: the shared runs only


def not_visible(run_id, viewer: Viewer | None = None) -> RunNotFoundError:
    """The same answer as for a run that does not exist: another session's run is not revealed. In single-user mode
    (`viewer.owner` None) every run is everyone's, so the answer speaks of the store, not of sessions."""
    if viewer is not None and viewer.owner is None:
        return RunNotFoundError(
            f"no run {run_id} in this app's store (the Replay & tune tab lists every run it holds; "
            "a deleted run is gone)"
        )
    return RunNotFoundError(
        f"no run {run_id} among this session's runs and the shared ones (runs made in the app "
        f"belong to the browser session that made them until their owner shares them)"
    )


def owner_tag(session: str) -> str:
    return OWNER_PREFIX + hmac.new(_KEY, session.encode(), hashlib.sha256).hexdigest()[:24]


def viewer_of(request, single_user: bool) -> Viewer:
    """The viewer behind a Gradio request (a request without a session gets an owner of its own)."""
    if single_user:
        return Viewer(None)
    session = getattr(request, "session_hash", None) if request is not None else None
    return Viewer(owner_tag(session or secrets.token_hex(16)))


def shown_tags(tags: Sequence[str]) -> list[str]:
    """Tags as a list shows them: owner tags are bookkeeping, left out."""
    return [t for t in tags if not t.startswith(OWNER_PREFIX)]
