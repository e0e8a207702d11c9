"""A reviewer's own task file as task families (docs/AUTOMATIC_SETTINGS.md, "Checking the automatic settings on
your own tasks"). Issue 32's guarantees must hold on tasks no fit has seen, so the gate
(benchmarks/bench_auto_size.py), the shipped-fit check (benchmarks/check_shipped_fit.py) and the frontier
(`report --frontier`) take `--tasks FILE` in place of the project's own families, all through this module.

The file is a task file (workbench.evaluation.tasks.task_file: JSON Lines, the project's rows, or Spec-Bench's or
LongBench's, detected per row); each row's category is its family. A family is scored in one metric the project
already has: the one its rows name (`metric`), else the one its rows' task kind has (`KIND_DEFAULT`). From there
the rows are a family like the built-in ones: a row per family in the tables, paired bootstrap intervals, the
−1-point rule (workbench.evaluation.admissibility).

Clean evaluation: before anything is decoded, `check_run_unseen` refuses items that a fit the run reads was made on
(by the fit's `family/id` and by the text of its items, read again where they can be) or that are in a project
family's held-out split (what fits and the gate's acceptance priors are made from), comparing each item's own text
by `calibration.prompt_hash` (words only: case, spacing and punctuation ignored). Items that only share a word
13-gram with one (`calibration.Overlap`) are near-duplicates: reported, not refused. The cost model t(n, L) is
measured on random tokens and records no items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError, WorkbenchError
from workbench.evaluation.calibration import Overlap, prompt_hash
from workbench.evaluation.families import FAMILIES, family_tasks, item_text, parse_families
from workbench.evaluation.scores import KIND_METRIC, METRICS, PASS_AT_1, TARGET_PROBABILITY
from workbench.evaluation.tasks import Task, load_tasks
from workbench.evaluation.thresholds import fitted_methods, item_id

FAMILY_METRICS = (*METRICS, TARGET_PROBABILITY)  # what a family of a task file may be scored in
KIND_DEFAULT = {**KIND_METRIC, "chat": TARGET_PROBABILITY}  # a family that names no metric: its task kind's
SHOWN = 5  # item ids a message names per source


def family_metric(name: str, tasks: Sequence[Task]) -> str:
    """The one metric family `name` is scored in: the one its rows name, else the default of its rows' task kind."""
    named = list(dict.fromkeys(t.metric for t in tasks if t.metric))
    if PASS_AT_1 in named:
        raise InvalidInputError(
            f"family {name!r} is scored by pass@1 (running the model's code), which --tasks does not run: give its "
            f"rows references and a metric ({', '.join(FAMILY_METRICS)})"
        )
    if len(named) > 1:
        raise InvalidInputError(
            f"family {name!r} mixes the metrics {', '.join(named)}: a family is scored in one metric (give the rows "
            f"of another metric their own category)"
        )
    if named:
        return named[0]
    kinds = list(dict.fromkeys(t.task for t in tasks))
    defaults = list(dict.fromkeys(KIND_DEFAULT.get(k) for k in kinds))
    if len(defaults) == 1 and defaults[0] is not None:
        return defaults[0]
    raise InvalidInputError(
        f"family {name!r} names no metric and its task kind ({', '.join(kinds)}) gives no single one: add "
        f'"metric": one of {", ".join(FAMILY_METRICS)} to its rows'
    )


def read_family_file(
    path: str | Path, families: str | None = None, *, first: int = 0, items: int | None = None
) -> dict[str, list[Task]]:
    """The task file's rows grouped per family (the row's category), in file order, each task carrying its
    family's metric; `families` ("a,b"; default all) picks some, `first` and `items` slice each family. A bad
    file, row or choice is one InvalidInputError."""
    if first < 0 or (items is not None and items < 1):
        raise InvalidInputError("--first-item must be at least 0 and --items at least 1")
    path = Path(path)
    grouped: dict[str, list[Task]] = {}
    for t in load_tasks(path):
        grouped.setdefault(t.category or t.task, []).append(t)
    if not grouped:
        raise InvalidInputError(
            f"{path.name} has no rows: write one JSON object per line, each with id, task, input, category and "
            f"answers (docs/AUTOMATIC_SETTINGS.md, 'Checking the automatic settings on your own tasks')"
        )
    out = {}
    for name in parse_families(families, tuple(grouped), tuple(grouped), where=f"{path.name} (its rows' categories)"):
        family = grouped[name]
        ids = [t.id for t in family]
        twice = list(dict.fromkeys(i for i in ids if ids.count(i) > 1))
        if twice:  # items are paired with greedy's by family and id
            raise InvalidInputError(
                f"family {name!r} of {path.name} has the id{'s' * (len(twice) > 1)} {', '.join(twice[:SHOWN])} more "
                f"than once: ids must be unique within a family"
            )
        metric = family_metric(name, family)
        bare = [t.id for t in family if not t.answers]
        if metric != TARGET_PROBABILITY and bare:
            raise InvalidInputError(
                f"family {name!r} is scored by {metric} against references, but {_few(bare)} of {path.name} "
                f'{"has" if len(bare) == 1 else "have"} no answers: add "answers": [...] (or "metric": '
                f'"{TARGET_PROBABILITY}" for open writing, which has none)'
            )
        chosen = family[first : None if items is None else first + items]
        if not chosen:
            raise InvalidInputError(
                f"family {name!r} of {path.name} has {len(family)} row{'s' * (len(family) != 1)}: --first-item "
                f"{first} leaves none"
            )
        out[name] = [replace(t, category=name, metric=metric) for t in chosen]
    return out


def _few(ids: Sequence[str]) -> str:
    return f"item{'s' * (len(ids) != 1)} {', '.join(ids[:SHOWN])}{', ...' if len(ids) > SHOWN else ''}"


