"""HumanEval execution in the sandbox and GSM8K final-number matching."""
from __future__ import annotations

import pytest

from workbench.evaluation.sandbox import gsm8k_correct, gsm8k_prediction, gsm8k_reference, run_humaneval, run_python, truncate_completion

PROBLEM = {
    "task_id": "Toy/0",
    "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
}


def test_a_right_completion_passes_and_a_wrong_one_fails():
    assert run_humaneval(PROBLEM, "    return a + b\n").passed
    wrong = run_humaneval(PROBLEM, "    return a - b\n")
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.detail


def test_the_completion_is_cut_at_the_next_top_level_statement():
    text = "    return a + b\n\n\ndef unrelated():\n    raise SystemExit(1)\n\nprint(add(1, 2))\n"
    assert truncate_completion(text) == "    return a + b\n\n"
    assert run_humaneval(PROBLEM, text).passed


def test_limits_hold():
    assert run_python("while True:\n    pass\n", timeout=1.5).status == "timeout"
    assert not run_python("x = bytearray(3 << 30)\n").passed  # address-space limit
    assert not run_python("import os\nos.remove('/etc/hostname')\n").passed  # destructive calls disabled
    assert not run_python("import subprocess\nsubprocess.Popen(['true'])\n").passed
    assert run_python("import os, sys\nassert not os.environ.get('WORKBENCH_HOME')\nassert os.getcwd().startswith(os.environ['HOME'])\n").passed


@pytest.mark.parametrize("text,ok", [
    ("48/2 = 24 clips in May. 48 + 24 = 72. The answer is 72.", True),
    ("So she made $1,000 in total.\n#### 1000", False),  # reference below is 72
    ("The total is \\boxed{72}", True),
    ("He has 72 - 2 = 70 left", False),
    ("The answer is: **72**", True),
])
def test_gsm8k_final_number(text, ok):
    assert gsm8k_correct(text, "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") is ok


def test_gsm8k_parsing():
    assert gsm8k_reference("blah\n#### 1,234") == 1234.0
    assert gsm8k_prediction("costs $18.50 then the answer is 18.5") == 18.5
    assert gsm8k_prediction("no numbers here") is None
    assert not gsm8k_correct("no numbers here", "#### 3")
