"""LongBench (THUDM/LongBench, English sets, and NQ in CASD's template): rows from the hub or a local JSON
Lines file, each dataset with LongBench's own prompt template, generation length and metric."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from workbench.evaluation.tasks.rows import Row, line_id, read_rows
from workbench.evaluation.tasks.task import Task


@dataclass(frozen=True)
class LongBenchSet:
    template: str
    max_new_tokens: int
    task: str
    metric: str  # a name in workbench.evaluation.scores.METRICS
    chat: bool = True  # pred.py skips the chat template for trec, triviaqa, samsum, lsht, lcc and repobench-p
    first_line: bool = False  # eval.py scores only the first line for trec, triviaqa, samsum and lsht


_QA_PASSAGES = (
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
    "The following are given passages.\n{context}\n\n"
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
    "Question: {input}\nAnswer:"
)
_QASPER_RULES = (
    "as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on "
    'the information in the article, write "unanswerable". If the question is a yes/no question, answer "yes", '
    '"no", or "unanswerable". Do not provide any explanation.'
)

# The templates and generation lengths the AASD and CASD papers evaluate with; other datasets take LongBench's
# published config/dataset2prompt.json and config/dataset2maxlen.json verbatim (typos included:
# "asconcisely"), metrics from its eval.py. The Chinese sets are left out: their metrics need jieba.
LONGBENCH: dict[str, LongBenchSet] = {
    "narrativeqa": LongBenchSet(
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question asconcisely "
        "as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: {context}\n\nNow, answer the "
        "question based on the story asconcisely as you can, using a single phrase if possible. Do not provide any explanation."
        "\n\nQuestion: {input}\n\nAnswer:",
        128,
        "qa",
        "qa_f1",
    ),
    "qasper": LongBenchSet(
        f"You are given a scientific article and a question. Answer the question {_QASPER_RULES}\n\nArticle: {{context}}\n\n "
        f"Answer the question based on the above article {_QASPER_RULES}\n\nQuestion: {{input}}\n\nAnswer:",
        128,
        "qa",
        "qa_f1",
    ),
    "multifieldqa_en": LongBenchSet(
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the above text, "
        "only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",
        64,
        "qa",
        "qa_f1",
    ),
    "hotpotqa": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "2wikimqa": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "musique": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "gov_report": LongBenchSet(
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{context}\n\n"
        "Now, write a one-page summary of the report.\n\nSummary:",
        512,
        "summarization",
        "rouge_l",
    ),
    "qmsum": LongBenchSet(
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or more "
        "sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in one or more "
        "sentences.\n\nQuery: {input}\nAnswer:",
        512,
        "summarization",
        "rouge_l",
    ),
    "multi_news": LongBenchSet(
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
        "Now, write a one-page summary of all the news.\n\nSummary:",
        512,
        "summarization",
        "rouge_l",
    ),
    "trec": LongBenchSet(
        "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",
        64,
        "classification",
        "classification",
        chat=False,
        first_line=True,
    ),
    "triviaqa": LongBenchSet(
        "Answer the question based on the given passage. Only give me the answer and do not output any other words. "
        "The following are some examples.\n\n{context}\n\n{input}",
        32,
        "qa",
        "qa_f1",
        chat=False,
        first_line=True,
    ),
    "samsum": LongBenchSet(
        "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
        128,
        "summarization",
        "rouge_l",
        chat=False,
        first_line=True,
    ),
    "passage_count": LongBenchSet(
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read these "
        "paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, how many "
        "non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after "
        "removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe final answer is: ",
        32,
        "count",
        "count",
    ),
    "passage_retrieval_en": LongBenchSet(
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is from."
        "\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph that the abstract "
        'is from. The answer format must be like "Paragraph 1", "Paragraph 2", etc.\n\nThe answer is: ',
        32,
        "retrieval",
        "retrieval",
    ),
    "lcc": LongBenchSet(
        "Please complete the code given below. \n{context}Next line of code:\n", 64, "code", "code_sim", chat=False
    ),
    "repobench-p": LongBenchSet(
        "Please complete the code given below. \n{context}{input}Next line of code:\n",
        64,
        "code",
        "code_sim",
        chat=False,
    ),
    # NQ is not in LongBench (CASD samples 300 validation queries): CASD's template; the papers give no
    # generation length, so 128, LongBench's length for its other free-form QA sets (narrativeqa, qasper).
    "nq": LongBenchSet(
        "Answer the Question based on the given context.\n\nContext:{context}\n\nQuestion:{input}\n\nAnswer:",
        128,
        "qa",
        "qa_f1",
    ),
}


def longbench_task(row: Row, dataset: str, fallback_id: str) -> Task:
    """One LongBench row (input, context, answers, all_classes, _id) of `dataset`."""
    spec = LONGBENCH[dataset]
    row.require_text("input", "context", what=" (a LongBench row needs input and context strings)")
    text, context = row.text("input"), row.text("context")
    classes = row.strings("all_classes")
    if dataset == "trec" and not classes:
        raise row.error("a trec row needs 'all_classes' (the labels its metric matches)")
    return Task(
        id=row.ident("_id", fallback=fallback_id),
        task=spec.task,
        input=text,
        context=context,
        answers=row.references("answers"),
        template=spec.template,
        max_new_tokens=spec.max_new_tokens,
        chat=spec.chat,
        category=dataset,
        metric=spec.metric,
        first_line=spec.first_line,
        all_classes=classes,
    )


def longbench_name(row: Row, dataset: Any) -> str:
    """A row's LongBench dataset name, checked; LongBench-E rows (`hotpotqa_e`) use the same templates."""
    if not isinstance(dataset, str):
        raise row.error("'dataset' must be a string (a LongBench dataset name)")
    name = dataset.removesuffix("_e")
    if name not in LONGBENCH:
        raise row.error(f"unknown LongBench dataset {name[:60]!r}; known: {', '.join(LONGBENCH)}")
    return name


