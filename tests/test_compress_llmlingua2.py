"""LLMLingua-2 (`--compressor llmlingua2`, core.compress.LLMLingua2Compressor): the clear errors when the llmlingua
package, tiktoken's BPE file or the classifier is out of reach (and which of the two downloads failed), and the working
path on a tiny random BERT token classifier written to a folder, under transformers 5. Nothing is downloaded: the hub
is set offline, and tiktoken's encoding (a download) is replaced by a stand-in."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest
from conftest import hub_offline, make_tiny

from core.compress import (
    DEFAULT_LLMLINGUA2_MODEL,
    LLMLINGUA2_MODEL_ENV,
    CompressorUnavailable,
    LLMLingua2Compressor,
    check_compressor,
    llmlingua2_classifier,
    llmlingua_failure,
    make_compressor,
)
from core.errors import InvalidInputError, WorkbenchError

TEXT = (
    "The river rises in the north. It flows south through three towns and a lake.\n"
    "Fishermen work the lake in summer, and the towns trade grain and wool. Where does the river end? "
    "In winter the river freezes!"
)
MISSING_HUB_ID = "workbench-tests/no-such-llmlingua2-classifier"


class WordEncoding:
    """A stand-in for tiktoken's cl100k_base: LLMLingua-2 calls only `encode` (to weigh each word in its budget)."""

    def encode(self, text, **kwargs):
        return text.split()


@pytest.fixture
def offline(monkeypatch):
    hub_offline(monkeypatch)


@pytest.fixture
def tiktoken_stub(monkeypatch):
    pytest.importorskip("llmlingua")
    import tiktoken

    monkeypatch.setattr(tiktoken, "encoding_for_model", lambda name: WordEncoding())


def target(tokenizer=None):
    """What make_compressor takes (core.models.LoadedModel's fields): a tiny LM; llmlingua2 counts with its tokenizer."""
    loaded = make_tiny()
    loaded.tokenizer, loaded.path = tokenizer, "tiny"
    return loaded


def test_the_name_and_the_classifier_setting(monkeypatch):
    assert check_compressor("LLMLingua2") == "llmlingua2"
    with pytest.raises(InvalidInputError, match="llmlingua2 takes: none"):
        check_compressor("llmlingua2[layers=2]")
    monkeypatch.delenv(LLMLINGUA2_MODEL_ENV, raising=False)
    assert (
        llmlingua2_classifier()
        == DEFAULT_LLMLINGUA2_MODEL
        == "microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank"
    )
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, " /models/ll2 ")
    assert llmlingua2_classifier() == "/models/ll2"


def test_a_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "llmlingua", None)  # import fails as if not installed
    with pytest.raises(
        CompressorUnavailable, match="llmlingua2 compressor needs the llmlingua package.*pip install llmlingua==0.2.2"
    ):
        make_compressor("llmlingua2", SimpleNamespace(tokenizer=None, device="cpu"))


def test_tiktoken_offline_is_a_clear_error(monkeypatch, tmp_path):
    pytest.importorskip("llmlingua")
    import requests
    import tiktoken

    def offline(name):
        raise requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='openaipublic.blob.core.windows.net'): Failed to resolve"
        )

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, str(tmp_path))
    with pytest.raises(
        CompressorUnavailable, match="llmlingua2 could not start.*tiktoken.*BPE.*TIKTOKEN_CACHE_DIR.*selfinfo"
    ) as e:
        LLMLingua2Compressor()
    assert isinstance(e.value, WorkbenchError) and LLMLINGUA2_MODEL_ENV not in str(e.value)


def test_the_classifier_offline_is_a_clear_error(monkeypatch, offline, tiktoken_stub):
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, MISSING_HUB_ID)
    with pytest.raises(CompressorUnavailable) as e:
        make_compressor("llmlingua2", SimpleNamespace(tokenizer=None, device="cpu"))
    message = str(e.value)
    assert re.search(
        f"llmlingua2 could not start: its classifier model {MISSING_HUB_ID} could not be loaded from the "
        rf"Hugging Face hub \(offline\?\).*{LLMLINGUA2_MODEL_ENV}.*--compressor selfinfo",
        message,
    ), message
    assert "TIKTOKEN_CACHE_DIR" not in message


