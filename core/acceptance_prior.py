"""Acceptance estimates that start from what stored traces saw: a(source, depth), the chance that a draft
node of this source at this depth is accepted once its parent was (docs/AUTOMATIC_SETTINGS.md, "The
acceptance prior").

- `AcceptancePrior`: per (source, depth), the accepted and verified counts of stored traces of the same
  method and model (workbench.store.priors reads them with one query) and the centre they give: the
  stored rate, smoothed toward the source's rate over all depths, which is smoothed toward DEFAULT_RATE,
  each by PRIOR_WEIGHT pseudo-observations (a key seen a handful of times does not set a confident prior;
  a key seen thousands of times gives its own rate). No stored traces: DEFAULT_RATE everywhere.
- `AcceptanceEstimate`: one request's estimate, a Beta posterior: a Beta prior of PRIOR_WEIGHT pseudo-counts
  centred on the prior's rate, updated by the request's own counts; `rate` is its posterior mean
  (accepted + w·centre) / (verified + w). Early in a request it stays near the stored rate, so a lucky
  first step does not inflate the next tree; after many steps the request's own rate wins.

Drafters that score their own nodes (a DraftTree's `confidence`: the suffix drafter's continuation
frequency and match length) are priced by that score instead of by depth: their nodes are counted per
(source, confidence bucket), and a node's rate is the Beta posterior of its bucket centred on its own
confidence (moved first by the prior's stored calibration counts for the bucket, if any, then by the
request's): a calibration of the drafter's confidence learned from what verification did with it. A long
exact repeat the drafter is sure of is then priced as nearly certain from its first step, while rejected
short matches lower only their own bucket. Nodes without a confidence are priced as before.

A node is *verified* when its parent was accepted (the walk judged it), and *accepted* when it is on the
accepted path; rescued nodes count as accepted, as in core.stats.acceptance_by. Depths beyond MAX_DEPTH
share MAX_DEPTH's estimate. Pure: no store, no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.tree import DraftTree

PRIOR_WEIGHT = 20.0  # pseudo-observations behind the prior
DEFAULT_RATE = 0.3  # the centre where no stored trace says anything
MAX_DEPTH = 16  # deeper nodes share the estimate of this depth
# Upper edges of the confidence buckets a drafter's per-node confidence is calibrated in (the last bucket: above
# the last edge). Finer where the sizer's choice is most sensitive: near certainty a chain of 16 nodes at 0.9
# is worth half the tokens of one at 0.97.
CONFIDENCE_EDGES = (0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.98)

Key = tuple[str, int]  # (source, depth capped at MAX_DEPTH)


def key_of(source: str, depth: int) -> Key:
    return source, min(int(depth), MAX_DEPTH)


def _smoothed(accepted: float, verified: float, centre: float, weight: float) -> float:
    return (accepted + weight * centre) / (verified + weight)


def lower_rate(mean: float, evidence: float, caution: float) -> float:
    """`caution` standard deviations below the mean of a Beta posterior with `evidence` (= α + β) observations
    behind it, at least 0. Pure."""
    return max(0.0, mean - caution * (mean * (1.0 - mean) / (evidence + 1.0)) ** 0.5)


def confidence_bucket(confidence: float) -> int:
    """The calibration bucket of a drafter's confidence: 0 .. len(CONFIDENCE_EDGES)."""
    for i, edge in enumerate(CONFIDENCE_EDGES):
        if confidence < edge:
            return i
    return len(CONFIDENCE_EDGES)


def calibrated_rate(confidence: float, accepted: float, verified: float, weight: float = PRIOR_WEIGHT) -> float:
    """A node's acceptance from its drafter's `confidence` and the counts of its bucket: the Beta posterior
    centred on the confidence with `weight` pseudo-observations. Pure."""
    return _smoothed(accepted, verified, min(max(float(confidence), 0.0), 1.0), weight)


