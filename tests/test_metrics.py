"""Task scores pinned on hand-computed examples (LongBench's definitions)."""
import pytest

from core.metrics import code_edit_similarity, normalize_answer, qa_f1, rouge_l, score


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
