"""The papers' tables from benchmark result rows (the lines of a workbench.evaluation.bench.Checkpoint): pure functions
of the rows, rendered as Markdown and CSV, with the papers' own numbers (published.json, beside this file) beside them.

    AASD: Table 1 (scores: greedy, top-k, nucleus, beam, AASD), Table 2 (MAL, tokens/s, speed-up),
          Table 4 (verification ablation, scores), Table 5 (drafting/verification ablation, speed).
    CASD: Table 1 (greedy, fixed, mixed, Oracle-D, Oracle-S), the δ sweep of score and MAL (Table 8, Fig. 2/4).
    CSD:  Table 1 (accuracy, tokens/s, speed-up for SD, lossy SD, CSD), Table 3 (memory/gate ablation).

A row holds a task's `category` (the dataset column), `id`, `method` (as run, with overrides),
`score` (None = absent) and the additive counts of core.stats.run_totals.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.params import PARAMS
from core.stats import pool

PUBLISHED_FILE = "published.json"  # beside this module; package data (pyproject.toml)


def load_published() -> dict[str, Any]:
    """The papers' published numbers and setups (workbench/evaluation/published.json) as plain data:
    `longbench_datasets` (the papers' columns, in order), `setup` per paper, `tables` by key."""
    from importlib.resources import files

    return json.loads(files("workbench.evaluation").joinpath(PUBLISHED_FILE).read_text(encoding="utf-8"))


_PUBLISHED = load_published()
# The eight datasets of AASD's and CASD's tables, in the papers' column order (nq needs a local file).
PAPER_LONGBENCH: tuple[str, ...] = tuple(_PUBLISHED["longbench_datasets"])

DELTAS = (0.1, 0.01, 1e-3, 1e-4, 1e-5)  # CASD's oracle search space


def delta_method(delta: float) -> str:
    """The method spec of one point of the δ sweep; casd at its default δ is plain `casd` (run once)."""
    return "casd" if delta == PARAMS["delta"].default else f"casd[delta={delta:g}]"


AASD_T1 = ("greedy", "top-k", "nucleus", "beam", "aasd")
AASD_T2 = ("greedy", "pld", "aasd")
AASD_T4 = ("aasd", "aasd-fixed", "aasd-topk")
AASD_T5 = ("aasd", "aasd-no-align", "aasd-strict")
CASD_T1 = ("greedy", "casd", "casd-mixed")
CSD_T1 = ("greedy", "sd", "lossy-sd", "csd")
CSD_T3 = ("sd", "sd-memory-only", "sd-gating-only", "csd")
TABLE_SETS: dict[str, tuple[str, ...]] = {
    "aasd": tuple(dict.fromkeys(AASD_T1 + AASD_T2 + AASD_T4 + AASD_T5)),
    "casd": tuple(dict.fromkeys(CASD_T1 + tuple(delta_method(d) for d in DELTAS))),
    "csd": tuple(dict.fromkeys(CSD_T1 + CSD_T3)),
}
# What each table set runs on when --data is not given: the papers' datasets (LongBench from the hub,
# so nq, which needs a local file, is left out; CSD's MATH500 is not available here).
_LONGBENCH = "longbench:" + ",".join(d for d in PAPER_LONGBENCH if d != "nq")
DEFAULT_DATA: dict[str, tuple[str, ...]] = {
    "aasd": (_LONGBENCH,),
    "casd": (_LONGBENCH,),
    "csd": ("gsm8k", "humaneval", "spec-bench:summarization"),
}
# The papers' names for our methods, where they differ.
LABELS = {
    "greedy": "greedy (ARD / vanilla)",
    "top-k": "top-k (k = 50)",
    "nucleus": "nucleus (p = 0.8)",
    "beam": "beam (n = 10)",
    "aasd-fixed": "aasd-fixed (w/ threshold verification)",
    "aasd-topk": "aasd-topk (w/ top-k verification)",
    "aasd-no-align": "aasd-no-align (w/o alignment sampling)",
    "aasd-strict": "aasd-strict (w/o conditional verification)",
    "casd": "casd (fixed, δ = 0.1)",
    "casd-mixed": "casd-mixed (δ = 0.1, top-5)",
    "sd": "sd (SpecDecode)",
    "lossy-sd": "lossy-sd (τ = 0.6)",
    "sd-memory-only": "sd-memory-only (SD w/ OCM)",
    "sd-gating-only": "sd-gating-only (SD w/ SCG)",
}


def table_methods(sets: Iterable[str]) -> list[str]:
    """Every method the named table sets need, greedy first (the speed-up baseline)."""
    out: dict[str, None] = {"greedy": None}
    for name in sets:
        out.update(dict.fromkeys(TABLE_SETS[name]))
    return list(out)


# ---- tables as data -------------------------------------------------------------------------


@dataclass
class Table:
    """A titled grid. `kinds` says how each column prints: text, score, mal, tps, x (speed-up), pct, delta, int."""

    key: str  # file name of its CSV
    title: str
    header: list[str]
    kinds: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(_fmt(v, k) for v, k in zip(row, self.kinds)) + " |" for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.header)
        for row in self.rows:
            writer.writerow(["" if v is None else (round(v, 6) if isinstance(v, float) else v) for v in row])
        return out.getvalue()


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "–"  # absent (no references, not run, code not executed): never shown as 0
    if kind == "x":
        return f"{v:.2f}×"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "delta":
        return f"{v:g}"
    if kind in ("score", "mal", "tps"):
        return f"{v:.2f}"
    return str(v)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


