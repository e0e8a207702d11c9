"""Which setting of a relaxed rule may be shipped: the admissibility rule across task families
(docs/AUTOMATIC_SETTINGS.md, "Admissible settings"). Pure: numbers in, a decision out.

For a candidate setting and each family f, the paired differences d_i = score_i(setting) − score_i(greedy)
over f's held-out items (scores ×100, the same items decoded by both in one run) get a 95 % percentile
bootstrap interval of their mean (2,000 resamples, seeded). The setting is admissible when every family's
lower bound is at least −TOLERANCE (one point): no family may plausibly lose more than a point. Among the
admissible settings the fastest wins, by speed-up pooled over families (all tokens over all decoding
seconds, against greedy's on the same items) or by mean accepted length pooled over families (all tokens
decoded over all verification steps: the same on any machine, free of timing noise); when none is
admissible, the rule's lossless setting.

A fit on one family says nothing about another: a threshold that helps summarization can cost two thirds
of extractive QA's F1. Demanding the bound per family, not on the pooled mean, is what refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import InvalidInputError

TOLERANCE = 1.0  # points (scores ×100) a family's lower bound may fall below zero
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


@dataclass(frozen=True)
class FamilyOutcome:
    """One setting on one family's items, beside greedy on the same items in the same run."""

    family: str
    setting_scores: Sequence[float]  # ×100, one per item, in item order
    greedy_scores: Sequence[float]  # the same items, same order
    setting_tokens: int
    setting_seconds: float  # decoding seconds (prefill excluded)
    greedy_tokens: int
    greedy_seconds: float
    setting_decoded: float | None = None  # tokens decoded and steps taken (MAL = decoded / steps); None: not counted
    setting_steps: int | None = None


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    items: int


@dataclass(frozen=True)
class Judgement:
    setting: str
    admissible: bool
    speedup: float  # pooled over families
    mal: float | None = None  # the setting's mean accepted length pooled over families (None: steps not counted)
    intervals: dict[str, Interval] = field(default_factory=dict)
    failing: tuple[str, ...] = ()  # families whose lower bound is below −TOLERANCE


def paired_interval(
    setting: Sequence[float],
    greedy: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The mean of setting − greedy over paired items and its percentile bootstrap interval (items resampled
    with replacement, `resamples` times, from a generator seeded with `seed`)."""
    if len(setting) != len(greedy):
        raise InvalidInputError(
            f"paired scores need as many setting scores as greedy ones ({len(setting)} vs {len(greedy)})"
        )
    d = np.asarray(setting, dtype=float) - np.asarray(greedy, dtype=float)
    if d.size == 0:
        raise InvalidInputError("no paired scores: a family needs at least one item scored by both")
    if not np.all(np.isfinite(d)):
        raise InvalidInputError("paired scores must be finite numbers (an item without a score is left out before)")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(d.mean()), float(low), float(high), int(d.size))


def pooled_speedup(outcomes: Sequence[FamilyOutcome]) -> float:
    """Tokens per second over every family's items, over greedy's on the same items."""
    seconds = sum(o.setting_seconds for o in outcomes)
    greedy_seconds = sum(o.greedy_seconds for o in outcomes)
    if seconds <= 0 or greedy_seconds <= 0:
        raise InvalidInputError("a speed-up needs positive decoding seconds for the setting and for greedy")
    return (sum(o.setting_tokens for o in outcomes) / seconds) / (
        sum(o.greedy_tokens for o in outcomes) / greedy_seconds
    )


def pooled_mal(outcomes: Sequence[FamilyOutcome]) -> float | None:
    """Tokens decoded per verification step over every family's items (None when a family did not count them)."""
    if any(o.setting_decoded is None or o.setting_steps is None for o in outcomes):
        return None
    steps = sum(o.setting_steps for o in outcomes)
    return sum(o.setting_decoded for o in outcomes) / steps if steps else None


def judge(
    setting: str,
    outcomes: Sequence[FamilyOutcome],
    families: Sequence[str] | None = None,
    *,
    tolerance: float = TOLERANCE,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Judgement:
    """Admissible when every family's bootstrap lower bound of the mean paired difference is ≥ −tolerance.
    `families` (default: those in `outcomes`) must each have exactly one outcome: a family without evidence
    cannot be passed."""
    by_family = {}
    for o in outcomes:
        if o.family in by_family:
            raise InvalidInputError(f"{setting}: two outcomes for family {o.family}")
        by_family[o.family] = o
    wanted = list(families) if families is not None else list(by_family)
    missing = [f for f in wanted if f not in by_family]
    if missing or not wanted:
        raise InvalidInputError(
            f"{setting} was not measured on famil{'y' if len(missing) == 1 else 'ies'} "
            f"{', '.join(missing) or '(none given)'}"
        )
    intervals = {
        f: paired_interval(
            by_family[f].setting_scores,
            by_family[f].greedy_scores,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
        for f in wanted
    }
    failing = tuple(f for f in wanted if intervals[f].low < -tolerance)
    mine = [by_family[f] for f in wanted]
    return Judgement(setting, not failing, pooled_speedup(mine), pooled_mal(mine), intervals, failing)


SPEED_MEASURES = ("mal", "speedup")


def fastest(judgements: Sequence[Any], by: str = "speedup") -> Any:
    """The fastest admissible judgement by `by` (the measured speed-up, or MAL: tokens per verification step,
    which does not depend on the machine's noise), the earlier one on a tie; None when none is admissible.
    Anything with `admissible`, `speedup` and `mal` is judged alike (a Judgement, a fit's Trial)."""
    if by not in SPEED_MEASURES:
        raise InvalidInputError(f"speed is measured by {' or '.join(SPEED_MEASURES)}, not {by!r}")
    best = None
    for j in judgements:
        value = getattr(j, by)
        if j.admissible and value is not None and (best is None or value > getattr(best, by)):
            best = j
    return best


def choose_setting(
    candidates: Mapping[str, Sequence[FamilyOutcome]],
    lossless: str,
    families: Sequence[str] | None = None,
    *,
    by: str = "speedup",
    **options,
) -> tuple[str, list[Judgement]]:
    """(the setting to keep, every candidate's judgement): the fastest admissible candidate by `by` (the earlier
    one on a tie), else `lossless`. Every candidate is judged on the same `families` (default: the first
    candidate's)."""
    if not candidates:
        return lossless, []
    if families is None:
        families = [o.family for o in next(iter(candidates.values()))]
    judgements = [judge(name, outcomes, families, **options) for name, outcomes in candidates.items()]
    best = fastest(judgements, by)
    return (best.setting if best is not None else lossless), judgements
