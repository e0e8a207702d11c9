"""Fitting acceptance thresholds to the model (`workbench calibrate --thresholds`; docs/ALGORITHMS.md, "Fitted
thresholds"): CASD's oracle sweeps turned into a fitting step.

On held-out items (after the first BENCHMARK_ITEMS of each category, which benchmarks draw from), run
greedy and a grid of settings, interleaved per item (workbench.evaluation.bench.run_bench), and keep the
fastest setting whose mean task score is at least greedy's on the same items (`choose`, a pure function).

`aasd` is fitted per source in two passes: first one (α, β) shared by context and alignment nodes; then,
with the context nodes' values fixed at that choice, the alignment nodes' own (α, β) from the same grid
(the pass-one choice runs again beside them, so every speed-up of a pass is against the same greedy runs).
`casd` drafts no alignment nodes: one pass over δ. When no setting keeps greedy's score, the fit stores
the rule's lossless setting (core.thresholds.LOSSLESS: aasd[auto] then verifies like aasd-strict).
The fit is stored per model, device and dtype (core.thresholds.save_fit); `aasd[auto]` reads it.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from core.errors import InvalidInputError
from workbench.methods import resolve_params
from core.thresholds import FITTED_PARAMS, LOSSLESS
from workbench.evaluation.bench import Scorer, run_bench
from workbench.evaluation.calibration import BENCHMARK_ITEMS
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task

# Small on purpose: every setting decodes every item. α = 0 is the fixed threshold β.
DEFAULT_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "aasd": {"alpha": (0.0, 0.02, 0.05, 0.1), "beta": (0.01, 0.03, 0.1)},
    "casd": {"delta": (0.05, 0.1, 0.2, 0.3)},
}
ALIGNMENT_OF = {"alpha": "alpha_alignment", "beta": "beta_alignment"}  # the alignment nodes' own parameter
SCORE_TOLERANCE = 1e-9  # equal outputs give equal mean scores; this only absorbs float noise

Grid = dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class Trial:
    """One grid setting measured on the held-out items."""

    stage: str  # "shared" (one setting for every relaxed source) or "alignment" (the alignment nodes' own)
    values: dict[str, float]  # every fitted parameter (core.thresholds.FITTED_PARAMS) this setting verifies with
    spec: str  # the method spec it ran as, e.g. aasd[alpha=0.05,beta=0.03]
    speedup: float | None  # TPS over greedy's on the same items, in the same interleaved run
    mal: float | None
    score: float | None  # mean task score over the items


# ---------------------------------------------------------------- the grid

def parse_grid(text: str | None, method: str) -> Grid:
    """`"alpha=0,0.05;beta=0.01,0.1"` -> {"alpha": (0.0, 0.05), "beta": (0.01, 0.1)}; parameters not named
    keep the default grid's values, and every value is range-checked as the method would check it."""
    if method not in DEFAULT_GRIDS:
        raise InvalidInputError(f"thresholds are fitted for {', '.join(DEFAULT_GRIDS)}, not {method!r}")
    grid = dict(DEFAULT_GRIDS[method])
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, eq, values = part.partition("=")
        name = name.strip()
        if not eq or name not in grid:
            raise InvalidInputError(f"bad --grid part {part!r}: write NAME=v1,v2,... joined by ';' with NAME one of "
                                    f"{', '.join(grid)} (e.g. \"{_example(method)}\")")
        try:
            numbers = tuple(dict.fromkeys(float(v) for v in values.split(",") if v.strip()))
        except ValueError:
            raise InvalidInputError(f"bad --grid values in {part!r}: numbers separated by commas") from None
        if not numbers:
            raise InvalidInputError(f"--grid gives {name} no values")
        for v in numbers:
            resolve_params(method, {name: v})  # out of range: the parameter's own message
        grid[name] = numbers
    return grid


def _example(method: str) -> str:
    return "; ".join(f"{k}={','.join(f'{v:g}' for v in vs[:2])}" for k, vs in DEFAULT_GRIDS[method].items())


def grid_settings(grid: Grid) -> list[dict[str, float]]:
    """Every combination of the grid's values, in the order the grid lists them."""
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def method_spec(method: str, setting: Mapping[str, float]) -> str:
    """`aasd[alpha=0.05,beta=0.03]`: the setting as run_bench runs (and labels) it."""
    return f"{method}[{','.join(f'{k}={v:g}' for k, v in setting.items())}]"


