"""Hostile code in the HumanEval sandbox (workbench.evaluation.sandbox): every escape found in issue 24
as a test. Each program tries the escape, swallows its own errors and runs to its end, so a test also
checks the sandbox ran it (`passed`) and then that nothing outside the sandbox changed.

Without a working bubblewrap these tests skip (.ci/run installs it); the false-pass tests also run in
the unsafe (plain subprocess) mode, which decides a pass the same way. Nothing here reaches beyond
this machine: the network test only listens on, and tries, 127.0.0.1.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.evaluation import sandbox as sb

NO_SANDBOX = sb.sandbox_problem()
needs_sandbox = pytest.mark.skipif(
    NO_SANDBOX is not None,
    reason=f"no bubblewrap sandbox here ({NO_SANDBOX}); .ci/run installs it (apt-get install bubblewrap)",
)


def test_ci_has_the_sandbox():
    """CI installs bubblewrap (.ci/run), so there the escape tests must run, not skip."""
    if os.environ.get("CI", "").lower() in ("", "0", "false"):
        pytest.skip("only under CI, which installs bubblewrap")
    assert NO_SANDBOX is None, f"CI has no working bubblewrap sandbox: {NO_SANDBOX}"


PROBLEM = {
    "task_id": "Toy/0",
    "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
}
ORIGINAL = "original content\n"


def _proc_uids(pid: str) -> tuple[int, ...] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        return None
    return None


def _pids_with_cmdline(marker: bytes) -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _descendants(root: int) -> dict[int, str]:
    """pid -> command name of every process below `root` (host view)."""
    parents, names = {}, {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        head, _, rest = stat.rpartition(b")")
        names[int(pid)] = head.split(b"(", 1)[1].decode(errors="replace")
        parents[int(pid)] = int(rest.split()[1])
    out, frontier = {}, {root}
    for _ in range(50):  # bounded depth
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in out}
        if not frontier:
            break
        out.update({pid: names[pid] for pid in frontier})
    return out


@pytest.fixture
def victims(tmp_path):
    """Files outside the sandbox's temp folder: one under the host's temporary folder, one next to this
    test (a folder the sandbox can see, read-only). Each holds keep.txt; new.txt must never appear."""
    near = Path(__file__).parent / f".sandbox-victim-{secrets.token_hex(4)}"
    folders = [tmp_path / "victim", near]
    for folder in folders:
        folder.mkdir()
        (folder / "keep.txt").write_text(ORIGINAL)
    yield folders
    shutil.rmtree(near, ignore_errors=True)


def assert_untouched(folders):
    for folder in folders:
        assert (folder / "keep.txt").exists(), f"{folder}/keep.txt was deleted from inside the sandbox"
        assert (folder / "keep.txt").read_text() == ORIGINAL, f"{folder}/keep.txt was overwritten"
        assert not (folder / "new.txt").exists(), f"{folder}/new.txt was written from inside the sandbox"


def _shell_harm(folders) -> str:
    return "; ".join(f"rm -f {f}/keep.txt; echo pwned > {f}/new.txt" for f in folders)


ATTACKS = {
    "posix.system": lambda folders: f"import posix\nposix.system({_shell_harm(folders)!r})\n",
    "os.fork": lambda folders: (
        "import posix\n"
        f"folders = {[str(f) for f in folders]!r}\n"
        "pid = posix.fork()\n"
        "if pid == 0:\n"
        "    for f in folders:\n"
        "        for action in (lambda: open(f + '/keep.txt', 'w').write('pwned'), lambda: posix.unlink(f + '/keep.txt'),\n"
        "                       lambda: open(f + '/new.txt', 'w').write('pwned')):\n"
        "            try:\n"
        "                action()\n"
        "            except Exception:\n"
        "                pass\n"
        "    posix._exit(0)\n"
        "posix.waitpid(pid, 0)\n"
    ),
    "importlib.reload(subprocess)": lambda folders: (
        "import importlib, subprocess\n"
        "subprocess = importlib.reload(subprocess)\n"
        f"subprocess.Popen(['/bin/sh', '-c', {_shell_harm(folders)!r}]).wait(timeout=5)\n"
    ),
    "open and posix.unlink": lambda folders: (
        "import posix\n"
        f"for f in {[str(f) for f in folders]!r}:\n"
        "    for action in (lambda: open(f + '/keep.txt', 'w').write('pwned'), lambda: posix.unlink(f + '/keep.txt'),\n"
        "                   lambda: open(f + '/new.txt', 'w').write('pwned')):\n"
        "        try:\n"
        "            action()\n"
        "        except Exception:\n"
        "            pass\n"
    ),
}


def _tolerant(program: str) -> str:
    """Run `program` but end normally whatever it raises (so `passed` means: the sandbox ran it)."""
    return f"try:\n    exec({program!r})\nexcept Exception:\n    pass\n"


@needs_sandbox
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_code_cannot_write_or_delete_files_outside_its_temp_folder(attack, victims):
    result = sb.run_python(_tolerant(ATTACKS[attack](victims)), timeout=10)
    assert result.passed, result.detail
    assert_untouched(victims)


@needs_sandbox
def test_the_system_is_read_only_and_only_tmp_is_writable():
    probe = f"/wb-sandbox-probe-{secrets.token_hex(4)}"
    program = (
        "import os\n"
        "open(os.path.join(os.environ['TMPDIR'], 'mine.txt'), 'w').write('ok')  # its temp folder is writable\n"
        f"for path in ({probe!r}, os.path.join(os.path.dirname(os.__file__), {probe[1:]!r})):\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "    except OSError:\n"
        "        continue\n"
        "    raise AssertionError('wrote ' + path)\n"
    )
    try:
        result = sb.run_python(program, timeout=10)
        assert result.passed, result.detail
    finally:
        for path in (probe, os.path.join(os.path.dirname(os.__file__), probe[1:])):
            if os.path.exists(path):
                os.remove(path)


@needs_sandbox
def test_no_route_to_the_hosts_loopback_not_even_through_setns():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    program = (
        "import ctypes, os, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def reach():\n"
        "    try:\n"
        f"        with socket.create_connection(('127.0.0.1', {port}), timeout=1) as s:\n"
        "            s.sendall(b'escaped')\n"
        "    except OSError:\n"
        "        pass\n"
        "reach()\n"
        f"for pid in sorted({{os.getppid(), 1, {os.getpid()}, {os.getppid()}}}):\n"
        "    try:\n"
        "        fd = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY)\n"
        "    except OSError:\n"
        "        continue\n"
        "    if libc.setns(fd, 0x40000000) == 0:  # CLONE_NEWNET\n"
        "        reach()\n"
    )
    try:
        result = sb.run_python(program, timeout=10)
        listener.setblocking(False)
        try:
            conn, _ = listener.accept()
            conn.close()
            reached = True
        except BlockingIOError:
            reached = False
    finally:
        listener.close()
    assert result.passed, result.detail
    assert not reached, "sandboxed code connected to a listener on the host's 127.0.0.1"


def _in_a_fresh_parent(program: str, tmp_path: Path, env: dict | None = None, timeout: float = 60):
    """Run `program` through run_python in a new interpreter (its own environment, its own memory
    figures): the status, passed, the detail's length and that interpreter's peak resident KiB."""
    (tmp_path / "program.py").write_text(program)
    driver = (
        "import importlib\n"
        f"sb = importlib.import_module({sb.__name__!r})\n"
        f"result = sb.run_python(open({str(tmp_path / 'program.py')!r}).read(), timeout={timeout})\n"
        # VmHWM: this interpreter's peak (ru_maxrss would also count the forking parent's peak before exec)
        "peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print(result.status, result.passed, len(result.detail), peak)\n"
        "print(result.detail[-1500:])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(env or {})}
    out = subprocess.run(
        [sys.executable, "-c", driver],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, _, detail = out.stdout.partition("\n")
    status, passed, detail_len, peak_kib = first.split()
    return status, passed == "True", int(detail_len), int(peak_kib), detail


@needs_sandbox
def test_the_parents_environment_is_not_readable(tmp_path):
    # In the parent's environment from its start (what /proc/PID/environ shows; a later setenv is not).
    program = (
        "import os\n"
        "pids = {p for p in os.listdir('/proc') if p.isdigit()}\n"
        f"for pid in pids | {{str(os.getppid()), '{os.getpid()}', '{os.getppid()}'}}:\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    assert b'WB_SANDBOX_SECRET=' not in data, 'read a parent environment in /proc/' + pid + '/environ'\n"
    )
    status, passed, _, _, detail = _in_a_fresh_parent(program, tmp_path, {"WB_SANDBOX_SECRET": secrets.token_hex(8)})
    assert passed, detail


@needs_sandbox
def test_the_hosts_processes_are_not_visible():
    program = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "assert len(pids) < 10, f'{len(pids)} processes visible'\n"
    )
    result = sb.run_python(program, timeout=10)
    assert result.passed, result.detail


@needs_sandbox
def test_code_runs_as_nobody_not_as_root():
    program = (
        "import os\n"
        f"assert os.getresuid() == ({sb.SANDBOX_UID},) * 3, os.getresuid()\n"
        f"assert os.getresgid() == ({sb.SANDBOX_GID},) * 3, os.getresgid()\n"
        "if os.path.exists('/etc/shadow'):\n"
        "    try:\n"
        "        open('/etc/shadow').read()\n"
        "    except PermissionError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError('read /etc/shadow')\n"
        "import time\n"
        "time.sleep(2.5)\n"
    )
    box: dict = {}
    runner = threading.Thread(target=lambda: box.setdefault("result", sb.run_python(program, timeout=15)))
    runner.start()
    seen: dict[int, tuple] = {}  # the host's view of the sandboxed interpreters' uids, once they started
    start = time.monotonic()
    while runner.is_alive() and time.monotonic() - start < 20:
        if time.monotonic() - start > 1.0:
            for pid, name in _descendants(os.getpid()).items():
                uids = _proc_uids(str(pid))
                if name.startswith("python") and uids is not None:
                    seen[pid] = uids
        time.sleep(0.05)
    runner.join(timeout=20)
    assert box["result"].passed, box["result"].detail
    assert seen, "no sandboxed interpreter seen from the host"
    assert all(0 not in uids for uids in seen.values()), f"host uids of the sandboxed interpreter: {seen}"


@needs_sandbox
def test_a_setsid_child_does_not_outlive_the_timeout():
    marker = f"{60 + secrets.randbelow(30)}.{secrets.randbelow(10**6):06d}"  # sleep's unique argument
    program = (
        "import posix, time\n"
        "pid = posix.fork()\n"
        "if pid == 0:\n"
        "    posix.setsid()\n"
        "    if posix.fork() == 0:\n"
        f"        posix.execv('/bin/sleep', ['/bin/sleep', {marker!r}])\n"
        "    posix._exit(0)\n"
        "time.sleep(60)\n"
    )
    box: dict = {}
    runner = threading.Thread(target=lambda: box.setdefault("result", sb.run_python(program, timeout=2)))
    start = time.monotonic()
    runner.start()
    survivors: list[int] = []
    try:
        runner.join(timeout=10)  # a sandbox that waits for the child would wait for its whole sleep
        elapsed = time.monotonic() - start
        survivors = _pids_with_cmdline(marker.encode())
        stop = time.monotonic() + 1.0
        while survivors and time.monotonic() < stop:  # a moment for the kernel to reap the namespace
            time.sleep(0.05)
            survivors = _pids_with_cmdline(marker.encode())
    finally:
        for pid in _pids_with_cmdline(marker.encode()):  # only the sleep this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        runner.join(timeout=30)
    assert not survivors, f"a setsid child outlived the sandbox's timeout: pids {survivors}"
    assert box["result"].status == "timeout" and elapsed < 8, (box.get("result"), elapsed)


@needs_sandbox
def test_a_gigabyte_on_stderr_is_cut_short_not_held(tmp_path):
    program = "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(1024):\n    os.write(2, chunk)\n"
    start = time.monotonic()
    status, passed, detail_len, peak_kib, _ = _in_a_fresh_parent(program, tmp_path)
    assert peak_kib < 300 * 1024, f"the parent held {peak_kib // 1024} MiB"
    assert not passed and status == "error" and detail_len <= 4096
    assert time.monotonic() - start < 60


@needs_sandbox
def test_a_fork_bomb_is_held_by_the_process_limit():
    program = (
        "import posix, time\n"
        "n = 0\n"
        "for _ in range(400):\n"
        "    try:\n"
        "        pid = posix.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(5)\n"
        "        posix._exit(0)\n"
        "    n += 1\n"
        "assert n < 400, f'{n} processes started'\n"
    )
    result = sb.run_python(program, timeout=20)
    assert result.passed, result.detail


EXITS = {
    "sys.exit(0) at top level": "    return a + b\nimport sys\nsys.exit(0)\n",
    "os._exit(0) at top level": "    return a + b\nimport os\nos._exit(0)\n",
    "raise SystemExit at top level": "    return a + b\nraise SystemExit\n",
    "SystemExit(0) in the body": "    raise SystemExit(0)\n",
    "os._exit(0) in the body": "    import os\n    os._exit(0)\n",
    "a forged token line": "    return a - b\nimport os, sys\nos.write(1, b'0' * 32 + b'\\n')\nsys.stdout.write('passed\\n')\n",
}
MODES = [pytest.param(False, marks=needs_sandbox, id="sandbox"), pytest.param(True, id="unsafe")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(EXITS))
def test_exiting_before_the_tests_is_not_a_pass(name, mode):
    result = sb.run_humaneval(PROBLEM, EXITS[name], timeout=10, unsafe=mode)
    assert not result.passed and result.status == "failed", result
    assert sb.run_humaneval(PROBLEM, "    return a + b\n", timeout=10, unsafe=mode).passed  # the harness works


# ---- forged passes (issue 30): the candidate runs in its own sandbox, the checker only sees data ----------
# Each payload is a completion that is wrong (`a - b`) plus code that tries to make the harness count a pass.
# Against a harness that ran the completion in check's own interpreter, each of them did. They all score 0
# here, in both modes, and the same harness still passes the honest completion.

FRAME_WALK = """    return a - b
import os, sys
def_frames = [sys._getframe()]
try:
    raise RuntimeError
