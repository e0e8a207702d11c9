"""The app's API arguments fuzzed (Hypothesis, 300 cases per family), calling the handlers directly: no HTTP and
no model (the pool's load is a stub that answers "the model would load here" once every check has passed). Every
input comes back as a result or a clear one-line message, never an exception (Gradio logged those as tracebacks:
run ids ≥ 2⁶³, 1e308 or "1 OR 1=1" gave OverflowError, issue 30 item 19). In multi-user mode the model box takes
presets and hub ids only, with one answer for anything else, and never opens a path (item 20)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from conftest import FUZZ_PROFILE, hub_offline
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import WorkbenchError

# 300 cases per family, as for the fuzzed commands (tests/security/test_fuzz.py): each case runs a handler, not a
# parser; the known past failures are pinned as @example cases, which run on top. fuzz-quick runs 100.
CASES = settings(
    settings.get_profile(FUZZ_PROFILE), max_examples=min(300, settings.get_profile(FUZZ_PROFILE).max_examples)
)
REQUEST = SimpleNamespace(session_hash="fuzz-session")
STUB = "the model would load here"

HOSTILE = [
    "1 OR 1=1",
    "1e308",
    "9223372036854775808",
    "9223372036854775807",
    "-1",
    "0",
    "#1 aasd",
    "#2",
    " 1 ",
    "1.0",
    "../../etc/passwd",
    "/etc",
    "/etc/passwd",
    "~",
    "./models",
    "model.gguf",
    "/tmp/x.gguf",
    "a/b/c",
    "owner/name",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "smollm2-135m",
    "",
    " ",
    "\x00",
    "١٢",
    "²",
    "nan",
    "inf",
    "[1]",
    "<script>",
    "'; DROP TABLE runs; --",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**63 - 1, 2**64, 10**400 // 10**300, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324]),
    st.text(max_size=24),
    st.sampled_from(HOSTILE),
)
anything = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=4), scalars, max_size=2))
run_ids = st.one_of(st.sampled_from([1, 2, 1.0, "1", "#2 aasd", 3]), scalars)
id_lists = st.one_of(st.lists(run_ids, max_size=4), anything)


def clear(message) -> None:
    """A message the page shows: text, one line, no traceback."""
    assert isinstance(message, str), message
    assert "Traceback" not in message and "\n" not in message.strip(), message


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny):
    """A store with an aasd run and a csd run of the tiny model, the app's handlers over it, a stub model pool."""
    from core.methods import run_method
    from workbench import service
    from workbench.store import Store
    from workbench.ui.access import viewer_of
    from workbench.ui.compare_tab import CompareHandlers
    from workbench.ui.replay_tab import OPEN_OUTPUTS, ReplayHandlers
    from workbench.ui.shared import RunCache

    mp = pytest.MonkeyPatch()
    hub_offline(mp)
    mp.setenv("WORKBENCH_HOME", str(tmp_path_factory.mktemp("home")))
    store = Store(str(tmp_path_factory.mktemp("db") / "traces.db"))
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]
    viewer = viewer_of(REQUEST, single_user=False)
    for method in ("aasd", "csd"):
        store.save_run(run_method(method, tiny, prompt, {"max_new_tokens": 8}), tags=list(viewer.run_tags))

    class StubPool(service.ModelPool):
        def _load(self, spec, how):
            raise WorkbenchError(STUB)

    pool = StubPool("cpu", "float32", allow_local=False)
    cache = RunCache(store)
    who = lambda request: viewer_of(request, single_user=False)  # noqa: E731
    tasks = {t.id: t for t in service.sample_tasks()}
    yield SimpleNamespace(
        store=store,
        cache=cache,
        viewer=viewer,
        pool=pool,
        open_outputs=OPEN_OUTPUTS,
        compare=CompareHandlers(store, pool, tasks, who),
        replay=ReplayHandlers(store, pool, cache, who),
    )
    mp.undo()


@pytest.fixture(autouse=True)
def no_logged_tracebacks(caplog):
    caplog.set_level(logging.WARNING)
    yield
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


# ---------------------------------------------------------------- /compare

