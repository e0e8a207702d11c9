"""Drafting strategies behind one typed protocol (core.drafters.base.Drafter), and their registry.

Adding a drafter = one class with `from_params(params, env)`, `begin`, `propose`, `commit` (and its
`prefill_topk` / `generated_topk` needs; subclass TreeObserver to see every tree row's top-k) + one line in DRAFTERS; a method then names it (core.methods).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.drafters.base import DraftEnv, Drafter, NoDraft, Proposal, TopK, TreeObserver, TreeTopK
from core.drafters.context import ContextDrafter
from core.drafters.draft_model import DraftModelDrafter, check_draft
from core.drafters.prompt_lookup import PromptLookupDrafter
from core.drafters.recycle import RecycleDrafter, RecycleTable
from core.drafters.suffix import SuffixDrafter
from core.errors import InvalidInputError

DRAFTERS: dict[str, Callable[[dict[str, Any], DraftEnv], Drafter]] = {
    "none": NoDraft.from_params,
    "prompt_lookup": PromptLookupDrafter.from_params,
    "context": ContextDrafter.from_params,
    "draft_model": DraftModelDrafter.from_params,
    "recycle": RecycleDrafter.from_params,
    "suffix": SuffixDrafter.from_params,
}


def make_drafter(name: str, params: dict[str, Any], env: DraftEnv) -> Drafter:
    build = DRAFTERS.get(name)
    if build is None:
        raise InvalidInputError(f"unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")
    return build(params, env)


__all__ = [
    "DRAFTERS",
    "ContextDrafter",
    "DraftEnv",
    "DraftModelDrafter",
    "Drafter",
    "NoDraft",
    "PromptLookupDrafter",
    "Proposal",
    "RecycleDrafter",
    "RecycleTable",
    "SuffixDrafter",
    "TopK",
    "TreeObserver",
    "TreeTopK",
    "check_draft",
    "make_drafter",
]