except RuntimeError as exc:
    def_frames.append(exc.__traceback__.tb_frame)
for frame in def_frames:
    while frame is not None:
        local = frame.f_locals
        if isinstance(local.get("token"), bytes) and isinstance(local.get("result"), int):
            os.write(local["result"], local["token"] + b"\\n")
            os._exit(0)
        frame = frame.f_back
"""

TRACE_SWAP = """    return a - b
import sys
noop = lambda candidate: None
swap = lambda frame: "check" in frame.f_globals and setattr(frame.f_globals["check"], "__code__", noop.__code__)
tracer = lambda frame, event, arg: (swap(frame), tracer)[1]
sys.settrace(tracer)
sys._getframe().f_trace = tracer
"""

MEMORY_SCAN = """    return a - b
import ctypes, os, re
found = set()
for line in open("/proc/self/maps"):
    fields = line.split()
    name = fields[5] if len(fields) > 5 else ""
    if not fields[1].startswith("rw") or (name and name not in ("[heap]", "[stack]")):
        continue
    start, end = (int(x, 16) for x in fields[0].split("-"))
    if end - start > 64 << 20:
        continue
    found.update(re.findall(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", ctypes.string_at(start, end - start)))
lines = b"".join(t + b"\\n" for t in sorted(found))[:4000]
for fd in range(3, 20):
    try:
        os.write(fd, lines)
    except OSError:
        pass
"""

ALWAYS_EQUAL = """    class Anything:
        __eq__ = lambda self, other: True
        __ne__ = lambda self, other: False
        __hash__ = lambda self: 0
    return Anything()
"""

INT_ALWAYS_EQUAL = """    class Five(int):
        __eq__ = lambda self, other: True
    return Five(a - b)
"""

FORGERIES = {
    "frame walk to the harness": FRAME_WALK,
    "settrace and check.__code__ swap": TRACE_SWAP,
    "ctypes memory scan for the token": MEMORY_SCAN,
    "always-equal __eq__ object": ALWAYS_EQUAL,
    "int subclass with an always-true __eq__": INT_ALWAYS_EQUAL,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_pass_scores_zero(name, mode):
    unsafe = (sb.UNSAFE_ROOT if os.geteuid() == 0 else True) if mode else False
    result = sb.run_humaneval(PROBLEM, FORGERIES[name], timeout=20, unsafe=unsafe)
    assert not result.passed and result.status in ("failed", "error"), result
    assert sb.run_humaneval(PROBLEM, "    return a + b\n", timeout=10, unsafe=unsafe).passed  # the harness works


def test_the_checker_never_runs_the_completion(monkeypatch):
    """What each side runs: the completion only in the candidate's program, the tests and the token only in the
    checker's."""
    boxes = []
    monkeypatch.setattr(
        sb, "_run_boxes", lambda b, token, timeout: boxes.extend(b) or sb.ExecResult(False, "failed", "")
    )
    sb._humaneval_in(sb._Runner(bwrap="/usr/bin/bwrap"), PROBLEM, "    return a + b  # MARK-COMPLETION\n", 5)
    checker, candidate = boxes
    assert b"MARK-COMPLETION" not in checker.payload and b"def check" in checker.payload
    assert b"MARK-COMPLETION" in candidate.payload and b"def check" not in candidate.payload
    assert b"token" not in candidate.payload and b'"token"' in checker.payload
    for fd in {*checker.pass_fds, *candidate.pass_fds}:  # the pipes the boxes would have taken
        os.close(fd)


# ---- the narrow sandbox (issue 30, case 5): nothing of the host but Python and the system libraries ----


@needs_sandbox
def test_no_host_socket_is_reachable_not_even_in_a_world_writable_project_folder(tmp_path):
    """A Unix socket listening in a world-writable folder of the project (outside the folders the old sandbox
    hid) was reachable from inside; now the project is not there at all. An abstract socket neither."""
    folder = Path(__file__).parent / f".sandbox-socket-{secrets.token_hex(4)}"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    path = folder / "s"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0wb-sandbox-{secrets.token_hex(4)}"
    try:
        listener.bind(str(path))
        os.chmod(path, 0o777)
        listener.listen(4)
        listener.setblocking(False)
        abstract.bind(name)
        abstract.listen(4)
        abstract.setblocking(False)
        program = (
            "import socket\n"
            f"for address in ({str(path)!r}, {name!r}):\n"
            "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "    try:\n"
            "        s.connect(address)\n"
            "        s.sendall(b'escaped')\n"
            "    except OSError:\n"
            "        pass\n"
        )
        result = sb.run_python(program, timeout=10)
        reached = []
        for sock in (listener, abstract):
            try:
                sock.accept()[0].close()
                reached.append(sock)
            except BlockingIOError:
                pass
    finally:
        listener.close()
        abstract.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert result.passed, result.detail
    assert not reached, "sandboxed code connected to a Unix socket on the host"


@needs_sandbox
def test_only_python_and_the_system_libraries_are_visible():
    """No project, home or data folder, no /opt, /root, /home, /run, /var, /srv, /mnt or /sys: the root holds
    /usr (and its links), /etc's two files, /dev, /proc, a private /tmp and the interpreter's prefix."""
    prefix = os.path.realpath(sys.base_prefix)
    project = str(Path(__file__).resolve().parents[2])
    allowed_top = {
        "usr",
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "etc",
        "dev",
        "proc",
        "tmp",
        prefix.strip("/").split("/")[0],
    }
    program = (
        "import os\n"
        f"top = set(os.listdir('/')) - set({sorted(allowed_top)!r})\n"
        "assert not top, f'visible: {sorted(top)}'\n"
        "assert sorted(os.listdir('/etc')) <= ['ld.so.cache', 'localtime'], os.listdir('/etc')\n"
        f"for path in ({project!r}, {str(Path.home())!r}, '/opt', '/home', '/run', '/var', '/srv', '/mnt', '/sys', '/work'):\n"
        f"    if path == {prefix!r} or {prefix!r}.startswith(path + '/'):\n"
        "        continue\n"
        "    assert not os.path.exists(path), path + ' is visible'\n"
        f"parts = {prefix!r}.strip('/').split('/')\n"
        "for i in range(1, len(parts)):  # the folders above the prefix hold only the way to it\n"
        "    assert os.listdir('/' + '/'.join(parts[:i])) == [parts[i]], os.listdir('/' + '/'.join(parts[:i]))\n"
        "for path in ('/', '/usr/probe', '/etc/probe'):\n"
        "    try:\n"
        "        open(path.rstrip('/') + '/wb-probe', 'w')\n"
        "    except OSError:\n"
        "        continue\n"
        "    raise AssertionError('wrote under ' + path)\n"
    )
    result = sb.run_python(program, timeout=10)
    assert result.passed, result.detail


@needs_sandbox
def test_the_memory_cap_holds_over_all_the_sandboxes_processes_together():
    """Three processes of 450 MB each stay under the 1 GiB per-process address-space limit but not under the
    1 GiB cap of the whole sandbox: one of them is killed (the old sandbox let all three live)."""
    program = (
        "import posix, time\n"
        "pids = []\n"
        "for _ in range(3):\n"
        "    pid = posix.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(450 << 20)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(3)\n"
        "        posix._exit(0)\n"
        "    pids.append(pid)\n"
        "codes = [posix.waitpid(pid, 0)[1] for pid in pids]\n"
        "assert codes == [0, 0, 0], f'exit statuses {codes}'\n"
    )
    result = sb.run_python(program, timeout=30)
    assert not result.passed and result.status in ("failed", "error"), result
    assert "exit statuses" in result.detail or "memory" in result.detail, result


@needs_sandbox
def test_without_a_cgroup_the_parent_enforces_the_memory_cap(monkeypatch):
    monkeypatch.setattr(sb._Cgroup, "make", classmethod(lambda cls, limit: None))
    test_the_memory_cap_holds_over_all_the_sandboxes_processes_together()