def check_longbench_names(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in LONGBENCH]
    if unknown:
        raise InvalidInputError(
            f"unknown LongBench dataset{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"known: {', '.join(LONGBENCH)}"
        )


def load_longbench_file(path: str | Path, datasets: Sequence[str] | None = None) -> list[Task]:
    """LongBench rows from a local JSON Lines file (fields input, context, answers, length, dataset,
    all_classes, _id); a row without `dataset` takes the one dataset named in `datasets`."""
    if datasets:
        check_longbench_names(datasets)
    tasks = []
    for row in read_rows(path, what="LongBench file"):
        given = row.data.get("dataset") or (datasets[0] if datasets and len(datasets) == 1 else None)
        if not given:
            raise row.error(f"missing field dataset (or name one dataset: longbench:hotpotqa@{path})")
        name = longbench_name(row, given)
        if datasets and name not in datasets:
            continue
        tasks.append(longbench_task(row, name, line_id(row, name)))
    return tasks


def load_longbench_hub(datasets: Sequence[str]) -> list[Task]:
    """LongBench from the Hugging Face hub (`THUDM/LongBench`, split test) through `datasets`."""
    check_longbench_names(datasets)
    local = "or download the rows and pass a local file: longbench:NAME@/path/NAME.jsonl"
    try:
        from datasets import load_dataset
    except ImportError:
        raise InvalidInputError(
            f"LongBench from the hub needs the `datasets` package, which is not installed (pip install datasets), "
            f"{local}"
        ) from None
    tasks = []
    for name in datasets:
        if name == "nq":
            raise InvalidInputError(
                "nq is not part of LongBench on the hub; pass a local file: longbench:nq@/path/nq.jsonl"
            )
        try:
            rows = load_dataset("THUDM/LongBench", name, split="test")
        except Exception as e:  # offline, no such config, or a `datasets` release that no longer runs loading scripts
            raise InvalidInputError(
                f"could not load THUDM/LongBench {name} from the hub ({type(e).__name__}: {str(e)[:300]}); {local}"
            ) from None
        tasks += [
            longbench_task(Row(dict(row), f"THUDM/LongBench {name} row {i}"), name, f"{name}-{i}")
            for i, row in enumerate(rows, 1)
        ]
    return tasks
