"""Benchmarks that score: `bench` fills every `score` of its JSON, and `score` re-scores saved outputs
without a model to the same numbers. The reference numbers here are computed independently, from
LongBench's own definitions (metrics.py: qa_f1_score, code_sim_score; eval.py: max over the answers,
mean ×100), not with workbench.evaluation.scores."""

from __future__ import annotations

import json
import re
import string
from collections import Counter

import pytest
from rapidfuzz import fuzz

from workbench.commands.main import main

LCC_TEMPLATE = "Please complete the code given below. \n{context}Next line of code:\n"  # LongBench's, without {input}
HOTPOTQA_TEMPLATE = (
    "Answer the question based on the given passages. Only give me the answer and do not output any other words."
    "\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only "
    "give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"
)


# ---- LongBench's metrics, written out again from its metrics.py and eval.py ------------------------


def longbench_normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def longbench_qa_f1(prediction: str, ground_truth: str) -> float:
    pred, truth = longbench_normalize(prediction).split(), longbench_normalize(ground_truth).split()
    num_same = sum((Counter(pred) & Counter(truth)).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred), num_same / len(truth)
    return 2 * precision * recall / (precision + recall)


def longbench_code_sim(prediction: str, ground_truth: str) -> float:
    first = ""
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            first = line
            break
    return fuzz.ratio(first, ground_truth) / 100


def longbench_scores(rows: list[dict], tasks: dict[str, dict]) -> dict[str, float]:
    """Per method: the mean over its outputs of the best score against the task's answers, ×100."""
    per_method: dict[str, list[float]] = {}
    for r in rows:
        task = tasks[r["id"]]
        metric = longbench_code_sim if task["kind"] == "code" else longbench_qa_f1
        per_method.setdefault(r["method"], []).append(100 * max(metric(r["text"], a) for a in task["answers"]))
    return {m: sum(v) / len(v) for m, v in per_method.items()}


# ---- files -----------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def longbench_file(path, answers: dict[str, list[str]]):
    """Up to two lcc-style rows (the project's task format with LongBench's lcc template: no {input}) and two
    LongBench rows as LongBench ships them (hotpotqa: dataset, _id, input, context, answers): those `answers` names."""
    code = 'import os\n\ndef load(path):\n    cfg = {"a": 1}\n    with open(path) as fh:\n'
    rows = [
        {
            "id": "lcc-1",
            "task": "code",
            "input": "",
            "context": code,
            "answers": answers.get("lcc-1"),
            "template": LCC_TEMPLATE,
            "chat": False,
            "category": "lcc",
        },
        {
            "id": "lcc-2",
            "task": "code",
            "input": "",
            "context": "def add(a, b):\n",
            "answers": answers.get("lcc-2"),
            "template": LCC_TEMPLATE,
            "chat": False,
            "category": "lcc",
        },
        {
            "_id": "hq-1",
            "dataset": "hotpotqa",
            "input": "Who wrote the novel?",
            "context": "Passage 1: Ann Lee wrote the novel.",
            "answers": answers.get("hq-1"),
            "length": 7,
            "language": "en",
            "all_classes": None,
        },
        {
            "_id": "hq-2",
            "dataset": "hotpotqa",
            "input": "Where is the tower?",
            "context": "Passage 1: The tower is in Paris.",
            "answers": answers.get("hq-2"),
            "length": 7,
            "language": "en",
            "all_classes": None,
        },
    ]
    rows = [r for r in rows if (r.get("id") or r["_id"]) in answers]  # the rows `answers` names
    return write_jsonl(path, rows), {
        r.get("id") or r["_id"]: {"kind": "code" if "template" in r else "qa", "answers": r["answers"]} for r in rows
    }


