"""The words a trace is written in: where a node came from (`Source`) and what the walk decided about it
(`Decision`), as `Literal` types (a type checker catches a misspelt source) and as tuples (for checks at
run time and for the store's columns). Trees, walks, traces and statistics all take them from here.
"""

from __future__ import annotations

from typing import Literal, get_args

# root: the pending token; context / generated: copied from the prompt (or its full document) / from the
# output so far by the n-gram pool; alignment: the target's own alternative to a copied token (AASD);
# draft: a draft model's token; recycled: Token Recycling's table; history: the decoded history's suffix
# structure (a suffix drafter); model: the bonus token the target chose after the accepted path.
Source = Literal["root", "context", "generated", "alignment", "draft", "recycled", "history", "model"]
Decision = Literal["accepted", "rejected", "rescued", "bonus", "unreached"]

SOURCES: tuple[Source, ...] = get_args(Source)
DECISIONS: tuple[Decision, ...] = get_args(Decision)
JUDGED: tuple[Decision, ...] = ("accepted", "rejected", "rescued")  # draft nodes the walk reached and judged
ACCEPTED: tuple[Decision, ...] = ("accepted", "rescued")  # judged nodes on the accepted path
