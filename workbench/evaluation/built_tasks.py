"""LongBench-format rows built from text every Python installation carries (docs/AUTOMATIC_SETTINGS.md,
"Task families"): the standard library's docstrings and source.

- `docqa_rows`: extractive questions over long documentation passages (LongBench's `multifieldqa_en`
  prompt). A passage is the rendered documentation (signature and docstring of each public function and
  method) of several modules, 6k-22k characters; the question asks for one entry's name given its first
  sentence, the first sentence given its name, or one parameter's default value given the name. Every
  reference is a span of the passage by construction (the name and the default are copied from the header
  the passage prints, the sentence from the docstring it prints), and an item is kept only when its
  question has one answer in its passage: the quoted sentence occurs once, the named entry's header once.
- `code_rows`: next-line completion over long source files (LongBench's `lcc` prompt): the preceding
  5k-14k characters of a module's source, the reference the true next line (stripped), chosen among code
  lines (no comment, no string or docstring line, 12-100 characters).

The held-out split (for fitting) and the evaluation split (for reporting) come from disjoint sets of
modules (alternating groups of MODULE_GROUPS, related modules kept together), and an evaluation passage or
context that still shares a word 13-gram with the held-out modules' docstrings or source (a docstring copied
between modules) is not built: no text is shared between the splits. The rows are a deterministic function
of the running Python (its version is recorded in every row's `source`, the module in `module`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import io
import random
import re
import sys
import tokenize
import warnings
from dataclasses import dataclass

from workbench.evaluation.calibration import Overlap

SPLITS = ("held_out", "evaluation")
# Pure-Python standard-library modules with documented public functions, importable without side effects,
# in groups of modules that share docstrings or code (the compression modules, the mail protocols, ...).
# Alternating groups form the two splits (`split_modules`); the order is fixed, never sorted at run time.
MODULE_GROUPS = (
    ("textwrap", "difflib"),
    ("shutil", "glob", "fnmatch", "tempfile"),
    ("statistics", "random"),
    ("logging",),
    ("inspect", "dis", "ast"),
    ("pathlib",),
    ("traceback", "warnings"),
    ("threading", "queue", "sched"),
    ("json", "pprint"),
    ("urllib.parse", "urllib.request", "http.client", "http.cookies"),
    ("subprocess", "shlex"),
    ("smtplib", "imaplib", "poplib", "ftplib"),
    ("codecs", "base64"),
    ("tarfile", "zipfile", "gzip", "bz2", "lzma"),
    ("calendar", "locale"),
    ("configparser", "optparse", "getopt"),
    ("platform", "sysconfig", "pkgutil"),
    ("socket", "socketserver", "selectors"),
    ("ipaddress", "uuid", "hmac"),
    ("mimetypes", "mailbox", "email.utils"),
    ("bdb", "pdb", "cmd"),
    ("collections", "typing", "abc", "dataclasses"),
    ("weakref", "graphlib"),
    ("functools", "contextlib", "re"),
    ("fileinput", "tokenize", "pickletools", "timeit"),
)
DOC_CHARS = (6000, 22000)  # a docqa passage's length range (about 1.5k-6k tokens)
CODE_CHARS = (5000, 14000)  # a code context's length range
PYTHON = "python " + sys.version.split()[0]


def split_modules(split: str) -> tuple[str, ...]:
    """The modules a split is built from: the even groups of MODULE_GROUPS held out, the odd ones evaluated."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    return tuple(m for group in MODULE_GROUPS[SPLITS.index(split) :: 2] for m in group)


@functools.lru_cache(maxsize=1)
def held_out_text() -> Overlap:
    """Every docstring and source line of the held-out modules, as word 13-grams: an evaluation item that shares
    one with them is not built (a docstring copied between modules would otherwise sit on both sides)."""
    texts = []
    for m in split_modules("held_out"):
        texts += [e.render() for e in module_entries(m)]
        try:
            texts.append(inspect.getsource(_import(m)))
        except (OSError, TypeError):
            pass
    return Overlap.of(texts)


def _leaks(split: str, text: str) -> bool:
    return split == "evaluation" and held_out_text().hits(text)


