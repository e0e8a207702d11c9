"""The app's model-free logic: the default model on a machine (or Space) without the packaged preset,
method checks before any model loads, prompt guards."""

from __future__ import annotations

import threading

import pytest

from core.errors import InvalidInputError
from workbench import service


def test_default_model_falls_back_to_the_hub_copy_when_the_preset_is_not_fetched(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MODELS", str(tmp_path / "empty"))
    assert service.default_model() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert service.model_choices() == ["HuggingFaceTB/SmolLM2-135M-Instruct"]


def test_method_checks_name_the_fix():
    assert service.check_methods(["greedy", "aasd[align_graft=1]"], "smollm2-135m", None) == [
        ("greedy", {}),
        ("aasd", {"align_graft": "1"}),
    ]
    with pytest.raises(InvalidInputError, match="choose at least one method"):
        service.check_methods([], "smollm2-135m", None)
    with pytest.raises(InvalidInputError, match="needs a draft model.*qwen2.5-coder-0.5b"):
        service.check_methods(["csd"], "qwen2.5-coder-1.5b", "")
    with pytest.raises(InvalidInputError, match="needs a draft model"):
        service.check_methods(["sd"], "smollm2-135m", None)
    service.check_methods(["csd"], "smollm2-135m", None)  # single model: CSD over context drafts


def test_method_params_keep_only_what_the_method_takes_and_check_ranges():
    assert service.method_params("greedy", {"delta": 0.2, "max_new_tokens": 8}) == {"max_new_tokens": 8}
    assert service.method_params("casd", {"delta": 0.2, "alpha": 0.5}) == {"delta": 0.2}
    with pytest.raises(InvalidInputError, match="alpha = -1 is out of range"):
        service.method_params("aasd", {"alpha": -1})


def test_prompt_guards():
    class Tok:
        chat_template = None

        def __call__(self, text, add_special_tokens=True):
            return type("Enc", (), {"input_ids": list(range(len(text.split())))})()

    with pytest.raises(InvalidInputError, match="the prompt is empty"):
        service.build_prompt(Tok(), "  ", "")
    with pytest.raises(InvalidInputError, match="limit here is"):
        service.build_prompt(Tok(), "q", "x" * (service.MAX_PROMPT_CHARS + 1))
    text, ids = service.build_prompt(Tok(), "question?", "some context")
    assert text == "some context\n\nquestion?" and len(ids) == 3


# ---------------------------------------------------------------- a long prompt: progress and Stop between chunks


def _stream_prompt(monkeypatch, model, chunk: int, n: int, stop_after_chunks: int | None, store=None):
    """stream_run of greedy on an n-token prompt read `chunk` tokens at a time; Stop is set as soon as the
    `stop_after_chunks`-th chunk has been read (in the decoding thread, as a click landing then would: the reports the
    page sees can trail the decoding thread on a busy core). The (done, total) pairs reported, the finished run, and
    the chunks the decoding thread began."""
    from core import cache as kv
    from core import engine

    monkeypatch.setattr(kv, "PREFILL_CHUNK", chunk)
    stop, begun, reads, run = threading.Event(), [], [], None
    chunks = engine.prefill_chunks

    def counted(*args, **kwargs):
        for span in chunks(*args, **kwargs):
            begun.append(span)
            yield span  # the chunk is read when the engine asks for the next one
            if len(begun) == stop_after_chunks:
                stop.set()

    monkeypatch.setattr(engine, "prefill_chunks", counted)
    ids = [(7 * i) % 50 + 2 for i in range(n)]
    for prog in service.stream_run(
        "greedy",
        service.Models(model, None),
        ids,
        {"max_new_tokens": 4},
        prompt_text="p",
        stop=stop,
        store=store,
        every=0.0,
    ):
        if prog.prefill is not None and not prog.steps:
            reads.append(prog.prefill)
        if prog.run is not None:
            run = prog.run
    return reads, run, begun


def test_stream_run_reports_each_prompt_chunk_read(monkeypatch, tiny):
    reads, run, _ = _stream_prompt(monkeypatch, tiny, chunk=64, n=200, stop_after_chunks=None)
    assert reads == [(0, 200), (64, 200), (128, 200), (192, 200), (200, 200)]
    assert run.status == "complete" and len(run.output_ids) == 4


def test_stop_during_a_long_prompt_ends_the_run_within_one_chunk(monkeypatch, tiny, tmp_path):
    from workbench.store import Store

    store = Store(str(tmp_path / "runs.db"))
    reads, run, begun = _stream_prompt(monkeypatch, tiny, chunk=32, n=480, stop_after_chunks=2, store=store)
    assert run.status == "cancelled" and run.output_ids == [] and run.steps == []
    assert reads == [(0, 480), (32, 480), (64, 480)] and begun == [(0, 32), (32, 64)]  # no chunk after the Stop
    stored = store.load_run(max(r.id for r in store.list_runs()), nodes=False).trace
    assert stored.status == "cancelled"


@pytest.mark.real_model
def test_a_real_models_prompt_is_read_in_chunks_that_stop_honours(monkeypatch, smollm2):
    reads, run, _ = _stream_prompt(monkeypatch, smollm2, chunk=128, n=700, stop_after_chunks=None)
    assert [d for d, _ in reads] == [0, 128, 256, 384, 512, 640, 700] and run.status == "complete"
    reads, run, begun = _stream_prompt(monkeypatch, smollm2, chunk=128, n=700, stop_after_chunks=1)
    assert run.status == "cancelled" and not run.output_ids and begun == [(0, 128)] and len(reads) == 2


@pytest.mark.real_model
def test_warm_up_loads_the_model_and_measures_its_costs_holding_its_slot(monkeypatch, tmp_path, smollm2):
    """serve's warm-up: t(n, L) measured in the background while the page opens, with the model's slot held (a
    comparison that comes meanwhile waits, and the pool says for what), and the slot given back after."""
    import threading
    import time

    from core import timing
    from core.models import models_dir

    monkeypatch.setenv("WORKBENCH_MODELS", str(models_dir()))
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))  # nothing measured here yet
    measured, release = [], threading.Event()
    monkeypatch.setattr(
        timing, "cost_model", lambda target, remeasure=False: measured.append(target.name) or release.wait(60)
    )
    pool = service.ModelPool("cpu", "float32")
    thread = pool.warm_up("smollm2-135m")
    end = time.monotonic() + 120
    while not measured and time.monotonic() < end:
        time.sleep(0.05)
    assert measured == ["smollm2-135m"] and "measuring" in pool.busy["smollm2-135m"]
    with pytest.raises(service.Cancelled):  # held: a comparison would wait
        with pool.slot("smollm2-135m", should_stop=lambda: True, poll=0.01):
            pass
    release.set()
    thread.join(30)
    assert not thread.is_alive() and pool.busy == {}
    with pool.slot("smollm2-135m", should_stop=lambda: True, poll=0.01):  # given back
        pass


