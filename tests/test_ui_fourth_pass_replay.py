"""Fourth newcomer pass, Replay & tune, Frontier and Analytics: each test fails on the code before its fix."""

from __future__ import annotations

from test_rescore import node, step_of

from core.trace import RunTrace
from workbench.rescore import rescore_run
from workbench.ui import replay_view as rv

FITTED = {"alpha": 0.1, "beta": 0.3, "alpha_alignment": 0.1, "beta_alignment": 0.3, "fitted": 1}


def aasd_run(nodes, params=FITTED) -> RunTrace:
    return RunTrace(
        method="aasd",
        params=dict(params),
        model="tiny",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1, 2],
        steps=[step_of(nodes)],
        status="complete",
    )


# -- item 3: the sliders move the context rule; alignment nodes keep their own α, β, and every line says so -------
def test_flip_reason_names_the_alpha_beta_it_used_per_source():
    run = aasd_run(
        [
            node(1, 0, "context", "rejected", p=0.1, entropy=1.0, max_p=0.6, rank=1),
            node(2, 0, "alignment", "rejected", p=0.2, entropy=1.0, max_p=0.6, rank=1),
        ]
    )
    result = rescore_run(run, {"alpha": 0.0, "beta": 0.001})
    by = {n.node: n for n in result.steps[0].nodes}
    assert by[1].decision == "accepted" and "context α 0, β 0.001" in by[1].reason
    # the alignment node is judged by its own fitted rule: θ = min(0.1·1 + 0.3, 0.6) = 0.4 > p, and the reason says so
    assert by[2].decision == "rejected" and "alignment α 0.1, β 0.3" in by[2].reason
    summary = rv.rescore_summary(result, {"alpha": 0.0, "beta": 0.001})
    assert "alignment nodes keep their own α 0.1, β 0.3" in summary


def test_a_run_without_alignment_values_names_one_alpha_beta():
    run = aasd_run(
        [node(1, 0, "alignment", "rejected", p=0.1, entropy=1.0, max_p=0.6, rank=1)], {"alpha": 0.1, "beta": 0.3}
    )
    result = rescore_run(run, {"alpha": 0.0, "beta": 0.001})
    n = result.steps[0].nodes[1]
    assert n.decision == "accepted" and n.reason.endswith("α 0, β 0.001") and "alignment α" not in n.reason
    assert "keep their own" not in rv.rescore_summary(result, {"alpha": 0.0, "beta": 0.001})


def test_the_alpha_beta_sliders_say_they_move_context_nodes_when_alignment_keeps_its_own():
    """Fifth-pass leftover of item 3: the sliders' own labels, not only the re-score's lines, say which nodes they
    move on a run whose alignment nodes have fitted values; a run without them keeps the plain label."""
    fitted = {**FITTED, "alpha_alignment": 0.2}
    assert rv.slider_label("alpha", fitted).startswith("α alpha (context nodes; alignment nodes keep the run's α 0.2)")
    assert "alignment nodes keep the run's β 0.3" in rv.slider_label("beta", fitted)
    assert rv.slider_label("alpha", {"alpha": 0.1, "beta": 0.3}) == rv.slider_label("alpha")
    assert "alignment" not in rv.slider_label("delta", fitted)


def test_no_change_says_why_when_every_judged_node_was_the_argmax():
    run = aasd_run(
        [
            node(1, 0, "context", "accepted", p=0.9, entropy=0.3, max_p=0.9, rank=0),
            node(2, 1, "context", "accepted", p=0.8, entropy=0.5, max_p=0.8, rank=0),
        ]
    )
    summary = rv.rescore_summary(rescore_run(run, {"beta": 0.9}), {"beta": 0.9})
    assert "no decision changes" in summary and "all 2 judged nodes were the target's own top token" in summary
    # a rejected non-argmax node that stays rejected: no such claim
    run = aasd_run([node(1, 0, "context", "rejected", p=0.01, entropy=0.3, max_p=0.9, rank=1)])
    summary = rv.rescore_summary(rescore_run(run, {"beta": 0.5}), {"beta": 0.5})
    assert "no decision changes" in summary and "top token" not in summary


def test_rerun_line_names_the_settings_it_ran_with():
    original = aasd_run([node(1, 0, "context", "accepted", p=0.9, entropy=0.3, max_p=0.9, rank=0)])
    new = aasd_run(
        [node(1, 0, "context", "accepted", p=0.9, entropy=0.3, max_p=0.9, rank=0)],
        {**FITTED, "beta": 0.9, "fitted": 0},
    )
    md = rv.rerun_outputs(7, original, new, 8)[2]
    assert "re-run #8 (aasd, context α 0.1, β 0.9 · alignment α 0.1, β 0.3)" in md


# -- item 9: the Frontier tab says what it shows and what fills it; "no frontier" is said once, without backticks in a plot
def test_frontier_intro_names_a_command_the_cli_accepts_and_no_frontier_is_said_once(tmp_path, monkeypatch):
    import shlex

    from workbench.commands.main import build_parser
    from workbench.ui.figures.frontier import FRONTIER_COMMAND, FRONTIER_INTRO, frontier_figure, frontier_view

    assert FRONTIER_COMMAND in FRONTIER_INTRO and "speed-up over greedy" in FRONTIER_INTRO
    assert "1.5 hours" in FRONTIER_INTRO  # the sixth pass ran it and met a 1 h 39 min estimate the tab never gave
    args = build_parser().parse_args(shlex.split(FRONTIER_COMMAND)[3:])  # after "python -m workbench"
    assert args.frontier and args.out == "results/frontier" and args.limit == 4
    monkeypatch.chdir(tmp_path)
    for missing in ("results/frontier", "../.."):
        fig, message = frontier_view(missing)
        assert fig is None and message, missing  # the message once, below the plot, not also inside it
    assert "`" not in frontier_figure(None).layout.annotations[0].text


# -- item 14: Analytics' axis and its help line in the same words ----------------------------------------------------
def test_node_acceptance_axis_uses_the_help_lines_words():
    from core.stats import ACCEPTANCE_MEANING, NODE_ACCEPTANCE
    from workbench.ui.figures import analytics

    run = aasd_run([node(1, 0, "context", "accepted", p=0.9, entropy=0.3, max_p=0.9, rank=0)])
    axis = analytics.accept_by_source_figure([("#1 aasd", run)]).layout.yaxis.title.text
    ratio = axis.split(": ", 1)[1]  # "accepted ÷ judged"
    assert axis.startswith(NODE_ACCEPTANCE) and ACCEPTANCE_MEANING[NODE_ACCEPTANCE].startswith(ratio), axis
    assert ratio in analytics.acceptance_help(NODE_ACCEPTANCE)


# -- item 8: the position-acceptance title fits a half-width figure (its meaning is in the help line) -----------------
def test_position_figure_title_is_one_short_line():
    from workbench.ui.figures import replay

    run = aasd_run([node(1, 0, "context", "accepted", p=0.9, entropy=0.3, max_p=0.9, rank=0)])
    title = replay.position_figure(run, "#147 aasd").layout.title.text
    # "…(given the positions before it accepted)" ran out of a half-width figure (~60 characters at 14 px)
    assert title == "#147 aasd: position acceptance per draft position", title
