"""Issue 33, sixth newcomer pass, defect 14: the CLI printed transformers' weight-loading progress bar ("Loading
weights: 42%|████") into a command's output; it is off unless --verbose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generate(*extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "workbench", "generate", "--prompt", "Hi", "--max-new-tokens", "2", *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


@pytest.mark.real_model
@pytest.mark.slow
def test_generate_prints_no_weight_loading_bar_unless_verbose(smollm2):
    quiet = _generate()
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "Loading weights" not in quiet.stdout + quiet.stderr
    loud = _generate("--verbose")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "Loading weights" in loud.stderr  # the switch is the library's own: --verbose turns it back on


def test_every_subcommand_takes_verbose():
    from workbench.commands.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["models", "--verbose", "list"]).verbose
    assert parser.parse_args(["store", "--verbose", "list"]).verbose
    assert not parser.parse_args(["store", "list"]).verbose