# ---------------------------------------------------------------- streaming to a slow page


def _slow_page(stream, page_seconds: float, reported: list[int]) -> tuple[list[tuple[int, int]], float]:
    """Consume `stream` as a page on a busy core does, `page_seconds` per update; for each running update, (steps it
    shows, steps the worker had reported when it was handed over), and the seconds from the first to the last."""
    import time

    seen, times = [], []
    for prog in stream:
        if prog.run is None and prog.steps:
            seen.append((len(prog.steps), reported[0]))
            times.append(time.monotonic())
            time.sleep(page_seconds)
    return seen, times[-1] - times[0] if times else 0.0


def test_a_slow_page_gets_every_step_done_so_far_in_each_update(monkeypatch, tiny):
    """A consumer slower than a step got one more step per update: the page fell further behind the model the longer
    the run (it showed "3 of 64" for seconds, then jumped), and the updates came once per step, not per interval."""
    import time

    from core.trace import RunTrace, StepTrace

    reported = [0]

    def fake_run(method, target, prompt_ids, params, *, on_step, **kw):
        steps = []
        for i in range(40):
            time.sleep(0.02)  # a greedy step
            steps.append(StepTrace(i, len(prompt_ids) + i, 0, 0, [5]))
            reported[0] = i + 1
            on_step(steps[-1])
        return RunTrace("greedy", {}, "tiny", None, "cpu", "float32", "p", list(prompt_ids), steps=steps)

    monkeypatch.setattr(service, "run_method", fake_run)
    stream = service.stream_run(
        "greedy", service.Models(tiny, None), [2, 3, 4], {"max_new_tokens": 40}, prompt_text="p", every=0.05
    )
    seen, _ = _slow_page(stream, 0.15, reported)
    assert max(done - shown for shown, done in seen) <= 3, seen  # each update carries what the model has done
    assert len(seen) <= 40 * 0.02 / 0.15 + 2, seen  # one update per page round trip, not one per step


@pytest.mark.real_model
def test_a_slow_page_keeps_up_with_greedy_on_a_real_model(smollm2, tmp_path):
    """greedy on SmolLM2 through the app's path (recorded into a store) to a page taking 0.3 s per update: every
    update shows the steps done, and there are a few per second rather than one per token."""
    from workbench.store import Store

    reported = [0]

    class Counting(Store):
        def recording(self, header, tags=(), flush_seconds=None):
            rec = super().recording(header, tags, flush_seconds)
            add = rec.add_step

            def add_step(step):  # the worker's own count of the steps it has reported
                reported[0] += 1
                add(step)

            rec.add_step = add_step
            return rec

    ids = smollm2.tokenizer("Count from one to forty in words: one, two,").input_ids
    stream = service.stream_run(
        "greedy",
        service.Models(smollm2, None),
        ids,
        {"max_new_tokens": 48},
        prompt_text="p",
        store=Counting(str(tmp_path / "runs.db")),
    )
    seen, seconds = _slow_page(stream, 0.3, reported)
    assert seen and max(done - shown for shown, done in seen) <= 3, seen
    # one update per round trip: the page's 0.3 s and then stream_run's 0.25 s between updates (not one per step)
    assert len(seen) <= seconds / (0.3 + 0.25) + 2, (seen, seconds)


def test_wait_idle_waits_for_a_generation_and_gives_its_slot_back():
    """The app's shutdown (and each test module's) waits for request threads still inside a model: wait_idle
    returns only once the slot is free, gives every slot back, and says False when the wait timed out."""
    import time

    pool = service.ModelPool("cpu", "float32")
    assert pool.wait_idle(timeout=0.1)  # nothing ever ran
    inside, leave = threading.Event(), threading.Event()

    def generation():
        with pool.slot("m"):
            inside.set()
            leave.wait(5)

    worker = threading.Thread(target=generation)
    worker.start()
    inside.wait(5)
    assert not pool.wait_idle(timeout=0.2)  # the generation still holds the slot
    threading.Timer(0.3, leave.set).start()
    started = time.monotonic()
    assert pool.wait_idle(timeout=5)
    assert time.monotonic() - started >= 0.2  # it waited for the generation to leave
    worker.join(5)
    deadline = time.monotonic() + 2
    with pool.slot("m", should_stop=lambda: time.monotonic() > deadline):  # and gave the slot back (else Cancelled)
        pass
