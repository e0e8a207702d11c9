"""Loaders on small local files in every format, the `--data` grammar, and bad input named by line."""

from __future__ import annotations

import gzip
import json
import re
import sys
import types

import pytest

from core.errors import InvalidInputError
from workbench.evaluation.tasks import (
    LONGBENCH,
    Task,
    fill_template,
    load_dataset_tasks,
    load_gsm8k,
    load_humaneval,
    load_longbench_file,
    load_longbench_hub,
    load_many,
    load_tasks,
    middle_truncate,
    parse_data_spec,
    select_subset,
)


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


LB_ROWS = [
    {
        "input": "Who wrote it?",
        "context": "Passage 1: Ann wrote it.",
        "answers": ["Ann"],
        "length": 5,
        "dataset": "hotpotqa",
        "language": "en",
        "all_classes": None,
        "_id": "h1",
    },
    {
        "input": "",
        "context": "def f():\n    return 1\n",
        "answers": ["    return 1"],
        "length": 4,
        "dataset": "lcc",
        "language": "en",
        "all_classes": None,
        "_id": "c1",
    },
    {
        "input": "Q: capital of France?\nA:",
        "context": "Q: 1+1?\nA: 2",
        "answers": ["Paris"],
        "length": 9,
        "dataset": "triviaqa",
        "language": "en",
        "all_classes": None,
        "_id": "t1",
    },
]


# ---- task files and Spec-Bench ----------------------------------------------------------------


def test_task_file_fields_and_bad_lines_named(tmp_path):
    good = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"id": "a", "task": "qa", "input": "Q?", "context": "C.", "answers": ["x"], "max_new_tokens": 8},
            {"id": "b", "task": "code", "input": "write f", "template": "Code:\n{context}\n{input}", "chat": False},
        ],
    )
    a, b = load_tasks(good)
    assert (a.prompt(), a.max_new_tokens, a.category) == ("C.\n\nQ?", 8, "qa")
    assert b.prompt() == "Code:\n\nwrite f" and b.chat is False
    cases = [
        (
            [{"id": "a", "task": "qa", "input": "Q?"}, "", {"id": "b", "input": "Q?"}],
            r"t\.jsonl line 3: missing field\(s\) task",
        ),
        ([{"task": "qa"}], r"line 1: missing field\(s\) id, input"),
        ([{"id": "a", "task": "qa", "input": "Q"}, "{not json"], r"line 2: not valid JSON"),
        ([[1, 2]], r"line 1: each line must be a JSON object"),
        ([{"id": "a", "task": "qa", "input": "Q", "answers": "x"}], r"line 1: 'answers' must be a list"),
        (
            [{"id": "a", "task": "qa", "input": "Q", "template": "no slot"}],
            r"line 1: 'template' must contain \{context\} or \{input\}",
        ),
    ]
    for rows, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            load_tasks(write_jsonl(tmp_path / "t.jsonl", rows))
    with pytest.raises(InvalidInputError, match="not found"):
        load_tasks(tmp_path / "missing.jsonl")


# ---- templates: by name only ------------------------------------------------------------------

LCC_TEMPLATE = "Please complete the code given below. \n{context}Next line of code:\n"


def test_a_template_needs_context_or_input_and_only_those_two_are_substituted(tmp_path):
    code = 'cfg = {"a": 1}\nempty = {}\nfmt = "{0} {input}"\n'  # braces in code, even our field names, are the context's own
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "id": "lcc",
                "task": "code",
                "input": "",
                "context": code,
                "answers": ["x = 1"],
                "template": LCC_TEMPLATE,
                "chat": False,
            },
            {
                "id": "in",
                "task": "qa",
                "input": "Q?",
                "template": "Only the input: {input} ({name}, { 1 } and {} stay as written)",
            },
            {
                "id": "both",
                "task": "qa",
                "input": "{context}",
                "context": "C",
                "template": "{context} | {input} | {context}",
            },
        ],
    )
    lcc, only_input, both = load_tasks(path)
    assert lcc.prompt() == f"Please complete the code given below. \n{code}Next line of code:\n"
    assert only_input.prompt() == "Only the input: Q? ({name}, { 1 } and {} stay as written)"
    assert both.prompt() == "C | {context} | C"  # one pass: text put in is never read as a field again
    assert fill_template("{{input}}", context="", input="x") == "{x}"  # no escapes: a brace around the field stays


