"""Eleventh newcomer pass: the Compare tab's token cap and whole-number fields, the speed-up of a method that wrote
other text than greedy, and a stopped run's "divergence". Each test failed on the code before its fix."""

from __future__ import annotations

import pytest

from core.errors import InvalidInputError


def _form_field(demo, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from workbench.service import ModelPool
    from workbench.ui import build_app

    return build_app(db=str(tmp_path_factory.mktemp("db") / "t.db"), pool=ModelPool("cpu", "float32"))


def _checked(methods: list[str], params: dict, max_new_tokens=8, repeats=1, task_choice=None, tasks=None):
    """A Comparison of `methods` on the default model, checked (no model loads)."""
    import threading
    from types import SimpleNamespace

    from workbench.ui.compare_tab import PARAM_FIELDS, CompareRequest, Comparison

    fields = {n: params.get(n) for n in PARAM_FIELDS}
    req = CompareRequest(
        "smollm2-135m", None, methods, "p", "", True, max_new_tokens, fields, task_choice, None, None, None, repeats
    )
    pool = SimpleNamespace(allow_local=False)
    c = Comparison(req, None, pool, tasks or {}, threading.Event(), threading.Event, (), "here")
    c.check()
    return c


def test_a_token_cap_out_of_the_fields_range_is_refused_not_clamped(demo):
    """Typed 5000, −3 and 0 into max_new_tokens: the page's slider clamped them to 1024 and 1 without a word, and the
    runs were stored with those. Mutation caught: the field back to a gr.Slider (its page clamps, and its preprocess
    refuses 5000 in Gradio's words), or check_max_new_tokens clamping."""
    import gradio as gr

    from workbench.ui.compare_tab import check_max_new_tokens

    field = _form_field(demo, "compare-max-new")
    assert not isinstance(field, gr.Slider)  # its page clamps a typed value to the range, unseen by any handler
    for typed in (5000, -3, 0, 2.5):
        assert field.preprocess(typed) == typed  # reaches the handler as typed
    with pytest.raises(InvalidInputError) as e:
        check_max_new_tokens(5000, 128)
    assert str(e.value) == (
        "max_new_tokens = 5000 is out of range [1, 1024]: longer generations take the `bench` command"
    ), str(e.value)
    for typed in (-3, 0, 2.5, "x"):
        with pytest.raises(InvalidInputError, match="max_new_tokens"):
            _checked(["greedy"], {}, max_new_tokens=typed)
    assert check_max_new_tokens(64.0, 128) == 64 and check_max_new_tokens(1024, 128) == 1024
    # a blank field is the task's cap, not a refusal
    assert (
        check_max_new_tokens(None, 200) == 200 and _checked(["greedy"], {}, max_new_tokens=None).max_new_tokens == 128
    )


def test_a_fraction_in_a_whole_number_field_is_refused(demo):
    """Repeats 2.5 ran "pass 1 of 2", and key_len 2.5 ran as 2: Gradio's precision=0 rounded them before any check.
    Mutation caught: precision=0 back on the int parameters' fields or on Repeats."""
    from core.params import PARAMS
    from workbench.ui.compare_tab import PARAM_FIELDS

    for name in [n for n in PARAM_FIELDS if PARAMS[n].kind is int]:
        assert _form_field(demo, f"param-{name}").preprocess(2.5) == 2.5, name
    assert _form_field(demo, "compare-repeats").preprocess(2.5) == 2.5
    with pytest.raises(InvalidInputError, match="repeats must be a whole number from 1 to 10, got 2.5"):
        _checked(["greedy"], {}, repeats=2.5)
    with pytest.raises(InvalidInputError, match="key_len must be an integer, got 2.5"):
        _checked(["casd"], {"key_len": 2.5})
    # a whole number typed as 2.0 is that number
    whole = _checked(["casd"], {"key_len": 2.0}, repeats=2.0)
    assert whole.per_method[0]["key_len"] == 2 and whole.n_repeats == 2


def test_a_speed_up_on_other_text_than_greedys_is_marked():
    """csd looped "1 wooden spatula, …" for 1024 tokens and headlined 2.40×, the fastest in the chart and table, where
    greedy ended after 230 tokens: nothing beside the speed-up said it was measured on other text. Mutation caught:
    Speeds.add dropping the divergence, or the table, the chart or the line under them leaving the mark out."""
    from browser_util import synthetic_run

    from workbench.ui.compare_tab import Reference, Speeds, other_text_note, speed_frame
    from workbench.ui.figures.compare import speed_figure

    greedy = synthetic_run("greedy", output_ids=list(range(230)), decode_seconds=10.0, stop_reason="eos")
    same = synthetic_run("pld", output_ids=list(range(230)), decode_seconds=5.0, stop_reason="eos")
    looped = synthetic_run("csd", output_ids=list(range(40)) + [7] * 984, decode_seconds=10.0, stop_reason="eos")
    speeds, reference = Speeds(["greedy", "pld", "csd"]), Reference(list(greedy.output_ids), greedy)
    speeds.add(0, greedy, reference, None)
    speeds.add(1, same, reference, None)
    speeds.add(2, looped, reference, 40)
    other = speeds.other_text()
    assert other == {"csd": (40, 1024)}, other
    frame = speed_frame(speeds.summary(), other)
    assert list(frame["speed-up"]) == ["1.00×", "2.00×", "4.45× †"], list(frame["speed-up"])
    note = other_text_note(other)
    assert note.startswith("† wrote other text than greedy: csd from token 40 (of 1024).") and "different text" in note
    assert other_text_note({}) == ""
    ticks = list(speed_figure(speeds.summary(), {"greedy": "#000", "pld": "#111", "csd": "#222"}, other).data[0].x)
    assert [t.endswith("†") for t in ticks] == [False, False, True], ticks


def test_a_run_stopped_before_it_parted_from_greedy_is_no_divergence():
    """Run #48 (aasd[auto]) was Stopped after 5 tokens, all equal to greedy's #47: the column drew the red divergence
    bar before "■ stopped (Stop)" and the Diff tab said "first divergence at token 5". Mutation caught:
    core.stats.run_divergence returning the shorter length for a run cut short, or a caller reading first_divergence."""
    from browser_util import synthetic_run

    from core.stats import run_divergence
    from workbench.ui.compare_tab import stopped_before_diverging
    from workbench.ui.diff_tab import diff_outputs

    greedy = synthetic_run("greedy", output_ids=list(range(20)), stop_reason="eos")
    stopped = synthetic_run(
        "aasd", params={"fitted": 1}, output_ids=list(range(5)), status="cancelled", stop_reason="cancelled"
    )
    capped = synthetic_run("pld", output_ids=list(range(5)), stop_reason="max_new_tokens")
    ended = synthetic_run("pld", output_ids=list(range(5)), stop_reason="eos")  # its own EOS: a different token
    assert run_divergence(greedy, stopped) is None and run_divergence(stopped, greedy) is None
    assert run_divergence(greedy, capped) is None
    assert run_divergence(greedy, ended) == 5
    assert run_divergence(greedy, synthetic_run("pld", output_ids=[0, 1, 9], status="cancelled")) == 2
    assert stopped_before_diverging(greedy, stopped) == "\n\n*stopped before diverging: its 5 tokens equal greedy's*"
    assert stopped_before_diverging(greedy, ended) == ""
    origins = lambda run: [(f"t{t}", "whole") for t in run.output_ids]  # noqa: E731
    head, body = diff_outputs(47, greedy, origins(greedy), 48, stopped, origins(stopped))
    assert "first divergence" not in head and "stopped before diverging" in head, head
    assert "#48 aasd[auto] was stopped after 5 tokens, all equal to #47 greedy's first 5" in head, head
    head, _ = diff_outputs(50, capped, origins(capped), 47, greedy, origins(greedy))
    assert "#50 pld reached its token cap after 5 tokens, all equal to #47 greedy's first 5" in head, head
    assert ' first"' not in body and "(first divergence)" not in body  # no cell outlined
    head, _ = diff_outputs(47, greedy, origins(greedy), 49, ended, origins(ended))
    assert "first divergence at token 5" in head, head
    # Replay's re-run panel marks no divergence on a re-run stopped while equal to the original (rerun_outputs)
    from core.trace import StepTrace
    from workbench.ui.replay_view import rerun_outputs

    def stepped(ids, **fields):  # a run with one step a token, so its text is drawn
        steps = [StepTrace(index=i, cache_pos=10 + i, tree_size=0, accepted=0, emitted=[t]) for i, t in enumerate(ids)]
        return synthetic_run("pld", steps, **fields)

    _, rerun_html, _ = rerun_outputs(47, stepped(range(20)), stepped(range(5), status="cancelled"), 48)
    _, parted_html, _ = rerun_outputs(47, stepped(range(20)), stepped([0, 1, 9]), 49)
    assert "first divergence" not in rerun_html.lower() and "first divergence" in parted_html.lower(), parted_html
