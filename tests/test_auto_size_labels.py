"""The gate benchmark's label endings (benchmarks/bench_auto_size.py): a label such as `aasd[auto]+noprobe` runs
the method `aasd[auto]` with one sizer setting changed, so two sizers can be compared in one interleaved run."""

import importlib.util
from pathlib import Path

import pytest

import core.sizing

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("_bench_auto_size", ROOT / "benchmarks" / "bench_auto_size.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("end", ["+online", "+plain", "+pause", "+noprobe"])
def test_a_label_ending_names_the_method_it_runs(bench, end):
    assert bench.method_of(f"aasd[auto]{end}") == "aasd[auto]"
    assert bench.method_of(f"casd[delta=0.5]{end}") == "casd[delta=0.5]"
    assert bench.method_of("recycle") == "recycle"


def test_every_label_ending_changes_settings_the_sizer_reads(bench):
    for end, changed in bench.SIZER_SETTINGS.items():
        for key in changed:
            assert hasattr(core.sizing, key), f"{end} sets core.sizing.{key}, which does not exist"
    assert bench.SIZER_SETTINGS[bench.NO_PROBE] == {"PROBE": False}


def test_the_noprobe_ending_reaches_the_sizer_a_run_builds(monkeypatch):
    # The ending works by setting the module's switch before each run builds its sizer, which reads it when built.
    from core.cost_model import CostModel
    from core.sizing import TreeSizer

    cost = CostModel((0, 1, 64), (256, 4096), ((0.01, 0.01, 0.01), (0.01, 0.01, 0.01)))
    for value in (False, True):
        monkeypatch.setattr(core.sizing, "PROBE", value)
        assert TreeSizer(cost).probe is value
