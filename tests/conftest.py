"""Shared fixtures: tiny random models built in code, and the real SmolLM2 preset when fetched."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SPEC_BENCH = SHARED / "data" / "spec_bench" / "question.jsonl"
# Spec-Bench is never copied into the project: it lives in the shared folder beside it, which a fresh clone lacks.
NO_SPEC_BENCH = "needs ../shared/data/spec_bench/question.jsonl (the shared folder beside the project)"
sys.path.insert(0, str(ROOT))
import workbench.methods  # noqa: E402,F401  transformers' baselines join the methods, as in the workbench


@dataclass
class TinyModel:
    """Quacks like core.models.LoadedModel for the engine and the methods."""

    model: object
    tokenizer: object
    name: str = "tiny-llama"
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    fingerprint: str = "tiny"
    eos_ids: list[int] = field(default_factory=lambda: [1])
    max_context: int = 512
    vocab_size: int = 96


class IdTokenizer:
    """A tokenizer stand-in whose text is the ids themselves: enough for traces and stop checks."""

    pad_token_id = 0
    eos_token_id = 1

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"t{i}" for i in ids)


def make_tiny(seed: int = 0, vocab: int = 96, layers: int = 2, init: float = 0.3) -> TinyModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=init, bos_token_id=0, eos_token_id=1, pad_token_id=0,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    return TinyModel(model=model, tokenizer=IdTokenizer(), vocab_size=vocab)


def perturbed(base_seed: int, noise: float, seed: int = 5, vocab: int = 96):
    """A copy of tiny model `base_seed` with Gaussian noise on its LM head: a draft that agrees with
    the target at some positions and not at others (noise 0.1: about a third of the drafts)."""
    m = make_tiny(base_seed, vocab=vocab)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = m.model.lm_head.weight
        w.add_(torch.randn(w.shape, generator=gen) * noise)
    m.fingerprint = f"tiny-{base_seed}-noise{noise}-{seed}"
    return m


@pytest.fixture(scope="session")
def tiny() -> TinyModel:
    return make_tiny()


@pytest.fixture(scope="session")
def smollm2():
    """The real default model in float32 (exactness tests need fp32)."""
    from core.models import is_fetched, load_model

    if not is_fetched("smollm2-135m"):
        pytest.skip("smollm2-135m is not fetched: run `python -m workbench models fetch smollm2-135m` (run.sh test does)")
    return load_model("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def spec_bench() -> Path:
    """The path of Spec-Bench's question.jsonl (what workbench.evaluation.tasks.SPEC_BENCH reads); skips
    the test, with the reason, when the shared folder is not beside the project (a fresh clone)."""
    if not SPEC_BENCH.is_file():
        pytest.skip(NO_SPEC_BENCH)
    return SPEC_BENCH


def spec_bench_rows(categories: tuple[str, ...], limit: int) -> list[dict]:
    import json

    if not SPEC_BENCH.is_file():
        pytest.skip(NO_SPEC_BENCH)
    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    out = []
    for cat in categories:
        out += [r for r in rows if r["category"] == cat][:limit]
    return out


@pytest.fixture(scope="module")
def app(smollm2, tmp_path_factory):
    """The workbench on a free port with its own store and home, and a gradio_client on it (one per test module)."""
    from core.models import models_dir

    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_MODELS", str(models_dir()))  # keep the fetched models while the home moves
    mp.setenv("WORKBENCH_HOME", str(home))  # the CSD memory and anything else the app writes
    mp.setenv("HF_HUB_OFFLINE", "1")
    from gradio_client import Client

    from workbench.service import ModelPool
    from workbench.ui import build_app, launch

    demo = build_app(db=str(home / "traces.db"), pool=ModelPool("cpu", "float32"))
    launch(demo, prevent_thread_lock=True, quiet=True, show_error=True)
    client = Client(demo.local_url, verbose=False)
    yield demo, client
    demo.close()
    mp.undo()
