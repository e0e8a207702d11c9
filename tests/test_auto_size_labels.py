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


# ---------------------------------------------------------------- --lockstep: an item's runs one step each in turn


def test_lockstep_runs_decode_as_one_run_after_another_does_and_take_their_steps_in_turn(bench, tiny, monkeypatch):
    """Each run in its own thread, one step each in turn: the same outputs as runs made one after another (exact
    methods equal greedy), and between two steps of one run every other run still decoding takes exactly one."""
    from types import SimpleNamespace

    from core import timing
    from tests.test_sizing import flat

    monkeypatch.setattr(timing, "cost_model", lambda target, remeasure=False: flat(0.01))  # trees get drafted
    labels = ("greedy", "aasd-strict", "recycle", "aasd-strict+noprobe", bench.CONTROL)
    base = {label: bench.method_of(label) for label in labels}
    settings = {k: getattr(core.sizing, k) for k in ("CAUTION", "PAUSE", "PROBE")}
    starts = {label: (lambda label=label: bench.start_run(label, base, settings, {}, 24)) for label in labels}
    task = SimpleNamespace(input=None, stop=())
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7]
    turns: list[str] = []
    order = bench.rotated(labels, 2)

    together = bench.lockstep_runs(order, starts, tiny, prompt, {}, task, on_turn=turns.append)
    apart = {label: bench.timed_run(*starts[label](), tiny, prompt, None, task) for label in labels}

    assert list(together) == list(order)
    greedy = apart["greedy"][0].output_ids
    for label in labels:
        run, cpu, wall = together[label]
        assert run.output_ids == apart[label][0].output_ids == greedy, label
        assert 0 < cpu and 0 < wall
    assert any(s.tree_size > 0 for s in together["aasd-strict"][0].steps)  # trees were drafted, in a thread too
    # turn order: the first round follows `order`; after it, a run's next turn comes only after each other run
    # still decoding took one
    assert turns[: len(order)] == list(order)
    steps = {label: len(together[label][0].steps) for label in labels}
    assert {label: turns.count(label) for label in labels} == steps  # a turn before each step
    last = {}
    for i, label in enumerate(turns):
        if label in last:
            between = turns[last[label] + 1 : i]
            running = [other for other in order if other != label and turns[i:].count(other) + between.count(other) > 0]
            assert sorted(between) == sorted(running), (label, between, running)
        last[label] = i


def test_an_error_in_one_lockstep_run_reaches_the_caller_and_frees_the_others(bench, tiny):
    from types import SimpleNamespace

    def broken():
        raise ValueError("no such method")

    starts = {"greedy": lambda: ("greedy", {"max_new_tokens": 8}), "bad": broken}
    with pytest.raises(ValueError, match="no such method"):
        bench.lockstep_runs(("bad", "greedy"), starts, tiny, [5, 6, 7, 8], {}, SimpleNamespace(input=None, stop=()))


def test_lockstep_on_the_real_model_reproduces_greedy_with_every_run_timed(bench, smollm2):
    """SmolLM2 in float32, this machine's own cost curve: greedy, the control and two auto-sized strict methods
    decoded in lockstep give greedy's tokens, each with its own CPU and turn time."""
    from types import SimpleNamespace

    from core.models import encode_prompt

    labels = ("greedy", "aasd-strict", "recycle", bench.CONTROL)
    base = {label: bench.method_of(label) for label in labels}
    settings = {k: getattr(core.sizing, k) for k in ("CAUTION", "PAUSE", "PROBE")}
    starts = {label: (lambda label=label: bench.start_run(label, base, settings, {}, 16)) for label in labels}
    prompt = encode_prompt(smollm2.tokenizer, "List three prime numbers and say why each is prime.", chat=True)
    runs = bench.lockstep_runs(labels, starts, smollm2, prompt, {}, SimpleNamespace(input=None, stop=()))
    greedy = bench.timed_run(*starts["greedy"](), smollm2, prompt, None, SimpleNamespace(input=None, stop=()))
    for label, (run, cpu, wall) in runs.items():
        assert run.output_ids == greedy[0].output_ids, label
        assert len(run.output_ids) == 16 and cpu > 0 and wall > 0
