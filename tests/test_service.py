"""The app's model-free logic: the default model on a machine (or Space) without the packaged preset,
method checks before any model loads, prompt guards."""
from __future__ import annotations

import pytest

from core.errors import InvalidInputError
from workbench import service


def test_default_model_falls_back_to_the_hub_copy_when_the_preset_is_not_fetched(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MODELS", str(tmp_path / "empty"))
    assert service.default_model() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert service.model_choices() == ["HuggingFaceTB/SmolLM2-135M-Instruct"]


def test_method_checks_name_the_fix():
    assert service.check_methods(["greedy", "aasd[align_graft=1]"], "smollm2-135m", None) == [("greedy", {}), ("aasd", {"align_graft": "1"})]
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
