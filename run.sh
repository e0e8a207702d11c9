#!/usr/bin/env bash
# One entry point for people and CI:
#   bash run.sh demo   install, fetch the embedded default model, start the workbench at http://127.0.0.1:7860
#                      (single-user: a local, one-person workbench sees every stored run, the CLI's too)
#   bash run.sh test   install, fetch the embedded default model, run the default (fast) test suite
#   bash run.sh table  install, then compare greedy and PLD on the bundled samples as a table in the terminal
#   bash run.sh test -m slow    the long tests on real models (any pytest arguments pass through)
#   bash run.sh lint   install, then ruff check ., ruff format --check . and mypy (over core/; settings in pyproject.toml)
# The virtual environment lives in .venv (override with VENV=path).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}

# What the install depends on: when none of it changed since the last install into this venv, setup skips pip
# (a minute of resolving on every call otherwise). Delete $VENV/.installed (or the venv) to force a reinstall.
install_key() {
  cat pyproject.toml requirements*.txt 2>/dev/null | sha256sum | cut -d' ' -f1
}

setup() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  local stamp="$VENV/.installed" key
  key=$(install_key)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$key" ] || ! python -c "import workbench, torch" 2>/dev/null; then
    python -m pip install -q --upgrade pip
    # The CPU build of torch 2.13 (on these machines it is on disk); a machine with CUDA may install its own torch first.
    python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
    python -m pip install -q -e ".[test]"
    echo "$key" > "$stamp"
  fi
  python -m workbench models fetch smollm2-135m
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  demo)
    setup
    python -m workbench serve --single-user "$@"
    ;;
  table)
    setup
    # float32, as the workbench runs: in this CPU's bfloat16 a lossless method can part from greedy at a near-tie
    python -m workbench bench --data assets/samples.jsonl --methods greedy,pld --limit 1 --dtype float32 "$@"
    ;;
  test)
    setup
    # Two phases on a machine with two or more cores: every test that drives no browser and judges no clock on a
    # pytest-xdist worker per core (WORKBENCH_TEST_WORKERS, default 2; a module's tests stay on one worker), then the
    # browser tests and those marked `alone` in one process with the machine to themselves: beside another worker's
    # forwards the browser tests met load-dependent races (two of four CI runs had one or two failures that passed
    # alone). In one process the default suite took 26 minutes on a 2-core AVX2 CPU. WORKBENCH_TEST_WORKERS=1 runs
    # everything in one process.
    cores=$(nproc 2>/dev/null || echo 1)
    workers=${WORKBENCH_TEST_WORKERS:-$((cores < 2 ? 1 : 2))}
    if [ "$workers" -gt 1 ]; then
      # pytest exits 5 when it selects no test: for one phase (a path or -k that names one kind only) not a failure,
      # for both it is (a -k that matches nothing)
      rc=0 rc2=0
      python -m pytest -n "$workers" --dist loadgroup --phase parallel "$@" || rc=$?
      python -m pytest --phase alone "$@" || rc2=$?
      if [ "$rc" = 5 ] && [ "$rc2" = 5 ]; then exit 5; fi
      [ "$rc" = 5 ] && rc=0
      [ "$rc2" = 5 ] && rc2=0
      exit $((rc > rc2 ? rc : rc2))
    else
      python -m pytest "$@"
    fi
    ;;
  lint)
    setup
    ruff check .
    ruff format --check .
    mypy
    ;;
  setup)
    setup
    ;;
  *)
    echo "usage: bash run.sh demo|test|table|lint|setup [args]" >&2
    exit 2
    ;;
esac
