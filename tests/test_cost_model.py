"""t(n, L) (core.cost_model, pure) and its measurement and cache (core.timing) on a tiny model and SmolLM2."""

from __future__ import annotations

import json
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.cost_model import CostModel, monotone_grid

SIZES = (0, 4, 16, 64)
LENGTHS = (256, 1024, 4096)
GRID = ((0.010, 0.012, 0.020, 0.050), (0.012, 0.016, 0.030, 0.080), (0.020, 0.030, 0.070, 0.200))


def test_the_measured_points_are_read_back_and_bilinear_between_them():
    m = CostModel(SIZES, LENGTHS, GRID)
    for j, length in enumerate(LENGTHS):
        for i, n in enumerate(SIZES):
            assert m(n, length) == pytest.approx(GRID[j][i])
    # Halfway in n and in L: the mean of the four corners.
    assert m(10, 640) == pytest.approx((0.012 + 0.020 + 0.016 + 0.030) / 4)
    assert m(16, 2560) == pytest.approx((0.030 + 0.070) / 2)  # on a measured size: linear in L only
    assert m.ratio(64, 4096) == pytest.approx(10.0)
    assert m.curve_at(1024) == (SIZES, GRID[1])


def test_beyond_the_grid_it_extends_linearly_in_l_and_n_and_clamps_below():
    m = CostModel(SIZES, LENGTHS, GRID)
    # The last two lengths' slope per size, continued: 2 × 4096 − 1024 = 7168 doubles the 1024→4096 step.
    assert m(0, 7168) == pytest.approx(0.020 + (0.020 - 0.012))
    assert m(64, 7168) == pytest.approx(0.200 + (0.200 - 0.080))
    assert m(16, 100) == pytest.approx(0.020)  # below the shortest length: the shortest's times
    assert m(-3, 256) == pytest.approx(0.010)
    assert m(112, 1024) == pytest.approx(0.080 + (0.080 - 0.030) * 48 / 48)  # the last segment's slope in n


def test_a_noisy_grid_is_made_monotone_in_both_axes():
    noisy = (
        (0.010, 0.030, 0.020, 0.050),  # 4 nodes slower than 16: a busy spell
        (0.009, 0.016, 0.030, 0.080),  # 1024 tokens faster than 256 at n = 0
        (0.020, 0.030, 0.070, 0.200),
    )
    m = CostModel(SIZES, LENGTHS, noisy)
    assert m.seconds[0][:2] == (0.009, 0.016)  # lowered to what larger sizes / lengths measured
    assert m.seconds == monotone_grid(noisy)
    for row in m.seconds:
        assert list(row) == sorted(row)
    for col in zip(*m.seconds):
        assert list(col) == sorted(col)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.001, 1.0), min_size=4, max_size=4), min_size=3, max_size=3),
    st.floats(0, 150),
    st.floats(0, 150),
    st.floats(1, 12000),
    st.floats(1, 12000),
)
def test_any_grid_gives_a_cost_that_never_falls_with_more_nodes_or_more_context(rows, n1, n2, l1, l2):
    m = CostModel(SIZES, LENGTHS, rows)
    (n_lo, n_hi), (l_lo, l_hi) = sorted((n1, n2)), sorted((l1, l2))
    assert m(n_lo, l_lo) <= m(n_hi, l_lo) + 1e-12
    assert m(n_lo, l_lo) <= m(n_lo, l_hi) + 1e-12
    assert m(n_hi, l_lo) <= m(n_hi, l_hi) + 1e-12  # also beyond the largest size and the longest length
    assert m(n_lo, l_lo) > 0


def test_one_measured_length_is_flat_in_l_and_bad_grids_are_refused():
    m = CostModel((0, 8), (512,), ((0.01, 0.02),))
    assert m(8, 64) == m(8, 512) == m(8, 9000) == pytest.approx(0.02)
    for bad in [
        dict(sizes=(1, 8)),
        dict(sizes=(0,)),
        dict(lengths=(1024, 256)),
        dict(lengths=()),
        dict(seconds=((0.01, 0.02),) * 2),
        dict(seconds=((0.01, 0.0),)),
        dict(seconds=((0.01, float("nan")),)),
    ]:
        args = dict(sizes=(0, 8), lengths=(512,), seconds=((0.01, 0.02),)) | bad
        with pytest.raises(ValueError):
            CostModel(**args)


def test_a_cost_model_round_trips_through_a_dict():
    m = CostModel(SIZES, LENGTHS, GRID)
    assert CostModel.from_dict(json.loads(json.dumps(m.to_dict()))) == m


# ---------------------------------------------------------------- measurement and cache (core.timing)


@pytest.fixture
def home(tmp_path, monkeypatch):
    from core import timing

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(timing, "_models", {})
    return tmp_path


def test_repeat_to_grows_a_cache_with_its_own_rows(tiny):
    from core import cache as kv
    from core.engine import prefill

    cache = kv.new_cache(tiny.model)
    prefill(tiny.model, [5, 6, 7, 8, 9], cache)
    before = cache.layers[0].keys.clone()
    kv.repeat_to(cache, 12)
    assert kv.cache_length(cache) == 12
    keys = cache.layers[-1].keys
    assert torch.equal(cache.layers[0].keys[..., :5, :], before)
    assert torch.equal(keys[..., 5:10, :], keys[..., :5, :]) and torch.equal(keys[..., 10:12, :], keys[..., :2, :])


