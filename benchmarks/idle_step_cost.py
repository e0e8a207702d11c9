"""The methods' own work per run on steps that draft nothing: draft + verify + bookkeeping ms over a whole run,
beside greedy's, on a few items (the best of three runs each; the forward is left out). It is what change 15 of
docs/AUTOMATIC_SETTINGS.md measured before and after (section "Steps that draft nothing cost what greedy's does").

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/idle_step_cost.py results/gate_f32_avx2_lockstep/prior.db

The argument is a bench_auto_size output's prior.db (its stored held-out runs give each method's acceptance prior).
SmolLM2-135M float32, 64 new tokens, max_nodes=auto. Compare each method with the greedy printed beside it: the
machine's speed drifts between runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ITEMS = [("rag", "508"), ("rag", "510"), ("code", "code-evaluation-030"), ("writing", "sharegpt-4FCMpJR_0")]
METHODS = ["greedy", "recycle", "aasd-strict", "casd[delta=0.5]"]
PRIOR_TAG = "auto-size-prior:float32"  # bench_auto_size's tag for float32 priors


def main(prior_db: str) -> None:
    import torch

    from core.models import encode_prompt, load_model
    from workbench.evaluation.families import family_tasks
    from workbench.methods import parse_method_spec, run_method
    from workbench.store.priors import acceptance_prior
    from workbench.store.repository import Store

    torch.set_num_threads(1)
    target = load_model("smollm2-135m", dtype="float32")
    store = Store(f"sqlite:///{prior_db}")
    for family, item in ITEMS:
        task = next(t for t in family_tasks(family, "evaluation", 40) if str(t.id) == item)
        ids = encode_prompt(target.tokenizer, task.prompt(), chat=task.chat)
        for label in METHODS:
            name, overrides = parse_method_spec(label)
            prior = (
                None
                if name == "greedy"
                else acceptance_prior(store, name, target.fingerprint, params=overrides or None, tag=PRIOR_TAG)
            )
            params = {**overrides, "max_new_tokens": 64, **({} if name == "greedy" else {"max_nodes": "auto"})}
            best = None
            for _ in range(3):
                run = run_method(name, target, ids, params, prompt_text=task.input, stop_strings=task.stop, prior=prior)
                own = sum(s.draft_ms + s.verify_ms + s.bookkeeping_ms for s in run.steps)
                if best is None or own < best[0]:
                    best = (own, run.steps)
            own, steps = best
            print(
                f"{family} {item} {label:18s} steps {len(steps)} own work {own:7.2f} ms "
                f"(draft {sum(s.draft_ms for s in steps):.2f}, verify {sum(s.verify_ms for s in steps):.2f}, "
                f"bookkeeping {sum(s.bookkeeping_ms for s in steps):.2f}; first step's draft {steps[0].draft_ms:.2f})",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit("usage: python benchmarks/idle_step_cost.py <bench_auto_size output>/prior.db")
    main(sys.argv[1])