@dataclass(frozen=True)
class AcceptancePrior:
    """Stored counts per (source, depth) and the prior rate they give; built by `from_counts`."""

    counts: Mapping[Key, tuple[int, int]] = field(default_factory=dict)  # (accepted, verified), depths capped
    weight: float = PRIOR_WEIGHT
    default: float = DEFAULT_RATE
    source: str = (
        ""  # where the counts came from (e.g. the store query's method, model and filters), for the run's record
    )

    # (accepted, verified) per (source, confidence bucket) of nodes whose drafter gave a confidence
    calibration: Mapping[Key, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self):
        if not self.weight > 0 or not 0.0 <= self.default <= 1.0:
            raise ValueError("an acceptance prior needs a positive weight and a default rate in [0, 1]")
        for key, (accepted, verified) in [*self.counts.items(), *self.calibration.items()]:
            if not 0 <= accepted <= verified:
                raise ValueError(f"stored counts for {key}: accepted {accepted} must lie in [0, verified {verified}]")
        by_source: dict[str, list[int]] = {}
        for (source, _), (accepted, verified) in self.counts.items():
            total = by_source.setdefault(source, [0, 0])
            total[0] += accepted
            total[1] += verified
        source_rates = {s: _smoothed(a, v, self.default, self.weight) for s, (a, v) in by_source.items()}
        centres = {k: _smoothed(a, v, source_rates[k[0]], self.weight) for k, (a, v) in self.counts.items()}
        object.__setattr__(self, "_source_rates", source_rates)
        object.__setattr__(self, "_centres", centres)

    @classmethod
    def from_counts(
        cls,
        rows: Iterable[tuple[str, int, int, int]],
        weight: float = PRIOR_WEIGHT,
        default: float = DEFAULT_RATE,
        source: str = "",
    ) -> AcceptancePrior:
        """From (source, depth, accepted, verified) rows (any depth: deeper than MAX_DEPTH are summed into it)."""
        counts: dict[Key, tuple[int, int]] = {}
        for draft_source, depth, accepted, verified in rows:
            key = key_of(draft_source, depth)
            a, v = counts.get(key, (0, 0))
            counts[key] = (a + int(accepted), v + int(verified))
        return cls(counts, weight, default, source)

    def calibrated(self, source: str, confidence: float) -> float:
        """The prior's rate for a node its drafter gave `confidence`: the confidence, moved by the stored
        counts of its (source, bucket) if there are any."""
        accepted, verified = self.calibration.get((source, confidence_bucket(confidence)), (0, 0))
        return calibrated_rate(confidence, accepted, verified, self.weight)

    def centre(self, source: str, depth: int) -> float:
        """The prior's rate for (source, depth): the smoothed stored rate, else the source's, else the default."""
        key = key_of(source, depth)
        if key in self._centres:
            return self._centres[key]
        return self._source_rates.get(source, self.default)

    def stored(self, source: str, depth: int) -> int:
        """Verified stored nodes behind (source, depth)'s own centre (0 where it is the source's or the default)."""
        return self.counts.get(key_of(source, depth), (0, 0))[1]

    @property
    def observations(self) -> int:
        """Verified nodes behind the prior (0: no stored trace, the default everywhere)."""
        return sum(v for _, v in self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record (a run stores what its sizer started from: `record`)."""
        out: dict[str, Any] = {
            "weight": self.weight,
            "default": self.default,
            "source": self.source,
            "counts": [[s, d, a, v] for (s, d), (a, v) in sorted(self.counts.items())],
        }
        if self.calibration:  # absent when empty: priors without one keep their fingerprints
            out["calibration"] = [[s, b, a, v] for (s, b), (a, v) in sorted(self.calibration.items())]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AcceptancePrior:
        prior = cls.from_counts(
            (tuple(row) for row in data.get("counts", [])),
            float(data.get("weight", PRIOR_WEIGHT)),
            float(data.get("default", DEFAULT_RATE)),
            str(data.get("source", "")),
        )
        calibration = {(str(s), int(b)): (int(a), int(v)) for s, b, a, v in data.get("calibration", [])}
        return cls(prior.counts, prior.weight, prior.default, prior.source, calibration) if calibration else prior

    def fingerprint(self) -> str:
        """A short hash of what the estimates read (counts, weight, default; not the `source` label): two runs
        with the same fingerprint started their trees from the same prior."""
        body = {k: v for k, v in self.to_dict().items() if k != "source"}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    def record(self) -> dict[str, Any]:
        """What a run's params keep of the prior: its fingerprint, where it came from, how many stored nodes it
        rests on and the counts themselves (as compact JSON: `AcceptancePrior.from_dict(json.loads(...))`
        rebuilds it, so a run can be reproduced)."""
        return {
            "prior_sha": self.fingerprint(),
            "prior_source": self.source or "default",
            "prior_observations": self.observations,
            "prior": json.dumps(self.to_dict(), separators=(",", ":")),
        }


class AcceptanceEstimate:
    """One request's a(source, depth): the prior's Beta(w·c, w·(1 − c)) updated by the request's counts."""

    def __init__(self, prior: AcceptancePrior | None = None):
        self.prior = prior if prior is not None else AcceptancePrior()
        self.verified: dict[Key, int] = {}
        self.accepted: dict[Key, int] = {}
        self.bucket_verified: dict[Key, int] = {}  # per (source, confidence bucket)
        self.bucket_accepted: dict[Key, int] = {}

    def rate(self, source: str, depth: int, confidence: float | None = None, caution: float = 0.0) -> float:
        """The posterior mean (accepted + w·centre) / (verified + w): per (source, depth) centred on the prior's
        rate, or, for a node its drafter gave a `confidence`, per (source, confidence bucket) centred on the
        prior's calibration of that confidence. With `caution` > 0, that many standard deviations below the mean
        (at least 0; lower_rate), the spread of a Beta with the request's own nodes plus the stored nodes behind the
        centre (at least the prior's weight) observed: a rate resting on few observations promises less, one
        resting on hundreds of stored nodes nearly its mean."""
        if confidence is not None:
            key = (source, confidence_bucket(confidence))
            verified = self.bucket_verified.get(key, 0)
            stored = self.prior.calibration.get(key, (0, 0))[1]
            mean = calibrated_rate(
                self.prior.calibrated(source, confidence),
                self.bucket_accepted.get(key, 0),
                verified,
                self.prior.weight,
            )
        else:
            key = key_of(source, depth)
            verified = self.verified.get(key, 0)
            stored = self.prior.stored(source, depth)
            mean = _smoothed(self.accepted.get(key, 0), verified, self.prior.centre(source, depth), self.prior.weight)
        if not caution:
            return mean
        # The spread of what is known, not of the prior's weight: a centre resting on 900 stored nodes is known
        # well although the request may move it as if it were 20; one resting on 38 (or none) is not.
        return lower_rate(mean, verified + max(self.prior.weight, stored), caution)

    def optimistic(self, source: str, depth: int, optimism: float) -> float:
        """How high this request's rate at (source, depth) may be: the posterior mean plus `optimism` standard
        deviations (at most 1), the spread counting the request's own nodes and the prior's weight only, not the
        stored nodes behind the centre: stored runs on other prompts say little about this prompt's rate. The
        sizer's probes read it (core.sizing.TreeSizer)."""
        verified = self.verified.get(key_of(source, depth), 0)
        mean = self.rate(source, depth)
        return min(1.0, mean + optimism * (mean * (1.0 - mean) / (verified + self.prior.weight + 1.0)) ** 0.5)

    def observe(self, tree: DraftTree, path: Sequence[int]) -> None:
        """Count one step: every node whose parent lies on the accepted `path`, and which of them are on it."""
        on_path = set(path)
        for i in range(1, len(tree)):
            if tree.parents[i] in on_path:
                key = key_of(tree.sources[i], tree.depths[i])
                self.verified[key] = self.verified.get(key, 0) + 1
                if i in on_path:
                    self.accepted[key] = self.accepted.get(key, 0) + 1
                confidence = tree.confidence_of(i)
                if confidence is not None:
                    bucket = (tree.sources[i], confidence_bucket(confidence))
                    self.bucket_verified[bucket] = self.bucket_verified.get(bucket, 0) + 1
                    if i in on_path:
                        self.bucket_accepted[bucket] = self.bucket_accepted.get(bucket, 0) + 1
