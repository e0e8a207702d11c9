"""Many processes, one benchmark (issue 21, item 3): sharding and merging as pure functions, and
`bench --num-processes 2` on SmolLM2 giving one process's texts, with a killed shard resuming."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core.errors import WorkbenchError
from workbench.evaluation import shards


def test_shards_come_from_the_flag_or_the_launcher():
    assert shards.parse_shard("1/3") == shards.Shard(1, 3)
    for bad in ("3/3", "1", "a/2", "0/0", "-1/2"):
        with pytest.raises(WorkbenchError):
            shards.parse_shard(bad)
    assert shards.shard_from_env({"RANK": "1", "WORLD_SIZE": "2"}) == shards.Shard(1, 2)
    assert shards.shard_from_env({"WORLD_SIZE": "1"}) is None and shards.shard_from_env({}) is None


def test_every_task_lands_in_exactly_one_shard():
    tasks = list(range(11))
    parts = [shards.shard_tasks(tasks, shards.Shard(k, 3)) for k in range(3)]
    assert sorted(sum(parts, [])) == tasks and [len(p) for p in parts] == [4, 4, 3]


def test_merge_orders_rows_as_one_process_and_refuses_missing_ones():
    tasks = [SimpleNamespace(id=str(i), category="c") for i in range(3)]
    row = lambda i, m: {"id": str(i), "category": "c", "method": m}  # noqa: E731
    shard0 = [row(2, "pld"), row(0, "pld"), row(0, "greedy"), row(2, "greedy")]
    shard1 = [row(1, "pld"), row(1, "greedy")]
    merged = shards.merge_rows(tasks, ["pld"], [shard0, shard1])
    assert [(r["id"], r["method"]) for r in merged] == [(str(i), m) for i in range(3) for m in ("greedy", "pld")]
    with pytest.raises(WorkbenchError, match="1 result.*missing.*again"):
        shards.merge_rows(tasks, ["pld"], [shard0, shard1[:1]])


def test_the_parent_passes_its_arguments_on_without_num_processes():
    from workbench.commands.bench import _without

    argv = ["bench", "--data", "x", "--num-processes", "2", "--out", "o", "--num-processes=3"]
    assert _without(argv, "--num-processes") == ["bench", "--data", "x", "--out", "o"]


@pytest.mark.real_model
@pytest.mark.slow  # three SmolLM2 loads and two runs of 8 decodes in subprocesses: minutes on a busy machine
def test_two_processes_give_one_process_texts_and_a_killed_shard_resumes(smollm2, spec_bench, tmp_path):
    from workbench.commands.main import main
    from workbench.store import Store

    base = [
        "bench",
        "--data",
        str(spec_bench),
        "--categories",
        "summarization,rag",
        "--limit",
        "2",
        "--methods",
        "greedy,pld",
        "--max-new-tokens",
        "8",
        "--model",
        "smollm2-135m",
        "--dtype",
        "float32",
    ]
    assert main([*base, "--out", str(tmp_path / "one.json"), "--db", str(tmp_path / "one.db")]) == 0
    two = tmp_path / "two.json"
    db = tmp_path / "two.db"
    assert main([*base, "--out", str(two), "--db", str(db), "--num-processes", "2"]) == 0
    one_rows = json.loads((tmp_path / "one.json").read_text())["tasks"]
    two_result = json.loads(two.read_text())
    strip = lambda rows: [(r["id"], r["method"], r["token_ids"], r["score"]) for r in rows]  # noqa: E731
    assert strip(two_result["tasks"]) == strip(one_rows)
    assert two_result["config"]["processes"] == 2
    assert len(Store(str(db)).list_runs()) == len(one_rows) == 8  # every shard wrote the one store

    # a killed shard: its last result and its done mark are gone; the same command finishes it
    path = shards.checkpoint_path(two, shards.Shard(1, 2))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # cut mid-line, as a kill does
    shards.done_path(two, shards.Shard(1, 2)).unlink()
    two.unlink()
    assert main([*base, "--out", str(two), "--db", str(db), "--num-processes", "2"]) == 0
    assert strip(json.loads(two.read_text())["tasks"]) == strip(one_rows)
    assert len(Store(str(db)).list_runs()) == 9  # only the lost run ran again


def test_core_groups_give_each_process_its_own_cores():
    from workbench.evaluation.shards import core_groups, pin_to_shard_cores

    assert core_groups([0, 1], 2) == [[0], [1]]
    assert core_groups([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    assert core_groups([3], 2) == [[3], [3]]  # fewer cores than processes: they share
    pin_to_shard_cores({})  # no cores given: nothing happens
