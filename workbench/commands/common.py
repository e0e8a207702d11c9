"""What several subcommands share: the model, loading, store and method-parameter options, and
acting on them (loading the models, opening the store). Subcommand modules import this module,
never each other; heavy imports (torch, the store) happen inside the functions that need them."""

from __future__ import annotations

import argparse
import math

from core.params import PARAMS

DTYPE_CHOICES = ["auto", "float32", "bfloat16", "float16"]


def add_load_args(p: argparse.ArgumentParser, dtype_default: str = "auto", dtype_help: str | None = None) -> None:
    """How models load: every command that loads one takes these."""
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cuda, mps or cpu")
    p.add_argument("--dtype", default=dtype_default, choices=DTYPE_CHOICES, help=dtype_help)
    p.add_argument(
        "--trust-remote-code", action="store_true", help="allow a hub model's own Python code (off by default)"
    )
    p.add_argument(
        "--device-map",
        default=None,
        help="spread layers over devices with accelerate: auto, balanced, balanced_low_0, sequential, "
        "or a JSON object / file {module: device} (device: cpu, disk, mps, N or cuda:N); "
        "applies to the target and the draft, each placed on its own",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        help="most each device may hold, per model: cpu=2GiB,0=10GiB (or JSON); implies --device-map auto",
    )
    p.add_argument(
        "--offload-folder",
        default=None,
        help="allow disk offload (slow) of what does not fit, with weights kept in this folder",
    )


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The target and draft models, how they load, and how their runs are stored."""
    # The default is resolved in load_models: naming it here would import core.models (and torch) for --help.
    p.add_argument(
        "--model",
        default=None,
        help="preset, local folder, .gguf file or hub id (default: the default preset, marked in `models list`)",
    )
    p.add_argument(
        "--draft", default=None, help="draft model for draft-model methods (must share the target's tokenizer)"
    )
    add_load_args(p)
    p.add_argument("--no-store", action="store_true", help="do not keep the run's trace in the store")
    p.add_argument(
        "--tag", action="append", default=[], help="label the stored run(s) (repeatable; `store list --tag`)"
    )


def add_db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        default=None,
        help="trace store: a SQLAlchemy URL or a SQLite file (default: $WORKBENCH_DB, else <home>/traces.db)",
    )


INT64_MAX = 2**63 - 1  # what SQLite, PostgreSQL's BIGINT and torch's seeds hold


def number_type(kind: type, name: str, names=None, low: float | None = None, high: float | None = None):
    """argparse's type for a parameter: an int, or a finite float (NaN passes every range check and makes
    invalid JSON, so it is refused here, as is infinity); or one of the parameter's words (`auto`, `frozen`).
    `low`..`high` bound the value (an int is always held to 64 bits: a bigger one overflows the store and torch)."""
    if kind is int:
        low = -INT64_MAX - 1 if low is None else low
        high = INT64_MAX if high is None else high

    def parse(text: str):
        if names and text.strip() in names:
            return names[text.strip()]
        if len(text) > 100:  # int() of thousands of digits is slow, then refused anyway
            raise argparse.ArgumentTypeError(
                f"a value of {len(text):,} characters is not a{'n integer' if kind is int else ' number'} in range"
            )
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {_bound(low)}..{_bound(high)}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _bound(value: float | None) -> str:
    if value is None:
        return ""
    return "2**63-1" if value == INT64_MAX else "-2**63" if value == -INT64_MAX - 1 else f"{value:g}"


def integer(name: str, low: int = 1, high: int = INT64_MAX):
    """argparse's type for a count or an id: an integer in low..high (a run id is at least 1 and fits 64 bits)."""
    return number_type(int, name, low=low, high=high)


RUN_ID = integer("run id")


def add_param_args(p: argparse.ArgumentParser) -> None:
    """One option per method parameter (core.params.PARAMS), unset unless given."""
    g = p.add_argument_group("method parameters (defaults depend on the method)")
    for spec in PARAMS.values():
        words = f"; or {', '.join(spec.names)}" if spec.names else ""
        g.add_argument(
            f"--{spec.name.replace('_', '-')}",
            dest=spec.name,
            type=number_type(spec.kind, spec.name, spec.names),
            default=None,
            help=f"{spec.help} (range {spec.low}..{spec.high}{words})",
        )


PROMPT_FILE_BYTES = 16 << 20  # --prompt-file and --context-file: far more than a model's context holds


def read_text_file(path: str, option: str) -> str:
    """A UTF-8 text file named by `option` (core.files: missing, a folder, a FIFO or device, over 16 MiB or not
    UTF-8 is an InvalidInputError), checked as a prompt (no lone surrogate, at most core.files.MAX_PROMPT_CHARS)."""
    from core.files import MAX_PROMPT_CHARS, check_text, read_text

    return check_text(
        read_text(path, what=option, max_bytes=PROMPT_FILE_BYTES), what=f"{option} {path}", max_chars=MAX_PROMPT_CHARS
    )


