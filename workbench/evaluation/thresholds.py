"""Fitting acceptance thresholds to the model (`workbench calibrate --thresholds`; docs/AUTOMATIC_SETTINGS.md,
"Fitted thresholds across families"): CASD's oracle sweeps turned into a fitting step.

On held-out items of several task families at once (each task's category is its family), greedy and a grid
of settings run interleaved per item (workbench.evaluation.bench.run_bench); every setting is judged by the
admissibility rule (workbench.evaluation.admissibility: for every family, the lower end of a paired 95 %
bootstrap interval of score − greedy's score must be above −1 point), and the fastest admissible setting is
kept, by mean accepted length (default: tokens per verification step, the same on any machine) or by the
measured speed-up against greedy in the same run (`choose`, a pure function).

`aasd` is fitted per source in two passes: first one (α, β) shared by context and alignment nodes; then,
with the context nodes' values fixed at that choice, the alignment nodes' own (α, β) from the same grid
(the pass-one choice runs again beside them, so every speed-up of a pass is against the same greedy runs).
`casd` drafts no alignment nodes: one pass over δ. When no setting is admissible, the fit stores the rule's
lossless setting (core.thresholds.LOSSLESS: aasd[auto] then verifies like aasd-strict).
The fit is stored per model, device and dtype (core.thresholds.save_fit) with the item ids it used per
family; `aasd[auto]` reads it, and bench / report check evaluated items against those ids (`fit_overlap`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import InvalidInputError
from core.thresholds import FITTED_PARAMS, LOSSLESS, stored_fit
from workbench.evaluation.admissibility import SPEED_MEASURES, FamilyOutcome, fastest, judge
from workbench.evaluation.bench import run_bench, summarise_rows
from workbench.evaluation.calibration import BENCHMARK_ITEMS
from workbench.evaluation.families import family_score, scored_by_probability
from workbench.evaluation.scores import score_task
from workbench.evaluation.tasks import Task
from workbench.methods import resolve_params

# Small on purpose: every setting decodes every item. α = 0 is the fixed threshold β.
DEFAULT_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "aasd": {"alpha": (0.0, 0.02, 0.05, 0.1), "beta": (0.01, 0.03, 0.1)},
    "casd": {"delta": (0.05, 0.1, 0.2, 0.3)},
}
ALIGNMENT_OF = {"alpha": "alpha_alignment", "beta": "beta_alignment"}  # the alignment nodes' own parameter

Grid = dict[str, tuple[float, ...]]


# (task, generated text, the run's steps) -> score ×100 or None: writing reads the steps (the target's own
# probabilities), the other families compare the text with the references.
FamilyScorer = Callable[[Task, str, Any], float | None]


@dataclass(frozen=True)
class Trial:
    """One grid setting measured on the held-out items of every family, judged by the admissibility rule."""

    stage: str  # "shared" (one setting for every relaxed source) or "alignment" (the alignment nodes' own)
    values: dict[str, float]  # every parameter this setting verifies with (a fit's: core.thresholds.FITTED_PARAMS)
    spec: str  # the method spec it ran as, e.g. aasd[alpha=0.05,beta=0.03]
    speedup: float | None  # TPS over greedy's on the same items, in the same interleaved run, pooled over families
    mal: float | None  # tokens per verification step, pooled over families
    admissible: bool = False
    families: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # family -> mean, low, high (score − greedy's), items
    failing: tuple[str, ...] = ()  # families whose lower bound is below −1 point


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
            raise InvalidInputError(
                f"bad --grid part {part!r}: write NAME=v1,v2,... joined by ';' with NAME one of "
                f'{", ".join(grid)} (e.g. "{_example(method)}")'
            )
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
        raise InvalidInputError(
            f"no held-out items: the categories have at most {most} items and the first {skip} "
            f"are the benchmarks' (lower --held-out-from, or use a larger --data)"
        )
    return out


# ---------------------------------------------------------------- fitting


def outcomes_by_family(rows: Sequence[Mapping[str, Any]], spec: str) -> list[FamilyOutcome]:
    """run_bench's rows of `spec` and greedy, paired per item within each family (the row's category): the scores
    of items scored for both, and the tokens, decoding seconds and steps of all the family's items."""
    greedy = {(r.get("category"), r["id"]): r for r in rows if r["method"] == "greedy"}
    by_family: dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for r in rows:
        g = greedy.get((r.get("category"), r["id"]))
        if r["method"] == spec and g is not None:
            by_family.setdefault(r.get("category") or "", []).append((r, g))
    out = []
    for family, pairs in by_family.items():
        scored = [
            (r["score"], g["score"]) for r, g in pairs if r.get("score") is not None and g.get("score") is not None
        ]
        out.append(
            FamilyOutcome(
                family,
                [a for a, _ in scored],
                [b for _, b in scored],
                sum(r["tokens"] for r, _ in pairs),
                sum(r["decode_seconds"] for r, _ in pairs),
                sum(g["tokens"] for _, g in pairs),
                sum(g["decode_seconds"] for _, g in pairs),
                setting_decoded=sum(r["decoded"] for r, _ in pairs),
                setting_steps=sum(r["steps"] for r, _ in pairs),
            )
        )
    return out


