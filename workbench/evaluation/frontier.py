"""The speed-quality frontier per relaxed rule (`python -m workbench report --frontier`; docs/AUTOMATIC_SETTINGS.md,
"The frontier"): each rule's threshold swept on the held-out items of every family, greedy and every setting
decoded in one interleaved run, each setting's speed-up (measured, and MAL) beside its per-family score change
against greedy with a paired 95 % bootstrap interval (workbench.evaluation.admissibility). It answers which rule
gives the most speed at equal quality on this model and machine: among each rule's admissible settings (no
family's lower bound below −1 point), the fastest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from core.errors import InvalidInputError

# Each rule's sweep, loosest last. csd-context verifies with CSD's rescue over context drafts: λ = 0 leaves the
# gate τ alone (no memory needed), the memory frozen so the sweep does not change it.
SWEEPS: dict[str, tuple[str, ...]] = {
    "fixed δ (casd)": ("casd[delta=0.3]", "casd[delta=0.1]", "casd[delta=0.03]"),
    "δ + top-k (casd-mixed)": ("casd-mixed[delta=0.1,top_k=2]", "casd-mixed[delta=0.03,top_k=3]"),
    "adaptive α, β (aasd)": ("aasd[alpha=0.1,beta=0.3]", "aasd[alpha=0.1,beta=0.1]", "aasd[alpha=0,beta=0.03]"),
    "rescue (csd-context)": (
        "csd-context[lam=0,tau=0.5,memory_mode=frozen]",
        "csd-context[lam=0,tau=0.1,memory_mode=frozen]",
    ),
    "typical (Medusa)": ("typical[epsilon=0.3,alpha=0.55]", "typical[epsilon=0.09,alpha=0.3]"),
    "entropy-gated deferred (FLy)": ("fly[entropy_gate=2,window=2]", "fly[entropy_gate=1,window=1]"),
}
RULE_KEYS = {
    "casd": "fixed δ (casd)",
    "mixed": "δ + top-k (casd-mixed)",
    "aasd": "adaptive α, β (aasd)",
    "rescue": "rescue (csd-context)",
    "typical": "typical (Medusa)",
    "fly": "entropy-gated deferred (FLy)",
}


def parse_rules(text: str | None) -> dict[str, tuple[str, ...]]:
    """`"aasd,typical"` -> those rules' sweeps (default: all), keyed by the rule's label; unknown keys are one error."""
    keys = [k.strip() for k in (text or "").split(",") if k.strip()] or list(RULE_KEYS)
    unknown = [k for k in keys if k not in RULE_KEYS]
    if unknown:
        raise InvalidInputError(f"unknown rule(s) {', '.join(unknown)} for --rules; known: {', '.join(RULE_KEYS)}")
    return {RULE_KEYS[k]: SWEEPS[RULE_KEYS[k]] for k in dict.fromkeys(keys)}


def sweep(
    target,
    tasks: Sequence[Any],
    sweeps: Mapping[str, Sequence[str]],
    *,
    params: Mapping[str, Any] | None = None,
    max_new_tokens: int | None = None,
    scorer=None,
    progress: bool = True,
) -> dict[str, Any]:
    """Greedy and every rule's settings on `tasks` (held-out items; each task's category is its family), interleaved
    per item: {"families", "points": [one per setting], "greedy": greedy's pooled TPS and MAL, "rows"}."""
    from workbench.evaluation.thresholds import measure_settings, trial_of

    specs = [s for ss in sweeps.values() for s in ss]
    if len(set(specs)) != len(specs):
        raise InvalidInputError("a setting is listed under two rules")
    families = list(dict.fromkeys(t.category or "" for t in tasks))
    measured = measure_settings(
        target, tasks, specs, params=params, max_new_tokens=max_new_tokens, scorer=scorer, progress=progress
    )
    points = []
    for rule, ss in sweeps.items():
        for spec in ss:
            trial = trial_of("frontier", spec, {}, measured["outcomes"][spec], families)
            points.append({"rule": rule, **{k: v for k, v in asdict(trial).items() if k not in ("stage", "values")}})
    greedy = measured["greedy"]
    return {
        "families": families,
        "points": points,
        "greedy": {"tps": greedy["tps"], "mal": greedy["mal"]},
        "rows": measured["rows"],
    }


def best_per_rule(points: Sequence[Mapping[str, Any]], by: str = "speedup") -> dict[str, Mapping[str, Any] | None]:
    """Each rule's fastest admissible setting by `by` (None when none of its settings is admissible)."""
    from workbench.evaluation.admissibility import fastest
    from workbench.evaluation.thresholds import Trial

    out: dict[str, Mapping[str, Any] | None] = {}
    for rule in dict.fromkeys(p["rule"] for p in points):
        mine = {p["spec"]: p for p in points if p["rule"] == rule}
        best = fastest(
            [Trial("frontier", {}, p["spec"], p["speedup"], p["mal"], p["admissible"]) for p in mine.values()], by
        )
        out[rule] = mine[best.spec] if best is not None else None
    return out


def format_frontier(result: Mapping[str, Any]) -> str:
    """Markdown: one row per setting (speed-up, MAL, per family the mean score change and its 95 % interval, in
    points, admissible or which families fail), then each rule's fastest admissible setting."""
    families = list(result["families"])

    def num(v, f="{:.2f}"):
        return "-" if v is None else f.format(v)

    lines = [
        "| rule | setting | speed-up | MAL | " + " | ".join(f"{f} Δ [95 % CI]" for f in families) + " | admissible |",
        "|---" * (len(families) + 5) + "|",
        f"| greedy | greedy | 1.00 | {num(result['greedy']['mal'])} | " + " | ".join("0" for _ in families) + " | |",
    ]
    for p in result["points"]:
        cells = []
        for f in families:
            i = p["families"].get(f)
            cells.append("-" if i is None else f"{i['mean']:+.1f} [{i['low']:+.1f}, {i['high']:+.1f}]")
        ok = "yes" if p["admissible"] else "no: " + ", ".join(p["failing"])
        lines.append(
            f"| {p['rule']} | `{p['spec']}` | {num(p['speedup'])} | {num(p['mal'])} | "
            + " | ".join(cells)
            + f" | {ok} |"
        )
    lines += ["", "Fastest admissible setting per rule (by measured speed-up):", ""]
    for rule, p in best_per_rule(result["points"]).items():
        lines.append(
            f"- {rule}: "
            + (f"`{p['spec']}`, {p['speedup']:.2f}x greedy, MAL {num(p['mal'])}" if p else "none admissible")
        )
    return "\n".join(lines)