def test_the_grid_of_lengths_fits_the_model_context(tiny):
    from core.errors import InvalidInputError
    from core.timing import practical_lengths

    assert practical_lengths(tiny) == (256, 512 - 64 - 1)
    big = type(tiny)(model=None, tokenizer=None, max_context=8192)
    assert practical_lengths(big) == (256, 1024, 4096)
    assert practical_lengths(type(tiny)(model=None, tokenizer=None, max_context=300)) == (300 - 65,)
    with pytest.raises(InvalidInputError, match="too short"):
        practical_lengths(type(tiny)(model=None, tokenizer=None, max_context=40))


@pytest.mark.measured_cost
def test_cost_model_is_measured_once_per_machine_and_read_back(tiny, home, monkeypatch):
    from core import timing

    model = timing.cost_model(tiny)
    path = timing.timing_path(tiny)
    assert path.name == f"tiny-cpu-float32-{torch.get_num_threads()}t.json"
    saved = json.loads(path.read_text())
    machine = timing.machine_signature(tiny)
    assert saved["machine"] == machine and machine["threads"] == torch.get_num_threads()
    assert machine["torch"] == torch.__version__ and machine["dtype"] == "float32" and "cpu" in machine
    assert saved["lengths"] == [256, 447] and saved["sizes"] == list(timing.SIZES)
    assert saved["clock"] == ("thread_time" if torch.get_num_threads() == 1 else "perf_counter")
    assert model.lengths == (256, 447) and all(t > 0 for row in model.seconds for t in row)

    # The read-back, with a measurement of known times: the tiny model's millisecond forwards beside other tests'
    # work can come out disturbed (core.cost_model.disorder), and a disturbed file is measured again by design
    calls = []
    grid = [[0.01 * (1 + n / 8) for n in timing.SIZES]] * 2
    monkeypatch.setattr(timing, "measure_grid", lambda *a, **k: calls.append(a) or grid)
    clean = timing.cost_model(tiny, remeasure=True)
    assert len(calls) == 1 and json.loads(path.read_text())["disorder"] == 1.0
    monkeypatch.setattr(timing, "_models", {})
    assert timing.cost_model(tiny) == clean and len(calls) == 1  # read from the file: same machine

    saved = json.loads(path.read_text())
    saved["machine"] = {**machine, "cpu": "another CPU"}
    path.write_text(json.dumps(saved))
    monkeypatch.setattr(timing, "_models", {})
    assert timing.cost_model(tiny).seconds[0][0] == 0.01 and len(calls) == 2  # another machine: measured again

    path.write_text(json.dumps({"sizes": [0, 1], "seconds": [0.01, 0.02]}))  # the old t(n)-only layout
    monkeypatch.setattr(timing, "_models", {})
    timing.cost_model(tiny)
    assert len(calls) == 3 and json.loads(path.read_text())["format"] == timing.FORMAT


def test_cost_curve_is_the_slice_at_its_length(tiny, home):
    from core import timing

    model = timing.cost_model(tiny)
    curve = timing.cost_curve(tiny)
    assert curve.sizes == model.sizes
    assert curve.seconds == pytest.approx([model(n, timing.CURVE_LENGTH) for n in model.sizes])


@pytest.mark.measured_cost
@pytest.mark.real_model
def test_on_smollm2_more_context_makes_each_node_cost_more(smollm2):
    """The measurement on a real model: t grows with L, and the extra cost of 32 nodes over a single token
    grows with L too (each node attends to the whole prefix). One thread: a shared machine's other
    processes then slow every point alike instead of starving two threads unevenly."""
    from core import timing

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grid = timing.measure_grid(smollm2, sizes=(0, 32), lengths=(256, 4096), repeats=3)
    finally:
        torch.set_num_threads(threads)
    m = CostModel((0, 32), (256, 4096), grid)
    assert m(0, 4096) > m(0, 256) and m(32, 4096) > m(32, 256)
    assert m(32, 4096) - m(0, 4096) > m(32, 256) - m(0, 256) > 0


@pytest.mark.measured_cost
@pytest.mark.real_model
def test_calibrate_timing_prints_the_grid_and_its_ratios_and_saves_it(smollm2, tmp_path, monkeypatch, capsys):
    from core import timing
    from core.models import models_dir
    from workbench.commands.main import main

    monkeypatch.setenv("WORKBENCH_MODELS", str(models_dir()))  # the fetched model, with a fresh home for the timing
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(timing, "_models", {})

    monkeypatch.setattr(timing, "SIZES", (0, 4))
    monkeypatch.setattr(timing, "LENGTHS", (256, 512))
    monkeypatch.setattr(timing, "REPEATS", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared machine two threads wait for each other far longer than one computes
    try:
        assert main(["calibrate", "--timing", "--model", "smollm2-135m", "--dtype", "float32"]) == 0
        path = timing.timing_path(smollm2)  # named by the thread count it was measured with
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert "| L \\ n | 0 | 4 |" in out and "t(n, L) / t(0, L)" in out
    assert re.search(r"\| 512 \| 1\.00 \| \d+\.\d\d \|", out)
    saved = json.loads(path.read_text())
    assert saved["lengths"] == [256, 512] and saved["sizes"] == [0, 4] and f"saved {path}" in err
    assert path.name.endswith("-1t.json") and saved["clock"] == "thread_time"