def test_format_fields_are_refused_naming_the_line_and_nothing_is_evaluated(tmp_path):
    for field in ["{0}", "{input.__class__.__mro__}", "{input!r}", "{input.x}", "{context[0]}", "{context:>20}"]:
        rows = [
            {"id": "ok", "task": "qa", "input": "Q"},
            {"id": "bad", "task": "qa", "input": "Q", "template": "Answer {input} " + field},
        ]
        with pytest.raises(
            InvalidInputError,
            match=r"t\.jsonl line 2: template field \{.+\} is not supported: only \{context\} "
            r"and \{input\}",
        ):
            load_tasks(write_jsonl(tmp_path / "t.jsonl", rows))
    task = Task(id="made-in-code", task="qa", input="Q", template="{input.__class__.__mro__}")
    with pytest.raises(InvalidInputError, match=r"task made-in-code: template field \{input.__class__.__mro__\}"):
        task.prompt()  # a Task built in code is checked when its prompt is made, not evaluated
    with pytest.raises(InvalidInputError, match=r"line 1: 'template' must be a string"):
        load_tasks(write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "task": "qa", "input": "Q", "template": 3}]))


def test_every_bundled_template_fills_by_name():
    from workbench.evaluation.tasks import GSM8K_TEMPLATE

    for name, spec in LONGBENCH.items():
        text = fill_template(spec.template, context="CTX", input="INP")
        assert "CTX" in text and "{" not in text, name  # every field was one of the two names
    assert LONGBENCH["lcc"].template == LCC_TEMPLATE and "{input}" not in LCC_TEMPLATE
    assert fill_template(GSM8K_TEMPLATE, context="", input="2+2?").startswith("2+2?\n\nSolve")


# ---- one task file, several row formats (detected per line) -------------------------------------


def test_a_task_file_takes_longbench_and_humaneval_rows_as_they_are(tmp_path):
    problem = {
        "task_id": "Toy/0",
        "prompt": "def add(a, b):\n",
        "test": "def check(c):\n    assert c(2, 3) == 5\n",
        "entry_point": "add",
        "canonical_solution": "    return a + b\n",
    }
    as_task = {
        "id": "Toy/1",
        "task": "code",
        "input": "def sub(a, b):\n",
        "test": "def check(c):\n    assert c(3, 2) == 1\n",
        "entry_point": "sub",
    }
    path = write_jsonl(
        tmp_path / "mixed.jsonl", [LB_ROWS[1], problem, as_task, {"id": "q", "task": "qa", "input": "Q?"}]
    )
    lcc, he, toy, qa = load_tasks(path)
    assert (lcc.id, lcc.category, lcc.metric, lcc.chat) == ("c1", "lcc", "code_sim", False)
    assert lcc.prompt() == LONGBENCH["lcc"].template.replace("{context}", LB_ROWS[1]["context"])
    assert (he.id, he.metric, he.chat, he.problem["entry_point"]) == ("Toy/0", "pass@1", False, "add")
    assert (toy.metric, toy.chat, toy.category) == ("pass@1", False, "code")
    assert toy.problem == {
        "task_id": "Toy/1",
        "prompt": "def sub(a, b):\n",
        "test": as_task["test"],
        "entry_point": "sub",
    }
    assert "\ndef " in toy.stop and toy.prompt() == "def sub(a, b):\n" and qa.metric is None
    half = {k: v for k, v in as_task.items() if k != "entry_point"}
    with pytest.raises(
        InvalidInputError,
        match=r"line 1: a HumanEval-style task needs both test and entry_point \(missing entry_point\)",
    ):
        load_tasks(write_jsonl(tmp_path / "t.jsonl", [half]))
    with pytest.raises(InvalidInputError, match=r"line 1: unknown LongBench dataset 'dureader'"):
        load_tasks(write_jsonl(tmp_path / "t.jsonl", [{**LB_ROWS[0], "dataset": "dureader"}]))


def test_spec_bench_rows_categories_and_nested_references(tmp_path):
    path = write_jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 1, "category": "summarization", "turns": ["Summarize: x"], "reference": ["a summary"]},
            {
                "question_id": 2,
                "category": "rag",
                "turns": ["passages... question?"],
                "reference": [["ans one", "ans two"]],
            },
            {"question_id": 3, "category": "writing", "turns": ["Write.", "Again."]},
        ],
    )
    tasks = load_dataset_tasks(f"spec-bench:rag,summarization@{path}")
    assert [t.id for t in tasks] == ["1", "2"]
    assert tasks[1].answers == ["ans one", "ans two"] and tasks[1].task == "qa"  # the rag row's nested list, flattened
    assert load_dataset_tasks(f"spec-bench@{path}")[2].task == "chat"
    with pytest.raises(
        InvalidInputError, match="unknown category coding in Spec-Bench; known: rag, summarization, writing"
    ):
        load_dataset_tasks(f"spec-bench:coding@{path}")


# ---- LongBench ------------------------------------------------------------------------------


