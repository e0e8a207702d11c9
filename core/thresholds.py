"""Thresholds fitted to the model: the acceptance thresholds `workbench calibrate --thresholds` chose
for one model, device and dtype, stored beside its timing curve in `<home>/thresholds/`.

A fit is per method: `aasd` keeps α, β for context nodes and α, β for alignment nodes (AASD's per-source
split, core.rules.by_source), `casd` keeps δ (it drafts no alignment nodes). `aasd[auto]` (the parameter
`fitted=1`) verifies with them: `core.methods.run_method` copies the fitted values into the run's
parameters (`fitted_values`), so the run records what it used and its rules are rebuilt from its
parameters alone: re-scoring a stored run never reads this file.

A fit the user made (`<home>/thresholds/`) is read first; else the fit shipped with the package for the
model and dtype (`core/fits/<fingerprint>-<dtype>.json`, the `.sha256` file beside it says how it was made),
so `aasd[auto]` works on a fresh install for the models that have one. A shipped fit is chosen by mean
accepted length, which does not depend on the machine, so it holds for any device; where none was made in
the running dtype, the model's shipped fit of another dtype serves (float32's first): thresholds are on
the target's probabilities, which bfloat16 moves by about a percent, but the admissibility evidence is the
other dtype's (`stored_fit` says which file it read).

The fitting (decoding held-out items, scoring them, choosing) is workbench.evaluation.thresholds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from core.models import workbench_home

# The parameters a fit sets, per method that can read one (`fitted=1`).
FITTED_PARAMS: dict[str, tuple[str, ...]] = {
    "aasd": ("alpha", "beta", "alpha_alignment", "beta_alignment"),
    "casd": ("delta",),
}
# What a fit stores when no relaxed setting kept greedy's score: each rule's own setting that only the
# argmax passes. Adaptive with β = 1: δ = min(α·H + 1, max p) = max p, so only the argmax (and exact ties)
# pass: strict verification, aasd-strict's. Fixed with δ = 0.5: p > 0.5 only for the argmax, so the output
# is greedy's (the fixed rule cannot express strict itself: an argmax with p ≤ 0.5 is rejected, then emitted
# as the bonus token).
LOSSLESS: dict[str, dict[str, float]] = {
    "aasd": {"alpha": 0.0, "beta": 1.0, "alpha_alignment": 0.0, "beta_alignment": 1.0},
    "casd": {"delta": 0.5},
}


def _dtype(target) -> str:
    return str(target.dtype).replace("torch.", "")


def thresholds_path(target) -> Path:
    """`<home>/thresholds/<fingerprint>-<device>-<dtype>.json`, named as core.timing names the cost curve."""
    return workbench_home() / "thresholds" / f"{target.fingerprint}-{target.device.type}-{_dtype(target)}.json"


SHIPPED_DIR = Path(__file__).resolve().parent / "fits"


def shipped_fits_path(target) -> Path:
    """Where the package keeps the fits shipped for this model and dtype (whether or not there are any)."""
    return SHIPPED_DIR / f"{target.fingerprint}-{_dtype(target)}.json"


def _shipped_candidates(target) -> list[Path]:
    """The model's shipped fit files: the running dtype's first, then float32's, then any other dtype's."""
    exact = shipped_fits_path(target)
    others = sorted(
        SHIPPED_DIR.glob(f"{target.fingerprint}-*.json"), key=lambda p: (not p.stem.endswith("float32"), p.name)
    )
    return [exact] + [p for p in others if p != exact]


def stored_fit(target, method: str) -> tuple[dict[str, Any] | None, str]:
    """(`method`'s fit for this model, device and dtype, where it came from): the user's ("home") when there is
    one, else the package's ("shipped", or "shipped (float32)" when made in another dtype), else (None, "none")."""
    fit, where, _, _ = fit_origin(target, method)
    return fit, where


def fit_origin(target, method: str) -> tuple[dict[str, Any] | None, str, Path | None, str | None]:
    """stored_fit's (fit, where) with the file it was read from and the dtype it was fitted in (None, "none",
    None, None when there is none), so a run can say where its thresholds came from."""
    path = thresholds_path(target)
    fit = load_fits(path).get(method)
    if fit is not None:
        return fit, "home", path, _dtype(target)
    for path in _shipped_candidates(target):
        fit = load_fits(path).get(method)
        if fit is not None:
            dtype = path.stem[len(target.fingerprint) + 1 :]
            return fit, "shipped" if dtype == _dtype(target) else f"shipped ({dtype})", path, dtype
    return None, "none", None, None


def shipped_fit_models(method: str) -> set[str]:
    """The model names the package ships a `method` fit for (the UI defaults to `method[auto]` for them)."""
    names = set()
    for path in SHIPPED_DIR.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and method in (data.get("fits") or {}):
            names.add(str(data.get("model")))
    return names


def calibrate_command(target, method: str) -> str:
    """The command that fits `method`'s thresholds for this model, device and dtype."""
    extra = "" if method == "aasd" else f" --method {method}"
    return (
        f"python -m workbench calibrate --thresholds --model {target.name} --device {target.device.type} "
        f"--dtype {_dtype(target)}{extra}"
    )


def load_fits(path: Path) -> dict[str, Any]:
    """The file's fits by method ({} when there is no file); a damaged file is an InvalidInputError."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fits = data["fits"]
        if not isinstance(fits, dict):
            raise TypeError
        return fits
    except (OSError, ValueError, KeyError, TypeError):
        raise InvalidInputError(
            f"the fitted thresholds in {path} cannot be read: delete the file and fit again"
        ) from None


def save_fit(target, method: str, fit: Mapping[str, Any]) -> Path:
    """Store `fit` as `method`'s fit for this model, device and dtype (the other methods' fits stay)."""
    if method not in FITTED_PARAMS:
        raise InvalidInputError(f"thresholds are fitted for {', '.join(FITTED_PARAMS)}, not {method!r}")
    path = thresholds_path(target)
    fits = load_fits(path)
    fits[method] = {"fitted": time.strftime("%Y-%m-%d %H:%M:%S"), **fit}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "model": target.name,
                "fingerprint": target.fingerprint,
                "device": str(target.device),
                "dtype": _dtype(target),
                "fits": fits,
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    tmp.replace(path)
    return path


def fitted_values(target, method: str) -> dict[str, float]:
    """The parameters `method[auto]` verifies with on this model, device and dtype: the stored fit's values.
    No fit stored is an InvalidInputError naming the command that makes one."""
    if method not in FITTED_PARAMS:
        raise InvalidInputError(f"{method} has no fitted thresholds; `[auto]` works for {', '.join(FITTED_PARAMS)}")
    fit, where = stored_fit(target, method)
    path = thresholds_path(target) if not where.startswith("shipped") else shipped_fits_path(target)
    if fit is None:
        raise InvalidInputError(
            f"no thresholds are fitted for {method} on {target.name} ({target.device.type}, "
            f"{_dtype(target)}): run `{calibrate_command(target, method)}` first"
        )
    values = fit.get("values") or {}
    missing = [k for k in FITTED_PARAMS[method] if not isinstance(values.get(k), (int, float))]
    if missing:
        raise InvalidInputError(
            f"the {method} fit in {path} lacks {', '.join(missing)}: fit again (`{calibrate_command(target, method)}`)"
        )
    return {k: float(values[k]) for k in FITTED_PARAMS[method]}


def describe_values(values: Mapping[str, Any]) -> str:
    """ "context α 0.05, β 0.03 · alignment α 0.1, β 0.03" (or "δ 0.2"): thresholds as a line of text."""

    def g(v: Any) -> str:
        return f"{v:g}" if isinstance(v, (int, float)) else "-"

    if "delta" in values and "alpha" not in values:
        return f"δ {g(values['delta'])}"
    a, b = values.get("alpha"), values.get("beta")
    a_al = values.get("alpha_alignment")
    b_al = values.get("beta_alignment")
    a_al, b_al = (a if a_al is None else a_al), (b if b_al is None else b_al)
    return f"context α {g(a)}, β {g(b)} · alignment α {g(a_al)}, β {g(b_al)}"
