"""The methods the workbench offers: the decoding core's (core.methods), and transformers' own `generate`
registered beside them here, explicitly (workbench.evaluation.hf_baselines: hf-generate, hf-prompt-lookup,
hf-assisted, beam), so every command, the UI and the benchmarks name the same methods. Everything in the
workbench that lists, resolves or runs methods imports them from here; core never learns of transformers'
baselines."""

from __future__ import annotations

from core.methods import (
    METHODS,
    Method,
    get_method,
    parse_method_spec,
    recorded_params,
    register,
    rescue_for,
    resolve_params,
    run_batch,
    run_method,
    split_method_list,
)
from workbench.evaluation.hf_baselines import register_methods

register_methods(register)

__all__ = [
    "METHODS",
    "Method",
    "get_method",
    "parse_method_spec",
    "recorded_params",
    "rescue_for",
    "resolve_params",
    "run_batch",
    "run_method",
    "split_method_list",
]