def test_longbench_local_file_uses_longbench_templates_and_lengths(tmp_path):
    path = write_jsonl(tmp_path / "lb.jsonl", LB_ROWS)
    hotpot, lcc, trivia = load_longbench_file(path)
    assert hotpot.prompt().startswith("Answer the question based on the given passages.")
    assert (
        hotpot.prompt().endswith("Question: Who wrote it?\nAnswer:") and "Passage 1: Ann wrote it." in hotpot.prompt()
    )
    assert (hotpot.max_new_tokens, hotpot.chat, hotpot.metric, hotpot.category, hotpot.id) == (
        32,
        True,
        "qa_f1",
        "hotpotqa",
        "h1",
    )
    assert lcc.prompt() == "Please complete the code given below. \ndef f():\n    return 1\nNext line of code:\n"
    assert (lcc.max_new_tokens, lcc.chat, lcc.metric) == (64, False, "code_sim")
    assert (trivia.chat, trivia.first_line) == (False, True)
    # selection by dataset, and the brief's `longbench:/path` form
    assert [t.id for t in load_dataset_tasks(f"longbench:lcc@{path}")] == ["c1"]
    assert len(load_dataset_tasks(f"longbench:{path}")) == 3


def test_longbench_bad_rows(tmp_path):
    no_dataset = dict(LB_ROWS[0])
    del no_dataset["dataset"]
    with pytest.raises(InvalidInputError, match=r"lb.jsonl line 2: missing field dataset"):
        load_longbench_file(write_jsonl(tmp_path / "lb.jsonl", [LB_ROWS[0], no_dataset]))
    assert (
        load_longbench_file(tmp_path / "lb.jsonl", ["hotpotqa"])[1].category == "hotpotqa"
    )  # one dataset named: rows take it
    with pytest.raises(
        InvalidInputError, match=r"line 1: unknown LongBench dataset 'dureader'; known: narrativeqa, qasper"
    ):
        load_longbench_file(write_jsonl(tmp_path / "lb.jsonl", [{**LB_ROWS[0], "dataset": "dureader"}]))
    no_context = {k: v for k, v in LB_ROWS[0].items() if k != "context"}
    with pytest.raises(InvalidInputError, match=r"line 1: missing field\(s\) context"):
        load_longbench_file(write_jsonl(tmp_path / "lb.jsonl", [no_context]))
    with pytest.raises(InvalidInputError, match="unknown LongBench dataset nope; known: narrativeqa"):
        load_dataset_tasks(f"longbench:nope@{tmp_path / 'lb.jsonl'}")
    # references missing: the task loads, its score is absent (workbench.evaluation.scores.score_task returns None)
    no_answers = {k: v for k, v in LB_ROWS[0].items() if k != "answers"}
    assert load_longbench_file(write_jsonl(tmp_path / "lb.jsonl", [no_answers]))[0].answers == []


def test_longbench_hub_path_with_a_local_file_in_the_same_format(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "hotpotqa.jsonl", [LB_ROWS[0], {**LB_ROWS[0], "_id": "h2"}])
    calls = []

    def load_dataset(repo, name, split):
        calls.append((repo, name, split))
        if name != "hotpotqa":
            raise FileNotFoundError(f"no config {name}")
        return [json.loads(line) for line in path.read_text().splitlines()]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    tasks = load_dataset_tasks("longbench:hotpotqa", limit=1)
    assert calls == [("THUDM/LongBench", "hotpotqa", "test")] and [t.id for t in tasks] == ["h1"]
    assert tasks[0].template == LONGBENCH["hotpotqa"].template
    with pytest.raises(
        InvalidInputError, match=r"could not load THUDM/LongBench 2wikimqa .*longbench:NAME@/path/NAME.jsonl"
    ):
        load_longbench_hub(["2wikimqa"])
    with pytest.raises(InvalidInputError, match="nq is not part of LongBench on the hub"):
        load_longbench_hub(["nq"])
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(InvalidInputError, match=r"needs the `datasets` package, which is not installed .*local file"):
        load_dataset_tasks("longbench:hotpotqa")


def test_templates_and_lengths_are_those_of_methods_md():
    from conftest import SHARED

    methods = SHARED / "METHODS.md"
    if not methods.exists():
        pytest.skip("METHODS.md not found beside the project")
    section = methods.read_text().split("## Prompts and lengths")[1].split("\n## ")[0]
    checked = 0
    for line in section.splitlines():
        m = re.match(r"- (.+?): `(.*)`(?: \((\d+)(?: max new tokens)?)?", line)
        if not m:
            continue
        names = [n.strip().split(" ")[0] for n in m.group(1).split("/")]
        template = m.group(2).replace("\\n", "\n")
        for name in names:
            assert LONGBENCH[name].template == template, name
            if m.group(3):
                assert LONGBENCH[name].max_new_tokens == int(m.group(3)), name
            if "no chat template" in line:
                assert LONGBENCH[name].chat is False, name
            checked += 1
    assert checked == 8  # hotpotqa, 2wikimqa, triviaqa, multi_news, gov_report, lcc, repobench-p, nq