def test_a_classifier_folder_that_does_not_exist_is_named(monkeypatch, tmp_path, tiktoken_stub):
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(CompressorUnavailable, match=f"{LLMLINGUA2_MODEL_ENV}=.*nowhere is not a folder"):
        LLMLingua2Compressor()


def test_the_failure_messages_tell_the_two_downloads_apart():
    hub = OSError(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files."
    )
    bpe = OSError("openaipublic.blob.core.windows.net unreachable")
    assert LLMLINGUA2_MODEL_ENV in llmlingua_failure(hub, "start", "llmlingua2", MISSING_HUB_ID)
    assert "TIKTOKEN_CACHE_DIR" in llmlingua_failure(bpe, "start", "llmlingua2", MISSING_HUB_ID)
    assert LLMLINGUA2_MODEL_ENV not in llmlingua_failure(hub, "start")  # LLMLingua-1 has no classifier
    try:  # huggingface_hub's own error, raised under another: found along the chain
        try:
            from huggingface_hub.errors import LocalEntryNotFoundError

            raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")
        except LocalEntryNotFoundError as inner:
            raise ValueError("loading failed") from inner
    except ValueError as outer:
        assert "could not be loaded from the Hugging Face hub" in llmlingua_failure(
            outer, "start", "llmlingua2", "org/name"
        )


def tiny_classifier(folder, words, architecture="token-classification"):
    """A randomly initialised BERT token classifier (keep/drop) and its WordPiece tokenizer, saved to `folder`."""
    import torch
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!"] + sorted(set(words))
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    tokenizer = BertTokenizerFast(
        vocab=str(folder / "vocab.txt"), do_lower_case=False
    )  # transformers 5: vocab=, not vocab_file=
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=2,
    )
    model = BertForTokenClassification(config) if architecture == "token-classification" else make_tiny().model
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


def test_llmlingua2_compresses_with_a_local_classifier(monkeypatch, tmp_path, offline, tiktoken_stub):
    tokenizer = tiny_classifier(tmp_path / "classifier", re.findall(r"\w+", TEXT))
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, str(tmp_path / "classifier"))
    comp = make_compressor("llmlingua2", target(tokenizer))
    assert isinstance(comp, LLMLingua2Compressor) and comp.classifier == str(tmp_path / "classifier")
    a, b = comp.compress(TEXT, 0.5), comp.compress(TEXT, 0.5)
    assert a.text == b.text and a.tokens_kept == b.tokens_kept  # deterministic
    assert a.compressor == "llmlingua2" and a.rate == 0.5 and 0 < a.reached <= 1
    assert a.tokens_in == len(
        tokenizer(TEXT, add_special_tokens=False).input_ids
    )  # counted with the target's tokenizer
    assert 0 < a.tokens_kept < a.tokens_in and a.reached == a.tokens_kept / a.tokens_in
    assert set(re.findall(r"\w+", a.text)) <= set(re.findall(r"\w+", TEXT))  # words kept whole, none invented
    assert "?" in a.text  # a force token (the package README's): the options reach compress_prompt
    assert a.record()["compressor"] == "llmlingua2"
    whole = comp.compress(TEXT, 1.0)
    assert whole.text == TEXT and whole.reached == 1.0


def test_a_folder_that_is_not_a_token_classifier_is_refused(monkeypatch, tmp_path, offline, tiktoken_stub):
    tiny_classifier(tmp_path / "causal", re.findall(r"\w+", TEXT), architecture="causal-lm")
    monkeypatch.setenv(LLMLINGUA2_MODEL_ENV, str(tmp_path / "causal"))
    with pytest.raises(
        CompressorUnavailable, match="loads as LlamaForCausalLM.*needs a token classifier of type bert or xlm-roberta"
    ):
        LLMLingua2Compressor()
