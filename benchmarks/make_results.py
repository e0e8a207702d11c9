"""docs/RESULTS.md in one command: the papers' tables measured here, beside the papers' own numbers.

    python benchmarks/make_results.py [--limit 20] [--pair-limit N] [--pair-max-new-tokens 256] [--longbench hub|PATH] [--dtype auto] [--skip-pair]

1. SmolLM2-135M (the embedded default): AASD's Tables 1, 2, 4, 5 and CASD's Table 1 with Oracle-D/-S
   and the δ sweep (`report --tables aasd,casd`), on LongBench when `--longbench` names it (`hub`, or
   a local JSON Lines file with LongBench's fields), else on Spec-Bench's summarization and rag rows
   and the bundled samples (assets/samples.jsonl).
2. The Qwen2.5-Coder 1.5B target with its 0.5B draft: CSD's Tables 1 and 3 (`report --tables csd
   --execute-code`) on GSM8K (Spec-Bench's math_reasoning rows), HumanEval and CNN/DailyMail
   (Spec-Bench's summarization rows). The models are fetched and the correction memory calibrated
   (`calibrate --limit 200`, on ShareGPT prompts disjoint from these items) when missing.
3. docs/RESULTS.md: both reports under one heading; each states its model, hardware and data against
   the papers'.

Every run is resumable (results/report/<name>/checkpoint.jsonl): after an interruption run the same
command again and it continues where it stopped; RESULTS.md is written from the checkpoints alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.commands.main import main as workbench  # noqa: E402
from workbench.evaluation.report import DEFAULT_DATA  # noqa: E402

SMOL = "smollm2-135m"
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"


def call(argv: list[str]) -> None:
    print("$ python -m workbench " + " ".join(argv), file=sys.stderr)
    code = workbench(argv)
    if code != 0:
        sys.exit(
            f"python -m workbench {argv[0]} failed (exit {code}); fix the cause and run this script again: it resumes"
        )


def calibrated(target: str, draft: str) -> bool:
    """Whether a calibrated correction memory of this pair is on disk (read from the files' metadata, no model loaded)."""
    from core.memory import memory_dir

    for path in Path(memory_dir()).glob("*.json"):
        try:
            meta = json.loads(path.read_text(encoding="utf-8")).get("meta") or {}
        except (OSError, ValueError):
            continue
        if meta.get("target") == target and meta.get("draft") == draft and meta.get("calibration"):
            return True
    return False


def demote(markdown: str) -> str:
    """One heading level down, so each report becomes a section of RESULTS.md."""
    return re.sub(r"^(#+) ", r"#\1 ", markdown, flags=re.MULTILINE)


def figures_section(source: Path, target: Path) -> str:
    """Copy the δ-sweep PNGs next to RESULTS.md and return the markdown that shows them ('' when none)."""
    names = [("delta_sweep_score.png", "Score against δ"), ("delta_sweep_mal.png", "MAL against δ")]
    present = [(n, alt) for n, alt in names if (source / n).exists()]
    if not present:
        return ""
    target.mkdir(parents=True, exist_ok=True)
    for n, _ in present:
        shutil.copyfile(source / n, target / n)
    return "\n".join(
        [
            f"### CASD δ sweep figures ({SMOL}, the run above)",
            "",
            *[f"![{alt}]({target.name}/{n})" for n, alt in present],
            "",
            f"The figures are copied from `{source.relative_to(ROOT) if source.is_relative_to(ROOT) else source}`, "
            "which also holds interactive HTML versions.",
            "",
        ]
    )


KEEP_MARKER = (
    "<!-- sections below come from other benchmarks (their commands are in each); make_results.py keeps them -->"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=20, help="tasks per dataset (default 20)")
    ap.add_argument(
        "--seed", type=int, default=None, help="draw the tasks at random with this seed (default: the first ones)"
    )
    ap.add_argument(
        "--longbench", default=None, help="'hub' (needs `datasets` and the network) or a LongBench JSON Lines file"
    )
    ap.add_argument(
        "--max-new-tokens", type=int, default=None, help="cap the SmolLM2 generations (default: each dataset's length)"
    )
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-pair", action="store_true", help="leave out the Qwen pair (CSD tables)")
    ap.add_argument(
        "--pair-limit",
        type=int,
        default=None,
        help="tasks per dataset for the Qwen pair (default: --limit); on a CPU each pair task costs minutes",
    )
    ap.add_argument(
        "--pair-max-new-tokens",
        type=int,
        default=256,
        help="generation length for the pair (default 256: GSM8K's worked answers and HumanEval bodies need it; "
        "--max-new-tokens caps the SmolLM2 part only)",
    )
    ap.add_argument("--out", default=str(ROOT / "results" / "report"))
    ap.add_argument("--results", default=str(ROOT / "docs" / "RESULTS.md"))
    ap.add_argument("--db", default=None, help="trace store for the runs (default: the workbench's)")
    args = ap.parse_args()

    common = ["--dtype", args.dtype, "--device", args.device]
    common += ["--seed", str(args.seed)] if args.seed is not None else []
    common += ["--db", args.db] if args.db else []
    if args.longbench == "hub":
        smol_data = list(DEFAULT_DATA["aasd"])
    elif args.longbench:
        smol_data = [f"longbench@{args.longbench}"]
    else:
        smol_data = ["spec-bench:summarization,rag", "samples"]

    smol_out = Path(args.out) / SMOL
    smol_len = ["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else []
    call(
        [
            "report",
            "--tables",
            "aasd,casd",
            "--model",
            SMOL,
            "--limit",
            str(args.limit),
            *smol_len,
            *[x for d in smol_data for x in ("--data", d)],
            "--out",
            str(smol_out),
            "--title",
            f"AASD and CASD on {SMOL}",
            *common,
        ]
    )
    sections = [demote((smol_out / "report.md").read_text(encoding="utf-8"))]
    sections.append(figures_section(smol_out / "figures", Path(args.results).parent / "figures"))

    if not args.skip_pair:
        from core.models import is_fetched

        missing = [m for m in (TARGET, DRAFT) if not is_fetched(m)]
        if missing:
            call(["models", "fetch", *missing])
        if not calibrated(TARGET, DRAFT):
            call(
                [
                    "calibrate",
                    "--model",
                    TARGET,
                    "--draft",
                    DRAFT,
                    "--limit",
                    "200",
                    "--dtype",
                    args.dtype,
                    "--device",
                    args.device,
                ]
            )
        pair_out = Path(args.out) / "qwen2.5-coder-pair"
        call(
            [
                "report",
                "--tables",
                "csd",
                "--model",
                TARGET,
                "--draft",
                DRAFT,
                "--execute-code",
                "--data",
                "gsm8k",
                "--data",
                "humaneval",
                "--data",
                "spec-bench:summarization",
                "--out",
                str(pair_out),
                "--title",
                f"CSD on {TARGET} with the {DRAFT} draft",
                "--limit",
                str(args.pair_limit or args.limit),
                "--max-new-tokens",
                str(args.pair_max_new_tokens),
                *common,
            ]
        )
        sections.append(demote((pair_out / "report.md").read_text(encoding="utf-8")))

    command = "python benchmarks/make_results.py " + " ".join(sys.argv[1:])
    body = [
        "# Results: the papers' tables, measured here",
        "",
        f"Produced by `{command.strip()}` (see docs/REPORT.md). Each section states the model, hardware and data it was "
        "measured with, and then sets every measured table beside the paper's. The papers ran 8B to 72B models on "
        "A100/H20 GPUs over full datasets; these runs use small models on the CPU of this machine over a subset of each "
        "dataset, so absolute scores and tokens/s differ by design. What carries over is the ordering of the methods, "
        "their speed-up over greedy decoding in the same run and MAL.",
        "",
    ]
    body += sections
    results = Path(args.results)
    if results.exists():  # the sections other benchmarks measured (issues 18, 19, 21) stay as they are
        old = results.read_text(encoding="utf-8")
        if KEEP_MARKER in old:
            body += ["", old[old.index(KEEP_MARKER) :]]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("\n".join(body), encoding="utf-8")
    print(f"wrote {args.results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