methods = st.one_of(
    st.lists(
        st.sampled_from(
            [
                "greedy",
                "aasd",
                "csd",
                "casd",
                "pld",
                "sd",
                "aasd[alpha=0.2]",
                "casd[delta=2]",
                "no-such",
                "aasd[",
                "greedy[x=1]",
            ]
        ),
        max_size=5,
    ),
    anything,
)
numbers = st.one_of(st.sampled_from([None, 0.1, 1, 6, 64]), scalars)


@CASES
@given(
    model=st.one_of(st.sampled_from(["smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct"]), scalars),
    draft=st.one_of(st.just(""), scalars),
    method_list=methods,
    prompt=st.one_of(st.just("Say hi."), anything),
    context=anything,
    chat=anything,
    max_new=numbers,
    params=st.lists(numbers, min_size=15, max_size=15),
    task=anything,
    compress=numbers,
    compressor=anything,
    repeats=numbers,
)
@example(
    model="/etc",
    draft="",
    method_list=["greedy"],
    prompt="hi",
    context="",
    chat=True,
    max_new=4,
    params=[None] * 15,
    task=None,
    compress=1,
    compressor="selfinfo",
    repeats=1,
)
@example(
    model="smollm2-135m",
    draft="",
    method_list=["greedy"],
    prompt="hi",
    context="",
    chat=True,
    max_new=1e308,
    params=[None] * 15,
    task=None,
    compress=1,
    compressor="selfinfo",
    repeats=2**63,
)
def test_compare_api(
    world, model, draft, method_list, prompt, context, chat, max_new, params, task, compress, compressor, repeats
):
    outputs = list(
        world.compare.compare(
            REQUEST,
            model,
            draft,
            method_list,
            prompt,
            context,
            chat,
            max_new,
            *params,
            task,
            {},
            compress,
            compressor,
            repeats,
        )
    )
    assert outputs
    for out in outputs:
        clear(out[0])
    last = outputs[-1][0]
    assert last.startswith("**⚠"), last  # refused, or the stub's "the model would load here": never a run here
    if STUB in last:  # everything was accepted: only then may the model load
        assert isinstance(model, str) and model.strip() in ("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct")


# ---------------------------------------------------------------- item 20: the model box in multi-user mode

PATHS = [
    "/etc",
    "/etc/passwd",
    "/nonexistent",
    "/root/.cache",
    "./",
    "../",
    "~",
    "~/x",
    "/tmp/model.gguf",
    "x.gguf",
    "/",
    "a/b/c",
    "C:\\Windows",
    "\\\\server\\share",
    "tests",
    "workbench",
    "README.md",
    "core/../core",
    "core/models.gguf",
    "./core/models.py",
]


@pytest.mark.parametrize("spec", PATHS)
def test_the_model_box_gives_one_answer_for_anything_not_a_preset_or_hub_id(world, spec, monkeypatch):
    """The same message for an existing folder, a file, a .gguf and a missing path, and the path is never looked at."""
    import os

    from workbench import service

    looked = []
    for name in ("stat", "lstat", "listdir", "scandir"):
        real = getattr(os, name)
        monkeypatch.setattr(
            os, name, lambda path, *a, _real=real, **k: looked.append(str(path)) or _real(path, *a, **k)
        )
    with pytest.raises(WorkbenchError) as err:
        world.pool.load(spec)
    monkeypatch.undo()
    assert str(err.value) == str(service.not_offered(spec))
    assert not looked, looked


def test_a_hub_id_that_names_a_path_here_gets_the_answer_of_one_that_does_not(tmp_path, monkeypatch):
    """owner/name is a hub id; where it also names a folder or a file here, core.models would open that: the pool
    answers exactly as for a hub id that exists nowhere (offline here), and opens nothing."""
    from workbench import service

    (tmp_path / "owner" / "name").mkdir(parents=True)
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "models.py").write_text("x")
    monkeypatch.chdir(tmp_path)
    hub_offline(monkeypatch)
    pool = service.ModelPool("cpu", "float32", allow_local=False)
    answers = {}
    for spec in ("owner/name", "core/models.py", "owner/nothing-here"):
        with pytest.raises(WorkbenchError) as err:
            pool.load(spec)
        answers[spec] = str(err.value).replace(spec, "<spec>")
    assert len(set(answers.values())) == 1, answers
    assert "from the Hugging Face hub" in answers["owner/name"]