# ---------------------------------------------------------------- what the run has seen


@dataclass(frozen=True)
class Seen:
    """The items something a run uses was made from: a fit's (its `family/id`s, and their texts where they can be
    read again) or a held-out split's (texts)."""

    source: str  # e.g. "the shipped aasd fit (core/fits/...)", "docqa's held-out split"
    ids: frozenset[str] = frozenset()
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contamination:
    seen: dict[str, list[str]]  # source -> the checked items (family/id) that it was made from
    near: dict[str, list[str]]  # source -> the other checked items sharing a word 13-gram with one of its items


def contamination(tasks: Sequence[Task], seen: Sequence[Seen]) -> Contamination:
    """Which `tasks` each source has seen: same `family/id` as a fit's item, or the same own text (prompt_hash);
    and which, not seen, share a word 13-gram with one of its items (near-duplicates)."""
    mine = [(item_id(t), item_text(t)) for t in tasks]
    hashes = {key: prompt_hash(text) for key, text in mine}
    found: dict[str, list[str]] = {}
    near: dict[str, list[str]] = {}
    for s in seen:
        theirs = {prompt_hash(t) for t in s.texts}
        same = [key for key, _ in mine if key in s.ids or hashes[key] in theirs]
        if same:
            found[s.source] = same
        if s.texts:
            grams = Overlap.of(s.texts)
            close = [key for key, text in mine if key not in same and grams.hits(text)]
            if close:
                near[s.source] = close
    return Contamination(found, near)


def check_unseen(tasks: Sequence[Task], seen: Sequence[Seen], where: str) -> list[str]:
    """Refuse (one InvalidInputError: how many, which, what to do) when any of `tasks` is an item a source has seen;
    return the lines to print: what was checked, and a warning for near-duplicates."""
    found = contamination(tasks, seen)
    if found.seen:
        ids = list(dict.fromkeys(i for ids in found.seen.values() for i in ids))
        raise InvalidInputError(
            f"{len(ids)} item{'s' * (len(ids) != 1)} of {where} {'was' if len(ids) == 1 else 'were'} already seen "
            f"({_describe(found.seen)}): results on them would not be on unseen tasks; remove them from the file "
            f"or write new items"
        )
    lines = [
        f"checked {len(tasks)} item{'s' * (len(tasks) != 1)} of {where} against "
        + (", ".join(f"{s.source} ({len(s.texts) or len(s.ids)})" for s in seen) or "nothing")
        + ": none seen"
    ]
    if found.near:
        ids = list(dict.fromkeys(i for ids in found.near.values() for i in ids))
        lines.append(
            f"warning: {len(ids)} item{'s' * (len(ids) != 1)} of {where} share a 13-word run with items already "
            f"seen ({_describe(found.near)}): check they are not copies"
        )
    return lines


def _describe(by_source: Mapping[str, Sequence[str]]) -> str:
    return "; ".join(f"{source}: {_few(ids)}" for source, ids in by_source.items())


def fit_seen(fit: Mapping[str, Any], source: str) -> tuple[Seen, str | None]:
    """The items a stored fit was made on (core.thresholds' fit: `items` holds its `family/id`s and where they
    came from: the families' held-out split, or a task file), with their texts read again; when they cannot be
    (the file is gone), its ids alone and a note saying so."""
    record = fit.get("items") or {}
    ids = frozenset(record.get("ids") or ())
    try:
        if record.get("data"):
            pool = load_tasks(record["data"])
        else:
            split = record.get("split") or "held_out"
            pool = [t for name in record.get("families") or {} for t in family_tasks(name, split)]
    except (WorkbenchError, OSError) as e:
        return Seen(source, ids), f"note: {source}'s items could not be read again ({e}): checked by their ids only"
    return Seen(source, ids, tuple(item_text(t) for t in pool if item_id(t) in ids)), None


def held_out_seen(names: Sequence[str] = tuple(FAMILIES)) -> tuple[list[Seen], list[str]]:
    """The project families' held-out splits (what fits and the gate's acceptance priors are made from), and a
    note for each that cannot be read here (its data absent)."""
    seen, notes = [], []
    for name in names:
        try:
            tasks = family_tasks(name, "held_out")
        except (WorkbenchError, OSError) as e:
            notes.append(f"note: not checked against {name}'s held-out split, which cannot be read here ({e})")
            continue
        seen.append(Seen(f"{name}'s held-out split", texts=tuple(item_text(t) for t in tasks)))
    return seen, notes


def run_seen(target, methods: Sequence[str], params: Mapping[str, Any] | None = None) -> tuple[list[Seen], list[str]]:
    """Everything a run of `methods` on `target` reads that was made from items: the stored fit of each method that
    verifies with one (the user's or the shipped, as `[auto]` reads it), and every family's held-out split."""
    from core.thresholds import fit_origin

    seen, notes = [], []
    for name in dict.fromkeys(fitted_methods(methods, params).values()):
        fit, where, path, _ = fit_origin(target, name)
        if fit is not None:
            shown = path.name if path is not None else "?"
            s, note = fit_seen(fit, f"the {where} {name} fit ({shown})")
            seen.append(s)
            notes += [note] if note else []
    held, held_notes = held_out_seen()
    return seen + held, notes + held_notes


def check_run_unseen(
    target, tasks: Sequence[Task], methods: Sequence[str], params: Mapping[str, Any] | None = None, *, where: str
) -> list[str]:
    """check_unseen against everything a run of `methods` reads (run_seen): raises when an item was seen, else
    returns the lines to print."""
    seen, notes = run_seen(target, methods, params)
    return notes + check_unseen(tasks, seen, where)
