"""Many processes, one benchmark: tasks sharded over processes, each with its own model copy, all
writing one trace store, their results merged into the JSON one process would write (bar timings).

- `bench --num-processes N` starts N copies of itself on this machine (torch threads split between
  them) and merges when all have finished; under `accelerate launch` each process reads its rank from
  the environment (RANK / WORLD_SIZE) and rank 0 merges once every shard has finished.
- A shard writes each result as it ends to its own checkpoint (`<out>.shards/shard-K-of-N.jsonl`), so a
  killed shard resumes where it stopped when the same command runs again; a `.done` file marks it
  finished. Merging orders rows as one process orders them (task by task, methods in order).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError, WorkbenchError


@dataclass(frozen=True)
class Shard:
    rank: int
    world: int

    @property
    def label(self) -> str:
        return f"shard-{self.rank}-of-{self.world}"


def parse_shard(text: str) -> Shard:
    """'K/N' (0 <= K < N): the K-th of N shards."""
    rank, sep, world = (text or "").partition("/")
    if not sep or not rank.strip().isdigit() or not world.strip().isdigit():
        raise InvalidInputError(f"--shard {text!r}: write K/N, e.g. 0/2")
    shard = Shard(int(rank), int(world))
    if shard.world < 1 or not 0 <= shard.rank < shard.world:
        raise InvalidInputError(f"--shard {text!r}: K must be in 0..N-1")
    return shard


def shard_from_env(env: Mapping[str, str] | None = None) -> Shard | None:
    """The shard `accelerate launch` (or torchrun) gives this process, or None when it runs alone."""
    env = os.environ if env is None else env
    world = int(env.get("WORLD_SIZE", "1") or 1)
    return Shard(int(env.get("RANK", "0") or 0), world) if world > 1 else None


def shard_tasks(tasks: Sequence[Any], shard: Shard) -> list[Any]:
    """Every N-th task from K: shards of equal size and mix (categories interleave in task files)."""
    return list(tasks[shard.rank :: shard.world])


def shard_dir(out: str | Path) -> Path:
    return Path(str(out) + ".shards")


def checkpoint_path(out: str | Path, shard: Shard) -> Path:
    return shard_dir(out) / f"{shard.label}.jsonl"


def done_path(out: str | Path, shard: Shard) -> Path:
    return shard_dir(out) / f"{shard.label}.done"


def merge_rows(
    tasks: Sequence[Any],
    methods: Sequence[str],
    shard_rows: Sequence[Sequence[Mapping[str, Any]]],
    key=lambda row: (row.get("category") or "", row["id"], row["method"]),
    task_key=lambda task, method: (task.category or "", task.id, method),
) -> list[dict[str, Any]]:
    """The shards' rows in the order one process writes them: task by task, methods in order (greedy first).
    Missing rows are an error: a merge of unfinished shards would give a table no single run gives."""
    by_key = {key(r): dict(r) for rows in shard_rows for r in rows}
    order = list(dict.fromkeys(["greedy", *methods]))
    missing = [task_key(t, m) for t in tasks for m in order if task_key(t, m) not in by_key]
    if missing:
        raise WorkbenchError(
            f"{len(missing)} result(s) missing from the shards (first: {missing[0]}): "
            "run the same command again to finish them"
        )
    return [by_key[task_key(t, m)] for t in tasks for m in order]


def launch(argv: Sequence[str], processes: int, out: str | Path, threads: int | None = None) -> None:
    """Run `python -m workbench bench argv --shard K/N` for K in 0..N-1 on this machine and wait for them all.
    Each child gets threads = cores ÷ N (OMP_NUM_THREADS) unless given, and its own cores when there are
    enough (core_groups): processes that do not share cores do not evict each other's caches. Raises when a shard failed: the
    finished results stay in its checkpoint and the same command resumes."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per = threads or max(1, len(cores) // processes)
    groups = core_groups(cores, processes)
    children = []
    for k in range(processes):
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(per),
            "WORKBENCH_SHARD_THREADS": str(per),
            "WORKBENCH_SHARD_CPUS": ",".join(map(str, groups[k])),
        }
        env.pop("WORLD_SIZE", None)
        env.pop("RANK", None)
        cmd = [sys.executable, "-m", "workbench", "bench", *argv, "--shard", f"{k}/{processes}"]
        children.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if k else None))
    try:
        codes = [c.wait() for c in children]
    except KeyboardInterrupt:
        for c in children:
            c.terminate()
        raise
    failed = [k for k, code in enumerate(codes) if code != 0]
    if failed:
        raise WorkbenchError(
            f"shard(s) {', '.join(map(str, failed))} of {processes} failed (exit codes "
            f"{', '.join(str(codes[k]) for k in failed)}); their finished results are kept in "
            f"{shard_dir(out)}: run the same command again to resume"
        )


def core_groups(cores: Sequence[int], processes: int) -> list[list[int]]:
    """Split the cores into `processes` disjoint groups of equal size; with fewer cores than processes,
    every process may use every core. Pure."""
    if len(cores) < processes:
        return [list(cores)] * processes
    per = len(cores) // processes
    return [list(cores[k * per : (k + 1) * per]) for k in range(processes)]


def pin_to_shard_cores(env: Mapping[str, str] | None = None) -> None:
    """In a child started by `launch`: keep to the cores it was given (no-op elsewhere)."""
    env = os.environ if env is None else env
    cpus = env.get("WORKBENCH_SHARD_CPUS")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def wait_for_shards(out: str | Path, world: int, timeout: float, poll: float = 2.0) -> None:
    """Rank 0 under accelerate launch: wait until every shard has marked itself done (shared --out folder)."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [k for k in range(world) if not done_path(out, Shard(k, world)).exists()]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise WorkbenchError(
                f"shard(s) {pending} did not finish within {timeout:.0f} s; their results stay in "
                f"{shard_dir(out)}: run the command again, or merge later with --merge"
            )
        time.sleep(poll)


def read_shard(out: str | Path, shard: Shard) -> list[dict[str, Any]]:
    """The rows a shard's checkpoint holds (workbench.evaluation.bench.Checkpoint's format)."""
    from workbench.evaluation.bench import read_checkpoint

    return list(read_checkpoint(checkpoint_path(out, shard))[1].values())


def shard_times(out: str | Path, shard: Shard) -> dict[str, float]:
    """What a finished shard wrote in its done mark: its seconds writing the store and its wall seconds."""
    import json

    try:
        return json.loads(done_path(out, shard).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
