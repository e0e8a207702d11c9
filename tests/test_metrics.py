"""Task scores pinned on hand-computed examples (LongBench's definitions)."""

import pytest

from workbench.evaluation.scores import code_edit_similarity, normalize_answer, qa_f1, rouge_l, score_task
from workbench.evaluation.tasks import Task


def score(kind, prediction, answers):
    return score_task(Task(id="t", task=kind, input="", answers=list(answers)), prediction)


def test_normalisation_and_qa_f1():
    assert normalize_answer("  The  Cat, sat! An apple.") == "cat sat apple"
    # prediction {cat, sat}, reference {cat, sat, on, mat}: P = 1, R = 1/2, F1 = 2/3
    assert qa_f1("The cat sat.", "a cat sat on the mat") == pytest.approx(2 / 3)
    assert qa_f1("dog", "cat") == 0.0
    assert qa_f1("", "cat") == 0.0


def test_rouge_l_as_the_rouge_package_counts_it():
    # LCS 3 of a 3-word prediction; the reference has 5 distinct words (the package counts them
    # exclusively): P = 1, R = 3/5, F = 2PR / (P + R) = 0.75
    assert rouge_l("the cat sat", "the cat sat on the mat") == pytest.approx(0.75, abs=1e-6)
    assert rouge_l("", "the cat") == 0.0


def test_code_edit_similarity_takes_the_first_code_line():
    assert code_edit_similarity("# a comment\n    return a + b\n", "    return a + b") == 1.0
    # "x = 1" vs "x = 2": indel distance 2 over 10 characters -> ratio 80
    assert code_edit_similarity("x = 1", "x = 2") == 0.8
    assert code_edit_similarity("```python\n// c\nfoo()", "foo()") == 1.0


def test_score_max_over_references_and_absent_without_them():
    assert score("qa", "Paris", ["London", "paris"]) == 100.0
    assert score("qa", "Paris", []) is None  # absent, not zero
    assert score("chat", "anything", ["ref"]) is None  # no metric for open chat
    assert score("summarization", "the cat sat", ["the cat sat on the mat"]) == pytest.approx(75.0, abs=1e-4)


# ---- LongBench's other metrics, GSM8K, HumanEval pass@1, absent scores, pooling ----------------

from core.stats import add_speedups, pool  # noqa: E402
from workbench.evaluation.scores import classification_score, count_score, retrieval_score  # noqa: E402


def test_longbench_classification_retrieval_and_count():
    classes = ["Location", "Number", "Human", "Human being"]
    # two labels found, the reference among them: 1/2
    assert classification_score("Location or Number", "Location", classes) == 0.5
    # "Human" is inside the reference "Human being" but not equal to it: dropped, leaving one match
    assert classification_score("Human being", "Human being", classes) == 1.0
    assert classification_score("Number", "Location", classes) == 0.0
    # numbers 3 and 5 in the prediction, the reference paragraph is 3: 1/2
    assert retrieval_score("Paragraph 3 or Paragraph 5", "Paragraph 3") == 0.5
    assert retrieval_score("I do not know", "Paragraph 3") == 0.0
    # numbers 12 and 20, the reference count is 12: 1/2
    assert count_score("There are 12 unique paragraphs out of 20", "12") == 0.5


def test_score_task_follows_longbench_eval():
    trivia = Task(id="t", task="qa", input="q", answers=["Paris", "City of Light"], metric="qa_f1", first_line=True)
    assert score_task(trivia, "Paris\nThe capital of France") == 100.0  # only the first line is scored
    # without the first-line rule: {paris, capital, of, france} against {paris}: P = 1/4, R = 1, F1 = 0.4
    assert score_task(
        Task(id="t", task="qa", input="q", answers=["Paris"]), "Paris\nThe capital of France"
    ) == pytest.approx(40.0)
    trec = Task(
        id="c",
        task="classification",
        input="q",
        answers=["Location"],
        metric="classification",
        all_classes=["Location", "Number"],
    )
    assert score_task(trec, "Location, Number") == 50.0
    with pytest.raises(Exception, match="unknown metric 'bleu'"):
        score_task(Task(id="x", task="qa", input="q", answers=["a"], metric="bleu"), "a")


def test_gsm8k_accuracy_and_absent_references():
    math = Task(id="m", task="math", input="q", answers=["48/2 = 24\n#### 72"], metric="gsm8k")
    assert score_task(math, "So the answer is 72.") == 100.0
    assert score_task(math, "So the answer is 70.") == 0.0
    assert score("math", "The answer is 72", ["#### 72"]) == 100.0  # the task kind picks the metric too
    for task in (
        Task(id="m", task="math", input="q"),
        Task(id="q", task="qa", input="q"),
        Task(id="c", task="chat", input="q", answers=["r"]),
    ):
        assert score_task(task, "anything 72") is None  # absent, not zero