def test_local_models_load_when_allowed(world, tmp_path):
    from workbench import service

    pool = service.ModelPool("cpu", "float32", allow_local=True)
    with pytest.raises(WorkbenchError) as err:
        pool.load(str(tmp_path / "missing.gguf"))
    assert "GGUF file not found" in str(err.value)  # core.models' own answer: the path was looked at


# ---------------------------------------------------------------- replay & tune, share, re-run

REPLAY = ["open", "step_data", "show_step", "active", "advance", "run_figures", "tune", "rerun", "share", "open_if_new"]


@CASES
@given(
    which=st.sampled_from(REPLAY),
    rid=run_ids,
    k=numbers,
    rule=st.one_of(
        st.sampled_from(["(the run's own)", "aasd", "aasd-fixed", "csd", "top-k", "hf-generate", "no-such"]), anything
    ),
    values=st.lists(numbers, min_size=5, max_size=5),
    other=anything,
)
@example(which="open", rid=2**63, k=0, rule=None, values=[None] * 5, other=None)
@example(which="show_step", rid=1e308, k=float("inf"), rule=None, values=[None] * 5, other=None)
@example(which="share", rid="1 OR 1=1", k=0, rule=None, values=[None] * 5, other=None)
@example(which="tune", rid=1, k=0, rule="(the run's own)", values=[float("nan"), 1e308, -1, "x", 2**70], other=None)
def test_replay_api(world, which, rid, k, rule, values, other):
    h = world.replay
    if which == "open":
        out = h.open(REQUEST, rid)
        assert len(out) == world.open_outputs
        if isinstance(out[1], str):
            clear(out[1])
    elif which == "open_if_new":
        assert len(h.open_if_new(REQUEST, rid, other)) == world.open_outputs
    elif which == "step_data":
        h.step_data(REQUEST, rid)
    elif which == "show_step":
        clear(h.show_step(REQUEST, rid, k)[0])
    elif which == "active":
        h.active(REQUEST, rid, rule)
    elif which == "advance":
        h.advance(REQUEST, k, rid)
    elif which == "run_figures":
        h.run_figures(REQUEST, rid)
    elif which == "tune":
        clear(h.tune(REQUEST, rid, rule, *values)[0])
    elif which == "rerun":
        out = h.rerun(REQUEST, rid, rule, *values, other if isinstance(other, str) else "")
        clear(out[2])
        assert out[2].startswith("**⚠") or "re-run #" in out[2] or out[2] == "load a run first"
    else:
        clear(h.share(REQUEST, rid))


# ---------------------------------------------------------------- diff, export, analytics, memory


@CASES
@given(
    which=st.sampled_from(["diff", "export", "analytics", "memory"]),
    a=run_ids,
    b=run_ids,
    choice=id_lists,
    last=id_lists,
    param=st.one_of(st.sampled_from(["auto", "alpha", "delta", "lam"]), anything),
)
@example(which="diff", a=2**63, b="1 OR 1=1", choice=None, last=None, param="auto")
@example(which="export", a=1, b=1, choice=[1e308], last=None, param="auto")
@example(which="memory", a=1, b=1, choice=["9223372036854775808"], last=None, param="auto")
@example(which="analytics", a=1, b=1, choice=[1, 2], last=None, param=float("nan"))
def test_runs_api(world, which, a, b, choice, last, param):
    import warnings

    from workbench.ui.analytics_tab import figures_of, labelled_traces
    from workbench.ui.diff_tab import diff_runs
    from workbench.ui.export_tab import export_zip
    from workbench.ui.memory_tab import memory_view

    if which == "diff":
        clear(diff_runs(world.cache, a, b, world.viewer)[0])
    elif which == "export":
        path, note = export_zip(world.store, choice, last, world.viewer)
        clear(note)
    elif which == "analytics":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gr.Warning outside a request: a Python warning
            figures_of(labelled_traces(world.cache, choice, last, world.viewer), param)
    else:
        clear(memory_view(world.cache, choice, last, world.viewer)[0])