class Results:
    """Rows grouped by (dataset, method), with pooled statistics and speed-ups on the same items."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self.groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for r in rows:
            self.groups.setdefault((r.get("category") or "", r["method"]), []).append(r)
        self.datasets = list(dict.fromkeys(d for d, _ in self.groups))
        self.methods = list(dict.fromkeys(m for _, m in self.groups))

    def has(self, method: str) -> bool:
        return method in self.methods

    def stats(self, dataset: str, method: str, baseline: str | None = "greedy") -> dict[str, Any] | None:
        """Pooled statistics of a method on a dataset; `speedup` is its TPS over the baseline's on the items both ran."""
        rows = self.groups.get((dataset, method))
        if not rows:
            return None
        out = pool(rows)
        base = self.groups.get((dataset, baseline or ""))
        if base:
            common = {r["id"] for r in rows} & {r["id"] for r in base}
            a = pool([r for r in rows if r["id"] in common])["tps"]
            b = pool([r for r in base if r["id"] in common])["tps"]
            out["speedup"] = a / b if a and b else None
        return out

    def value(self, dataset: str, method: str, key: str, baseline: str | None = "greedy") -> Any:
        s = self.stats(dataset, method, baseline)
        return None if s is None else s.get(key)

    def item_scores(self, dataset: str, method: str) -> dict[str, float]:
        return {str(r["id"]): r["score"] for r in self.groups.get((dataset, method), []) if r.get("score") is not None}


def _label(method: str) -> str:
    return LABELS.get(method, method)


def _present(res: Results, methods: Sequence[str]) -> tuple[list[str], str]:
    """The methods that were run, and a note naming those that were not."""
    ran = [m for m in methods if res.has(m)]
    missing = [m for m in methods if not res.has(m)]
    return ran, (f"Not run: {', '.join(missing)}." if missing else "")


def score_table(res: Results, key: str, title: str, methods: Sequence[str], datasets: Sequence[str]) -> Table:
    """Scores per dataset and method with their average over the datasets that have one (AASD Table 1/4)."""
    ran, missing = _present(res, methods)
    t = Table(key, title, ["method", *datasets, "Avg."], ["text", *["score"] * (len(datasets) + 1)])
    for m in ran:
        values = [res.value(d, m, "score") for d in datasets]
        t.rows.append([_label(m), *values, _mean(values)])
    t.note = " ".join(
        x
        for x in (
            "Scores ×100 (F1, ROUGE-L, edit similarity, accuracy or pass@1 by dataset); "
            "– = absent (no references or not scored), left out of Avg.",
            missing,
        )
        if x
    )
    return t