def _shared_values(method: str, setting: Mapping[str, float]) -> dict[str, float]:
    """A shared setting as every fitted parameter: alignment nodes take the context nodes' values."""
    out = dict(setting)
    for name, own in ALIGNMENT_OF.items():
        if own in FITTED_PARAMS[method] and name in setting:
            out[own] = setting[name]
    return out


# ---------------------------------------------------------------- deciding (pure)

def keeps_score(trial: Trial, greedy_score: float) -> bool:
    return trial.score is not None and trial.score >= greedy_score - SCORE_TOLERANCE


def choose(trials: Sequence[Trial], greedy_score: float) -> Trial | None:
    """The fastest trial whose mean score is at least greedy's on the same items (the earlier on a tie of
    speed-up); None when none keeps the score."""
    kept = [t for t in trials if keeps_score(t, greedy_score) and t.speedup is not None]
    return max(kept, key=lambda t: t.speedup, default=None)


# ---------------------------------------------------------------- the items

def held_out_tasks(tasks: Sequence[Task], skip: int = BENCHMARK_ITEMS, per_category: int | None = None) -> list[Task]:
    """The items after the first `skip` of each category (those benchmarks draw, as calibration.held_out_prompts
    leaves them), at most `per_category` of each; none left is an InvalidInputError."""
    if skip < 0 or (per_category is not None and per_category < 1):
        raise InvalidInputError("--held-out-from must be at least 0 and --limit at least 1")
    columns: dict[str | None, list[Task]] = {}
    for t in tasks:
        columns.setdefault(t.category, []).append(t)
    end = None if per_category is None else skip + per_category
    out = [t for column in columns.values() for t in column[skip:end]]
    if not out:
        most = max((len(c) for c in columns.values()), default=0)
        raise InvalidInputError(f"no held-out items: the categories have at most {most} items and the first {skip} "
                                f"are the benchmarks' (lower --held-out-from, or use a larger --data)")
    return out


# ---------------------------------------------------------------- fitting

def _measure(target, tasks, stage: str, method: str, settings: Sequence[tuple[dict[str, float], dict[str, float]]], *,
             params: Mapping[str, Any] | None, max_new_tokens: int, scorer: Scorer,
             progress: bool) -> tuple[dict[str, Any], list[Trial]]:
    """Greedy and every setting, interleaved per item: (greedy's summary, one Trial per setting). A setting is
    (the parameters its spec writes, every fitted parameter it verifies with)."""
    specs = {method_spec(method, written): values for written, values in settings}
    result = run_bench(target, tasks, list(specs), params, max_new_tokens=max_new_tokens, scorer=scorer, progress=progress)
    rows = result["methods"]
    trials = [Trial(stage, values, spec, rows[spec]["speedup"], rows[spec]["mal"], rows[spec]["score"])
              for spec, values in specs.items()]
    return rows["greedy"], trials


def fit_thresholds(target, tasks: Sequence[Task], method: str = "aasd", grid: Grid | None = None, *,
                   params: Mapping[str, Any] | None = None, max_new_tokens: int = 128, per_source: bool = True,
                   scorer: Scorer = score_task, progress: bool = True) -> dict[str, Any]:
    """Fit `method`'s thresholds on `tasks` (held-out items); returns the fit as core.thresholds.save_fit stores
    it: `values` (what `method[auto]` verifies with), `relaxed` (False: no setting kept greedy's score, the
    lossless setting is stored), greedy's score, TPS and MAL per pass, every trial, and each pass's `chosen` spec.
    `params` are other parameters every run takes (e.g. max_nodes; by default the method's own defaults)."""
    grid = grid or parse_grid(None, method)  # an unknown method fails here
    if not tasks:
        raise InvalidInputError("no items to fit on")
    if all(scorer(t, "") is None for t in tasks):  # None = no score for this task at all (score_task's contract)
        raise InvalidInputError("none of the items has a task score (no references, or no metric for its kind): fit on "
                                "items that have one (Spec-Bench: summarization, rag, math_reasoning)")
    measure = dict(params=params, max_new_tokens=max_new_tokens, scorer=scorer, progress=progress)
    shared = grid_settings(grid)
    greedy_shared, trials = _measure(target, tasks, "shared", method, [(s, _shared_values(method, s)) for s in shared],
                                     **measure)
    if greedy_shared["score"] is None:
        raise InvalidInputError("greedy's outputs got no task score on these items (no references): fit on items with references")
    best = choose(trials, greedy_shared["score"])
    values = dict(best.values) if best is not None else dict(LOSSLESS[method])
    greedy = {"shared": _greedy_row(greedy_shared)}
    chosen = {"shared": best.spec if best is not None else None}
    per_source = per_source and any(own in FITTED_PARAMS[method] for own in ALIGNMENT_OF.values())
    if per_source:
        # Context nodes keep the first pass's values; alignment nodes try the grid. The first pass's choice
        # runs again (first), so this pass's speed-ups are all against the same greedy runs.
        candidates = [values] + [{**values, **{ALIGNMENT_OF[k]: v for k, v in s.items()}} for s in shared
                                 if any(values[ALIGNMENT_OF[k]] != v for k, v in s.items())]
        greedy_alignment, second = _measure(target, tasks, "alignment", method, [(c, c) for c in candidates], **measure)
        trials += second
        best = choose(second, greedy_alignment["score"])
        values = dict(best.values) if best is not None else dict(LOSSLESS[method])
        greedy["alignment"] = _greedy_row(greedy_alignment)
        chosen["alignment"] = best.spec if best is not None else None
    values = {k: values[k] for k in FITTED_PARAMS[method]}
    return {"method": method, "values": values, "relaxed": values != LOSSLESS[method], "chosen": chosen, "greedy": greedy,
            "grid": {k: list(v) for k, v in grid.items()}, "per_source": per_source, "params": dict(params or {}),
            "max_new_tokens": max_new_tokens,
            "trials": [asdict(t) for t in trials]}


