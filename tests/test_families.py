"""Task families with held-out and evaluation splits (workbench.evaluation.families, built_tasks) and the
admissibility rule across them (workbench.evaluation.admissibility)."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from conftest import NO_SPEC_BENCH, SPEC_BENCH

from core.errors import InvalidInputError
from core.trace import NodeTrace, StepTrace
from workbench.evaluation.admissibility import FamilyOutcome, choose_setting, judge, paired_interval, pooled_speedup

# ---------------------------------------------------------------- admissibility (pure)


def outcome(family, setting, greedy, speed=1.0):
    """Greedy decodes 100 tokens per item in 1 s; the setting as many tokens `speed` times faster."""
    n = len(greedy)
    return FamilyOutcome(family, list(setting), list(greedy), 100 * n, n / speed, 100 * n, float(n))


QA_GREEDY = [0, 0, 0, 25.0, 40.0, 0, 10.0, 33.3, 0, 50.0, 0, 0, 12.5, 0, 28.6, 0, 0, 20.0, 0, 31.4]  # mean 12.54
SUMM_GREEDY = [17.0, 21.5, 15.2, 19.9, 14.1, 22.3, 18.8, 16.0, 20.4, 13.3]


def test_a_setting_that_helps_summarization_and_costs_two_thirds_of_qa_is_refused():
    """The issue's case: thresholds fitted on summarization keep its score (above greedy's) and lose 2/3 of
    extractive QA's F1; pooled over both families' items the mean loss is small, and faster: still refused."""
    qa_setting = [s / 3 for s in QA_GREEDY]
    summ_setting = [s + 2.0 for s in SUMM_GREEDY]
    fitted = [outcome("docqa", qa_setting, QA_GREEDY, 1.3), outcome("summarization", summ_setting, SUMM_GREEDY, 3.3)]
    verdict = judge("aasd[alpha=0,beta=0.01]", fitted)
    assert not verdict.admissible and verdict.failing == ("docqa",)
    assert verdict.intervals["docqa"].mean == pytest.approx(-np.mean(QA_GREEDY) * 2 / 3)
    assert verdict.intervals["docqa"].high < 0 and verdict.intervals["summarization"].low > 0
    lossless = {
        "aasd[beta=1]": [
            outcome("docqa", QA_GREEDY, QA_GREEDY, 1.05),
            outcome("summarization", SUMM_GREEDY, SUMM_GREEDY, 1.1),
        ]
    }
    chosen, judgements = choose_setting({"aasd[alpha=0,beta=0.01]": fitted, **lossless}, lossless="aasd[beta=1]")
    assert chosen == "aasd[beta=1]" and [j.admissible for j in judgements] == [False, True]
    chosen, _ = choose_setting({"aasd[alpha=0,beta=0.01]": fitted}, lossless="aasd-lossless")
    assert chosen == "aasd-lossless"  # nothing admissible: the rule's lossless setting


def test_the_fastest_admissible_setting_wins_and_a_small_loss_within_a_point_is_allowed():
    rng = np.random.default_rng(3)
    greedy = list(rng.uniform(0, 60, 40))
    noise = list(np.asarray(greedy) + rng.normal(0, 0.5, 40))  # ±0.5 points per item: admissible
    worse = list(np.asarray(greedy) - 3.0)
    candidates = {
        "slow": [outcome("a", greedy, greedy, 1.2), outcome("b", greedy, greedy, 1.2)],
        "noisy": [outcome("a", noise, greedy, 1.6), outcome("b", greedy, greedy, 1.5)],
        "fast-but-worse": [outcome("a", worse, greedy, 3.0), outcome("b", greedy, greedy, 3.0)],
        "tie": [outcome("a", greedy, greedy, 1.6), outcome("b", greedy, greedy, 1.5)],
    }
    chosen, judgements = choose_setting(candidates, lossless="lossless")
    assert chosen == "noisy"  # the earlier of two equally fast admissible settings
    by = {j.setting: j for j in judgements}
    assert by["fast-but-worse"].failing == ("a",) and by["noisy"].admissible
    assert by["noisy"].speedup == pytest.approx((8000 / (40 / 1.6 + 40 / 1.5)) / 100)


def test_the_lower_bound_decides_not_the_mean():
    """A mean loss of half a point whose items scatter widely: the interval reaches below −1, so the setting is
    refused though its mean is within a point; the same mean with little scatter passes."""
    greedy = [50.0] * 40
    wide = [50.0 - 0.5 + (12 if i % 2 else -12) for i in range(40)]
    narrow = [50.0 - 0.5 + (0.2 if i % 2 else -0.2) for i in range(40)]
    wide_j, narrow_j = judge("wide", [outcome("rag", wide, greedy)]), judge("narrow", [outcome("rag", narrow, greedy)])
    assert wide_j.intervals["rag"].mean == pytest.approx(-0.5) == narrow_j.intervals["rag"].mean
    assert not wide_j.admissible and wide_j.intervals["rag"].low < -1 and narrow_j.admissible


def test_the_interval_is_a_seeded_percentile_bootstrap_of_the_mean():
    from scipy.stats import bootstrap

    rng = np.random.default_rng(7)
    greedy, setting = rng.uniform(0, 100, 30), rng.uniform(0, 100, 30)
    a = paired_interval(setting, greedy)
    assert a == paired_interval(setting, greedy)  # seeded: the same interval every time
    assert a.mean == pytest.approx(np.mean(setting - greedy)) and a.low < a.mean < a.high and a.items == 30
    ref = bootstrap(
        ((setting - greedy),),
        np.mean,
        n_resamples=2000,
        method="percentile",
        confidence_level=0.95,
        random_state=np.random.default_rng(1),
    ).confidence_interval
    assert a.low == pytest.approx(ref.low, abs=1.5) and a.high == pytest.approx(ref.high, abs=1.5)
    same = paired_interval([5.0] * 8, [5.0] * 8)
    assert (same.low, same.high) == (0.0, 0.0)


def test_no_evidence_or_mismatched_scores_are_errors():
    with pytest.raises(InvalidInputError, match="as many setting scores"):
        paired_interval([1.0, 2.0], [1.0])
    with pytest.raises(InvalidInputError, match="no paired scores"):
        paired_interval([], [])
    with pytest.raises(InvalidInputError, match="finite"):
        paired_interval([float("nan")], [1.0])
    with pytest.raises(InvalidInputError, match="not measured on family code"):
        judge("x", [outcome("docqa", [1.0], [1.0])], families=["docqa", "code"])
    with pytest.raises(InvalidInputError, match="two outcomes"):
        judge("x", [outcome("docqa", [1.0], [1.0])] * 2)
    with pytest.raises(InvalidInputError, match="positive decoding seconds"):
        pooled_speedup([FamilyOutcome("a", [1.0], [1.0], 10, 0.0, 10, 1.0)])


# ---------------------------------------------------------------- the writing score


def _node(step, node, parent, depth, decision, p, source="context"):
    return NodeTrace(
        step=step,
        cache_pos=0,
        node=node,
        parent=parent,
        depth=depth,
        token_id=node,
        token_text="",
        source=source,
        decision=decision,
        reason="",
        p=p,
    )


def test_writing_is_scored_by_the_targets_mean_probability_of_the_emitted_tokens():
    from workbench.evaluation.scores import mean_target_probability

    root = _node(0, 0, -1, 0, "accepted", None, "root")
    step0 = StepTrace(
        0,
        0,
        3,
        2,
        [1, 2, 9],
        nodes=[
            root,
            _node(0, 1, 0, 1, "accepted", 0.5),
            _node(0, 2, 1, 2, "rescued", 0.1),
            _node(0, 3, 0, 1, "rejected", 0.4),
            _node(0, 4, 2, 3, "bonus", 0.9, "model"),
        ],
    )
    step1 = StepTrace(
        1, 3, 1, 1, [7], nodes=[root, _node(1, 1, 0, 1, "accepted", 0.8), _node(1, 2, 1, 2, "bonus", 0.3, "model")]
    )
    # step 1 stopped after its first token (a stop string): its bonus is not emitted
    assert mean_target_probability([step0, step1]) == pytest.approx(100 * (0.5 + 0.1 + 0.9 + 0.8) / 4)
    assert mean_target_probability([]) is None


# ---------------------------------------------------------------- built rows (docqa, code)


@pytest.fixture(scope="module")
def built():
    from workbench.evaluation.built_tasks import code_rows, docqa_rows

    return {
        (name, split): fn(split, n)
        for name, fn in (("docqa", docqa_rows), ("code", code_rows))
        for split, n in (("held_out", 60), ("evaluation", 40))
    }


def _ws(text):
    return " ".join(text.split())


def test_docqa_references_are_spans_with_one_answer_in_their_passage(built):
    from workbench.evaluation.built_tasks import _import, module_entries

    for split in ("held_out", "evaluation"):
        rows = built[("docqa", split)]
        assert {r["question_type"] for r in rows} == {"name", "sentence", "default"}
        assert len({r["_id"] for r in rows}) == len(rows)
        for r in rows:
            flat = _ws(r["context"])
            assert all(_ws(a) in flat for a in r["answers"])
            module, qualname = r["module"], r["entry"]
            entry = next(e for e in module_entries(module) if e.qualname == qualname)
            assert flat.count(_ws(entry.header)) == 1  # the named entry is printed once
            if r["question_type"] in ("name", "sentence"):
                assert flat.count(entry.first_sentence) == 1
                quoted = r["input"] if r["question_type"] == "name" else r["answers"][0]
                assert entry.first_sentence in quoted
            if r["question_type"] == "name":
                assert r["answers"][0] == qualname
            if r["question_type"] == "default":
                param = re.search(r"parameter (\w+) of", r["input"]).group(1)
                obj = _import(module)
                for part in qualname.split("."):
                    obj = getattr(obj, part)
                assert (
                    repr(inspect.signature(obj).parameters[param].default) == r["answers"][0]
                )  # read from the function


def test_code_references_are_the_true_next_line_of_the_source(built):
    from workbench.evaluation.built_tasks import _import

    for split in ("held_out", "evaluation"):
        for r in built[("code", split)]:
            source = inspect.getsource(_import(r["module"]))
            line = source.splitlines()[r["line"] - 1]
            assert line.strip() == r["answers"][0] and not line.strip().startswith("#")
            assert r["context"] + line in source  # the context is exactly what precedes that line
            assert 12 <= len(r["answers"][0]) <= 100 and r["context"].endswith("\n")


def test_the_splits_come_from_disjoint_modules_and_are_rebuilt_identically(built):
    from workbench.evaluation.built_tasks import code_rows, docqa_rows, split_modules

    assert not set(split_modules("held_out")) & set(split_modules("evaluation"))
    for name in ("docqa", "code"):
        modules = {split: {r["module"] for r in built[(name, split)]} for split in ("held_out", "evaluation")}
        assert modules["held_out"] <= set(split_modules("held_out"))
        assert modules["evaluation"] <= set(split_modules("evaluation"))
        assert len(modules["held_out"]) >= 20 and len(modules["evaluation"]) >= 20  # drawn from the modules in turn
    assert docqa_rows("evaluation", 40) == built[("docqa", "evaluation")]
    assert code_rows("held_out", 60) == built[("code", "held_out")]


# ---------------------------------------------------------------- families


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    return tmp_path


def test_built_families_load_as_longbench_tasks_with_the_familys_category(home):
    from workbench.evaluation.families import built_path, family_score, family_tasks

    qa = family_tasks("docqa", "evaluation", limit=5)
    assert len(qa) == 5 and all(t.category == "docqa" and t.metric == "qa_f1" and t.max_new_tokens == 64 for t in qa)
    assert (
        qa[0].prompt().startswith("Read the following text and answer briefly.")
        and built_path("docqa", "evaluation").exists()
    )
    assert family_score(qa[0], qa[0].answers[0]) == 100.0 and family_score(qa[0], "nothing alike") == 0.0
    code = family_tasks("code", "held_out", limit=3)
    assert all(t.category == "code" and not t.chat and t.metric == "code_sim" for t in code)
    assert code[0].prompt().endswith("Next line of code:\n") and family_score(code[0], code[0].answers[0]) == 100.0


@pytest.mark.skipif(not SPEC_BENCH.exists(), reason=NO_SPEC_BENCH)
def test_every_family_has_disjoint_splits(home):
    from workbench.evaluation.families import DEFAULT_FAMILIES, FAMILIES, family_tasks, split_overlap

    assert set(DEFAULT_FAMILIES) <= set(FAMILIES) and len(DEFAULT_FAMILIES) >= 5
    counts = {}
    for name in FAMILIES:
        held, evaluated = family_tasks(name, "held_out"), family_tasks(name, "evaluation")
        counts[name] = (len(held), len(evaluated))
        assert split_overlap(name) == {"ids": [], "text": []}, name
        assert {t.category for t in held + evaluated} == {name}
    assert counts == {
        "docqa": (60, 40),
        "summarization": (40, 40),
        "rag": (40, 40),
        "code": (60, 40),
        "writing": (40, 40),
        "humaneval": (124, 40),
        "gsm8k": (40, 40),
    }
    from workbench.evaluation.tasks import load_dataset_tasks

    rows = [t.id for t in load_dataset_tasks("spec-bench:summarization")]
    assert [t.id for t in family_tasks("summarization", "evaluation")] == rows[:40]  # the benchmarks' items
    assert [t.id for t in family_tasks("summarization", "held_out")] == rows[40:]


def test_unknown_families_and_splits_are_one_line_errors(home):
    from workbench.evaluation.families import family_tasks, parse_families

    assert parse_families(None) == ("docqa", "summarization", "rag", "code", "writing")
    assert parse_families("rag, docqa,rag") == ("rag", "docqa")
    with pytest.raises(InvalidInputError, match="unknown task family poetry; known: docqa"):
        parse_families("rag,poetry")
    with pytest.raises(InvalidInputError, match="unknown task family"):
        family_tasks("poetry", "held_out")
    with pytest.raises(InvalidInputError, match="held_out .for fitting. or evaluation"):
        family_tasks("rag", "test")


@pytest.mark.real_model
def test_on_smollm2_docqa_prompts_are_long_and_greedy_writing_scores_its_own_probabilities(smollm2, home):
    from core.methods import run_method
    from core.models import encode_prompt
    from workbench.evaluation.families import family_score, family_tasks

    lengths = [
        len(encode_prompt(smollm2.tokenizer, t.prompt(), chat=t.chat)) for t in family_tasks("docqa", "evaluation")
    ]
    assert 1000 <= min(lengths) and max(lengths) <= 7000  # the long contexts t(n, L) is about
    task = family_tasks("writing", "held_out", limit=1)[0]
    run = run_method(
        "greedy", smollm2, encode_prompt(smollm2.tokenizer, task.prompt(), chat=task.chat), {"max_new_tokens": 12}
    )
    score = family_score(task, run.output_text, run.steps)
    bonus = [n for s in run.steps for n in s.nodes if n.decision == "bonus"]
    assert score == pytest.approx(100 * np.mean([n.max_p for n in bonus]))  # greedy writes each step's likeliest token
    assert 0 < score <= 100 and family_score(task, run.output_text) is None  # no trace, no score
