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
# Hypothesis: the "fuzz" profile is what the property tests of bad input run under (tests/security/test_fuzz.py:
# CLI parameters, task rows, method strings): at least 1,000 cases each, derandomized so CI is repeatable, no
# deadline (a slow case on a busy machine is not a failure). WORKBENCH_FUZZ_PROFILE=fuzz-quick runs 100 while
# working on them; other tests keep Hypothesis's defaults.
from hypothesis import HealthCheck  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

import workbench.methods  # noqa: E402,F401  transformers' baselines join the methods, as in the workbench

hypothesis_settings.register_profile(
    "fuzz", max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
hypothesis_settings.register_profile("fuzz-quick", parent=hypothesis_settings.get_profile("fuzz"), max_examples=100)
FUZZ_PROFILE = os.environ.get("WORKBENCH_FUZZ_PROFILE", "fuzz")

# Machines differ: on one CPU a draft node costs almost nothing, on another (AVX2 only, emulated bf16) nearly a
# whole forward, so max_nodes=auto drafts big trees on the first and none on the second. A test must pass on both:
# `pytest --cost-curve steep` (or flat) replaces the measured t(n, L) by such a machine's, for every model.
COST_CURVES = {"flat": 0.002, "steep": 0.9}  # extra cost of one draft node, as a share of the forward at n = 0


# `WORKBENCH_TEST_WORKERS=N bash run.sh test` runs N pytest-xdist workers. Each worker, and each process it starts (the CLI
# tests' subprocesses), gets its share of the cores: thread pools that each take every core fight over them, and a
# test that reads a clock (the prefill estimate's, the UI's timings) then waits on the other worker's forwards.
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if XDIST_WORKERS > 1:
    _threads = max(1, len(os.sched_getaffinity(0)) // XDIST_WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)


def drives_a_browser(module: Path) -> bool:
    """A test module that drives Chromium: the test_browser* modules and any other that uses tests/browser_util."""
    return module.name.startswith("test_browser") or "browser_util" in module.read_text(encoding="utf-8")


def needs_the_machine(item, browser_module: bool) -> bool:
    """Run in run.sh's second phase, with no other worker beside it: it drives a browser or judges clocks."""
    return browser_module or item.get_closest_marker("alone") is not None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """`--phase parallel|alone` keeps one side of run.sh's two phases (the browser tests and those marked `alone` are
    the second). Under `--dist loadgroup`: a module's tests stay on one worker (its module fixtures, an app or a
    loaded model, are built once), and the browser modules share one worker: two apps and two Chromiums at once on
    two cores slowed the page waits past their timeouts."""
    phase = config.getoption("--phase")
    browser: dict[Path, bool] = {}
    kept, dropped = [], []
    for item in items:
        module = Path(str(item.path))
        if module not in browser:
            browser[module] = drives_a_browser(module)
        if phase != "all" and needs_the_machine(item, browser[module]) != (phase == "alone"):
            dropped.append(item)
            continue
        kept.append(item)
        item.add_marker(pytest.mark.xdist_group("browser" if browser[module] else item.nodeid.split("::", 1)[0]))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_addoption(parser):
    parser.addoption(
        "--phase",
        default="all",
        choices=("all", "parallel", "alone"),
        help="all tests; or run.sh's first phase (parallel: no browser, no `alone` mark) or second (alone: the rest)",
    )
    parser.addoption(
        "--cost-curve",
        default="measured",
        choices=("measured", *COST_CURVES),
        help="t(n, L) for max_nodes=auto: this machine's (measured), or a simulated flat or steep machine's",
    )


@pytest.fixture(autouse=True, scope="session")
def simulated_cost_curve(request):
    kind = request.config.getoption("--cost-curve")
    if kind == "measured":
        yield None
        return
    from core import timing

    _MEASURED.update(measure_grid=timing.measure_grid, load=timing.load, save=timing.save)

    per_node = COST_CURVES[kind]

    def grid(target, sizes=timing.SIZES, lengths=None, repeats=0, trees=None):
        lengths = timing.practical_lengths(target, sizes=sizes) if lengths is None else tuple(lengths)
        return [[0.01 * (1 + length / 2048) * (1 + per_node * n) for n in sizes] for length in lengths]

    mp = pytest.MonkeyPatch()
    mp.setattr(timing, "measure_grid", grid)
    mp.setattr(timing, "load", lambda path, machine=None, disturbed_ok=False: None)  # never this machine's saved curve
    mp.setattr(timing, "save", lambda *a, **k: None)  # and never overwrite it
    timing._models.clear()
    yield kind
    timing._models.clear()
    mp.undo()


_MEASURED: dict = {}  # core.timing's own measure_grid, load and save while a curve is simulated


@pytest.fixture(autouse=True)
def measured_cost(request, simulated_cost_curve, monkeypatch):
    """Tests marked `measured_cost` test the measurement itself: they get core.timing's own functions back."""
    if simulated_cost_curve is None or request.node.get_closest_marker("measured_cost") is None:
        return
    from core import timing

    for name, function in _MEASURED.items():
        monkeypatch.setattr(timing, name, function)
    monkeypatch.setattr(timing, "_models", {})  # neither the simulated models nor these outlive the test


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
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=init,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
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
        pytest.skip(
            "smollm2-135m is not fetched: run `python -m workbench models fetch smollm2-135m` (run.sh test does)"
        )
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


def hub_offline(mp: pytest.MonkeyPatch) -> None:
    """The hub offline at once: huggingface_hub reads HF_HUB_OFFLINE once, at import, so setting the variable
    alone leaves a hub id to five retries (~23 s) before its error."""
    import huggingface_hub.constants

    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def app(smollm2, tmp_path_factory, request):
    """The workbench on a free port with its own store and home, and a gradio_client on it (one per test module).

    The home starts with the t(n, L) an earlier module's app measured in this session (the same machine and
    threads: the app would measure the same curve again, a minute or more a module); a module that sets
    `FRESH_TIMING = True` gets a home without it, to watch the first comparison measure it."""
    import shutil

    from core.models import models_dir

    home = tmp_path_factory.mktemp("home")
    measured = tmp_path_factory.getbasetemp() / "measured-timing"
    if measured.is_dir() and not getattr(request.module, "FRESH_TIMING", False):
        shutil.copytree(measured, home / "timing")
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_MODELS", str(models_dir()))  # keep the fetched models while the home moves
    mp.setenv("WORKBENCH_HOME", str(home))  # the CSD memory and anything else the app writes
    hub_offline(mp)
    from workbench import suffix_corpus

    # A model's suffix corpus is held per process and keyed by the store's run ids: this module's app has its own
    # store and home, so it starts without the corpus an earlier module's app opened (its run #2 is not ours)
    mp.setattr(suffix_corpus, "_OPENED", {})
    from gradio_client import Client

    from workbench.service import ModelPool
    from workbench.ui import build_app, launch

    pool = ModelPool("cpu", "float32")
    demo = build_app(db=str(home / "traces.db"), pool=pool)
    launch(demo, prevent_thread_lock=True, quiet=True, show_error=True)
    client = Client(demo.local_url, verbose=False)
    yield demo, client
    demo.close()
    pool.wait_idle()  # no request thread left inside the model when the interpreter exits (status 134)
    mp.undo()
    if (home / "timing").is_dir():
        shutil.copytree(home / "timing", measured, dirs_exist_ok=True)


# ---- the target's own numbers, from a fresh forward (not from the trace) --------------------------------


def _path_tokens(nodes_by_id: dict, node) -> list[int]:
    """The tokens from the root (exclusive) down to `node` (inclusive)."""
    out = []
    while node.parent >= 0:
        out.append(node.token_id)
        node = nodes_by_id[node.parent]
    return out[::-1]


def fresh_node_stats(target, prompt_ids, run, *, steps=None, sample: int = 6, seed: int = 0, only=None):
    """Recompute the statistics of the nodes of a sample of a run's steps from a fresh forward of the target:
    the committed sequence once, then each node's own path on a copy of that plain cache (no engine cache, no
    tree mask); assert they equal what the trace recorded, and return [(node trace, fresh NodeStats)] so a
    test can judge decisions with numbers the engine did not produce. `only(node)` limits the nodes checked.

    A test that re-derives decisions from recorded values passes whatever the engine computed wrongly and
    recorded consistently (an EOS probability left out, say); these numbers come from the model itself."""
    import random

    from core.cache import cache_arg, crop, new_cache
    from core.rules import NodeStats

    eos = sorted(set(target.eos_ids))
    before, sequences = list(prompt_ids), []
    for step in run.steps:
        sequences.append(list(before))
        before += step.emitted
    if steps is None:
        steps = sorted(random.Random(seed).sample(range(len(run.steps)), min(sample, len(run.steps))))
    pairs = []
    device = next(target.model.parameters()).device
    prefix, have = new_cache(target.model), 0  # a plain cache of the committed tokens, extended step to step
    for k in sorted(steps):
        step, seq = run.steps[k], sequences[k]
        by_id = {n.node: n for n in step.nodes}
        assert step.nodes[0].token_id == seq[-1], "the root is the last committed token"
        wanted = [n for n in step.nodes if n.p is not None and (only is None or only(n))]
        if not wanted:
            continue
        paths = {tuple(_path_tokens(by_id, by_id[n.parent])) for n in wanted}  # the tokens after which each is judged
        with torch.no_grad():
            if len(seq) - 1 > have:
                target.model(
                    input_ids=torch.tensor([seq[have:-1]], device=device),
                    use_cache=True,
                    **cache_arg(target.model, prefix),
                )
                have = len(seq) - 1
            rows = {}
            # One forward per longest path (the accepted path covers every node judged under it), on the
            # prefix's plain cache, cut back to the prefix after it; its rows are the distributions along it.
            longest = [p for p in paths if not any(len(q) > len(p) and q[: len(p)] == p for q in paths)]
            for path in longest:
                out = target.model(
                    input_ids=torch.tensor([[seq[-1], *path]], device=device),
                    use_cache=True,
                    **cache_arg(target.model, prefix),
                )
                for j in range(len(path) + 1):
                    rows.setdefault(path[:j], out.logits[0, j].double().cpu())
                crop(prefix, len(seq) - 1)
        for n in wanted:
            z = rows[tuple(_path_tokens(by_id, by_id[n.parent]))]
            logp = torch.log_softmax(z, -1)
            probs = logp.exp()
            tok = n.token_id
            rank = int((z > z[tok]).sum()) + int((z[:tok] == z[tok]).sum())
            fresh = NodeStats(
                p=float(probs[tok]),
                entropy=float(-(probs * logp).nan_to_num().sum()),
                max_p=float(probs.max()),
                p_eos=float(probs[eos].max()) if eos else 0.0,
                rank=rank,
                logit_gap=float(z.max() - z[tok]),
            )
            where = f"step {k} node {n.node} ({n.source}, {n.decision})"
            for name in ("p", "max_p", "p_eos", "entropy", "logit_gap"):
                got, want = getattr(n, name), getattr(fresh, name)
                # The recorded entropy is a float32 sum over the whole vocabulary of a tree forward's row: near
                # zero (a peaked row) its tail's rounding is ~4e-5 on SmolLM2 (a casd step with 16 nodes).
                floor = 1e-4 if name == "entropy" else 1e-5
                assert abs(got - want) <= floor + 2e-3 * abs(want), (
                    f"{where}: recorded {name} {got!r}, the target says {want!r}"
                )
            near_tie = int((abs(z - z[tok]) < 1e-4).sum()) > 1
            assert n.rank == fresh.rank or near_tie, f"{where}: recorded rank {n.rank}, the target says {fresh.rank}"
            pairs.append((n, fresh))
    return pairs


@pytest.fixture(scope="module")
def page(app):
    """A browser page on the module's app (browser_util.open_page), shared by the module's browser tests."""
    from browser_util import open_page

    with open_page(app[0].local_url) as pg:
        yield pg