def test_humaneval_pass_at_1_only_when_asked():
    problem = {
        "task_id": "Toy/0",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
    }
    task = Task(id="Toy/0", task="code", input=problem["prompt"], metric="pass@1", problem=problem)
    assert score_task(task, "    return a + b\n") is None  # code is not executed unless asked
    assert score_task(task, "    return a + b\n", execute_code=True) == 100.0
    assert score_task(task, "    return a - b\n", execute_code=True) == 0.0


def test_pooling_runs_by_hand():
    rows = [
        {
            "decoded": 10,
            "steps": 5,
            "decode_seconds": 1.0,
            "prefill_seconds": 0.5,
            "tokens": 10,
            "drafted": 8,
            "accepted": 5,
            "rescued": 1,
            "timed_steps": 5,
            "step_ms_total": 100.0,
            "forward_ms_total": 80.0,
            "score": 50.0,
        },
        {
            "decoded": 6,
            "steps": 2,
            "decode_seconds": 1.0,
            "prefill_seconds": 0.5,
            "tokens": 6,
            "drafted": 2,
            "accepted": 1,
            "rescued": 0,
            "timed_steps": 2,
            "step_ms_total": 40.0,
            "forward_ms_total": 20.0,
            "score": None,
        },
    ]
    s = pool(rows)
    assert s["mal"] == pytest.approx(16 / 7)  # tokens over steps, pooled (not the mean of 2 and 3)
    assert s["tps"] == pytest.approx(8.0) and s["e2e_tps"] == pytest.approx(16 / 3)
    assert s["accept_rate"] == pytest.approx(0.6) and s["rescued_share"] == pytest.approx(0.1)
    assert s["score"] == 50.0 and (s["runs"], s["scored"]) == (2, 1)  # the absent score is left out, not counted as 0
    assert s["step_ms"] == pytest.approx(20.0) and s["forward_share"] == pytest.approx(100 / 140)
    assert pool([{**rows[1], "score": None}])["score"] is None
    summary = add_speedups({"greedy": {"tps": 4.0}, "pld": {"tps": 8.0}, "x": {"tps": None}})
    assert (summary["greedy"]["speedup"], summary["pld"]["speedup"], summary["x"]["speedup"]) == (1.0, 2.0, None)


def test_equal_share_counts_greedys_tokens_reproduced_before_the_first_divergence():
    from core.stats import equal_prefix, equal_share

    assert equal_prefix([1, 2, 3, 4], [1, 2, 3, 4]) == 4
    assert equal_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert equal_prefix([1, 2, 3, 4], [1, 2]) == 2  # stopped early
    assert equal_prefix([1, 2], [1, 2, 3]) == 2  # went on: all of greedy's tokens are there
    assert equal_share([([1, 2, 3, 4], [1, 2, 9, 4]), ([5, 6], [5, 6])]) == pytest.approx(4 / 6)
    assert equal_share([]) is None


def test_position_acceptance_is_conditional_on_the_previous_position():
    from core.stats import position_acceptance
    from core.trace import NodeTrace, RunTrace, StepTrace

    def node(i, parent, depth, decision):
        return NodeTrace(
            step=0,
            cache_pos=0,
            node=i,
            parent=parent,
            depth=depth,
            token_id=i,
            token_text="",
            source="root" if parent == -1 else "context",
            decision=decision,
            reason="",
        )

    # step 0: a chain of 3, two accepted (depth 3 judged and rejected); step 1: depth 1 rejected, depth 2 unreached
    s0 = StepTrace(
        0,
        0,
        3,
        2,
        [1, 2, 3],
        nodes=[
            node(0, -1, 0, "accepted"),
            node(1, 0, 1, "accepted"),
            node(2, 1, 2, "accepted"),
            node(3, 2, 3, "rejected"),
        ],
    )
    s1 = StepTrace(
        1, 3, 2, 0, [4], nodes=[node(0, -1, 0, "accepted"), node(1, 0, 1, "rejected"), node(2, 1, 2, "unreached")]
    )
    run = RunTrace(
        method="pld",
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="",
        prompt_ids=[1],
        context=None,
        model_fingerprint="f",
        draft_fingerprint=None,
    )
    run.steps = [s0, s1]
    assert position_acceptance(run) == {1: (1, 2), 2: (1, 1), 3: (0, 1)}
