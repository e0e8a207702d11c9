"""How a method is written and its parameters resolved: `aasd[alpha=0.2,align_graft=1]` (core.spec's grammar)
names one method with its own overrides, and `resolve_params` checks them against the method's defaults
(core.params). A bare `auto` is `fitted=1`: `aasd[auto]` verifies with the thresholds fitted to the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.compress.spec import DEFAULT_POOL, check_pool, is_pool_method
from core.errors import InvalidInputError
from core.methods.registry import METHODS, get_method
from core.params import PARAMS, validate
from core.spec import AUTO_THRESHOLDS, parse_spec, shown, split_specs
from core.spec import asked_as as _spelled
from core.thresholds import FITTED_PARAMS

EXAMPLE = "NAME[param=value,...], e.g. aasd[alpha=0.2,align_graft=1]"


def parse_method_spec(spec: str) -> tuple[str, dict[str, str]]:
    """`aasd[align_graft=1,alpha=0.2]` -> ("aasd", {"align_graft": "1", "alpha": "0.2"}): one method
    with its own parameter overrides, so a bench can put variants of a method side by side. The values stay
    text until `resolve_params` checks them."""
    parsed = parse_spec(spec, "method", flags=(AUTO_THRESHOLDS,), example=EXAMPLE)
    name = get_method(parsed.name).name
    overrides = dict(parsed.items)
    if AUTO_THRESHOLDS in parsed.flags:
        if name not in FITTED_PARAMS:
            raise InvalidInputError(f"{name} has no fitted thresholds; `[auto]` works for {', '.join(FITTED_PARAMS)}")
        if "fitted" in overrides:
            raise InvalidInputError(
                f"bad method {shown(spec)}: auto is short for fitted=1, so fitted is given twice; write one of them"
            )
        overrides["fitted"] = "1"
    return name, overrides


def split_method_list(text: str) -> list[str]:
    """Split `greedy,aasd[alpha=0.2,beta=0.1],pld` on the commas outside brackets."""
    return split_specs(text, "method")


def resolve_params(name: str, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The method's parameters: its defaults with `values` checked and merged over them."""
    values = dict(values or {})
    pool = values.pop("pool", None)  # pool=full|compressed: a word, not a number (core.compress), for pool methods only
    method = get_method(name)
    p = validate(values, method.params, name)
    if pool is not None:
        if not is_pool_method(method):
            raise InvalidInputError(
                f"pool={shown(pool)} has no effect on {name}: it says what the context pool "
                f"of a context-drafting method holds under --compress "
                f"({', '.join(n for n, m in METHODS.items() if is_pool_method(m))})"
            )
        p["pool"] = check_pool(pool)
    if p.get("fitted"):  # the fit sets these: given ones would be silently replaced
        given = [k for k in FITTED_PARAMS.get(name, ()) if values.get(k) is not None]
        if given:
            raise InvalidInputError(
                f"{name}[auto] verifies with the fitted {', '.join(FITTED_PARAMS[name])}; "
                f"{', '.join(given)} cannot be given beside it: drop {'it' if len(given) == 1 else 'them'} or auto"
            )
    return p


NOT_NAMED = ("max_new_tokens", "fitted")  # the comparison's own cap, and fitted (asked_as writes it as `auto`)


def _as_written(name: str, value: Any) -> str:
    """A stored value as a user writes it: the word a parameter takes for it (`keys=text`), 1 for 1.0."""
    words = {v: w for w, v in (PARAMS[name].names or {}).items()} if name in PARAMS else {}
    if value in words and not isinstance(value, bool):
        return words[value]
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def changed_params(
    name: str, params: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None, leave_out: tuple = ()
) -> dict[str, str]:
    """The parameters of a stored run of `name` that differ from the method's defaults, as text in the order the
    method declares them: what its variant spec held (`aasd[alpha=0.05]` -> {"alpha": "0.05"}). A fitted run's
    thresholds came from the fit, not the user, so they are left out; so is what a run records beside its
    parameters (a memory's sha, the cost model). `defaults` replaces some of the method's defaults: the app's plain
    `csd` reads the shipped memory (workbench.ui.shared.asked_as). `leave_out`: parameters not named (a sweep's
    own parameter: the runs at each of its values are one line)."""
    method = METHODS.get(name)
    params = params or {}
    if method is None:
        return {}
    set_by_fit = FITTED_PARAMS.get(name, ()) if params.get("fitted") else ()
    reference = {**method.params, **{k: v for k, v in (defaults or {}).items() if k in method.params}}
    out = {
        k: _as_written(k, params[k])
        for k, default in reference.items()
        if k in params and k not in (*NOT_NAMED, *set_by_fit, *leave_out) and params[k] != default
    }
    if params.get("pool", DEFAULT_POOL) != DEFAULT_POOL:
        out["pool"] = str(params["pool"])
    return out


def asked_as(
    name: str, params: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None, leave_out: tuple = ()
) -> str:
    """A stored run's method as it was asked for: `aasd[auto]`, `aasd[alpha=0.05]`, `greedy` (core.spec.asked_as)."""
    return _spelled(name, params, changed_params(name, params, defaults, leave_out))
