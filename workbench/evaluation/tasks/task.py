"""The one Task type every loader returns, its prompt templates (filled by name only) and the parts of a
prompt that compression may shorten."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.errors import InvalidInputError


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
        raise InvalidInputError(
            f"{where}: template field {{{bad[0][:40]}}} is not supported: only {{context}} and {{input}} "
            f"are substituted, by name (nothing in a template is evaluated; other braces stay as written)"
        )
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
    return tokenizer.decode(ids[:half], skip_special_tokens=True) + tokenizer.decode(
        ids[-half:], skip_special_tokens=True
    )


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
        body = text[len("Summarize:") :]
        lead = body[: len(body) - len(body.lstrip())]
        return "Summarize:" + lead, body[len(lead) :], ""
    if task.category == "rag" and "\n" in text.strip():
        head, _, question = text.rstrip().rpartition("\n")
        return "", head, "\n" + question + text[len(text.rstrip()) :]
    return text, "", ""


def compress_prompt(task: Task, compressor, rate: float):
    """(the prompt with its context compressed, core.compress.Compression): the instruction and the question stay
    whole. A task without a context is an InvalidInputError (there is nothing to compress)."""
    before, context, after = prompt_parts(task)
    if not context.strip():
        raise InvalidInputError(
            f"task {task.id}: nothing to compress: it has no context (compression shortens the context "
            f"only; the instruction and question stay whole)"
        )
    done = compressor.compress(context, rate)
    return before + done.text + after, done
