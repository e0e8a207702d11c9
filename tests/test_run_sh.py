"""Issue 33, sixth newcomer pass, defect 9: `run.sh` reinstalled the project on every call (a minute of pip each
time); it installs when the venv is new or pyproject.toml / requirements.txt changed since its last install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls.log"
exit 0
"""


def _setup(work: Path) -> list[str]:
    """`bash run.sh setup` in `work` with a stand-in venv whose python logs what it is asked; the calls it made."""
    log = work / "venv" / "calls.log"
    log.unlink(missing_ok=True)
    subprocess.run(["bash", "run.sh", "setup"], cwd=work, env={"PATH": "/usr/bin:/bin", "VENV": "venv"}, check=True)
    return log.read_text().splitlines() if log.exists() else []


def test_setup_installs_only_when_the_dependencies_changed(tmp_path):
    for name in ("run.sh", "pyproject.toml", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    installs = lambda calls: [c for c in calls if c.startswith("-m pip install")]  # noqa: E731
    first = _setup(tmp_path)
    assert any("-e .[test]" in c for c in installs(first)), first
    assert "-m workbench models fetch smollm2-135m" in first
    again = _setup(tmp_path)
    assert installs(again) == [] and "-m workbench models fetch smollm2-135m" in again  # current: no pip at all
    with (tmp_path / "pyproject.toml").open("a") as f:
        f.write("\n# a changed dependency\n")
    assert any("-e .[test]" in c for c in installs(_setup(tmp_path)))
