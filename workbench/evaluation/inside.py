"""What runs inside the sandbox: the tagged-JSON wire format and the three programs a sandboxed interpreter
runs. Standard library only, no project imports: the sandboxed interpreter (`python -I -S -B`) sees no
project files, so workbench.evaluation.sandbox hands it this file's text followed by one call. The host
imports the same file for the wire format, so both ends share one codec.

HumanEval runs in two sandboxes that share nothing but two pipes:
- the *candidate* (`serve_candidate`) runs the prompt and the model's completion, then answers calls to the
  entry point: each call's arguments arrive as tagged JSON, the result (or the exception) goes back the same
  way, with the state of mutable arguments after the call (a test may rely on an argument being changed);
- the *checker* (`run_checker`) runs the prompt (the helpers a test calls, such as HumanEval/32's `poly`) and
  the test, binds the entry point's name to a proxy that calls the candidate, runs `check(proxy)`, and
  writes the run's token to its result pipe only when `check` returned and no call failed.
The checker never runs model-written code and never sees an object the model made: only None, bools,
ints, floats (nan and infinities tagged), strings, bytes, lists, tuples, dicts (any hashable keys), sets
and frozensets cross, plus a materialised iterator, a range, dict views and complex numbers as results.
An instance of a subclass of one of those crosses as the base value it holds, read with the base type's
own methods (a subclass's __eq__ or __iter__ never runs on the checker's side); anything else fails.
`run_program` runs one plain program and writes the token when it ran to its end (run_python).
"""

from __future__ import annotations

import base64
import builtins
import json
import math
import os
import sys

# ---- the wire format -----------------------------------------------------------------------------
# A value is JSON: null, true/false, numbers and strings as themselves, a list as a JSON list, and every
# other type as a one-key object {tag: payload}. JSON keeps bool and int apart; dicts always travel as
# {"dict": [[key, value], ...]} (keys of any crossing type, order kept).
MAX_DEPTH = 100  # nesting levels (a list holding itself fails here)
MAX_ITEMS = 1_000_000  # values in one message (a runaway result fails instead of filling memory)
MAX_LINE = 64 << 20  # bytes of one message
INT_PLAIN = 1 << 53  # larger integers travel as hex text (JSON readers and Python's digit limit differ)


class WireError(Exception):
    """A value that cannot cross (its type, its size or its depth)."""


class _Budget:
    def __init__(self):
        self.items = 0

    def take(self) -> None:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS:,} values in one message")


def _float(value: float):
    if math.isfinite(value):
        return value
    return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def _int(value: int):
    return value if -INT_PLAIN < value < INT_PLAIN else {"int": format(value, "x")}


def encode(value, *, result: bool = False, _depth: int = 0, _budget: _Budget | None = None):
    """`value` as JSON-able data; WireError for anything that cannot cross. `result`: also iterators (read
    to their end, at most MAX_ITEMS), ranges, dict views and complex numbers (what a function may return)."""
    budget = _budget or _Budget()
    budget.take()
    if _depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep (or holding itself)")

    def sub(v):
        return encode(v, result=result, _depth=_depth + 1, _budget=budget)

    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is str:
        return value
    if kind is int:
        return _int(value)
    if kind is float:
        return _float(value)
    if kind is list:
        return [sub(v) for v in list.copy(value)]
    if kind is tuple:
        return {"tuple": [sub(v) for v in value]}
    if kind is dict:
        return {"dict": [[sub(k), sub(v)] for k, v in list(dict.items(value))]}
    if kind is set:
        return {"set": [sub(v) for v in list(set.copy(value))]}
    if kind is frozenset:
        return {"frozenset": [sub(v) for v in list(value)]}
    if kind is bytes:
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if kind is bytearray:
        return {"bytearray": base64.b64encode(bytes(value)).decode("ascii")}
    # A subclass of a type that crosses: its base value, read with the base type's own (C) methods.
    for base, read in _BASES:
        if isinstance(value, base):
            return sub(read(value))
    if result:
        if kind is complex:
            return {"complex": [_float(value.real), _float(value.imag)]}
        if kind is range:
            return {"range": [_int(value.start), _int(value.stop), _int(value.step)]}
        view = _VIEWS.get(kind)
        if view is not None:
            return {view: [sub(v) for v in _take(iter(value), budget)]}
        if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):  # a generator or another iterator
            return {"iter": [sub(v) for v in _take(value, budget)]}
    raise WireError(
        f"a value of type {kind.__name__[:60]} cannot cross between the candidate and the tests "
        f"(only None, bool, int, float, str, bytes, list, tuple, dict, set and frozenset do)"
    )