def efficiency_table(
    res: Results, key: str, title: str, methods: Sequence[str], datasets: Sequence[str], baseline: str = "greedy"
) -> Table:
    """MAL, tokens/s and speed-up per dataset (AASD Table 2/5)."""
    ran, missing = _present(res, methods)
    header, kinds = ["method"], ["text"]
    for d in datasets:
        header += [f"{d} MAL", f"{d} TPS", f"{d} speed-up"]
        kinds += ["mal", "tps", "x"]
    t = Table(key, title, header, kinds)
    for m in ran:
        row: list[Any] = [_label(m)]
        for d in datasets:
            s = res.stats(d, m, baseline) or {}
            row += [s.get("mal"), s.get("tps"), s.get("speedup")]
        t.rows.append(row)
    t.note = " ".join(
        x
        for x in (
            f"TPS: tokens per second of decoding (prefill excluded); speed-up over {baseline} on the same items.",
            missing,
        )
        if x
    )
    return t


def oracles(
    res: Results, datasets: Sequence[str], deltas: Sequence[float] = DELTAS
) -> tuple[dict[str, tuple[float | None, float | None]], dict[str, float | None]]:
    """CASD's Oracle-D (per dataset, the δ with the best mean score: (score, δ)) and Oracle-S (per sample,
    the best score over δ, averaged over the samples scored under every δ run). Analysis only: it reads the references."""
    oracle_d: dict[str, tuple[float | None, float | None]] = {}
    oracle_s: dict[str, float | None] = {}
    for d in datasets:
        runs = [(delta, res.item_scores(d, delta_method(delta))) for delta in deltas]
        runs = [(delta, items) for delta, items in runs if items]
        best = (None, None)
        for delta, items in runs:  # ties keep the larger (stricter) δ, listed first
            mean = statistics.fmean(items.values())
            if best[0] is None or mean > best[0]:
                best = (mean, delta)
        oracle_d[d] = best
        common = set.intersection(*(set(items) for _, items in runs)) if runs else set()
        oracle_s[d] = statistics.fmean(max(items[i] for _, items in runs) for i in common) if common else None
    return oracle_d, oracle_s


def casd_table(res: Results, datasets: Sequence[str]) -> Table:
    ran, missing = _present(res, CASD_T1)
    t = Table(
        "casd_table1",
        "CASD Table 1: scores of vanilla decoding, CASD and the oracle thresholds",
        ["method", *datasets, "Avg."],
        ["text", *["score"] * (len(datasets) + 1)],
    )
    for m in ran:
        values = [res.value(d, m, "score") for d in datasets]
        t.rows.append([_label(m), *values, _mean(values)])
    oracle_d, oracle_s = oracles(res, datasets)
    d_values = [oracle_d[d][0] for d in datasets]
    s_values = [oracle_s[d] for d in datasets]
    if any(v is not None for v in d_values):
        t.rows.append(["Oracle-D (best δ per dataset)", *d_values, _mean(d_values)])
        t.rows.append(["Oracle-S (best δ per sample)", *s_values, _mean(s_values)])
    chosen = ", ".join(f"{d}: {oracle_d[d][1]:g}" for d in datasets if oracle_d[d][1] is not None)
    t.note = " ".join(
        x
        for x in (
            f"Oracle δ from {{{', '.join(f'{x:g}' for x in DELTAS)}}}, chosen with the references (an analysis, "
            f"not a decoding mode). Oracle-D's δ: {chosen or '–'}.",
            missing,
        )
        if x
    )
    return t


