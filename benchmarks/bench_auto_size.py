"""max_nodes=auto against greedy on the project's own task families (issue 32, "never slower than greedy").

Every tree method with max_nodes=auto runs beside greedy, interleaved per item (greedy first, then each method
on the same prompt), on the evaluation split of each family (workbench.evaluation.families); the acceptance
prior each method starts from is read from stored traces of that method and model on the *held-out* split
(collected here once, with a fixed max_nodes=64 so every source and depth gets judged, into a trace store
under --out, and read back with workbench.store.priors.acceptance_prior, filtered by a tag). Per family and
method: the speed-up over greedy (tokens per second of decoding, pooled over the family's items) with a
paired 95 % percentile bootstrap interval over items (scipy.stats.bootstrap), the items and the mean tree size.

The order of the runs on an item is rotated from item to item (greedy first on the first item, second on the next,
...), so no method always runs in the same place after the others; `--repeats R` runs each item's whole set R times
(rotated again each time) and keeps each method's fastest run per item, as the cost grid keeps the fastest round;
`--control` adds `greedy-again`, greedy run a second time and reported as if it were a method: the spread of its
ratio is what the noise of the measurement alone gives (an A/A test). `--lockstep` decodes an item's runs at once,
each in its own thread, one step each in turn (prefills whole and untimed), each run timed by its own thread's CPU
clock and the wall time of its turns: a drift of the host's speed lasting seconds then falls on greedy and every
method alike instead of on whichever run it happened in (on a quiet 2-vCPU AMD EPYC, AVX2 only, identical
one-token forwards ran up to 20 % apart from one run to the next; in lockstep the A/A control sat within about 1 %).
Label endings run a method with one sizer setting changed, so two sizers meet in one run: `+online` (the online
check), `+plain` (no caution, no pause), `+pause` (no caution), `+noprobe` (no probes).

Decoding time is measured twice: the run's wall clock (`decode_seconds`) and, with one torch thread, the
calling thread's CPU time from the first step to the end of the run (not inflated when other processes
share the core; the machine this was written on ran at a load average of 10-17 from other work, which made
wall times 5-10x the CPU times).

`--tasks FILE` runs the gate on a reviewer's own task file instead of the families' evaluation splits
(workbench.evaluation.family_file: each row's category is its family; items that a fit the methods read or a
held-out split has seen are refused before anything is timed); the acceptance priors still come from the
project families' held-out items.

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_auto_size.py --threads 1 \\
        --items 3 --max-new-tokens 64 --control --lockstep --out results/auto_size
    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_auto_size.py --threads 1 \\
        --tasks assets/reviewer_tasks.jsonl --control --max-new-tokens 64 --out results/auto_size_reviewer
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

METHODS = (
    "aasd-strict",
    "recycle",
    "casd[delta=0.5]",
    "aasd",
)  # every tree method that takes max_nodes (casd δ = 0.5: strict)
PRIOR_TAG = "auto-size-prior"
ONLINE = "+online"  # a label ending so runs its sizer with the online check (core.sizing.StepClock)
PLAIN = "+plain"  # a label ending so runs its sizer without caution and without the drafting pause (the old sizer)
PAUSE_ONLY = "+pause"  # a label ending so runs its sizer without caution, with the drafting pause
NO_PROBE = "+noprobe"  # a label ending so runs its sizer without probes (core.sizing.PROBE), the rest as the run's
# label ending -> the core.sizing settings its runs change (the others stay the run's)
SIZER_SETTINGS = {
    PLAIN: {"CAUTION": 0.0, "PAUSE": False},
    PAUSE_ONLY: {"CAUTION": 0.0, "PAUSE": True},
    NO_PROBE: {"PROBE": False},
}
CONTROL = "greedy-again"  # --control: greedy again, as a method (an A/A test of the measurement's noise)
PHASES = ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms")  # core.trace.StepTrace's per-step clocks (wall)
PRIOR_NODES = 64  # the prior's runs: a fixed, large tree (what max_nodes=auto chooses from), so every depth is judged


def speedup_interval(greedy: list[tuple[float, int]], method: list[tuple[float, int]], seed: int = 0):
    """(pooled speed-up, low, high): (Σ tokens_m / Σ s_m) / (Σ tokens_g / Σ s_g) over items, and its paired
    95 % percentile bootstrap interval (items resampled together for both; None with fewer than 2 items)."""
    from scipy.stats import bootstrap

    g = np.array(greedy, dtype=float)
    m = np.array(method, dtype=float)

    def ratio(gs, gt, ms, mt, axis=-1):
        return (mt.sum(axis) / ms.sum(axis)) / (gt.sum(axis) / gs.sum(axis))

    point = float(ratio(g[:, 0], g[:, 1], m[:, 0], m[:, 1]))
    if len(g) < 2:
        return point, None, None
    res = bootstrap(
        (g[:, 0], g[:, 1], m[:, 0], m[:, 1]),
        ratio,
        paired=True,
        vectorized=True,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def decode_cpu_clock():
    """(on_prefill, should_stop, seconds) for one run_method call: the callbacks mark the thread's CPU time at
    the first step (the first stop check after the prefill and the drafter's setup, which the engine counts as
    prefill); seconds() is the CPU time since (call it when the run has ended)."""
    mark = {}

    def prefilled(done, total):
        mark["prefilled"] = done >= total

    def first_step():  # asked before every step (and between prefill chunks)
        if mark.get("prefilled") and "t" not in mark:
            mark["t"] = time.thread_time()
        return False

    return prefilled, first_step, lambda: time.thread_time() - mark.get("t", time.thread_time())


def timed_run(name, params, target, ids, prior, task):
    """run_method, the thread's CPU seconds of decoding (from the first step to the end of the run) and its wall
    seconds of decoding."""
    prefilled, first_step, seconds = decode_cpu_clock()
    run = decode_task(name, params, target, ids, prior, task, prefilled, first_step)
    return run, seconds(), run.decode_seconds


def decode_task(name, params, target, ids, prior, task, on_prefill, should_stop):
    """run_method on a task's prompt ids, with its text and stop strings (the gate's one way to decode an item)."""
    from workbench.methods import run_method

    return run_method(
        name,
        target,
        ids,
        params,
        prompt_text=task.input,
        stop_strings=task.stop,
        prior=prior,
        on_prefill=on_prefill,
        should_stop=should_stop,
    )


def start_run(label, base, settings, online, max_new_tokens) -> tuple[str, dict]:
    """(method name, params) for a run of `label`, with the core.sizing settings its ending asks for set now: call
    it just before the run starts (its sizer reads them when the run builds it)."""
    import core.sizing
    from workbench.methods import parse_method_spec

    name, overrides = parse_method_spec("greedy" if label == CONTROL else base.get(label, label))
    online["on"] = label.endswith(ONLINE)
    changed = next((v for end, v in SIZER_SETTINGS.items() if label.endswith(end)), {})
    for key, value in {**settings, **changed}.items():
        setattr(core.sizing, key, value)
    params = {**overrides, "max_new_tokens": max_new_tokens}
    if name != "greedy":
        params["max_nodes"] = "auto"
    return name, params


class Turns:
    """Whose turn it is among runs decoding in threads (--lockstep): one step each, round robin, in `n` places."""

    def __init__(self, n: int):
        self.cond = threading.Condition()
        self.ring = list(range(n))  # the places still running, in turn order
        self.at = 0  # the index in ring whose turn it is

    def wait(self, place: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.ring[self.at] == place)

    def pass_on(self, place: int) -> None:
        with self.cond:
            self.at = (self.ring.index(place) + 1) % len(self.ring)
            self.cond.notify_all()

    def leave(self, place: int) -> None:
        with self.cond:
            i = self.ring.index(place)
            self.ring.pop(i)
            self.at = i % len(self.ring) if self.ring else 0
            self.cond.notify_all()


def lockstep_runs(order, starts, target, ids, priors, task, on_turn=None) -> dict:
    """Every label's run on one item at once, each in its own thread, taking one decoding step each in turn
    (`order` is the turn order; each prefill runs whole in its turn, untimed). So every run's steps fall in the
    same stretch of the machine's time, and a slow drift of the host's speed (seen on a quiet 2-vCPU EPYC:
    one-token forwards 20 % apart from one 8-s run to the next) falls on greedy and the methods alike, where
    one run after another gives each run its own stretch. Returns label -> (run, the thread's CPU seconds of
    decoding, wall seconds of its turns). `on_turn(label)` is called at each of a run's steps (tests)."""

    turns, results = Turns(len(order)), {}

    def decode(place: int, label: str) -> None:
        clock = {"prefilled": False, "cpu": None, "wall": 0.0, "turn": 0.0}

        def prefilled(done, total):
            clock["prefilled"] = done >= total

        def next_turn():  # asked before every step (and between prefill chunks)
            if not clock["prefilled"]:
                return False
            if clock["cpu"] is None:
                clock["cpu"] = time.thread_time()  # the first step: decoding starts
            else:
                clock["wall"] += time.perf_counter() - clock["turn"]
            turns.pass_on(place)
            turns.wait(place)
            clock["turn"] = time.perf_counter()
            if on_turn is not None:
                on_turn(label)
            return False

        turns.wait(place)
        try:
            name, params = starts[label]()  # in this run's turn: the sizer settings are its own while it is built
            run = decode_task(name, params, target, ids, priors.get(label), task, prefilled, next_turn)
            end = time.thread_time()
            if clock["cpu"] is not None:  # the last step's turn
                clock["wall"] += time.perf_counter() - clock["turn"]
            results[label] = (run, end - (clock["cpu"] if clock["cpu"] is not None else end), clock["wall"])
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            results[label] = e
        finally:
            turns.leave(place)

    threads = [threading.Thread(target=decode, args=(k, label), daemon=True) for k, label in enumerate(order)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results.values():
        if isinstance(result, BaseException):
            raise result
    return {label: results[label] for label in order}


def online_switch(target) -> dict:
    """Let a label ending in ONLINE run its sizer with the online check: returns the switch the loop sets per run.
    (A benchmark-only wrapper around core.methods.run.tree_sizer; the check is off in the engine's default.)"""
    import core.methods.run as method_run
    from core import timing
    from core.sizing import StepClock

    state = {"on": False}
    build_sizer = method_run.tree_sizer

    def tree_sizer(*args, **kwargs):
        sizer = build_sizer(*args, **kwargs)
        if sizer is not None and state["on"]:
            sizer.clock = StepClock(getattr(time, timing.clock_name(target)))
        return sizer

    method_run.tree_sizer = tree_sizer
    return state


def method_of(label: str) -> str:
    """The method a label runs: the label without a sizer-setting ending (ONLINE, PLAIN, PAUSE_ONLY, NO_PROBE)."""
    for end in (ONLINE, *SIZER_SETTINGS):
        label = label.removesuffix(end)
    return label


def rotated(labels: tuple[str, ...], shift: int) -> tuple[str, ...]:
    """`labels` rotated left by `shift`: the run order on one item (each label takes every place in turn)."""
    k = shift % len(labels)
    return labels[k:] + labels[:k]


def collect_priors(target, families, methods, items, max_new_tokens, store_path) -> dict:
    """The acceptance prior per method label, from the store's tagged runs on held-out items (run now if absent)."""
    from core.models import encode_prompt
    from workbench.evaluation.families import family_tasks
    from workbench.methods import parse_method_spec, run_method
    from workbench.store.priors import acceptance_prior
    from workbench.store.repository import Store

    store = Store(f"sqlite:///{store_path}")
    dtype_tag = f"{PRIOR_TAG}:{str(target.dtype).replace('torch.', '')}"
    priors = {}
    for label in methods:
        if label.endswith((ONLINE, *SIZER_SETTINGS)) or label == CONTROL:
            continue
        name, overrides = parse_method_spec(label)
        # A fitted label's runs carry their own tag: the plain label's query (no parameter filter) would pool them.
        tag, query_params = (
            (f"{dtype_tag}:{label}", None) if overrides.get("fitted") else (dtype_tag, overrides or None)
        )
        prior = acceptance_prior(store, name, target.fingerprint, params=query_params, tag=tag)
        if prior.observations == 0:
            for family in families:
                for task in family_tasks(family, "held_out", items):
                    ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
                    run = run_method(
                        name,
                        target,
                        ids,
                        {**overrides, "max_nodes": PRIOR_NODES, "max_new_tokens": max_new_tokens},
                        prompt_text=task.input,
                    )
                    store.save_run(run, tags=[tag])
            prior = acceptance_prior(store, name, target.fingerprint, params=query_params, tag=tag)
        priors[label] = prior
        print(
            f"prior {label}: {prior.observations} judged nodes, sha {prior.fingerprint()} ({prior.source}); "
            f"context depth 1-3: {[round(prior.centre('context', d), 3) for d in (1, 2, 3)]}",
            file=sys.stderr,
        )
    store.close()
    return priors


def main(argv=None) -> int:
    from core.errors import WorkbenchError

    try:
        return run(argv)
    except WorkbenchError as e:  # a bad --tasks file, an item already seen, ...: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--families",
        default=None,
        help="comma-separated (default docqa,summarization,rag,code,writing; with --tasks: the file's families)",
    )
    ap.add_argument(
        "--tasks",
        metavar="FILE",
        default=None,
        help="a task file (JSON Lines) whose rows' categories are the families, in place of the evaluation splits",
    )
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--items", type=int, default=None, help="evaluation items per family (default 3; --tasks: all)")
    ap.add_argument(
        "--first-item",
        type=int,
        default=0,
        help="skip this many evaluation items per family first (items an earlier run already used to decide a setting)",
    )
    ap.add_argument("--prior-items", type=int, default=1, help="held-out items per family for the prior's runs")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="results/auto_size")
    ap.add_argument("--no-prior", action="store_true", help="start every request from the default rate (0.3)")
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no new item after this many minutes of the timed part (items go round the families)",
    )
    ap.add_argument(
        "--caution",
        type=float,
        default=None,
        help="size trees from rates this many posterior standard deviations below their means (core.sizing.CAUTION)",
    )
    ap.add_argument("--repeats", type=int, default=1, help="runs of each item's whole set; the fastest kept per method")
    ap.add_argument("--summarize", metavar="ROWS_JSON", help="print the tables of a finished run's rows.json and stop")
    ap.add_argument(
        "--phases", action="store_true", help="with --summarize: each phase's ms per step beside greedy's, per family"
    )
    ap.add_argument(
        "--lockstep",
        action="store_true",
        help="decode an item's runs at once, one step each in turn (threads), so host drifts fall on all alike",
    )
    ap.add_argument("--control", action="store_true", help=f"add {CONTROL!r}: greedy again, as a method (A/A)")
    ap.add_argument(
        "--pause",
        choices=("on", "off"),
        default=None,
        help="pause drafting after proposals the sizer refused (core.sizing.PAUSE; default: the engine's)",
    )
    ap.add_argument("--remeasure", action="store_true", help="measure t(n, L) again first (under the bench lock)")
    ap.add_argument(
        "--priors-only",
        action="store_true",
        help="collect the priors' held-out runs and stop (untimed: needs no bench lock)",
    )
    args = ap.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.phases)
    if args.first_item < 0 or (args.items is not None and args.items < 1):
        ap.error("--first-item must be at least 0 and --items at least 1")
    from workbench.evaluation.families import family_tasks, parse_families
    from workbench.evaluation.family_file import check_run_unseen, read_family_file

    if args.tasks:  # a bad file fails here, before the model loads; the priors' items stay the families' held-out
        queue = read_family_file(args.tasks, args.families, first=args.first_item, items=args.items)
        prior_families = parse_families(None)
    else:
        prior_families = parse_families(args.families)
        items = args.items or 3
        queue = {f: family_tasks(f, "evaluation", args.first_item + items)[args.first_item :] for f in prior_families}
    families = list(queue)

    torch.set_num_threads(args.threads)
    import core.sizing

    if args.caution is not None:
        core.sizing.CAUTION = args.caution
    if args.pause is not None:
        core.sizing.PAUSE = args.pause == "on"
    from core import timing
    from core.methods import split_method_list
    from core.models import encode_prompt, load_model

    methods = [m.strip() for m in args.methods.split(";")] if ";" in args.methods else split_method_list(args.methods)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1 (got {args.repeats})")
    if args.control:
        methods.append(CONTROL)
    base = {m: method_of(m) for m in methods}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    machine = timing.machine_signature(target)
    print(
        f"machine: {machine['cpu']}, flags {' '.join(machine['cpu_flags'])}, torch threads {machine['threads']}, "
        f"dtype {machine['dtype']}, torch {machine['torch']}",
        file=sys.stderr,
    )
    if args.tasks:  # an error when a fit one of the methods reads, or a held-out split, has seen an item
        checked = [base[m] for m in methods if m != CONTROL]
        for line in check_run_unseen(
            target, [t for g in queue.values() for t in g], checked, where=Path(args.tasks).name
        ):
            print(line, file=sys.stderr)
    t0 = time.perf_counter()
    if args.priors_only:
        collect_priors(target, prior_families, methods, args.prior_items, args.max_new_tokens, out / "prior.db")
        print(f"priors collected in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        return 0
    cost = timing.cost_model(
        target, remeasure=args.remeasure
    )  # measured once per machine (seconds), before anything is timed
    for length in (256, 1024, 4096):
        print(
            f"t(n, {length}) / t(0, {length}): " + " ".join(f"{n}:{cost.ratio(n, length):.2f}" for n in cost.sizes),
            file=sys.stderr,
        )
    priors = (
        {}
        if args.no_prior
        else collect_priors(target, prior_families, methods, args.prior_items, args.max_new_tokens, out / "prior.db")
    )
    print(f"cost model and priors ready in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    for m in methods:
        if m in base and base[m] != m and base[m] in priors:
            priors[m] = priors[base[m]]
    online = online_switch(target)
    settings = {k: getattr(core.sizing, k) for k in ("CAUTION", "PAUSE", "PROBE")}  # the run's; labels change some
    rows = []
    warm = encode_prompt(target.tokenizer, "Hello", chat=False)
    from workbench.methods import run_method

    for label in ("greedy", *methods):  # lazy initialisation out of the timings
        name = "greedy" if label == CONTROL else base.get(label, label).split("[")[0]
        run_method(name, target, warm, {"max_new_tokens": 4})
    t_bench = time.perf_counter()
    longest = max(len(g) for g in queue.values())
    order = [(f, queue[f][i]) for i in range(longest) for f in families if i < len(queue[f])]  # round the families
    labels = ("greedy", *methods)
    for n_item, (family, task) in enumerate(order):
        if args.max_minutes is not None and time.perf_counter() - t_bench > 60 * args.max_minutes:
            print(f"--max-minutes {args.max_minutes} reached: the remaining items are left out", file=sys.stderr)
            break
        ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
        runs: dict[str, list] = {label: [] for label in labels}
        for repeat in range(args.repeats):
            order_now = rotated(labels, n_item * args.repeats + repeat)
            starts = {label: partial(start_run, label, base, settings, online, args.max_new_tokens) for label in labels}
            if args.lockstep:
                timed = lockstep_runs(order_now, starts, target, ids, priors, task)
            else:
                timed = {
                    label: timed_run(*starts[label](), target, ids, priors.get(label), task) for label in order_now
                }
            for label, result in timed.items():
                runs[label].append(result)
        greedy_ids = min(runs["greedy"], key=lambda rc: rc[1])[0].output_ids
        for label in labels:
            run, cpu, _ = min(runs[label], key=lambda rc: rc[1])  # the fastest of the repeats, by CPU time
            rows.append(
                {
                    "family": family,
                    "id": task.id,
                    "method": label,
                    "prompt_tokens": len(ids),
                    "tokens": len(run.output_ids),
                    "wall": min(w for _, _, w in runs[label]),
                    "cpu": cpu,
                    "cpu_repeats": [c for _, c, _ in runs[label]],
                    "steps": len(run.steps),
                    "tree": float(np.mean([s.tree_size for s in run.steps] or [0])),
                    "phases_ms": {k: float(np.mean([getattr(s, k) for s in run.steps] or [0])) for k in PHASES},
                    "equal_to_greedy": run.output_ids == greedy_ids,
                    "prior_sha": run.params.get("prior_sha"),
                }
            )
            print(
                f"{family} {task.id} {label}: {len(ids)} prompt tokens, {len(run.output_ids)} tokens, "
                f"wall {rows[-1]['wall']:.2f} s, cpu {cpu:.2f} s (repeats {[round(c, 2) for c in rows[-1]['cpu_repeats']]}), "
                f"mean tree {rows[-1]['tree']:.1f}, ms per step "
                + " ".join(f"{k[:-3]} {v:.2f}" for k, v in rows[-1]["phases_ms"].items()),
                file=sys.stderr,
            )
    for key, value in settings.items():
        setattr(core.sizing, key, value)
    minutes = (time.perf_counter() - t_bench) / 60
    (out / "rows.json").write_text(
        json.dumps(
            {
                "machine": machine,
                "args": vars(args),
                "rows": rows,
                "cost_model": cost.to_dict(),
                "tasks_file": args.tasks,
                "evaluation_items": {f: [t.id for t in queue[f]] for f in families},
                "prior_items": {
                    f: [t.id for t in family_tasks(f, "held_out", args.prior_items)] for f in prior_families
                },
                "priors": {k: p.record() for k, p in priors.items()},
            },
            indent=1,
        )
    )
    print(
        f"\n{args.model} {machine['dtype']}, {machine['cpu']} ({' '.join(machine['cpu_flags'])}), "
        f"{machine['threads']} thread(s); sizer caution {core.sizing.CAUTION}, drafting pause {'on' if core.sizing.PAUSE else 'off'}; {longest} evaluation items per family at most "
        f"(from item {args.first_item + 1}{' of ' + args.tasks if args.tasks else ''}), "
        f"{args.max_new_tokens} new tokens, {args.repeats} repeat(s) (fastest kept), order rotated per item"
        f"{', runs in lockstep (one step each in turn)' if args.lockstep else ''}; "
        f"timed part {minutes:.1f} min\n"
    )
    print_table(rows, families, methods)
    return 0


def print_table(rows: list[dict], families: list[str], methods: list[str]) -> None:
    """The speed-up table per family and method, then each method pooled over every family's items (its interval
    resamples items of all families together), and the pairs below 0.98x greedy by CPU time."""
    print(
        "| family | method | items | prompt tokens (median) | mean tree | speed-up, CPU time [95 % CI] | "
        "speed-up, wall [95 % CI] | = greedy |"
    )
    print("|---|---|---|---|---|---|---|---|")
    worst = {}
    for family in [*families, None]:
        fam = [r for r in rows if family is None or r["family"] == family]
        greedy = {r["id"]: r for r in fam if r["method"] == "greedy"}
        for label in methods:
            mine = [r for r in fam if r["method"] == label]
            if not mine:
                continue
            cells = []
            for clock in ("cpu", "wall"):
                point, lo, hi = speedup_interval(
                    [(greedy[r["id"]][clock], greedy[r["id"]]["tokens"]) for r in mine],
                    [(r[clock], r["tokens"]) for r in mine],
                )
                cells.append(f"{point:.3f} [{lo:.2f}, {hi:.2f}]" if lo is not None else f"{point:.3f}")
                if clock == "cpu" and family is not None:
                    worst[(family, label)] = point
            print(
                f"| {family or 'all families'} | {label} | {len(mine)} | "
                f"{int(np.median([r['prompt_tokens'] for r in mine]))} | "
                f"{np.mean([r['tree'] for r in mine]):.1f} | {cells[0]} | {cells[1]} | "
                f"{sum(r['equal_to_greedy'] for r in mine)}/{len(mine)} |"
            )
    below = {k: v for k, v in worst.items() if v < 0.98 and k[1] != CONTROL}
    print(
        f"\nevery method ≥ 0.98× greedy on every family (CPU time): {'yes' if not below else 'no'}"
        + ("" if not below else "; below: " + ", ".join(f"{f}/{m} {v:.3f}" for (f, m), v in below.items()))
    )


def print_phases(rows: list[dict], families: list[str], methods: list[str]) -> None:
    """Where a method's step time differs from greedy's: per family, the mean over items of each phase's ms per step
    (the step's wall clock, split by core.step) minus greedy's on the same item, and the forward's ratio to greedy's.
    An empty auto step runs greedy's forward, so a forward ratio above the control's is not drafting or pricing."""
    greedy = {(r["family"], r["id"]): r["phases_ms"] for r in rows if r["method"] == "greedy" and r.get("phases_ms")}
    print("\n| family | method | draft ms Δ | forward ms Δ | forward ÷ greedy's | verify ms Δ | bookkeeping ms Δ |")
    print("|---|---|---|---|---|---|---|")
    for family in families:
        for label in methods:
            pairs = [
                (r["phases_ms"], greedy[(family, r["id"])])
                for r in rows
                if r["family"] == family and r["method"] == label and (family, r["id"]) in greedy and r.get("phases_ms")
            ]
            if not pairs:
                continue
            delta = {k: np.mean([m[k] - g[k] for m, g in pairs]) for k in pairs[0][1]}
            ratio = np.mean([m["forward_ms"] / g["forward_ms"] for m, g in pairs])
            print(
                f"| {family} | {label} | {delta['draft_ms']:+.2f} | {delta['forward_ms']:+.2f} | {ratio:.3f} | "
                f"{delta['verify_ms']:+.2f} | {delta['bookkeeping_ms']:+.2f} |"
            )


def summarize(path: str, phases: bool = False) -> int:
    """--summarize: the tables of a finished run again, from its rows.json (families and methods as it ran them);
    with --phases, where each method's step time goes beside greedy's (print_phases)."""
    data = json.loads(Path(path).read_text())
    rows = data["rows"]
    families = list(dict.fromkeys(r["family"] for r in rows))
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != "greedy"]
    print_table(rows, families, methods)
    if phases:
        print_phases(rows, families, methods)
    return 0


if __name__ == "__main__":
    sys.exit(main())