def _import(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def _ws(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- documentation passages


@dataclass(frozen=True)
class Entry:
    module: str
    qualname: str  # `dedent` or `TextWrapper.fill`
    name: str  # the last part of qualname
    signature: str  # `(text, width=70, **kwargs)`
    doc: str

    @property
    def header(self) -> str:
        return f"{self.qualname}{self.signature}"

    def render(self) -> str:
        return self.header + "\n" + "\n".join(f"    {line}" if line else "" for line in self.doc.splitlines())

    @property
    def first_sentence(self) -> str | None:
        """The docstring's first sentence when it is a usable question: 6-40 words, one sentence, no quotes."""
        paragraph = _ws(self.doc.split("\n\n")[0])
        m = re.match(r"(.+?[.])(?:\s|$)", paragraph)
        if not m:
            return None
        sentence = m.group(1)
        words = sentence.split()
        if not 6 <= len(words) <= 40 or '"' in sentence or "e.g" in sentence or "i.e" in sentence:
            return None
        return sentence

    def defaults(self) -> list[tuple[str, str]]:
        """(parameter, default as the header prints it) for short literal defaults other than None."""
        out = []
        for part in _split_params(self.signature):
            name, eq, default = part.partition("=")
            name, default = name.strip().split(":")[0].strip(), default.strip()
            if eq and re.fullmatch(r"-?\d+(\.\d+)?|True|False|'[\w .:/-]{1,20}'", default) and name.isidentifier():
                out.append((name, default))
        return out


def _split_params(signature: str) -> list[str]:
    """The top-level comma-separated parts of `(a, b=(1, 2), *c)`."""
    inner, parts, depth, cur = signature[1 : signature.rfind(")")], [], 0, ""
    for ch in inner:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + ([cur] if cur.strip() else [])


def _documented(module: str, owner, prefix: str = "") -> list[Entry]:
    out = []
    for name, obj in vars(owner).items():
        if name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module:
            continue
        doc = inspect.getdoc(obj)
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            continue
        if doc and " at 0x" not in signature:  # a default printed with its address differs per process
            out.append(Entry(module, prefix + name, name, signature, doc))
    return out


def module_entries(module: str) -> list[Entry]:
    """The module's public functions and public classes' methods with docstrings, in source order."""
    mod = _import(module)
    public = getattr(mod, "__all__", None)
    entries = _documented(module, mod)
    for name, obj in vars(mod).items():
        if inspect.isclass(obj) and obj.__module__ == module and not name.startswith("_"):
            entries += _documented(module, obj, f"{name}.")
    if public is not None:
        entries = [e for e in entries if e.qualname.split(".")[0] in public]

    def line(e: Entry) -> int:
        owner = mod
        for part in e.qualname.split("."):
            owner = getattr(owner, part)
        return owner.__code__.co_firstlineno

    return sorted(entries, key=line)


def _module_title(module: str) -> str:
    doc = inspect.getdoc(_import(module)) or ""
    first = _ws(doc.split("\n\n")[0])
    return f"Module {module}" + (f": {first}" if first and len(first) < 300 else "")


def _passage(target: Entry, pool: dict[str, list[Entry]], rng: random.Random) -> tuple[str, list[Entry]]:
    """Documentation sections of several modules, the target's among them, about rng-drawn characters long."""
    budget = rng.randint(*DOC_CHARS)
    own = pool[target.module]
    at = own.index(target)
    start = max(0, at - rng.randint(0, 6))
    sections: list[tuple[str, list[Entry]]] = []
    chosen, size = [], len(_module_title(target.module))
    for e in own[start:]:  # the target's module from a few entries before the target
        if size + len(e.render()) > budget and e is not target and target in chosen:
            break
        chosen.append(e)
        size += len(e.render()) + 2
    sections.append((target.module, chosen))
    others = [m for m in pool if m != target.module]
    rng.shuffle(others)
    for module in others:
        if size >= budget * 0.9:
            break
        taken = []
        size += len(_module_title(module)) + 2
        for e in pool[module]:
            if size + len(e.render()) > budget:
                break
            taken.append(e)
            size += len(e.render()) + 2
        if taken:
            sections.append((module, taken))
    rng.shuffle(sections)
    text = "\n\n".join(_module_title(m) + "\n\n" + "\n\n".join(e.render() for e in entries) for m, entries in sections)
    return text, [e for _, entries in sections for e in entries]


def _question(kind: str, e: Entry, text: str, entries: list[Entry], rng: random.Random) -> tuple[str, list[str]] | None:
    """(question, references), or None when the question would not have one answer in this passage."""
    flat = _ws(text)
    if (
        sum(1 for x in entries if x.qualname == e.qualname and x.module == e.module) != 1
        or flat.count(_ws(e.header)) != 1
    ):
        return None
    where = f"{e.qualname} (module {e.module})"
    if kind == "name":
        sentence = e.first_sentence
        if sentence is None or flat.count(sentence) != 1:
            return None
        refs = [e.qualname] + ([e.name] if e.name != e.qualname and sum(x.name == e.name for x in entries) == 1 else [])
        return (
            f'Which function or method in the text is documented with this sentence: "{sentence}" '
            f"Answer with its name only."
        ), refs
    if kind == "sentence":
        sentence = e.first_sentence
        if sentence is None or flat.count(sentence) != 1:
            return None
        return f"Quote the first sentence of the documentation of {where}.", [sentence]
    defaults = e.defaults()
    if not defaults:
        return None
    param, default = defaults[rng.randrange(len(defaults))]
    return f"What is the default value of the parameter {param} of {where}? Answer with the value only.", [default]


KINDS = ("name", "sentence", "default")


def _collect(family: str, split: str, count: int, tries: int, draw) -> list[dict]:
    """`count` rows from `draw(index, attempt)` (a row without its id, or None when that attempt found none),
    each given the id `<family>-<split>-<index>`; at most `tries` attempts per row."""
    rows: list[dict] = []
    for attempt in range(count * tries):
        if len(rows) == count:
            break
        row = draw(len(rows), attempt)
        if row is not None:
            rows.append({"_id": f"{family}-{split}-{len(rows):03d}", **row})
    if len(rows) < count:
        raise RuntimeError(f"could not build {count} {family} items for {split} (built {len(rows)})")
    return rows


def docqa_rows(split: str, count: int, seed: int = 0) -> list[dict]:
    """`count` extractive questions over documentation passages of the split's modules (LongBench rows)."""
    rng = random.Random(f"docqa-{split}-{seed}")
    pool = {m: [e for e in module_entries(m) if not _leaks(split, e.render())] for m in split_modules(split)}
    pool = {m: entries for m, entries in pool.items() if entries}
    modules = list(pool)
    used: set[tuple[str, str, str]] = set()

    def draw(index: int, attempt: int) -> dict | None:
        kind = KINDS[index % len(KINDS)]
        module = modules[attempt % len(modules)]  # every attempt moves on: all modules in turn
        target = pool[module][rng.randrange(len(pool[module]))]
        if (kind, target.module, target.qualname) in used:
            return None
        text, entries = _passage(target, pool, rng)
        qa = _question(kind, target, text, entries, rng)
        if qa is None or _leaks(split, text):
            return None
        question, refs = qa
        assert all(_ws(r) in _ws(text) for r in refs), (target, refs)  # every reference is a span of the passage
        used.add((kind, target.module, target.qualname))
        return {
            "dataset": "multifieldqa_en",
            "input": question,
            "context": text,
            "answers": refs,
            "length": len(text.split()),
            "question_type": kind,
            "source": f"{PYTHON} standard library",
            "module": target.module,
            "entry": target.qualname,
        }

    return _collect("docqa", split, count, 200, draw)


# ---------------------------------------------------------------- source code


def _code_lines(source: str) -> list[int]:
    """0-based indices of the lines a next-line question may ask for: code, not comments or string lines."""
    in_string: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING or tok.type == tokenize.COMMENT:
                in_string.update(range(tok.start[0] - 1, tok.end[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    out = []
    for i, line in enumerate(source.splitlines()):
        stripped = line.strip()
        if i not in in_string and 12 <= len(stripped) <= 100 and not stripped.startswith("#"):
            out.append(i)
    return out


def code_rows(split: str, count: int, seed: int = 0) -> list[dict]:
    """`count` next-line completions over the split's modules' source (LongBench `lcc` rows)."""
    rng = random.Random(f"code-{split}-{seed}")
    files: dict[str, tuple[list[str], list[int], list[int]]] = {}  # module: lines, line offsets, candidate lines
    for m in split_modules(split):
        try:
            source = inspect.getsource(_import(m))
        except (OSError, TypeError):
            continue
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        candidates = [i for i in _code_lines(source) if offsets[i] >= CODE_CHARS[0]]
        if candidates:
            files[m] = (lines, offsets, candidates)
    modules = list(files)
    rng.shuffle(modules)
    used: set[tuple[str, int]] = set()

    def draw(index: int, attempt: int) -> dict | None:
        module = modules[attempt % len(modules)]  # every attempt moves on: all modules in turn
        lines, offsets, candidates = files[module]
        i = candidates[rng.randrange(len(candidates))]
        if (module, i) in used:
            return None
        used.add((module, i))
        budget = rng.randint(*CODE_CHARS)
        first = next(k for k in range(i + 1) if offsets[i] - offsets[k] <= budget)
        context = "".join(lines[first:i])
        if _leaks(split, context):
            return None
        return {
            "dataset": "lcc",
            "input": "",
            "context": context,
            "answers": [lines[i].strip()],
            "length": len(context.split()),
            "language": "python",
            "source": f"{PYTHON} standard library",
            "module": module,
            "line": i + 1,
        }

    return _collect("code", split, count, 50, draw)


BUILDERS = {"docqa": docqa_rows, "code": code_rows}
