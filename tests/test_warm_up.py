"""Issue 33, third newcomer pass: a process's first timed run (greedy's, as a comparison runs it first) paid one-off
first-forward costs. ModelPool now runs each model once, untimed, the first time it hands it out
(core.methods.warm_up); benchmarks/bench_first_pass.py measures what that changes."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture
def calls(monkeypatch):
    """Every core.methods.warm_up call (the real one runs), with when it began and ended."""
    import time

    from core import methods

    real, seen = methods.warm_up, []

    def spy(model):
        start = time.perf_counter()
        out = real(model)
        seen.append((model, start, time.perf_counter()))
        return out

    monkeypatch.setattr(methods, "warm_up", spy)
    return seen


def test_the_pool_warms_each_model_once_before_handing_it_out(smollm2, calls):
    from workbench.service import ModelPool

    pool = ModelPool("cpu", "float32")
    loaders = [threading.Thread(target=pool.load, args=("smollm2-135m",)) for _ in range(3)]
    for t in loaders:
        t.start()
    for t in loaders:
        t.join()
    target = pool.load("smollm2-135m").target
    assert target is smollm2  # core.models keeps one copy per (model, device, dtype)
    assert [c[0] for c in calls] == [smollm2]  # once, however many requests loaded it at the same time

    off = ModelPool("cpu", "float32")
    off.warm_up_forward = False  # what bench_first_pass --no-warm-up measures against
    off.load("smollm2-135m")
    assert len(calls) == 1


def test_the_warm_up_takes_every_forward_shape_of_a_timed_run(smollm2):
    from core.methods import warm_up

    greedy, tree = warm_up(smollm2)
    assert len(greedy.prompt_ids) > 1 and len(greedy.output_ids) > 1  # a multi-token prefill, one-token steps
    assert all(s.tree_size == 0 for s in greedy.steps)
    assert max(s.tree_size for s in tree.steps) > 1  # a verification forward over several draft nodes
    assert tree.output_ids == greedy.output_ids  # strict: it decoded, not just ran


def test_the_warm_up_is_not_inside_the_timed_run(smollm2, calls):
    from workbench.service import ModelPool, stream_run

    pool = ModelPool("cpu", "float32")
    models = pool.load("smollm2-135m")
    [(_, _, warmed)] = calls
    import time

    started = time.perf_counter()
    progress = list(stream_run("greedy", models, [1, 2, 3, 4], {"max_new_tokens": 4}, prompt_text="x"))
    assert progress[-1].run is not None and progress[-1].run.status == "complete"
    assert len(calls) == 1 and warmed < started  # done before the run, never again during it


def test_a_failed_warm_up_does_not_stop_the_model_loading(smollm2, monkeypatch, caplog):
    from core import methods
    from workbench.service import ModelPool

    def broken(model):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(methods, "warm_up", broken)
    assert ModelPool("cpu", "float32").load("smollm2-135m").target is smollm2
    assert "warm-up forward of smollm2-135m skipped: RuntimeError: no kernel" in caplog.text