def sweep_table(res: Results, datasets: Sequence[str], metric: str) -> Table:
    """One row per δ (and greedy as the baseline): the score (CASD Table 8) or MAL (CASD Figure 4)."""
    kind = "score" if metric == "score" else "mal"
    name = "score" if metric == "score" else "MAL"
    t = Table(
        f"casd_sweep_{metric}",
        f"CASD δ sweep: {name} per dataset as the threshold falls (no top-k condition)",
        ["δ", *datasets, "Avg."],
        ["text", *[kind] * (len(datasets) + 1)],
    )
    for delta in DELTAS:
        m = delta_method(delta)
        if res.has(m):
            values = [res.value(d, m, metric) for d in datasets]
            t.rows.append([f"{delta:g}", *values, _mean(values)])
    if res.has("greedy"):
        values = [res.value(d, "greedy", metric) for d in datasets]
        t.rows.append(["greedy (baseline)", *values, _mean(values)])
    return t


def delta_sweep(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The δ sweep as plain data for figures: per dataset, score and MAL at each δ run, and greedy's."""
    res = Results(rows)
    deltas = [d for d in DELTAS if res.has(delta_method(d))]
    out: dict[str, Any] = {"deltas": deltas, "datasets": {}}
    for ds in res.datasets:
        out["datasets"][ds] = {
            "score": [res.value(ds, delta_method(d), "score") for d in deltas],
            "mal": [res.value(ds, delta_method(d), "mal") for d in deltas],
            "greedy_score": res.value(ds, "greedy", "score"),
            "greedy_mal": res.value(ds, "greedy", "mal"),
        }
    return out


def csd_table(res: Results, datasets: Sequence[str]) -> Table:
    """CSD Table 1: accuracy, tokens/s and speed-up over vanilla decoding per dataset, and the mean speed-up."""
    ran, missing = _present(res, CSD_T1)
    header, kinds = ["method"], ["text"]
    for d in datasets:
        header += [f"{d} Acc", f"{d} Tp", f"{d} Spd"]
        kinds += ["score", "tps", "x"]
    t = Table(
        "csd_table1",
        "CSD Table 1: accuracy (Acc), throughput (Tp, tokens/s) and speed-up over vanilla decoding (Spd)",
        [*header, "Avg. Spd"],
        [*kinds, "x"],
    )
    for m in ran:
        row: list[Any] = [_label(m)]
        speedups = []
        for d in datasets:
            s = res.stats(d, m) or {}
            row += [s.get("score"), s.get("tps"), s.get("speedup")]
            speedups.append(s.get("speedup"))
        t.rows.append([*row, _mean(speedups)])
    t.note = missing
    return t


def csd_ablation(res: Results, datasets: Sequence[str]) -> Table:
    """CSD Table 3: accuracy, acceptance rate, tokens/s and speed-up over plain SD (as the paper reports it)."""
    ran, missing = _present(res, CSD_T3)
    header, kinds = ["variant"], ["text"]
    for d in datasets:
        header += [f"{d} Acc", f"{d} AR", f"{d} Tp", f"{d} Spd"]
        kinds += ["score", "pct", "tps", "x"]
    t = Table(
        "csd_table3",
        "CSD Table 3: ablation of the correction memory (OCM) and the gate (SCG); Spd over plain SD",
        header,
        kinds,
    )
    for m in ran:
        row: list[Any] = [_label(m)]
        for d in datasets:
            s = res.stats(d, m, baseline="sd") or {}
            row += [s.get("score"), s.get("accept_rate"), s.get("tps"), s.get("speedup")]
        t.rows.append(row)
    t.note = " ".join(x for x in ("AR: accepted (and rescued) draft tokens over drafted tokens.", missing) if x)
    return t


def summary_table(res: Results) -> Table:
    """Every method on every dataset, long format: the numbers the other tables select from."""
    t = Table(
        "summary",
        "All runs: per dataset and method",
        ["dataset", "method", "runs", "scored", "score", "MAL", "TPS", "speed-up", "accept", "e2e TPS", "tokens"],
        ["text", "text", "int", "int", "score", "mal", "tps", "x", "pct", "tps", "int"],
    )
    for d in res.datasets:
        for m in res.methods:
            s = res.stats(d, m)
            if s is not None:
                t.rows.append(
                    [
                        d,
                        m,
                        s["runs"],
                        s["scored"],
                        s["score"],
                        s["mal"],
                        s["tps"],
                        s["speedup"],
                        s["accept_rate"],
                        s["e2e_tps"],
                        s["tokens"],
                    ]
                )
    return t


def build_tables(rows: Sequence[Mapping[str, Any]], sets: Sequence[str]) -> list[tuple[Table, Table | None]]:
    """The measured tables of the named sets, each with the paper's counterpart (or None), then the summary."""
    res = Results(rows)
    ds = res.datasets
    out: list[tuple[Table, Table | None]] = []
    if "aasd" in sets:
        out += [
            (
                score_table(res, "aasd_table1", "AASD Table 1: scores of the sampling methods", AASD_T1, ds),
                PAPER["aasd_table1"],
            ),
            (
                efficiency_table(res, "aasd_table2", "AASD Table 2: inference efficiency", AASD_T2, ds),
                PAPER["aasd_table2"],
            ),
            (
                score_table(res, "aasd_table4", "AASD Table 4: verification ablation (scores)", AASD_T4, ds),
                PAPER["aasd_table4"],
            ),
            (
                efficiency_table(
                    res,
                    "aasd_table5",
                    "AASD Table 5: alignment sampling and conditional verification ablation",
                    AASD_T5,
                    ds,
                ),
                PAPER["aasd_table5"],
            ),
        ]
    if "casd" in sets:
        out += [
            (casd_table(res, ds), PAPER["casd_table1"]),
            (sweep_table(res, ds, "score"), PAPER["casd_table8"]),
            (sweep_table(res, ds, "mal"), None),
        ]
    if "csd" in sets:
        out += [(csd_table(res, ds), PAPER["csd_table1"]), (csd_ablation(res, ds), PAPER["csd_table3"])]
    out.append((summary_table(res), None))
    return out


# ---- the papers' numbers, beside the measured tables ----------------------------------------------


def _paper_tables(published: Mapping[str, Any]) -> dict[str, Table]:
    return {
        key: Table(
            f"paper_{key}", f"Paper: {t['title']}", list(t["header"]), list(t["kinds"]), [list(r) for r in t["rows"]]
        )
        for key, t in published["tables"].items()
    }


PAPER_SETUP: dict[str, str] = dict(_PUBLISHED["setup"])
PAPER: dict[str, Table] = _paper_tables(_PUBLISHED)


# ---- Markdown -------------------------------------------------------------------------------


def render_markdown(
    pairs: Sequence[tuple[Table, Table | None]],
    sets: Sequence[str],
    setup: Mapping[str, Any],
    title: str = "Benchmark report",
) -> str:
    """The report: how it was measured, how that differs from the papers, then each table with the paper's beside it."""
    lines = [f"# {title}", "", "## Setup", ""]
    lines += [f"- **{k}**: {v}" for k, v in setup.items() if v not in (None, "", [], {})]
    lines += ["", "## How this differs from the papers", ""]
    lines += [f"- {PAPER_SETUP[s]}" for s in sets if s in PAPER_SETUP]
    lines += [
        "- Here: the model, device and data above, usually a small subset of each dataset (see *tasks per dataset*); "
        "absolute scores and tokens/s do not carry across models and hardware. Compare the ordering of the methods, "
        "their speed-ups over greedy decoding and MAL.",
        "",
    ]
    for measured, paper in pairs:
        lines += [measured.markdown(), ""]
        if paper is not None:
            lines += [paper.markdown(), ""]
    return "\n".join(lines).rstrip() + "\n"
