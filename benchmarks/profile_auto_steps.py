"""Where a max_nodes=auto step's time goes beside greedy's (issue 32): per-phase CPU time of each step function
(draft, size_trees, forward_tree, step_stats, verify, emit, ...; the calling thread's time, so other load on the
core inflates it little), the per-step phase clocks of the steps whose sized tree is empty, and every step that
kept a tree (its size, accepted nodes and sources). One evaluation item of a family; greedy and each method on it.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/profile_auto_steps.py --family writing --dtype float32 \\
        --prior results/auto_size/prior.db

`--step-ratio` (timed: run it under the bench lock on core 1) decodes the first evaluation item of each of `--families`
(default rag,code) with greedy, greedy again (the A/A control) and each method, `--repeats` times in rotated order,
and prints each label's median CPU time per step (the thread's CPU time between two steps) against greedy's, with the
mean phase clocks of its steps and the minor page faults per step:

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/profile_auto_steps.py --step-ratio \
        --dtype float32 --prior results/auto_size_default_f32/prior.db --repeats 3

`--pause-effect N` times nothing: on the first N evaluation items of every family it decodes each method with the
drafting pause off and on (core.sizing.PAUSE) and prints the steps each took, the mean tree and whether the outputs
agree. Steps per token do not depend on the clock, so this says, even on a loaded core, whether the pause gives up
trees that would have been kept (more steps with it on) where trees pay.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--family", default="summarization")
    ap.add_argument("--methods", default="aasd-strict;recycle;casd[delta=0.5];aasd")
    ap.add_argument("--prior", default="results/auto_size/prior.db", help="bench_auto_size's prior store")
    ap.add_argument("--caution", type=float, default=None, help="core.sizing.CAUTION (default: the engine's)")
    ap.add_argument("--pause", choices=("on", "off"), default="on", help="core.sizing.PAUSE")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--pause-effect", type=int, default=0, metavar="N", help="steps with the pause on and off, N items")
    ap.add_argument(
        "--families",
        default=None,
        help="--pause-effect, --step-ratio: comma-separated families (default: all five; rag,code)",
    )
    ap.add_argument("--step-ratio", action="store_true", help="per-step CPU time of each method against greedy's")
    ap.add_argument("--repeats", type=int, default=3, help="--step-ratio: runs of each label per item")
    ap.add_argument("--methods-ratio", default="aasd-strict;recycle;casd[delta=0.5];aasd;aasd[auto]")
    ap.add_argument(
        "--against-plain",
        action="store_true",
        help="--pause-effect: compare with the plain sizer (caution 0, no pause) instead of the same caution unpaused",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.step_ratio:  # timed: no wrappers around the step functions
        return step_ratio_main(args)
    import core.sizing
    import core.step as step_module
    from core import cache as kv
    from core import engine
    from core.models import encode_prompt, load_model
    from workbench.evaluation.families import family_tasks
    from workbench.methods import parse_method_spec, run_method
    from workbench.store.priors import acceptance_prior
    from workbench.store.repository import Store

    if args.caution is not None:
        core.sizing.CAUTION = args.caution
    core.sizing.PAUSE = args.pause == "on"
    seconds: dict[str, float] = collections.defaultdict(float)
    calls: dict[str, int] = collections.defaultdict(int)

    def timed(module, name):
        inner = getattr(module, name)

        def wrapper(*a, **k):
            t = time.thread_time()
            out = inner(*a, **k)
            seconds[name] += time.thread_time() - t
            calls[name] += 1
            return out

        setattr(module, name, wrapper)

    for name in ("draft", "size_trees", "verify", "emit", "step_stats", "node_traces", "step_predictions"):
        timed(step_module, name)
    timed(engine, "forward_tree")
    timed(kv, "keep_path")

    target = load_model(args.model, device="cpu", dtype=args.dtype)
    store = Store(f"sqlite:///{args.prior}")
    tag = f"auto-size-prior:{str(target.dtype).replace('torch.', '')}"
    if args.pause_effect:
        return pause_effect(target, store, tag, args)
    if args.step_ratio:
        return step_ratio(target, store, tag, args)
    task = family_tasks(args.family, "evaluation", 1)[0]
    ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
    methods = ["greedy", *args.methods.split(";")]
    warm = encode_prompt(target.tokenizer, "Hello", chat=False)
    for label in methods:
        run_method(label.split("[")[0], target, warm, {"max_new_tokens": 4})
    print(f"{args.family} {task.id}: {len(ids)} prompt tokens; {args.dtype}, 1 thread, caution {core.sizing.CAUTION}")
    for label in methods:
        name, overrides = parse_method_spec(label)
        params = {**overrides, "max_new_tokens": args.max_new_tokens}
        prior = None
        if label != "greedy":
            params["max_nodes"] = "auto"
            prior = acceptance_prior(store, name, target.fingerprint, params=overrides or None, tag=tag)
        seconds.clear()
        calls.clear()
        t0 = time.thread_time()
        run = run_method(name, target, ids, params, prompt_text=task.input, stop_strings=task.stop, prior=prior)
        total = time.thread_time() - t0
        steps = run.steps
        per_call = " ".join(f"{k} {seconds[k] * 1e3 / max(calls[k], 1):.3f}" for k in sorted(seconds))
        print(f"{label}: {len(steps)} steps, {len(run.output_ids)} tokens, {total:.3f} s thread time of the run")
        print(f"  ms per call: {per_call}")
        print(
            "  steps with a tree (index, context length, nodes, accepted, forward ms, sources):",
            [
                (
                    s.index,
                    s.cache_pos,
                    s.tree_size,
                    s.accepted,
                    round(s.forward_ms, 1),
                    sorted({x.source for x in s.nodes[1:-1]}),
                )
                for s in steps
                if s.tree_size
            ],
        )
        empty = [s for s in steps if s.tree_size == 0]
        if empty:
            phases = {
                k: float(np.mean([getattr(s, k) for s in empty]))
                for k in ("draft_ms", "forward_ms", "verify_ms", "bookkeeping_ms")
            }
            print("  empty steps, mean wall ms per phase:", {k: round(v, 3) for k, v in phases.items()})
    store.close()
    return 0


def step_ratio_main(args) -> int:
    from core.models import load_model
    from workbench.store.repository import Store

    target = load_model(args.model, device="cpu", dtype=args.dtype)
    store = Store(f"sqlite:///{args.prior}")
    try:
        return step_ratio(target, store, f"auto-size-prior:{str(target.dtype).replace('torch.', '')}", args)
    finally:
        store.close()


def step_clock():
    """(on_prefill, should_stop, marks): should_stop is asked before every step; after the prefill, each call appends
    (thread CPU seconds, this thread's minor page faults) to marks, so consecutive marks bracket one step."""
    import resource

    marks: list[tuple[float, int]] = []
    state = {"prefilled": False}

    def prefilled(done, total):
        state["prefilled"] = done >= total

    def should_stop():
        if state["prefilled"]:
            marks.append((time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_minflt))
        return False

    return prefilled, should_stop, marks


def step_ratio(target, store, tag, args) -> int:
    """Per family (first evaluation item): each label's median CPU per step over all its repeats, against greedy's."""
    import platform

    import core.sizing
    from core.models import encode_prompt
    from workbench.evaluation.families import family_tasks
    from workbench.methods import parse_method_spec, run_method
    from workbench.store.priors import acceptance_prior

    flags = [f for f in ("avx512_bf16", "amx_tile") if f in open("/proc/cpuinfo").read()]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(
        f"{args.model} {args.dtype}; {cpu} ({platform.machine()}, flags {' '.join(flags) or 'none'}); "
        f"torch threads {torch.get_num_threads()}; {args.max_new_tokens} new tokens; repeats {args.repeats}; "
        f"caution {core.sizing.CAUTION}, pause {core.sizing.PAUSE}"
    )
    labels = ["greedy", "greedy-again", *args.methods_ratio.split(";")]
    warm = encode_prompt(target.tokenizer, "Hello", chat=False)
    for label in labels:
        if label != "greedy-again":
            run_method(parse_method_spec(label)[0], target, warm, {"max_new_tokens": 4})
    t_start = time.time()
    print(
        "| family | item | label | steps | CPU ms per step (median) | vs greedy | draft | forward | verify | bookkeeping "
        "| faults per step | beside the forward, vs greedy's step |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for family in (args.families or "rag,code").split(","):
        task = family_tasks(family, "evaluation", 1)[0]
        ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
        per_step: dict[str, list[float]] = {label: [] for label in labels}
        faults: dict[str, list[int]] = {label: [] for label in labels}
        phases: dict[str, list[list[float]]] = {label: [] for label in labels}
        outputs: dict[str, set] = {label: set() for label in labels}
        for rep in range(args.repeats):
            order = labels[rep % len(labels) :] + labels[: rep % len(labels)]  # rotated from repeat to repeat
            for label in order:
                name, overrides = parse_method_spec("greedy" if label == "greedy-again" else label)
                params = {**overrides, "max_new_tokens": args.max_new_tokens}
                prior = None
                if name != "greedy":
                    params["max_nodes"] = "auto"
                    prior = acceptance_prior(store, name, target.fingerprint, params=overrides or None, tag=tag)
                prefilled, should_stop, marks = step_clock()
                run = run_method(
                    name,
                    target,
                    ids,
                    params,
                    prompt_text=task.input,
                    stop_strings=task.stop,
                    prior=prior,
                    on_prefill=prefilled,
                    should_stop=should_stop,
                )
                per_step[label] += [b[0] - a[0] for a, b in zip(marks, marks[1:])]
                faults[label] += [b[1] - a[1] for a, b in zip(marks, marks[1:])]
                phases[label] += [
                    [s.draft_ms, s.forward_ms, s.verify_ms, s.bookkeeping_ms, s.tree_size] for s in run.steps
                ]
                outputs[label].add(tuple(run.output_ids))
        base = float(np.median(per_step["greedy"]))
        # the step's own work beside the forward (draft + verify + bookkeeping, mean wall ms): what a method adds to
        # greedy's step there, as a share of greedy's median step (the forward is the same work and only adds noise)
        beside = {label: float(np.mean([p[0] + p[2] + p[3] for p in phases[label]])) for label in labels}
        for label in labels:
            med = float(np.median(per_step[label]))
            ph = np.mean(np.asarray(phases[label]), axis=0)
            same = "= greedy" if outputs[label] == outputs["greedy"] else "differs"
            print(
                f"| {family} | {task.id} | {label} | {len(phases[label]) // args.repeats} ({same}, mean tree "
                f"{ph[4]:.2f}) | {med * 1e3:.2f} | {med / base:.4f} | {ph[0]:.3f} | {ph[1]:.2f} | {ph[2]:.3f} | "
                f"{ph[3]:.3f} | {np.mean(faults[label]):.1f} | "
                f"{(beside[label] - beside['greedy']) / (base * 1e3) * 100:+.2f} % |",
                flush=True,
            )
    print(f"timed part: {(time.time() - t_start) / 60:.1f} min")
    return 0


def pause_effect(target, store, tag, args) -> int:
    """Per family and method: steps with the pause off and on over the first N evaluation items, the mean tree and
    the outputs that agree."""
    import core.sizing
    from core.models import encode_prompt
    from workbench.evaluation.families import DEFAULT_FAMILIES, family_tasks
    from workbench.methods import parse_method_spec, run_method
    from workbench.store.priors import acceptance_prior

    caution = core.sizing.CAUTION
    configs = {False: (0.0 if args.against_plain else caution, False), True: (caution, True)}  # (CAUTION, PAUSE)
    print(f"{args.dtype}; steps for {args.max_new_tokens} tokens; (caution, pause) {configs[False]} -> {configs[True]}")
    print("| family | method | items | steps, before | steps, after | mean tree before / after | outputs equal |")
    print("|---|---|---|---|---|---|---|")
    for family in args.families.split(",") if args.families else DEFAULT_FAMILIES:
        tasks = family_tasks(family, "evaluation", args.pause_effect)
        for label in args.methods.split(";"):
            name, overrides = parse_method_spec(label)
            prior = acceptance_prior(store, name, target.fingerprint, params=overrides or None, tag=tag)
            params = {**overrides, "max_new_tokens": args.max_new_tokens, "max_nodes": "auto"}
            steps, trees, equal = {True: 0, False: 0}, {True: [], False: []}, 0
            for task in tasks:
                ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
                outputs = {}
                for pause in (False, True):
                    core.sizing.CAUTION, core.sizing.PAUSE = configs[pause]
                    run = run_method(
                        name, target, ids, params, prompt_text=task.input, stop_strings=task.stop, prior=prior
                    )
                    steps[pause] += len(run.steps)
                    trees[pause] += [s.tree_size for s in run.steps]
                    outputs[pause] = run.output_ids
                equal += outputs[True] == outputs[False]
            print(
                f"| {family} | {label} | {len(tasks)} | {steps[False]} | {steps[True]} | "
                f"{np.mean(trees[False]):.1f} / {np.mean(trees[True]):.1f} | {equal}/{len(tasks)} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
