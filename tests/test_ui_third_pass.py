"""Issue 33, third newcomer pass: the acceptance names (one each, with its meaning, in the app and the CLI) and the
"stopping" status. The browser side: tests/test_browser_newcomer.py."""

from __future__ import annotations

import re

import pytest
from browser_util import synthetic_run

from core.stats import ACCEPTANCE_MEANING, NODE_ACCEPTANCE, POSITION_ACCEPTANCE, TOKEN_ACCEPTANCE
from core.trace import NodeTrace, StepTrace


def step(accepted: int, tree: int) -> StepTrace:
    """A chain of `tree` draft nodes under the root, the first `accepted` of them accepted."""

    def node(d: int, decision: str, source: str = "context") -> NodeTrace:
        return NodeTrace(0, 0, d, d - 1, d, d + 1, "x", source, decision, "")

    nodes = [node(0, "accepted", "root")]
    for d in range(1, tree + 1):
        nodes.append(node(d, "accepted" if d <= accepted else "rejected" if d == accepted + 1 else "unreached"))
    return StepTrace(0, 0, tree, accepted, list(range(accepted + 1)), nodes=nodes)


RUN = synthetic_run("aasd", [step(3, 4), step(0, 4)])  # 3 of 8 drafted tokens accepted; 3 of 5 judged nodes


def test_the_three_acceptances_have_distinct_names_and_meanings():
    names = [TOKEN_ACCEPTANCE, NODE_ACCEPTANCE, POSITION_ACCEPTANCE]
    assert len(set(names)) == 3 and all(n.endswith("acceptance") and n != "acceptance" for n in names)
    assert len({ACCEPTANCE_MEANING[n] for n in names}) == 3


def test_a_columns_metrics_name_token_acceptance_with_its_meaning_on_hover():
    from workbench.ui.shared import metrics_md

    line = metrics_md(RUN, 7, None)
    hover = re.search(r'<span[^>]*title="([^"]*)"[^>]*>token acceptance</span> (\d+)%', line)
    assert hover, line
    assert hover.group(1) == ACCEPTANCE_MEANING[TOKEN_ACCEPTANCE]
    assert hover.group(2) == "38"  # 3 of 8 drafted, not 3 of 5 judged (node acceptance) nor a fraction
    assert not re.search(r"(?<!token )acceptance \d", line)  # no bare "acceptance" left


def test_the_figures_name_node_and_position_acceptance_and_the_help_lines_say_what_they_are():
    from workbench.ui.figures.analytics import accept_by_depth_figure, accept_by_source_figure, acceptance_help
    from workbench.ui.figures.replay import position_figure

    depth = accept_by_depth_figure([("#1 aasd", RUN)]).layout.title.text
    source = accept_by_source_figure([("#1 aasd", RUN)]).layout.title.text
    assert depth == "node acceptance by depth" and source == "node acceptance by source"
    position = position_figure(RUN, "#1 aasd").to_plotly_json()["layout"]["title"]["text"]
    assert "position acceptance per draft position" in position
    for name in (NODE_ACCEPTANCE, POSITION_ACCEPTANCE):
        assert acceptance_help(name) == f"**{name}**: {ACCEPTANCE_MEANING[name]}"


@pytest.mark.real_model
def test_the_cli_prints_token_acceptance_as_a_percentage(smollm2, tmp_path, capsys):
    from workbench.commands.main import main

    prompt = "Repeat: red green blue red green blue red green blue red green"
    argv = ["generate", "--model", "smollm2-135m", "--dtype", "float32", "--device", "cpu", "--prompt", prompt]
    assert main([*argv, "--method", "aasd", "--max-new-tokens", "8", "--no-store"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"token acceptance \d{1,3}%", err), err
    assert not re.search(r"acceptance 0\.\d\d", err), err


def test_the_status_says_stopping_once_stop_is_asked_for():
    from workbench.service import Progress
    from workbench.ui.compare_tab import running_status

    reading = running_status("greedy", 1, 3, 1, 1, Progress("greedy", [], prefill=(0, 6814), stopping=True), 64)
    assert reading.startswith("stopping **greedy**") and "next prompt chunk" in reading
    writing = running_status("aasd", 2, 3, 1, 1, Progress("aasd", [step(1, 2)], stopping=True), 64)
    assert writing.startswith("stopping **aasd**") and "next step" in writing
    going = running_status("aasd", 2, 3, 1, 1, Progress("aasd", [step(1, 2)]), 64)
    assert going.startswith("running **aasd**")


def test_a_csd_column_without_a_shipped_table_says_so_and_nothing_else():
    from core.params import SHIPPED_MEMORY
    from workbench.ui.compare_tab import memory_head

    none = memory_head(SHIPPED_MEMORY, None)
    assert "ships no table for this model pair" in none and "rescues nothing" in none
    assert "shipped table" not in none and "table shipped" not in none  # no "shipped table … none shipped"
    named = memory_head(SHIPPED_MEMORY, "the table shipped for m, context drafts (2,000 observations, `f.json.gz`)")
    assert named.startswith("*memory: the table shipped for m, context drafts (2,000 observations")


@pytest.mark.real_model
def test_smollm2_ships_a_context_draft_memory_disjoint_from_the_app_samples(smollm2, spec_bench):
    """The package's SmolLM2 table (built by `calibrate ... --ship`, its .sha256 file beside it) is what csd reads on a
    fresh install, and it never saw the app's bundled samples (checked by prompt hash and by word 13-grams)."""
    from core.memory import file_sha256, pair_fingerprint, shipped_memory, shipped_memory_path
    from workbench import service
    from workbench.evaluation.calibration import Overlap, check_disjoint, corpus_prompts
    from workbench.ui.compare_tab import shipped_table

    path = shipped_memory_path(pair_fingerprint(smollm2.fingerprint, None))
    assert path is not None
    sha_file = path.with_name(path.name + ".sha256").read_text()
    assert sha_file.split()[0] == file_sha256(path) and "# rebuild: python -m workbench calibrate" in sha_file
    memory = shipped_memory(smollm2)
    assert memory.total > 1000 and memory.meta["calibration"]["method"] == "aasd-strict"
    assert shipped_table(smollm2) == (
        f"the table shipped for smollm2-135m, context drafts ({memory.total:,} observations, `{path.name}`)"
    )
    samples = [t.prompt() for t in service.sample_tasks()]
    assert check_disjoint(memory, samples) == []
    corpus = memory.meta["calibration"]["corpus"].split(", items after")[0]  # the --corpus value
    prompts, _, _ = corpus_prompts(corpus, 10**6)  # the whole corpus the calibration drew from
    overlap = Overlap.of(samples)
    assert prompts and not [p.id for p in prompts if overlap.hits(p.text)]