def bench(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["bench", "--no-store", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def score(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["score", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def score_column(table: str) -> dict[str, str]:
    """method -> the printed score cell of format_table's Markdown."""
    lines = [line.strip("|").split("|") for line in table.strip().splitlines() if line.startswith("|")]
    col = [c.strip() for c in lines[0]].index("score")
    return {cells[0].strip(): cells[col].strip() for cells in lines[2:]}


# ---- on the tiny random model (no download) ----------------------------------------------------------


@pytest.fixture
def tiny_cli(tiny, monkeypatch):
    """`bench` on the tiny random model: its tokenizer stand-in reads text as character codes and writes ids as `tN`."""
    import workbench.evaluation.bench as bench_module
    from workbench.commands import common

    monkeypatch.setattr(common, "load_models", lambda args: (tiny, None))
    monkeypatch.setattr(
        bench_module, "encode_prompt", lambda tok, text, chat=None: [3 + (ord(c) % 60) for c in text][-40:]
    )
    return tiny


def test_bench_scores_a_longbench_file_as_longbench_does_and_score_reproduces_it(tiny_cli, tmp_path, capsys):
    # First run: what the model writes (the tiny model is deterministic); then references that partly match it.
    first, _ = longbench_file(tmp_path / "draft.jsonl", {k: ["unused"] for k in ("lcc-1", "lcc-2", "hq-1", "hq-2")})
    assert (
        bench(capsys, "--data", first, "--methods", "pld", "--max-new-tokens", 8, "--out", tmp_path / "first.json")[0]
        == 0
    )
    texts = {
        r["id"]: r["text"]
        for r in json.loads((tmp_path / "first.json").read_text())["tasks"]
        if r["method"] == "greedy"
    }
    words = {k: v.split() for k, v in texts.items()}
    answers = {
        "lcc-1": [texts["lcc-1"][:-3] + "xy", "nothing alike"],
        "lcc-2": ["t1 t2 t3"],
        "hq-1": [" ".join(words["hq-1"][:2] + ["extra"]), "other"],
        "hq-2": ["The " + words["hq-2"][-1] + "!"],
    }
    data, tasks = longbench_file(tmp_path / "lb.jsonl", answers)

    code, table, _ = bench(
        capsys, "--data", data, "--methods", "pld", "--max-new-tokens", 8, "--out", tmp_path / "bench.json"
    )
    assert code == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert {r["id"] for r in result["tasks"]} == set(tasks) and all(r["score"] is not None for r in result["tasks"])
    expected = longbench_scores(result["tasks"], tasks)
    assert set(result["methods"]) == {"greedy", "pld"}
    for method, value in expected.items():
        assert 0 < value < 100  # neither all wrong nor all right: the comparison means something
        assert result["methods"][method]["score"] == pytest.approx(value, abs=0.5)
    for r in result["tasks"]:  # and per task
        t = tasks[r["id"]]
        metric = longbench_code_sim if t["kind"] == "code" else longbench_qa_f1
        assert r["score"] == pytest.approx(100 * max(metric(r["text"], a) for a in t["answers"]), abs=0.5)

    # `score` on the first run's outputs (the same texts) with the new references: the same numbers, no model
    code, rescored_table, err = score(
        capsys, "--results", tmp_path / "first.json", "--data", data, "--out", tmp_path / "scored.json"
    )
    assert code == 0 and "scored 8 of 8 outputs" in err
    scored = json.loads((tmp_path / "scored.json").read_text())
    assert {m: s["score"] for m, s in scored["methods"].items()} == pytest.approx(expected, abs=0.5)
    assert sorted((r["id"], r["method"], r["score"]) for r in scored["tasks"]) == sorted(
        (r["id"], r["method"], r["score"]) for r in result["tasks"]
    )
    assert score_column(rescored_table) == score_column(table)
    # and on bench's own JSON, scores emptied: the table bench printed, cell for cell
    emptied = {
        **result,
        "methods": {m: {**s, "score": None} for m, s in result["methods"].items()},
        "tasks": [{**r, "score": None} for r in result["tasks"]],
    }
    (tmp_path / "emptied.json").write_text(json.dumps(emptied))
    code, again, _ = score(capsys, "--results", tmp_path / "emptied.json", "--data", data)
    assert code == 0 and again == table


def test_bench_scores_humaneval_style_tasks_only_with_execute_code(tiny_cli, tmp_path, capsys):
    data = write_jsonl(
        tmp_path / "he.jsonl",
        [
            {
                "id": "Toy/0",
                "task": "code",
                "input": "def add(a, b):\n",
                "test": "def check(c):\n    assert c(2, 3) == 5\n",
                "entry_point": "add",
            }
        ],
    )
    assert (
        bench(capsys, "--data", data, "--methods", "greedy", "--max-new-tokens", 4, "--out", tmp_path / "off.json")[0]
        == 0
    )
    assert [r["score"] for r in json.loads((tmp_path / "off.json").read_text())["tasks"]] == [None]  # not run: absent
    assert (
        bench(
            capsys,
            "--data",
            data,
            "--methods",
            "greedy",
            "--max-new-tokens",
            4,
            "--execute-code",
            "--out",
            tmp_path / "on.json",
        )[0]
        == 0
    )
    result = json.loads((tmp_path / "on.json").read_text())
    assert [r["score"] for r in result["tasks"]] == [0.0] and result["methods"]["greedy"][
        "score"
    ] == 0.0  # `t5 t9` is no body


# ---- `score` alone: HumanEval files and bad input ------------------------------------------------------


def results_json(path, rows):
    path.write_text(json.dumps({"methods": {}, "tasks": rows}))
    return path


def test_score_follows_longbench_on_outputs_with_comments_fences_and_indentation(tmp_path, capsys):
    data, tasks = longbench_file(
        tmp_path / "lb.jsonl",
        {
            "lcc-1": ["        return fh.read()"],
            "lcc-2": ["    return a + b", "pass"],
            "hq-1": ["Ann Lee"],
            "hq-2": ["Paris", "London"],
        },
    )
    outputs = {
        "greedy": {
            "lcc-1": "\n    # read it\n        return fh.read()\n",
            "lcc-2": "```python\n    return a+b\n```",
            "hq-1": "The novel was written by Ann Lee.",
            "hq-2": "Paris, France",
        },
        "casd": {
            "lcc-1": "// no\n  data = fh.read()",
            "lcc-2": "\n\nreturn a + b",
            "hq-1": "Lee",
            "hq-2": "the city of London",
        },
    }
    rows = [
        {"id": i, "category": "lcc" if i.startswith("lcc") else "hotpotqa", "method": m, "text": t}
        for m, texts in outputs.items()
        for i, t in texts.items()
    ]
    code, _, _ = score(
        capsys, "--results", results_json(tmp_path / "r.json", rows), "--data", data, "--out", tmp_path / "s.json"
    )
    assert code == 0
    scored = json.loads((tmp_path / "s.json").read_text())
    for r in scored["tasks"]:
        t = tasks[r["id"]]
        metric = longbench_code_sim if t["kind"] == "code" else longbench_qa_f1
        assert r["score"] == pytest.approx(100 * max(metric(r["text"], a) for a in t["answers"]), abs=0.5), r
    expected = longbench_scores(scored["tasks"], tasks)
    assert {m: s["score"] for m, s in scored["methods"].items()} == pytest.approx(expected, abs=0.5)
    assert scored["tasks"][0]["score"] == 100.0 and 0 < expected["casd"] < expected["greedy"] < 100


def test_score_runs_humaneval_completions_from_either_file_format(tmp_path, capsys):
    problem = {
        "task_id": "Toy/0",
        "prompt": "def add(a, b):\n",
        "test": "def check(c):\n    assert c(2, 3) == 5\n",
        "entry_point": "add",
    }
    as_task = {"id": "Toy/0", "task": "code", "input": problem["prompt"], "test": problem["test"], "entry_point": "add"}
    results = results_json(
        tmp_path / "r.json",
        [
            {
                "id": "Toy/0",
                "category": "humaneval",
                "method": "greedy",
                "text": "    return a + b\n\ndef unrelated():\n    pass\n",
            },
            {"id": "Toy/0", "category": "humaneval", "method": "lossy", "text": "    return a - b\n"},
        ],
    )
    for rows in ([problem], [as_task]):
        data = write_jsonl(tmp_path / "he.jsonl", rows)
        code, table, err = score(capsys, "--results", results, "--data", data, "--out", tmp_path / "s.json")
        assert code == 0 and "HumanEval tasks need --execute-code" in err
        assert score_column(table) == {"greedy": "-", "lossy": "-"}
        code, table, _ = score(
            capsys, "--results", results, "--data", data, "--execute-code", "--out", tmp_path / "s.json"
        )
        assert code == 0 and score_column(table) == {"greedy": "100.000", "lossy": "0.000"}
        scored = json.loads((tmp_path / "s.json").read_text())
        assert [r["score"] for r in scored["tasks"]] == [100.0, 0.0]
        assert scored["methods"]["greedy"]["score"] == 100.0 and scored["methods"]["lossy"]["scored"] == 1


def test_score_names_what_is_wrong(tmp_path, capsys):
    data = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "task": "qa", "input": "Q?", "answers": ["yes"]}])
    good = results_json(tmp_path / "r.json", [{"id": "a", "method": "greedy", "text": "yes"}])
    assert score(capsys, "--results", good, "--data", data)[0] == 0
    (tmp_path / "broken.json").write_text('{"methods": {}, "tasks": [')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    cases = [
        (
            results_json(
                tmp_path / "m.json",
                [{"id": "a", "method": "greedy", "text": "yes"}, {"id": "zz", "method": "greedy", "text": "no"}],
            ),
            data,
            "1 task id(s) of the results are not in the task data: zz",
        ),
        (tmp_path / "missing.json", data, "missing.json: not found"),
        (tmp_path / "broken.json", data, "broken.json: not valid JSON"),
        (tmp_path / "binary.json", data, "is not UTF-8 text"),
        (tmp_path / "list.json", data, "not bench results"),
        (results_json(tmp_path / "no_text.json", [{"id": "a", "method": "greedy"}]), data, "not bench results"),
        (good, tmp_path / "nope.jsonl", "nope.jsonl: not found"),
    ]
    for results, task_data, message in cases:
        code, _, err = score(capsys, "--results", results, "--data", task_data)
        assert code == 2 and message in err, (results, err)


def test_result_rows_find_their_task_by_category_and_id():
    from core.errors import InvalidInputError
    from workbench.evaluation.bench import score_results
    from workbench.evaluation.tasks import Task

    tasks = [
        Task(id="1", task="qa", input="Q", answers=["red"], category="colours"),
        Task(id="1", task="qa", input="Q", answers=["blue"], category="other"),
        Task(id="2", task="chat", input="Hi"),
    ]
    rows = [
        {"id": "1", "category": "other", "method": "greedy", "text": "blue", "tokens": 1},
        {"id": 2, "method": "greedy", "text": "hello", "tokens": 1},
    ]  # an id alone finds a task when unique
    recorded = {"greedy": {"mal": 1.5, "tps": 9.0, "score": None}}
    out = score_results({"methods": recorded, "tasks": rows, "config": {"model": "m"}}, tasks)
    assert [r["score"] for r in out["tasks"]] == [100.0, None]  # no references: absent, not zero
    assert out["methods"]["greedy"] == {"mal": 1.5, "tps": 9.0, "score": 100.0, "scored": 1}  # measured numbers kept
    assert out["config"] == {"model": "m"} and recorded["greedy"]["score"] is None  # the input is not changed
    with pytest.raises(InvalidInputError, match=r"task id 1 names 2 tasks of the data \(categories colours, other\)"):
        score_results({"tasks": [{"id": "1", "method": "greedy", "text": "red"}]}, tasks)


# ---- on the real model ---------------------------------------------------------------------------------


@pytest.mark.real_model
def test_bench_on_smollm2_scores_as_longbench_and_score_agrees(smollm2, monkeypatch, tmp_path, capsys):
    from workbench.commands import common

    monkeypatch.setattr(common, "load_models", lambda args: (smollm2, None))
    # one code row, one QA row, greedy alone, a few tokens: a smoke test of the real pipeline (chat template, tokenizer)
    data, tasks = longbench_file(tmp_path / "lb.jsonl", {"lcc-1": ["        return fh.read()"], "hq-2": ["Paris"]})
    code, table, _ = bench(
        capsys, "--data", data, "--methods", "greedy", "--max-new-tokens", 6, "--out", tmp_path / "bench.json"
    )
    assert code == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    expected = longbench_scores(result["tasks"], tasks)
    assert result["methods"]["greedy"]["score"] == pytest.approx(expected["greedy"], abs=0.5)
    code, again, _ = score(
        capsys, "--results", tmp_path / "bench.json", "--data", data, "--out", tmp_path / "scored.json"
    )
    assert code == 0 and again == table
    assert json.loads((tmp_path / "scored.json").read_text())["methods"] == result["methods"]