def test_middle_truncation_keeps_both_ends():
    class Words:  # a tokenizer stand-in: one token per word
        def __call__(self, text, truncation=False):
            return types.SimpleNamespace(input_ids=text.split(" "))

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(ids)

    text = " ".join(f"w{i}" for i in range(10))
    assert middle_truncate(text, Words(), 10) == text
    assert middle_truncate(text, Words(), 4) == "w0 w1" + "w8 w9"  # LongBench joins the halves as they decode
    assert middle_truncate(text, Words(), 5) == "w0 w1" + "w8 w9"  # int(5 / 2) tokens from each end


# ---- HumanEval, GSM8K, samples ----------------------------------------------------------------


def test_humaneval_from_the_package_and_from_a_file(tmp_path):
    tasks = load_humaneval()
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0"
    t = tasks[0]
    assert (t.metric, t.chat, t.category, t.template) == ("pass@1", False, "humaneval", None)
    assert t.prompt() == t.problem["prompt"] and "\ndef " in t.stop
    row = {
        "task_id": "Toy/0",
        "prompt": "def f():\n",
        "canonical_solution": "    return 1\n",
        "test": "def check(c): pass",
        "entry_point": "f",
    }
    path = tmp_path / "toy.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps(row) + "\n" + json.dumps({**row, "task_id": "Toy/1", "test": ""}) + "\n")
    with pytest.raises(InvalidInputError, match=r"toy.jsonl.gz line 2: missing field\(s\) test"):
        load_dataset_tasks(f"humaneval@{path}")
    with pytest.raises(InvalidInputError, match="humaneval takes no selection"):
        load_dataset_tasks("humaneval:easy")


def test_gsm8k_file(tmp_path):
    path = write_jsonl(
        tmp_path / "gsm8k.jsonl",
        [{"question": "2+2?", "answer": "2+2=4\n#### 4"}, {"question": "3+3?", "answer": "#### 6"}],
    )
    a, b = load_gsm8k(path)
    assert (a.id, a.metric, a.category, a.answers) == ("gsm8k-1", "gsm8k", "gsm8k", ["2+2=4\n#### 4"])
    assert a.prompt().startswith("2+2?\n\nSolve the problem step by step") and "The answer is" in a.prompt()
    with pytest.raises(InvalidInputError, match="gsm8k.jsonl line 2: missing field question"):
        load_gsm8k(
            write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "1?", "answer": "#### 1"}, {"answer": "#### 2"}])
        )


def test_gsm8k_without_a_file_is_spec_bench_math(spec_bench):
    tasks = load_dataset_tasks("gsm8k", limit=3)
    assert len(tasks) == 3 and all(t.metric == "gsm8k" and "####" in t.answers[0] for t in tasks)


def test_samples_plain_paths_and_unknown_datasets(tmp_path):
    from conftest import ROOT

    assert {t.category for t in load_dataset_tasks("samples")} >= {"qa", "summarization", "code"}
    assert {t.category for t in load_dataset_tasks("samples:qa")} == {"qa"}
    assert len(load_dataset_tasks(str(ROOT / "assets" / "samples.jsonl"))) == len(load_dataset_tasks("samples"))
    assert parse_data_spec("longbench:a,b@/x/y.jsonl") == ("longbench", ["a", "b"], "/x/y.jsonl")
    assert parse_data_spec("data/tasks.jsonl") == ("file", [], "data/tasks.jsonl")
    with pytest.raises(InvalidInputError, match=r"unknown dataset 'longbnech'; known: spec-bench .*samples"):
        load_dataset_tasks("longbnech:qasper")
    with pytest.raises(InvalidInputError, match="unknown category nope in the samples"):
        load_dataset_tasks("samples:nope")


def test_limit_seed_and_duplicates(tmp_path):
    tasks = [Task(id=str(i), task="qa", input="q", category="ab"[i % 2]) for i in range(10)]
    assert [t.id for t in select_subset(tasks, 2)] == ["0", "1", "2", "3"]  # the first two of each category
    sampled = select_subset(tasks, 2, seed=7)
    assert sampled == select_subset(tasks, 2, seed=7) and len(sampled) == 4
    assert [int(t.id) for t in sampled] == sorted(int(t.id) for t in sampled)  # file order kept
    with pytest.raises(InvalidInputError, match="--limit must be at least 1"):
        select_subset(tasks, 0)
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "task": "qa", "input": "Q"}])
    with pytest.raises(InvalidInputError, match="task 'a' of 'qa' comes from both"):
        load_many([str(path), str(path)])