def check_writable(path: str, option: str) -> None:
    """Fail before a long run if `path` cannot be written: a folder, a symbolic link, a FIFO or device, a
    path under a file, or an unwritable folder (an existing regular file is replaced at the end)."""
    from core.files import check_output

    check_output(path, what=option, force=True)


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    """What every command that decodes takes: models, method parameters, the store."""
    add_model_args(p)
    add_param_args(p)
    add_db_arg(p)


def add_compress_args(p: argparse.ArgumentParser) -> None:
    """--compress RATE, --compressor NAME, --compressor-model M (generate, bench, report)."""
    g = p.add_argument_group("prompt compression (CASD; docs/COMPRESSION.md)")
    g.add_argument(
        "--compress",
        type=number_type(float, "compress"),
        default=None,
        metavar="RATE",
        help="keep this fraction (0 < RATE <= 1) of the context's tokens; the instruction and question stay whole. "
        "Context-drafting methods draft from the full context (method[pool=compressed]: from the compressed prompt)",
    )
    g.add_argument(
        "--compressor",
        default=None,
        help="selfinfo (built in, offline; default), selfinfo[layers=K] (scored by the first K decoder layers: "
        "early exit, cheaper), selfinfo[unit=sentence] (keeps whole sentences), llmlingua (the llmlingua package) "
        "or llmlingua2 (LLMLingua-2's token classifier; needs the network once, for tiktoken's BPE file and the "
        "classifier from the hub, or a local classifier folder in WORKBENCH_LLMLINGUA2_MODEL)",
    )
    g.add_argument(
        "--compressor-model",
        default=None,
        help="the small causal LM the compressor scores with (default: the target model itself)",
    )


def add_exec_args(p: argparse.ArgumentParser) -> None:
    """--execute-code (HumanEval: run the completions in the sandbox) and --unsafe-exec (without one)."""
    p.add_argument(
        "--execute-code",
        action="store_true",
        help="score HumanEval-style tasks (test, entry_point) by running the completions in the bubblewrap sandbox",
    )
    p.add_argument(
        "--unsafe-exec",
        nargs="?",
        const=True,
        default=False,
        type=_unsafe_exec,
        metavar="root",
        help="with --execute-code where bubblewrap is missing: run model-written code in plain subprocesses "
        "(no isolation; only for code you trust); as root it is refused unless given as "
        "--unsafe-exec=root, and the code then runs as the user nobody",
    )


def _unsafe_exec(text: str) -> str:
    if text != "root":
        raise argparse.ArgumentTypeError(f"{text!r}: --unsafe-exec takes no value, or =root (to allow it as root)")
    return text


def task_scorer(args: argparse.Namespace):
    """score_task as --execute-code and --unsafe-exec say, the sandbox checked now (before any model loads)."""
    from workbench.evaluation.scores import score_task

    if args.execute_code:
        from workbench.evaluation.sandbox import check_sandbox

        check_sandbox(unsafe=args.unsafe_exec)

    def scorer(task, text):
        return score_task(task, text, execute_code=args.execute_code, unsafe_exec=args.unsafe_exec)

    return scorer


def params_from(args: argparse.Namespace) -> dict:
    """The method parameters given on the command line (by name), leaving out those not given."""
    return {name: getattr(args, name) for name in PARAMS if getattr(args, name, None) is not None}


def benchmark_params(args: argparse.Namespace) -> dict:
    """params_from for bench and report: CSD's memory frozen unless --memory-mode online is given, so a
    method's results do not depend on the tasks that ran before it (the papers' tables are per item)."""
    return {"memory_mode": 1, **params_from(args)}


def quiet_libraries(verbose: bool) -> None:
    """transformers' progress bars ("Loading weights: 42%|████") are its own business, not the command's output:
    off unless --verbose (its own switch, so its warnings and errors still print). Called where models load, not at
    start-up, so a command that fails on its input first never imports transformers."""
    from transformers.utils import logging as hf_logging

    if verbose:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()


def load_models(args: argparse.Namespace):
    """(target, draft or None) as --model, --draft, --device, --dtype and --trust-remote-code say; the pair is checked."""
    from core.models import DEFAULT_MODEL, check_pair, load_model

    quiet_libraries(getattr(args, "verbose", False))
    from core.placement import placement_from_args

    placement = placement_from_args(
        getattr(args, "device_map", None), getattr(args, "max_memory", None), getattr(args, "offload_folder", None)
    )
    how = {
        "device": args.device,
        "dtype": args.dtype,
        "trust_remote_code": args.trust_remote_code,
        "placement": placement,
    }
    target = load_model(args.model or DEFAULT_MODEL, **how)
    draft = None
    if args.draft:
        draft = load_model(args.draft, **how)
        check_pair(target, draft)
    return target, draft


def open_store(args: argparse.Namespace):
    """The trace store, opened before any model loads so a bad --db fails fast; None with --no-store."""
    if getattr(args, "no_store", False):
        return None
    from workbench.store import Store

    return Store(args.db)
