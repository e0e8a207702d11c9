"""Model loading: local folders, presets, refusals (sliding window, hybrid caches, vocabulary
mismatch, unknown or unfetched models), device and dtype choice, chat templates."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, hub_offline

from core.errors import WorkbenchError
from core.models import (
    ModelNotFetchedError,
    UnsupportedModelError,
    VocabularyMismatchError,
    check_pair,
    check_supported,
    encode_prompt,
    load_model,
    resolve_device,
    resolve_dtype,
)


def word_tokenizer(words: list[str]):
    """A small word-level fast tokenizer built in code (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def save_tiny(folder, config_cls, words, **extra):
    from transformers import AutoModelForCausalLM

    tok = word_tokenizer(words)
    cfg = config_cls(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        eos_token_id=1,
        pad_token_id=0,
        **extra,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_local_folder_loads_with_fingerprint_eos_and_context(tmp_path):
    from transformers import LlamaConfig

    folder = save_tiny(tmp_path / "tiny", LlamaConfig, ["a", "b", "c"])
    m = load_model(str(folder), device="cpu", dtype="float32", cache=False)
    assert m.vocab_size == 6 and m.eos_ids == [1] and m.max_context == 128 and m.dtype == torch.float32
    again = load_model(str(folder), device="cpu", dtype="float32", cache=False)
    assert again.fingerprint == m.fingerprint and len(m.fingerprint) == 16


def test_sliding_window_and_hybrid_models_are_refused(tmp_path):
    from transformers import MistralConfig, Qwen2Config

    folder = save_tiny(tmp_path / "mistral", MistralConfig, ["a"], sliding_window=16)
    with pytest.raises(UnsupportedModelError, match="sliding-window attention .*cannot be rolled back"):
        load_model(str(folder), device="cpu", dtype="float32", cache=False)
    check_supported(Qwen2Config(use_sliding_window=False, sliding_window=4096))  # Qwen2.5 keeps it off: accepted
    with pytest.raises(UnsupportedModelError, match="sliding_attention"):
        check_supported(Qwen2Config(layer_types=["full_attention", "sliding_attention"], num_hidden_layers=2))


def test_mismatched_vocabularies_are_refused(tmp_path):
    from transformers import LlamaConfig

    a = load_model(str(save_tiny(tmp_path / "a", LlamaConfig, ["x", "y"])), device="cpu", dtype="float32", cache=False)
    b = load_model(str(save_tiny(tmp_path / "b", LlamaConfig, ["y", "x"])), device="cpu", dtype="float32", cache=False)
    check_pair(a, a)
    with pytest.raises(VocabularyMismatchError, match="does not share the vocabulary"):
        check_pair(a, b)


def test_unknown_and_unfetched_models_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODELS", str(tmp_path / "empty"))
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("WORKBENCH_ALLOW_HUB", raising=False)
    with pytest.raises(ModelNotFetchedError, match="python -m workbench models fetch qwen2.5-coder-1.5b"):
        load_model("qwen2.5-coder-1.5b")
    with pytest.raises(WorkbenchError, match="model folder not found"):
        load_model(str(tmp_path / "no-such-folder"))
    hub_offline(monkeypatch)
    with pytest.raises(WorkbenchError, match="could not load 'no-org/no-such-model'"):
        load_model("no-org/no-such-model")


def test_an_unreachable_hub_answers_at_once_from_the_local_cache(tmp_path, monkeypatch):
    """No network and no HF_HUB_OFFLINE: a hub id is looked up in the local cache only (transformers would retry
    for ~23 s), and the error says the hub is unreachable; with the hub reachable the id goes to the hub."""
    import socket

    import huggingface_hub.constants

    from core import models

    monkeypatch.setenv("WORKBENCH_MODELS", str(tmp_path / "empty"))
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    tried = []

    def refused(address, timeout):
        tried.append((address, timeout))
        raise OSError("no route to host")

    monkeypatch.setattr(socket, "create_connection", refused)
    assert not models.hub_is_reachable()
    assert tried and tried[0][0][1] == 443 and tried[0][1] <= 2.0
    assert models._source("no-org/no-such-model") == ("no-org/no-such-model", {"local_files_only": True})
    with pytest.raises(WorkbenchError, match="hub is not reachable from here and 'no-org/no-such-model' is not in"):
        load_model("no-org/no-such-model")

    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: contextlib.nullcontext())
    assert models._source("no-org/no-such-model") == ("no-org/no-such-model", {})
    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert models.hub_is_reachable()  # behind a proxy the probe proves nothing
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    tried.clear()
    assert not models.hub_is_reachable() and not tried  # offline by choice: no probe at all


def test_device_and_dtype_choice():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(WorkbenchError, match="use --device cpu"):
            resolve_device("cuda")
    with pytest.raises(WorkbenchError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(WorkbenchError, match="unknown dtype"):
        resolve_dtype("fp8")
    assert resolve_dtype("bfloat16") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)


def test_cli_reports_bad_input_clearly(tmp_path):
    env = {
        "WORKBENCH_MODELS": str(tmp_path / "none"),
        "WORKBENCH_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
    }

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "workbench", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

    r = cli("generate", "--method", "nope", "--prompt", "hi", "--no-store")
    assert r.returncode == 2 and "unknown method 'nope'" in r.stderr
    r = cli("generate", "--method", "greedy", "--prompt", "hi", "--no-store")
    assert r.returncode == 2 and "models fetch smollm2-135m" in r.stderr
    r = cli("generate", "--method", "greedy", "--model", "no-org/no-model", "--prompt", "hi", "--no-store")
    assert r.returncode == 2 and "could not load" in r.stderr


@pytest.mark.real_model
def test_default_preset_chat_template_and_vocabulary(smollm2):
    assert smollm2.vocab_size == 49152 and smollm2.eos_ids
    chat = encode_prompt(smollm2.tokenizer, "Hi there")
    plain = encode_prompt(smollm2.tokenizer, "Hi there", chat=False)
    assert len(chat) > len(plain)
    assert "<|im_start|>" in smollm2.tokenizer.decode(chat) and "<|im_start|>" not in smollm2.tokenizer.decode(plain)


@pytest.mark.real_model
@pytest.mark.slow
def test_cli_refuses_empty_prompt_and_bad_parameters():
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "workbench", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
        )

    r = cli("generate", "--method", "greedy", "--prompt", "", "--no-store")
    assert r.returncode == 2 and "prompt is empty" in r.stderr, r.stderr
    r = cli("generate", "--method", "aasd", "--prompt", "hi", "--alpha", "-1", "--no-store")
    assert r.returncode == 2 and "out of range" in r.stderr, r.stderr
    r = cli("generate", "--method", "greedy", "--prompt", "hi", "--max-new-tokens", "0", "--no-store")
    assert r.returncode == 2 and "max_new_tokens" in r.stderr, r.stderr


def test_output_head_gets_a_packed_last_row(tmp_path):
    """logits_to_keep=1 hands the head a strided (1, 1, H) view; the hook packs it, values unchanged."""
    from transformers import LlamaConfig

    folder = save_tiny(tmp_path / "m", LlamaConfig, ["a", "b", "c", "d"])
    loaded = load_model(str(folder), device="cpu", dtype="bfloat16", cache=False)
    head = loaded.model.get_output_embeddings()
    seen = []
    head.register_forward_pre_hook(lambda mod, args: seen.append(args[0].stride()))  # runs after ours
    ids = torch.tensor([[2, 3, 4, 5, 6]])
    with torch.inference_mode():
        last = loaded.model(ids, logits_to_keep=1).logits[0, -1]
        full = loaded.model(ids).logits[0, -1]
    hidden = head.weight.shape[1]
    assert seen[0] == (hidden, hidden, 1)  # packed, not (5 * hidden, hidden, 1)
    assert torch.equal(last, full)
