"""The acceptance prior from stored traces: how often draft nodes of each source and depth were accepted
in the store's runs of one method and model (core.acceptance_prior turns the counts into a prior).

One query over `nodes` joined with `runs`, grouped by (source, depth): the verified nodes (the walk judged
them: accepted, rejected or rescued; core.stats.JUDGED) and how many of them were accepted or rescued. A second,
grouped by (source, confidence bucket) over the nodes whose drafter scored them (the suffix drafter's confidence,
stored in the nodes' attributes), gives the prior's calibration of that score.
The root and bonus records are not draft nodes; unreached nodes were never judged. Runs of every status
count (a cancelled run's steps were judged like any other).

Filters narrow "the same method" where the method name alone does not say how it verifies: `params`
matches run parameters (e.g. aasd's thresholds), `draft_fingerprint` the draft model, `tag` the runs that
carry a tag (e.g. only calibration runs, so a benchmark's prior never comes from its own items).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from core.acceptance_prior import CONFIDENCE_EDGES, DEFAULT_RATE, PRIOR_WEIGHT, AcceptancePrior
from core.errors import InvalidInputError
from core.stats import JUDGED
from workbench.store.repository import Store
from workbench.store.schema import Node, Run, RunTag

ACCEPTED = ("accepted", "rescued")


def _param_condition(name: str, value: Any):
    """runs.params[name] == value, typed so SQLite and PostgreSQL compare the same way."""
    field = Run.params[name]
    if isinstance(value, bool):
        return field.as_boolean() == value
    if isinstance(value, (int, float)):
        return field.as_float() == float(value)
    if isinstance(value, str):
        return field.as_string() == value
    raise InvalidInputError(f"a prior's parameter filter {name}={value!r} must be a number, a string or a boolean")


def _matching(
    query,
    method: str,
    model_fingerprint: str,
    draft_fingerprint: str | None,
    params: Mapping[str, Any] | None,
    tag: str | None,
):
    """`query` over nodes joined with runs, narrowed to the judged draft nodes of the matching runs."""
    if not method or not model_fingerprint:
        raise InvalidInputError("a stored acceptance prior needs a method and a model fingerprint")
    query = query.join(Run, Run.id == Node.run_id).where(
        Run.method == method,
        Run.model_fingerprint == model_fingerprint,
        Node.parent != -1,
        Node.decision.in_(JUDGED),
    )
    if draft_fingerprint is not None:
        query = query.where(Run.draft_fingerprint == draft_fingerprint)
    for name, value in (params or {}).items():
        query = query.where(_param_condition(name, value))
    if tag is not None:
        query = query.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
    return query


def _rows(store: Store, query) -> list:
    try:
        with Session(store.engine) as session:
            return session.execute(query).all()
    except sa_exc.DBAPIError as e:
        raise store._explain(e) from e  # the store's own plain-language errors (locked, damaged, unreachable)


def stored_counts(
    store: Store,
    method: str,
    model_fingerprint: str,
    *,
    draft_fingerprint: str | None = None,
    params: Mapping[str, Any] | None = None,
    tag: str | None = None,
) -> list[tuple[str, int, int, int]]:
    """(source, depth, accepted, verified) per source and depth over the matching runs' draft nodes."""
    accepted = func.sum(case((Node.decision.in_(ACCEPTED), 1), else_=0))
    query = _matching(
        select(Node.source, Node.depth, accepted, func.count()),
        method,
        model_fingerprint,
        draft_fingerprint,
        params,
        tag,
    ).group_by(Node.source, Node.depth)
    return [(str(source), int(depth), int(acc or 0), int(ver)) for source, depth, acc, ver in _rows(store, query)]


def stored_calibration(
    store: Store,
    method: str,
    model_fingerprint: str,
    *,
    draft_fingerprint: str | None = None,
    params: Mapping[str, Any] | None = None,
    tag: str | None = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """{(source, confidence bucket): (accepted, verified)} over the matching runs' draft nodes that their drafter
    gave a confidence (the trace's `confidence`, kept in the nodes' attributes; buckets as
    core.acceptance_prior.confidence_bucket): what verification did with each level of the drafter's confidence.
    Empty for methods whose drafters give none."""
    confidence = Node.attributes["confidence"].as_float()
    bucket = case(
        *[(confidence < edge, i) for i, edge in enumerate(CONFIDENCE_EDGES)], else_=len(CONFIDENCE_EDGES)
    ).label("bucket")
    accepted = func.sum(case((Node.decision.in_(ACCEPTED), 1), else_=0))
    query = (
        _matching(
            select(Node.source, bucket, accepted, func.count()),
            method,
            model_fingerprint,
            draft_fingerprint,
            params,
            tag,
        )
        .where(confidence.is_not(None))
        .group_by(Node.source, bucket)
    )
    return {(str(source), int(b)): (int(acc or 0), int(ver)) for source, b, acc, ver in _rows(store, query)}


def acceptance_prior(
    store: Store,
    method: str,
    model_fingerprint: str,
    *,
    weight: float = PRIOR_WEIGHT,
    default: float = DEFAULT_RATE,
    **filters: Any,
) -> AcceptancePrior:
    """The prior a request of `method` on this model starts from (the default rate where the store has nothing);
    its `source` names the query, so a run that records it says where its trees started from."""
    label = " ".join(
        [
            f"store:{method}",
            f"model={model_fingerprint}",
            *(f"{k}={v}" for k, v in sorted(filters.items()) if v is not None),
        ]
    )
    prior = AcceptancePrior.from_counts(
        stored_counts(store, method, model_fingerprint, **filters), weight, default, label
    )
    calibration = stored_calibration(store, method, model_fingerprint, **filters)
    return AcceptancePrior(prior.counts, weight, default, label, calibration) if calibration else prior