def _greedy_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {"score": summary["score"], "tps": summary["tps"], "mal": summary["mal"]}


def items_record(tasks: Sequence[Task], data: str, categories: Sequence[str] | None, held_out_from: int,
                 per_category: int | None) -> dict[str, Any]:
    """What the fit was made on, for the stored file: enough to pick the same items again."""
    return {"data": str(data), "categories": list(categories) if categories else None, "held_out_from": held_out_from,
            "per_category": per_category, "count": len(tasks), "ids": [item_id(t) for t in tasks]}


def item_id(task: Task) -> str:
    """How a fit records an item (items_record) and an evaluation names it: `category/id`."""
    return f"{task.category}/{task.id}"


def fit_overlap(target, methods: Sequence[str], params: Mapping[str, Any] | None, tasks: Sequence[Task]) -> dict[str, list[str]]:
    """For each method spec that verifies with fitted thresholds (`aasd[auto]`, or `fitted=1` among `params`), the
    evaluated items (`category/id`) that the stored fit was made on: an evaluation on them is not held out. Empty
    when none is (or no fitted method runs, or the fit recorded no items)."""
    from core.methods import parse_method_spec
    from core.thresholds import load_fits, thresholds_path

    out: dict[str, list[str]] = {}
    evaluated = [item_id(t) for t in tasks]
    for spec in methods:
        name, overrides = parse_method_spec(spec)
        fitted = overrides.get("fitted", (params or {}).get("fitted", 0))
        if name not in FITTED_PARAMS or str(fitted).strip() in ("", "0", "0.0"):
            continue
        fit = load_fits(thresholds_path(target)).get(name) or {}
        used = set((fit.get("items") or {}).get("ids") or ())
        both = [i for i in evaluated if i in used]
        if both:
            out[spec] = both
    return out


def describe_overlap(overlap: Mapping[str, Sequence[str]]) -> str:
    """One line per method: how many evaluated items its fit was made on, and the first few."""
    return "; ".join(f"{spec}: {len(ids)} item{'s' * (len(ids) != 1)} ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                     for spec, ids in overlap.items())


def format_fit(fit: Mapping[str, Any]) -> str:
    """The grid as a Markdown table, greedy's row first in each pass, each pass's choice marked."""
    def fmt(v, f="{:.3f}"):
        return "-" if v is None else f.format(v)

    lines = ["| pass | setting | speed-up | MAL | score | keeps greedy's score | chosen |", "|---|---|---|---|---|---|---|"]
    for stage, greedy in fit["greedy"].items():
        lines.append(f"| {stage} | greedy | 1.000 | {fmt(greedy['mal'])} | {fmt(greedy['score'], '{:.2f}')} | | |")
        for t in (t for t in fit["trials"] if t["stage"] == stage):
            keeps = keeps_score(Trial(**t), greedy["score"])
            mark = "←" if t["spec"] == fit["chosen"].get(stage) else ""
            lines.append(f"| {stage} | {t['spec']} | {fmt(t['speedup'])} | {fmt(t['mal'])} | {fmt(t['score'], '{:.2f}')} | "
                         f"{'yes' if keeps else 'no'} | {mark} |")
    return "\n".join(lines)
