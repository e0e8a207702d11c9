"""Named methods (core.methods.registry), how they are written and their parameters resolved
(core.methods.spec), the one factory that turns a method into a drafter, a verifier and a tree sizer
(core.methods.build), and running them (core.methods.run). Everything callers use is importable from here."""

from __future__ import annotations

from core.methods.build import (
    build,
    correction_memory,
    drafter_name,
    make_verifier,
    recycle_table,
    rescue_for,
    suffix_corpus,
    tree_sizer,
)
from core.methods.registry import (
    ALIGN,
    COMMON,
    DRAFT,
    METHODS,
    POOL,
    RESCUE,
    SAMPLING,
    TABLE,
    ExternalResult,
    ExternalRunner,
    Method,
    get_method,
    param_defaults,
    register,
)
from core.methods.run import recorded_params, run_batch, run_method, warm_up
from core.methods.spec import (
    AUTO_THRESHOLDS,
    asked_as,
    changed_params,
    parse_method_spec,
    resolve_params,
    split_method_list,
)

__all__ = [
    "ALIGN",
    "AUTO_THRESHOLDS",
    "COMMON",
    "DRAFT",
    "METHODS",
    "POOL",
    "RESCUE",
    "SAMPLING",
    "TABLE",
    "ExternalResult",
    "ExternalRunner",
    "Method",
    "build",
    "correction_memory",
    "drafter_name",
    "get_method",
    "make_verifier",
    "param_defaults",
    "asked_as",
    "changed_params",
    "parse_method_spec",
    "recycle_table",
    "register",
    "rescue_for",
    "resolve_params",
    "recorded_params",
    "run_batch",
    "run_method",
    "split_method_list",
    "suffix_corpus",
    "tree_sizer",
    "warm_up",
]
