"""`python -m workbench ...` and the `workbench` console script: the parser and the dispatch."""

from __future__ import annotations

import argparse
import sys

from core.errors import WorkbenchError
from workbench.commands import bench, calibrate, generate, models, report, score, serve, store

SUBCOMMANDS = (models, generate, bench, score, report, calibrate, store, serve)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Training-free speculative decoding, step by step.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        p = command.add_parser(sub)
        if p is not None:
            p.add_argument(
                "--verbose",
                action="store_true",
                help="also print the libraries' progress bars (transformers' weight loading), off by default",
            )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # as given: `bench --num-processes` starts copies of itself with it
    try:
        return args.func(args)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
