"""`python -m workbench models list|fetch NAME...`: the embedded model presets."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("models", help="list or fetch the embedded model presets")
    p.add_argument("action", choices=["list", "fetch"])
    p.add_argument("names", nargs="*", help="presets to fetch")
    p.add_argument("--force", action="store_true", help="fetch again even if present")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from core.models import DEFAULT_MODEL, PRESETS, fetch_preset, is_fetched, preset_path

    if args.action == "list":
        for name in PRESETS:
            state = (
                f"fetched at {preset_path(name)}"
                if is_fetched(name)
                else f"not fetched (python -m workbench models fetch {name})"
            )
            print(f"{name:22s} {state}" + ("  (default)" if name == DEFAULT_MODEL else ""))
        return 0
    for name in args.names or []:
        path = fetch_preset(name, force=args.force)
        print(f"{name}: ready at {path}")
    return 0
