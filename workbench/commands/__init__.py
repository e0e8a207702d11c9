"""The command line, `python -m workbench SUBCOMMAND ...` (also the `workbench` console script).

main.py builds the parser and dispatches; one module per subcommand (models, generate, bench, score,
report, calibrate, store, serve), each with `add_parser(subparsers)` and `run(args)`; common.py holds
the options and helpers they share. Subcommand modules import common, never each other or main.
"""