def _take(iterator, budget: _Budget) -> list:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) > MAX_ITEMS - budget.items:
            raise WireError(f"an iterator of more than {MAX_ITEMS:,} items")
    return out


_BASES = (
    (bool, bool),
    (int, int.__int__),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda v: bytes(memoryview(v))),
    (bytearray, lambda v: bytearray(memoryview(v))),
    (list, list.copy),
    (tuple, lambda v: tuple.__getitem__(v, slice(None))),
    (dict, lambda v: dict(list(dict.items(v)))),
    (set, set.copy),
    (frozenset, frozenset.copy),
)
_VIEWS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}
_DECODERS = {
    "tuple": lambda d: tuple(d),
    "set": set,
    "frozenset": frozenset,
    "iter": iter,
    "keys": lambda d: dict.fromkeys(d).keys(),
    "values": lambda d: dict(enumerate(d)).values(),
    "items": lambda d: dict(d).items(),
}


def decode(data, _depth: int = 0):
    """The value `encode` made `data` from (an iterator comes back as an iterator over a list)."""
    if _depth > MAX_DEPTH + 1:
        raise WireError("nested too deeply")
    if data is None or isinstance(data, (bool, str)):
        return data
    if isinstance(data, int):
        return data
    if isinstance(data, float):
        return data
    if isinstance(data, list):
        return [decode(v, _depth + 1) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("not a tagged value")
    ((tag, payload),) = data.items()
    if tag == "int":
        return int(payload, 16)
    if tag == "float":
        return float(payload)
    if tag in ("bytes", "bytearray"):
        raw = base64.b64decode(payload.encode("ascii"), validate=True)
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "complex":
        return complex(decode(payload[0]), decode(payload[1]))
    if tag == "range":
        return range(*(decode(v) for v in payload))
    if tag == "dict":
        return {decode(k, _depth + 1): decode(v, _depth + 1) for k, v in payload}
    make = _DECODERS.get(tag)
    if make is None:
        raise WireError(f"unknown tag {tag[:40]!r}")
    items = [decode(v, _depth + 1) for v in payload]
    if tag == "items":
        items = [tuple(pair) for pair in items]
    return make(items)


def dumps(message: dict) -> bytes:
    """One message as one line (JSON escapes every newline inside strings)."""
    line = json.dumps(message, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n"
    if len(line) > MAX_LINE:
        raise WireError(f"a message of {len(line):,} bytes (at most {MAX_LINE:,})")
    return line


def loads(line: bytes) -> dict:
    message = json.loads(line)
    if not isinstance(message, dict):
        raise WireError("not a message")
    return message


# ---- what every sandboxed program does first --------------------------------------------------------


def _start(drop_to, guard):
    """Drain stdin (a JSON header line, then the program), point stdin and stdout at /dev/null, keep a
    private duplicate of stdout (the result pipe), drop root, and in unsafe mode disable the destructive
    os, shutil and subprocess functions (a model's mistakes; no defence). Returns (header, program, result fd)."""
    read = os.read
    parts = []
    while True:
        chunk = read(0, 1 << 16)
        if not chunk:
            break
        parts.append(chunk)
    head, _, program = b"".join(parts).partition(b"\n")
    del parts
    header = json.loads(head)
    null = os.open(os.devnull, os.O_RDWR)
    result = os.dup(1)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    if os.getuid() == 0 and drop_to is not None:
        os.setgroups([])
        os.setgid(drop_to)
        os.setuid(drop_to)
        if 0 in os.getresuid() or 0 in os.getresgid():
            os._exit(3)
    if guard:
        import shutil
        import subprocess

        for name in (
            "system",
            "kill",
            "killpg",
            "fork",
            "forkpty",
            "putenv",
            "remove",
            "removedirs",
            "rmdir",
            "unlink",
            "rename",
            "renames",
            "replace",
            "truncate",
            "chmod",
            "chown",
            "setuid",
            "setgid",
            "execv",
            "execve",
            "execl",
        ):
            if hasattr(os, name):
                setattr(os, name, None)
        shutil.rmtree = shutil.move = shutil.chown = None
        subprocess.Popen = None
        builtins.exit = builtins.quit = None
    return header, program.decode("utf-8", "surrogateescape"), result


def _exec(program: str, namespace: dict) -> None:
    exec(compile(program, "program.py", "exec"), namespace)


def _fail(message: str, code: int = 1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
    os._exit(code)


def _traceback_and_exit():
    import traceback

    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)


# ---- one plain program (run_python) -----------------------------------------------------------------


def run_program(drop_to, guard):
    """Run the program; write the token when it ran to its end (an exit before it is a failure)."""
    header, program, result = _start(drop_to, guard)
    token = header["token"].encode("ascii")
    try:
        _exec(program, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as stop:
        _fail(f"the program exited before its end (SystemExit: {stop.code!r})")
    except BaseException:
        _traceback_and_exit()
    os.write(result, token + b"\n")
    os._exit(0)


# ---- the candidate: the model's code, answering calls ---------------------------------------------


def _reader(fd: int):
    return os.fdopen(fd, "rb", buffering=1 << 16)


def _send(fd: int, message: dict) -> None:
    data = dumps(message)
    while data:
        data = data[os.write(fd, data) :]


def _text(value, limit: int = 2000) -> str:
    try:
        return str(value)[:limit]
    except BaseException:
        return "(its message could not be read)"


def serve_candidate(drop_to, guard):
    """Run prompt + completion, say ready, then answer each call to the entry point until the pipe closes."""
    header, program, _ = _start(drop_to, guard)
    requests, responses = _reader(header["requests"]), header["responses"]
    os.set_inheritable(responses, False)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        _exec(program, namespace)
    except SystemExit as stop:
        _send(
            responses, {"load_failed": f"the completion exited before the tests (SystemExit: {_text(stop.code, 200)})"}
        )
        _fail(f"the completion exited before the tests (SystemExit: {_text(stop.code, 200)})")
    except BaseException as e:
        _send(responses, {"load_failed": f"the completion raised {type(e).__name__} before the tests"})
        _traceback_and_exit()
    function = namespace.get(header["entry_point"])
    if not callable(function):
        _send(responses, {"load_failed": f"the completion defines no function {header['entry_point']}"})
        _fail(f"no function {header['entry_point']}")
    _send(responses, {"ready": True})
    while True:
        line = requests.readline(MAX_LINE + 1)
        if not line:
            os._exit(0)
        request = loads(line)
        args = [decode(a) for a in request["args"]]
        kwargs = {k: decode(v) for k, v in request["kwargs"]}
        try:
            value = function(*args, **kwargs)
        except Exception as e:  # the tests may expect it: the checker raises the same built-in exception
            names = []
            for cls in type(e).__mro__:
                try:
                    names.append(str(cls.__name__)[:100])
                except BaseException:
                    names.append("?")
            _send(responses, {"raised": names, "message": _text(e)})
            continue
        except BaseException as e:  # SystemExit, KeyboardInterrupt, GeneratorExit: the candidate stopped
            _send(responses, {"stopped": f"{type(e).__name__} during a call"})
            _fail(f"the candidate raised {type(e).__name__} during a call")
        try:
            answer = {"value": encode(value, result=True)}
            answer["args"] = [_changed(a, before) for a, before in zip(args, request["args"])]
            answer["kwargs"] = [[k, _changed(kwargs[k], before)] for k, before in request["kwargs"]]
            _send(responses, answer)
        except WireError as e:
            _send(responses, {"unusable": str(e)})


def _changed(value, before):
    """The encoded value of a mutable argument after the call, when the call changed it (else None)."""
    if type(value) not in (list, dict, set, bytearray):
        return None
    after = encode(value)
    return None if after == before else after


# ---- the checker: the tests, calling the candidate through a proxy -----------------------------------


class CandidateFailure(BaseException):
    """The candidate could not answer a call (it stopped, crashed, ran out of a limit, or returned a value that
    cannot cross). A BaseException, so a test's `except Exception` cannot swallow it."""


def _update(target, value) -> None:
    """Give a mutable argument of the tests the state the candidate left it in."""
    if type(target) is list and type(value) is list:
        target[:] = value
    elif type(target) is dict and type(value) is dict:
        target.clear()
        target.update(value)
    elif type(target) is set and type(value) is set:
        target.clear()
        target.update(value)
    elif type(target) is bytearray and type(value) is bytearray:
        target[:] = value


def _proxy(name: str, requests: int, responses, failures: list):
    def candidate(*args, **kwargs):
        if failures:
            raise CandidateFailure(failures[0])
        before = len(failures)
        try:
            request = {"args": [encode(a) for a in args], "kwargs": [[k, encode(v)] for k, v in kwargs.items()]}
            _send(requests, request)
        except WireError as e:
            failures.append(f"an argument cannot be sent to the candidate: {e}")
            raise CandidateFailure(failures[-1]) from None
        except OSError:
            failures.append("the candidate's process is gone (it exited, crashed or hit a resource limit)")
            raise CandidateFailure(failures[-1]) from None
        line = responses.readline(MAX_LINE + 1)
        if not line or not line.endswith(b"\n"):
            failures.append(
                "the candidate's process ended during a call (it exited, crashed or hit a resource limit)"
                if not line
                else "the candidate's answer was too large"
            )
            raise CandidateFailure(failures[-1])
        try:
            answer = loads(line)
            if "raised" in answer:
                names = [n for n in answer["raised"] if isinstance(n, str)] or ["an exception"]
                raised = None
                for n in names:  # the first built-in Exception class in the candidate's exception's MRO
                    kind = getattr(builtins, n, None)
                    if isinstance(kind, type) and issubclass(kind, Exception):
                        try:
                            raised = kind(_text(answer.get("message", "")))
                            break
                        except Exception:  # a constructor with other arguments (UnicodeDecodeError): its base
                            continue
            elif "value" in answer:
                raised = None
                for target, after in zip(args, answer.get("args", ())):
                    if after is not None:
                        _update(target, decode(after))
                for k, after in answer.get("kwargs", ()):
                    if after is not None and k in kwargs:
                        _update(kwargs[k], decode(after))
                value = decode(answer["value"])
            else:
                failures.append(
                    _text(answer.get("unusable") or answer.get("stopped") or "the candidate did not answer")
                )
        except (WireError, ValueError, KeyError, TypeError, RecursionError) as e:
            failures.append(f"the candidate's answer is not usable ({type(e).__name__})")
        if len(failures) > before:
            raise CandidateFailure(failures[-1])
        if "raised" in answer:
            if raised is None:
                failures.append(f"the candidate raised {_text(names[0], 100)}")
                raise CandidateFailure(failures[-1])
            raise raised  # a built-in exception, as the candidate raised it (a test may expect it)
        return value

    candidate.__name__ = candidate.__qualname__ = name
    return candidate


def _not_dumpable() -> None:
    """Keep other processes of the same user from reading this one's memory or tracing it (unsafe mode has
    no namespaces between the checker and the candidate)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _complete(prompt: str) -> str:
    """The prompt as a module of its own: HumanEval's end with a docstring (a complete function); a task file's
    may end with a bare signature, which gets `pass`. One that cannot be completed is left out (the tests then
    run without its helpers)."""
    body = prompt.rstrip(" \t")
    for suffix in ("", "    pass\n", "\n    pass\n"):
        try:
            compile(body + suffix, "prompt.py", "exec")
            return body + suffix
        except (SyntaxError, ValueError):
            continue
    return ""


def run_checker(drop_to, guard):
    """Run prompt + test, then check(candidate); write the token only when check returned and no call failed."""
    _not_dumpable()
    header, program, result = _start(drop_to, guard)
    _not_dumpable()  # again: a change of user resets it
    token = header["token"].encode("ascii")
    requests, responses = header["requests"], _reader(header["responses"])
    for fd in (requests, result):
        os.set_inheritable(fd, False)
    line = responses.readline(MAX_LINE + 1)
    try:
        ready = loads(line) if line else {}
    except ValueError:
        ready = {}
    if not ready.get("ready"):
        _fail(_text(ready.get("load_failed") or "the candidate did not start (see its error below)"))
    failures: list = []
    candidate = _proxy(header["entry_point"], requests, responses, failures)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        _exec(_complete(header.get("prompt", "")), namespace)  # the helpers the tests may call
        _exec(program, namespace)
        namespace[header["entry_point"]] = candidate  # a test may call the function by its name (HumanEval/33)
        namespace["check"](candidate)
    except SystemExit as stop:
        _fail(f"the tests exited before their end (SystemExit: {stop.code!r})")
    except BaseException:
        _traceback_and_exit()
    if failures:
        _fail(f"a call to the candidate failed although the tests went on: {failures[0]}")
    os.write(result, token + b"\n")
    os._exit(0)