def trial_of(
    stage: str, spec: str, values: Mapping[str, float], outcomes: Sequence[FamilyOutcome], families: Sequence[str]
) -> Trial:
    """A setting's trial: its admissibility judgement over `families`, flattened for storing."""
    j = judge(spec, outcomes, families)
    return Trial(
        stage,
        dict(values),
        spec,
        j.speedup,
        j.mal,
        j.admissible,
        {f: {"mean": i.mean, "low": i.low, "high": i.high, "items": i.items} for f, i in j.intervals.items()},
        j.failing,
    )


def family_scorer(execute_code: bool = False, unsafe_exec: bool | str = False) -> FamilyScorer:
    """Each output scored in its family's metric (workbench.evaluation.families.family_score)."""
    return lambda task, text, steps: family_score(task, text, steps, execute_code=execute_code, unsafe_exec=unsafe_exec)


def measure_settings(
    target,
    tasks: Sequence[Task],
    specs: Sequence[str],
    *,
    params: Mapping[str, Any] | None = None,
    max_new_tokens: int | None = None,
    scorer: FamilyScorer | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Greedy and every spec on every task, interleaved per item, each output scored in its family's metric:
    {"rows": run_bench's rows, "greedy": greedy's pooled summary, "outcomes": {spec: [FamilyOutcome]}}."""
    scorer = scorer or family_scorer()

    def score(row, task, run):  # writing needs the run's steps, which run_bench's text scorer does not see
        row["score"] = scorer(task, run.output_text, run.steps)

    result = run_bench(
        target,
        tasks,
        list(specs),
        params,
        max_new_tokens=max_new_tokens,
        scorer=None,
        on_result=score,
        progress=progress,
    )
    rows = result["tasks"]
    summary = summarise_rows(rows)  # run_bench summarised before on_result's scores were all in
    return {
        "rows": rows,
        "greedy": summary["greedy"],
        "summary": summary,
        "outcomes": {spec: outcomes_by_family(rows, spec) for spec in specs},
    }


def _measure(
    target,
    tasks,
    stage: str,
    method: str,
    settings: Sequence[tuple[dict[str, float], dict[str, float]]],
    families: Sequence[str],
    **measure,
) -> tuple[dict[str, Any], list[Trial]]:
    """Greedy and every setting, interleaved per item: (greedy's summary, one Trial per setting). A setting is
    (the parameters its spec writes, every fitted parameter it verifies with)."""
    specs = {method_spec(method, written): values for written, values in settings}
    measured = measure_settings(target, tasks, list(specs), **measure)
    _check_greedy_scored(measured["outcomes"][next(iter(specs))], families)
    trials = [trial_of(stage, spec, values, measured["outcomes"][spec], families) for spec, values in specs.items()]
    return measured["greedy"], trials


def _check_greedy_scored(outcomes: Sequence[FamilyOutcome], families: Sequence[str]) -> None:
    scored = {o.family for o in outcomes if o.greedy_scores}
    missing = [f for f in families if f not in scored]
    if missing:
        raise InvalidInputError(
            f"greedy's outputs got no score on famil{'y' if len(missing) == 1 else 'ies'} "
            f"{', '.join(missing)} (no references, or code not executed): fit on families with a score"
        )


def fit_thresholds(
    target,
    tasks: Sequence[Task],
    method: str = "aasd",
    grid: Grid | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    max_new_tokens: int | None = None,
    per_source: bool = True,
    by: str = "mal",
    scorer: FamilyScorer | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Fit `method`'s thresholds on `tasks` (held-out items; each task's category is its family, and every family
    must hold: the admissibility rule); returns the fit as core.thresholds.save_fit stores it: `values` (what
    `method[auto]` verifies with), `relaxed` (False: no setting was admissible, the lossless setting is stored),
    the families, greedy's TPS and MAL per pass, every trial with its per-family intervals, each pass's `chosen`
    spec and `by` (what "fastest" meant). `params` are other parameters every run takes (e.g. max_nodes)."""
    grid = grid or parse_grid(None, method)  # an unknown method fails here
    if by not in SPEED_MEASURES:
        raise InvalidInputError(f"--choose-by is {' or '.join(SPEED_MEASURES)}, not {by!r}")
    if not tasks:
        raise InvalidInputError("no items to fit on")
    families = list(dict.fromkeys(t.category or "" for t in tasks))
    unscored = [
        f
        for f in families
        if all(score_task(t, "") is None and not scored_by_probability(t) for t in tasks if (t.category or "") == f)
    ]
    if unscored:  # None = no score for this task at all (score_task's contract); writing is scored from the run
        raise InvalidInputError(
            f"no item of {', '.join(unscored)} has a task score (no references, or no metric for its "
            f"kind): fit on families that have one (calibrate --thresholds --families)"
        )
    measure = dict(params=params, max_new_tokens=max_new_tokens, scorer=scorer, progress=progress)
    shared = grid_settings(grid)
    greedy_shared, trials = _measure(
        target, tasks, "shared", method, [(s, _shared_values(method, s)) for s in shared], families, **measure
    )
    best = fastest(trials, by)
    values = dict(best.values) if best is not None else dict(LOSSLESS[method])
    greedy = {"shared": _greedy_row(greedy_shared)}
    chosen = {"shared": best.spec if best is not None else None}
    per_source = per_source and any(own in FITTED_PARAMS[method] for own in ALIGNMENT_OF.values())
    if per_source:
        # Context nodes keep the first pass's values; alignment nodes try the grid. The first pass's choice
        # runs again (first), so this pass's speed-ups are all against the same greedy runs.
        candidates = [values] + [
            {**values, **{ALIGNMENT_OF[k]: v for k, v in s.items()}}
            for s in shared
            if any(values[ALIGNMENT_OF[k]] != v for k, v in s.items())
        ]
        greedy_alignment, second = _measure(
            target, tasks, "alignment", method, [(c, c) for c in candidates], families, **measure
        )
        trials += second
        best = fastest(second, by)
        values = dict(best.values) if best is not None else dict(LOSSLESS[method])
        greedy["alignment"] = _greedy_row(greedy_alignment)
        chosen["alignment"] = best.spec if best is not None else None
    values = {k: values[k] for k in FITTED_PARAMS[method]}
    return {
        "method": method,
        "values": values,
        "relaxed": values != LOSSLESS[method],
        "chosen": chosen,
        "by": by,
        "families": families,
        "greedy": greedy,
        "grid": {k: list(v) for k, v in grid.items()},
        "per_source": per_source,
        "params": dict(params or {}),
        "max_new_tokens": max_new_tokens,
        "trials": [asdict(t) for t in trials],
    }


def _greedy_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {"tps": summary["tps"], "mal": summary["mal"]}


def items_record(tasks: Sequence[Task], source: Mapping[str, Any]) -> dict[str, Any]:
    """What the fit was made on, for the stored file: the item ids per family (`families`), every item as
    `family/id` (`ids`, what an evaluation is checked against) and `source`, enough to pick the same items
    again (the families and split, or the data file, and the counts)."""
    by_family: dict[str, list[str]] = {}
    for t in tasks:
        by_family.setdefault(t.category or "", []).append(t.id)
    return {**source, "count": len(tasks), "families": by_family, "ids": [item_id(t) for t in tasks]}


def item_id(task: Task) -> str:
    """How a fit records an item (items_record) and an evaluation names it: `category/id`."""
    return f"{task.category}/{task.id}"


def fit_overlap(
    target, methods: Sequence[str], params: Mapping[str, Any] | None, tasks: Sequence[Task]
) -> dict[str, list[str]]:
    """For each method spec that verifies with fitted thresholds (`aasd[auto]`, or `fitted=1` among `params`), the
    evaluated items (`category/id`) that the stored fit was made on: an evaluation on them is not held out. Empty
    when none is (or no fitted method runs, or the fit recorded no items)."""
    out: dict[str, list[str]] = {}
    evaluated = [item_id(t) for t in tasks]
    for spec, name in fitted_methods(methods, params).items():
        fit, _ = stored_fit(target, name)
        used = set(((fit or {}).get("items") or {}).get("ids") or ())
        both = [i for i in evaluated if i in used]
        if both:
            out[spec] = both
    return out


def fitted_methods(methods: Sequence[str], params: Mapping[str, Any] | None) -> dict[str, str]:
    """{spec: method name} for each method spec that verifies with fitted thresholds (`aasd[auto]`, or `fitted=1`
    among its overrides or `params`): the runs that read a stored fit."""
    from core.methods import parse_method_spec

    out = {}
    for spec in methods:
        name, overrides = parse_method_spec(spec)
        fitted = overrides.get("fitted", (params or {}).get("fitted", 0))
        if name in FITTED_PARAMS and str(fitted).strip() not in ("", "0", "0.0"):
            out[spec] = name
    return out


def describe_overlap(overlap: Mapping[str, Sequence[str]]) -> str:
    """One line per method: how many evaluated items its fit was made on, and the first few."""
    return "; ".join(
        f"{spec}: {len(ids)} item{'s' * (len(ids) != 1)} ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
        for spec, ids in overlap.items()
    )


def format_fit(fit: Mapping[str, Any]) -> str:
    """The grid as a Markdown table, greedy's row first in each pass, each pass's choice marked: per family the
    mean score change against greedy's and its 95 % interval, in points."""

    def fmt(v, f="{:.3f}"):
        return "-" if v is None else f.format(v)

    families = list(fit.get("families") or [])
    head = (
        "| pass | setting | speed-up | MAL | "
        + " | ".join(f"{f} Δ [95 % CI]" for f in families)
        + " | admissible | chosen |"
    )
    lines = [head, "|---" * (len(families) + 6) + "|"]
    for stage, greedy in fit["greedy"].items():
        lines.append(
            f"| {stage} | greedy | 1.000 | {fmt(greedy['mal'])} | " + " | ".join("0" for _ in families) + " | | |"
        )
        for t in (t for t in fit["trials"] if t["stage"] == stage):
            cells = []
            for f in families:
                i = (t.get("families") or {}).get(f)
                cells.append("-" if i is None else f"{i['mean']:+.1f} [{i['low']:+.1f}, {i['high']:+.1f}]")
            mark = "←" if t["spec"] == fit["chosen"].get(stage) else ""
            lines.append(
                f"| {stage} | {t['spec']} | {fmt(t['speedup'])} | {fmt(t['mal'])} | "
                + " | ".join(cells)
                + f" | {'yes' if t['admissible'] else 'no: ' + ', '.join(t['failing'])} | {mark} |"
            )
    return "\n".join(lines)
