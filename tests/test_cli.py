"""The command line as a package: one module per subcommand, shared helpers in one module, no cycles,
light to start (no torch for --help), and reachable as `python -m workbench` and as the console script."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

from workbench.commands.main import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "workbench" / "commands"


def commands_imported_by(path: Path) -> set[str]:
    """The workbench.commands modules a file imports, lazily or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = (
                [f"{node.module}.{a.name}" for a in node.names]
                if node.module == "workbench.commands"
                else [node.module]
            )
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith("workbench.commands")}
    return found


def test_subcommand_modules_import_only_the_shared_helpers():
    modules = {p.stem: commands_imported_by(p) for p in COMMANDS.glob("*.py") if p.stem != "__init__"}
    assert set(modules) == {
        "main",
        "common",
        "models",
        "generate",
        "bench",
        "score",
        "report",
        "calibrate",
        "store",
        "serve",
    }
    assert modules["common"] == set()
    for name, imported in modules.items():
        if name not in ("main", "common"):
            assert imported <= {"workbench.commands.common"}, (name, imported)
    assert modules["main"] == {f"workbench.commands.{m}" for m in modules if m not in ("main", "common")}
    assert commands_imported_by(COMMANDS / "__init__.py") == set()


def test_every_subcommand_and_its_flags_are_on_the_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == ["models", "generate", "bench", "score", "report", "calibrate", "store", "serve"]
    assert [m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS] == list(sub.choices)
    flags = {name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()}
    common = {
        "--model",
        "--draft",
        "--device",
        "--dtype",
        "--trust-remote-code",
        "--no-store",
        "--tag",
        "--db",
        "--delta",
        "--max-new-tokens",
    }
    for name in ("generate", "bench", "report"):
        assert common <= flags[name], name
    assert {"--data", "--methods", "--categories", "--limit", "--out", "--execute-code"} <= flags["bench"]
    assert {"--results", "--data", "--execute-code", "--out"} <= flags["score"]
    assert {"--corpus", "--held-out-from", "--limit", "--benchmark", "--fresh", "--device", "--dtype"} <= flags[
        "calibrate"
    ]
    assert {"--host", "--port", "--device", "--db"} <= flags["serve"]
    args = parser.parse_args(["score", "--results", "r.json", "--data", "t.jsonl", "--execute-code"])
    assert (args.func.__module__, args.execute_code) == ("workbench.commands.score", True)
    args = parser.parse_args(["store", "list", "--db", "x.db"])
    assert args.func.__module__ == "workbench.commands.store" and args.db == "x.db"


def test_help_does_not_import_torch_transformers_or_gradio():
    probe = (
        "import sys\nfrom workbench.commands.main import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in ('torch', 'transformers', 'gradio', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "score", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "--results" in done.stdout


def test_the_console_script_and_package_data_point_at_what_exists():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, func = project["project"]["scripts"]["workbench"].partition(":")
    assert getattr(import_module(module), func) is import_module("workbench.commands.main").main
    globs = project["tool"]["setuptools"]["package-data"]["workbench.evaluation"]
    shipped = [p.name for g in globs for p in (ROOT / "workbench" / "evaluation").glob(g)]
    assert "published.json" in shipped


@pytest.mark.real_model
@pytest.mark.parametrize("as_json", [False, True])
def test_generate_shows_its_progress_on_stderr(smollm2, monkeypatch, capsys, tmp_path, as_json):
    """Issue 33 (first ten minutes), 3: generate printed nothing while it read a long prompt (and, with --json, while
    it decoded), as if hung; it shows bench's kind of progress bar (tqdm) on stderr, stdout keeping only the output."""
    from workbench.commands import common
    from workbench.commands.main import main

    monkeypatch.setattr(common, "load_models", lambda args: (smollm2, None))
    argv = ["generate", "--prompt", "Name three colours.", "--max-new-tokens", "6", "--no-store"]
    assert main(argv + ["--db", str(tmp_path / "t.db")] + (["--json"] if as_json else [])) == 0
    out, err = capsys.readouterr()
    assert "reading the prompt" in err and "reading the prompt" not in out
    if as_json:  # the text does not stream: a bar counts the tokens written
        assert "writing" in err and "/6" in err
        json_line = out.strip()
        assert json_line.startswith("{") and json_line.endswith("}")
