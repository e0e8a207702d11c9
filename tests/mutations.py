"""Mutation check: do the default-run tests catch a broken decoder? Each mutation below removes one guard
the methods rely on from a temporary copy of the repository, and the tests named for it must then fail
(and pass on the unmutated copy). docs/TESTING.md lists the mutations and the tests that catch them.

    python tests/mutations.py                 # every mutation (a few minutes on 2 cores)
    python tests/mutations.py --only csd-gate # one
    python tests/mutations.py --list

A mutation is a literal edit of the source (old text -> new text, which must occur exactly once); when the
code it edits is rewritten the script says which pattern no longer applies, so the list is kept current
rather than silently skipped. Exit code 0 when every mutation was caught.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]  # alternatives (file, old, new): the first whose old text is there
    tests: tuple[str, ...]  # pytest node ids that must fail under the mutation


MUTATIONS = (
    Mutation(
        "bonus-transfer",
        "the bonus token's trace record reads its p and rank from the device even at T = 0, where "
        "its row's argmax numbers already hold them",
        (("core/target_stats.py", "        if token == self.row_argmax[row]:", "        if False:"),),
        ("tests/test_transfers.py::test_a_tree_step_at_t0_reads_the_device_once",),
    ),
    Mutation(
        "threshold-tie",
        "gamma=auto's threshold sweep breaks cost ties towards the highest cut instead of the lowest",
        (
            (
                "core/drafters/draft_model.py",
                "p[first[int(np.argmin(cost))]]",
                "p[first[len(cost) - 1 - int(np.argmin(cost[::-1]))]]",
            ),
        ),
        ("tests/test_sd.py::test_the_sorted_threshold_sweep_returns_the_quadratic_sweeps_threshold",),
    ),
    Mutation(
        "eos-guard",
        "the engine computes every node's statistics without the EOS ids, so p(EOS) is 0 and CASD's "
        "threshold max(δ, p(EOS)) is δ alone (the probe's mutation)",
        (
            (
                "core/step.py",
                "stats = step_stats(logits, proposal.tree, env.eos_ids,",
                "stats = step_stats(logits, proposal.tree, (),",
            ),
        ),
        ("tests/test_trace_truth.py::test_casd_thresholds_are_max_of_delta_and_the_targets_own_p_eos",),
    ),
    Mutation(
        "eos-guard-rule",
        "CASD's rule drops p(EOS) from its threshold (δ alone), the statistics left right",
        (("core/rules.py", "threshold = max(delta, n.p_eos)", "threshold = delta"),),
        ("tests/test_trace_truth.py::test_casd_thresholds_are_max_of_delta_and_the_targets_own_p_eos",),
    ),
    Mutation(
        "eos-prune",
        "draft nodes at or below an EOS token are no longer pruned from the trees",
        (("core/step.py", "proposal.tree.pruned(depth, env.eos)", "proposal.tree.pruned(depth, frozenset())"),),
        ("tests/test_engine.py::test_no_draft_node_at_or_below_eos",),
    ),
    Mutation(
        "alignment-budget",
        "alignment siblings lose their own share of the node budget (the retrieved hits may take all of it)",
        (
            (
                "core/drafters/context.py",
                "share = min(_new_prefixes(aligned, candidates), math.ceil(self.max_nodes * ALIGN_SHARE)) if aligned else 0",
                "share = 0",
            ),
        ),
        ("tests/test_drafters.py::test_alignment_siblings_have_their_own_share_of_the_budget",),
    ),
    Mutation(
        "source-rule",
        "AASD's relaxed rule judges generated-text nodes too (it must relax only context and alignment nodes)",
        (("core/rules.py", '"generated": strict', '"generated": relaxed'),),
        ("tests/test_trace_truth.py::test_aasd_relaxes_only_context_and_alignment_nodes_by_the_targets_own_entropy",),
    ),
    Mutation(
        "csd-gate",
        "CSD rescues every frequent pair, whatever the gate z(x) − z(t*) ≥ log τ says",
        (("core/rules.py", "is_safe = gap >= log_tau", "is_safe = True"),),
        ("tests/test_trace_truth.py::test_csd_rescues_exactly_when_the_memory_and_the_targets_own_gap_allow",),
    ),
)


def copy_repository(dest: Path) -> None:
    """The tracked and new (not ignored) files of the working tree, as they are now."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


def apply(copy: Path, mutation: Mutation) -> str:
    """Edit the copy; the edit made, or raise when no alternative's old text occurs exactly once."""
    for file, old, new in mutation.edits:
        path = copy / file
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if text.count(old) == 1:
            path.write_text(text.replace(old, new), encoding="utf-8")
            return f"{file}: {old!r} -> {new!r}"
    raise SystemExit(
        f"mutation {mutation.name}: none of its patterns occurs exactly once any more "
        f"({'; '.join(f'{f}: {o!r}' for f, o, _ in mutation.edits)}): update tests/mutations.py"
    )


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    return out.returncode, (out.stdout + out.stderr).strip().splitlines()[-1] if (
        out.stdout + out.stderr
    ).strip() else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only this mutation (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list or not chosen:
        for m in MUTATIONS:
            print(f"{m.name}: {m.what}\n    caught by {', '.join(m.tests)}")
        return 0 if chosen or args.list else 2
    missed = []
    with tempfile.TemporaryDirectory(prefix="wb-mutations-") as tmp:
        for m in chosen:
            copy = Path(tmp) / m.name
            copy_repository(copy)
            start = time.monotonic()
            code, last = run_tests(copy, m.tests)
            if code != 0:
                print(f"{m.name}: the named tests fail WITHOUT the mutation ({last}); fix them first")
                missed.append(m.name)
                continue
            edit = apply(copy, m)
            code, last = run_tests(copy, m.tests)
            caught = code == 1  # pytest's "tests failed" (2-5 are usage, collection or internal errors)
            print(
                f"{m.name}: {'caught' if caught else 'NOT CAUGHT'} ({last}; {time.monotonic() - start:.0f} s)\n    {edit}"
            )
            if not caught:
                missed.append(m.name)
            shutil.rmtree(copy, ignore_errors=True)
    print(
        f"{len(chosen) - len(missed)} of {len(chosen)} mutations caught"
        + (f"; missed: {', '.join(missed)}" if missed else "")
    )
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
