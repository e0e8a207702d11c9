"""Draft-model SD and CSD on tiny random models: greedy SD equals greedy, the draft cache stays in
step, rejection sampling keeps the target's distribution, and the rescue rules do what they say."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import fresh_node_stats, make_tiny, perturbed
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from core import cache as kv
from core.drafters import DraftModelDrafter
from core.engine import DecodeConfig, decode
from core.errors import InvalidInputError
from core.memory import CorrectionMemory, memory_path, pair_fingerprint
from core.methods import METHODS, get_method, make_verifier, resolve_params, run_method
from core.models import VocabularyMismatchError
from core.target_stats import sampling_processors
from core.tree import DraftTree
from core.walk import sample_walk


@pytest.fixture(scope="module")
def target():
    return make_tiny(0)


@pytest.fixture(scope="module")
def drafts():
    return {
        "self": make_tiny(0),
        "close": perturbed(0, 0.1),
        "far": perturbed(0, 0.25),
        "other": make_tiny(1, layers=1),
    }


def prompt_of(seed: int, n: int = 12) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, 96) for _ in range(n)]


@pytest.mark.parametrize("kind,gammas", [("self", (6,)), ("close", (1, 4)), ("far", (3,)), ("other", (2,))])
def test_greedy_sd_equals_greedy(target, drafts, kind, gammas):
    lengths = []
    for seed in range(2):
        prompt = prompt_of(seed, 5 + 9 * seed)
        ref = run_method("greedy", target, prompt, {"max_new_tokens": 40}).output_ids
        for gamma in gammas:
            run = run_method("sd", target, prompt, {"max_new_tokens": 40, "gamma": gamma}, draft=drafts[kind])
            assert run.output_ids == ref, (kind, seed, gamma)
            lengths += run.accept_lengths
            assert all(
                n.source == "draft" and n.draft_p is not None
                for s in run.steps
                for n in s.nodes
                if 0 < n.node and n.decision != "bonus"
            )
    if kind == "self":
        assert 7 in lengths  # full acceptance at every γ (bar the cut at the end)
    if kind == "close":
        assert len(set(lengths)) >= 4  # partial acceptances of several lengths: the rollback paths run


class CheckedDrafter(DraftModelDrafter):
    """Checks at every step that the cached draft proposes what a fresh, cache-free greedy would."""

    def __init__(self, model, gamma):
        super().__init__(model, gamma)
        self.checked = 0

    def propose(self, sequence):
        proposal = super().propose(sequence)
        tree = proposal.tree
        assert kv.cache_length(self.cache) == self.n_cached == len(sequence) + self.gamma - 1
        ids = list(sequence)
        with torch.no_grad():
            for _ in range(self.gamma):
                ids.append(int(self.model(torch.tensor([ids])).logits[0, -1].argmax()))
        assert tree.tokens[1:] == ids[len(sequence) :]
        self.checked += 1
        return proposal

    def commit(self, new_tokens, predictions):
        super().commit(new_tokens, predictions)
        assert kv.cache_length(self.cache) == self.n_cached


def test_draft_cache_stays_in_step_with_the_committed_sequence(target, drafts):
    drafter = CheckedDrafter(drafts["close"].model, 4)
    out = decode(
        target.model,
        target.tokenizer,
        [],
        prompt_of(7, 9),
        drafter,
        make_verifier(get_method("sd"), resolve_params("sd")),
        DecodeConfig(max_new_tokens=30),
        512,
    )
    assert drafter.checked == len(out.steps) and len(out.output_ids) == 30
    assert {s.accepted for s in out.steps} >= {0, 1}  # rejections after 0 and after 1 accepted token


def test_sd_needs_a_draft_and_refuses_a_foreign_tokenizer(target):
    with pytest.raises(InvalidInputError, match="needs a draft model"):
        run_method("sd", target, [3, 4], {})

    class VocabTokenizer:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return dict(self.vocab)

        def decode(self, ids, skip_special_tokens=False):
            return " ".join(map(str, ids))

    a, b = make_tiny(0), make_tiny(1)
    a.tokenizer = VocabTokenizer({f"t{i}": i for i in range(96)})
    b.tokenizer = VocabTokenizer({**{f"t{i}": i for i in range(96)}, "t5": 6, "t6": 5})
    a.fingerprint, b.fingerprint = "vocab-a", "vocab-b"
    for name in ("sd", "csd", "lossy-sd"):
        with pytest.raises(VocabularyMismatchError, match="does not share the vocabulary.*first difference: 't5'"):
            run_method(name, a, [3, 4], {"max_new_tokens": 4}, draft=b, memory=CorrectionMemory())


def test_method_registry_and_defaults():
    assert {"sd", "csd", "csd-context", "lossy-sd", "sd-memory-only", "sd-gating-only", "hf-assisted"} <= set(METHODS)
    assert METHODS["sd"].lossless and not METHODS["csd"].lossless
    csd = resolve_params("csd")
    assert (csd["gamma"], csd["lam"], csd["tau"]) == (6, 6, 0.01)
    assert resolve_params("lossy-sd")["tau"] == 0.6 and resolve_params("sd-gating-only")["tau"] == 0.01
    assert "tau" not in resolve_params("sd-memory-only") and "lam" not in resolve_params("sd-gating-only")
    with pytest.raises(InvalidInputError, match="no effect"):
        resolve_params("sd", {"tau": 0.5})


def rescued_nodes(run):
    return [n for s in run.steps for n in s.nodes if n.decision == "rescued"]


def rejection_nodes(run):
    return [
        n for s in run.steps for n in s.nodes if n.decision in ("rejected", "rescued") and n.correction_id is not None
    ]


def test_csd_rescues_exactly_when_both_conditions_hold(target, drafts):
    mem = CorrectionMemory()
    prompt = prompt_of(3, 10)
    rescued, rejections = [], 0
    for i in range(3):  # the memory grows across runs: the first rescues nothing at λ = 2, later ones do
        run = run_method(
            "csd", target, prompt, {"max_new_tokens": 60, "lam": 2, "tau": 0.05}, draft=drafts["far"], memory=mem
        )
        for n in rejection_nodes(run):
            freq = n.mem_count >= 2
            safe = -n.logit_gap >= math.log(0.05)  # t* is the argmax at T = 0
            assert (n.decision == "rescued") == (freq and safe), n.reason
            assert n.threshold == 0.05
        # The gap as the target gives it (a fresh forward), not as the engine recorded it
        steps = sorted({s.index for s in run.steps for n in s.nodes if n.correction_id is not None})[:6]
        for n, fresh in fresh_node_stats(target, prompt, run, steps=steps, only=lambda n: n.correction_id is not None):
            if n.mem_count is not None and abs(-fresh.logit_gap - math.log(0.05)) > 1e-4:
                assert (n.decision == "rescued") == (n.mem_count >= 2 and -fresh.logit_gap >= math.log(0.05)), (
                    n,
                    fresh,
                )
        rescued.append(len(rescued_nodes(run)))
        rejections += len(rejection_nodes(run))
    assert rescued[-1] > 0 and mem.total == rejections  # every rejection and every rescue updated the memory once
    mem2 = CorrectionMemory()
    run = run_method(
        "csd", target, prompt, {"max_new_tokens": 60, "lam": 0, "tau": 0.05}, draft=drafts["far"], memory=mem2
    )
    assert mem2.total == len(rejection_nodes(run)) > 0
    assert Counter((n.token_id, n.correction_id) for n in rejection_nodes(run)) == Counter(mem2.snapshot())


def test_baselines_use_one_condition_each(target, drafts):
    prompt = prompt_of(4, 10)
    base = {"max_new_tokens": 50}
    gate = run_method("sd-gating-only", target, prompt, {**base, "tau": 0.05}, draft=drafts["far"])
    for n in rejection_nodes(gate):
        assert n.mem_count is None and (n.decision == "rescued") == (-n.logit_gap >= math.log(0.05))
    assert rescued_nodes(gate)
    lossy = run_method("lossy-sd", target, prompt, base, draft=drafts["far"])
    for n in rejection_nodes(lossy):
        assert n.threshold == 0.6 and (n.decision == "rescued") == (-n.logit_gap >= math.log(0.6))
    mem = CorrectionMemory()
    memo = run_method("sd-memory-only", target, prompt, {**base, "lam": 1}, draft=drafts["far"], memory=mem)
    for n in rejection_nodes(memo):
        assert (n.decision == "rescued") == (n.mem_count >= 1)
    assert mem.total == len(rejection_nodes(memo))
    plain = run_method("sd", target, prompt, base, draft=drafts["far"])
    assert not rescued_nodes(plain) and all(n.mem_count is None for n in rejection_nodes(plain))
    assert plain.output_ids == run_method("greedy", target, prompt, base).output_ids


def test_csd_without_a_draft_runs_over_context_drafts(target, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 5, 9, 22, 40, 41, 5, 9]
    # Fixed trees: under max_nodes=auto a steep machine drafts nothing from the context.
    run = run_method("csd", target, prompt, {"max_new_tokens": 40, "lam": 0, "tau": 0.05, "max_nodes": 16})
    sources = {n.source for s in run.steps for n in s.nodes if 0 < n.node and n.decision != "bonus"}
    assert sources and "draft" not in sources and sources <= {"context", "generated", "alignment"}
    assert run.draft_model is None
    for n in rejection_nodes(run):
        assert (n.decision == "rescued") == (-n.logit_gap >= math.log(0.05))
    # With no memory given, the run used the shared table keyed by the target alone, saved on request.
    from core.memory import shared_memory

    mem = shared_memory(target)
    assert mem.total == len(rejection_nodes(run)) > 0
    mem.save()
    assert memory_path(pair_fingerprint(target.fingerprint, None)).exists()
    explicit = run_method(
        "csd-context",
        target,
        prompt,
        {"max_new_tokens": 40, "lam": 0, "tau": 0.05, "max_nodes": 16},
        draft=make_tiny(1),
        memory=CorrectionMemory(),
    )
    assert explicit.output_ids == run.output_ids  # csd-context ignores a draft model


def test_methods_that_do_not_read_the_memory_leave_it_alone(target, drafts, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    for name in ("sd", "lossy-sd", "sd-gating-only"):
        run_method(name, target, prompt_of(2), {"max_new_tokens": 20}, draft=drafts["far"])
    from core.memory import _SHARED

    assert not any(str(p).startswith(str(tmp_path)) for p in _SHARED)


# -- rejection sampling ---------------------------------------------------------------------------
def two_step_world(vocab: int, seed: int):
    """Synthetic target and draft: first-token logits and second-token logits given the first."""
    g = torch.Generator().manual_seed(seed)
    zp1, zq1 = torch.randn(vocab, generator=g) * 1.5, torch.randn(vocab, generator=g) * 1.5
    zp2, zq2 = torch.randn(vocab, vocab, generator=g) * 1.5, torch.randn(vocab, vocab, generator=g) * 1.5
    return zp1, zq1, zp2, zq2


@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), pytest.param(0.7, 4, marks=pytest.mark.slow)])
def test_rejection_sampling_keeps_the_target_distribution(temperature, top_k):
    vocab, trials = 6, 15000
    zp1, zq1, zp2, zq2 = two_step_world(vocab, seed=11)
    procs = sampling_processors(temperature, top_k)
    warp = lambda z: torch.softmax(procs(None, z[None])[0], -1)  # noqa: E731
    gen = torch.Generator().manual_seed(0)
    counts = Counter()
    for _ in range(trials):
        q1 = warp(zq1)
        x1 = int(torch.multinomial(q1, 1, generator=gen))
        q2 = warp(zq2[x1])
        x2 = int(torch.multinomial(q2, 1, generator=gen))
        tree = DraftTree.root_only(0)
        tree.add(tree.add(0, x1, "draft"), x2, "draft")
        logits = torch.stack(
            [zp1, zp2[x1], torch.zeros(vocab)]
        )  # the last row is never reached by the first two tokens
        v = sample_walk(tree, logits, procs, gen, q_rows=torch.stack([q1, q2]))
        emitted = [tree.tokens[n] for n in v.path[1:]] + [v.bonus]
        if len(emitted) == 1:  # the next step starts from the target alone
            emitted.append(int(torch.multinomial(warp(zp2[emitted[0]]), 1, generator=gen)))
        counts[tuple(emitted[:2])] += 1
    p1 = warp(zp1)
    expected = np.array([float(p1[a] * warp(zp2[a])[b]) for a in range(vocab) for b in range(vocab)]) * trials
    observed = np.array([counts[(a, b)] for a in range(vocab) for b in range(vocab)])
    keep = expected > 0
    assert observed[~keep].sum() == 0  # nothing outside the target's support (top-k)
    expected = expected * observed.sum() / expected.sum()  # float32 sums are off by ~1e-7
    assert chisquare(observed[keep], expected[keep]).pvalue > 1e-3


def test_rejection_sampling_end_to_end_on_tiny_models():
    """First token of `sd` at T = 1 on an 8-token vocabulary against the target's exact distribution."""
    # p is spread over the vocabulary; the draft's q overlaps it by about 0.36.
    target, draft = make_tiny(0, vocab=8, layers=1, init=0.2), make_tiny(1, vocab=8, layers=1, init=0.2)
    draft.fingerprint = "tiny-8-draft"
    prompt = [2, 5, 3, 7, 4]
    with torch.no_grad():
        # float64: scipy's chisquare wants expected counts that sum to the observed ones within 1.5e-8
        p = torch.softmax(target.model(torch.tensor([prompt])).logits[0, -1].double(), -1).numpy()
        q = torch.softmax(draft.model(torch.tensor([prompt])).logits[0, -1].double(), -1).numpy()
    assert 0.5 * np.abs(p - q).sum() > 0.3  # the draft alone would fail the test below
    runs = 400
    firsts = Counter()
    accepted = 0
    for seed in range(runs):
        run = run_method(
            "sd", target, prompt, {"max_new_tokens": 2, "temperature": 1.0, "seed": seed, "gamma": 1}, draft=draft
        )
        firsts[run.output_ids[0]] += 1
        accepted += run.steps[0].accepted
    assert 0.1 * runs < accepted < 0.95 * runs  # the draft is neither always right nor always wrong
    observed = np.array([firsts[t] for t in range(8)])
    assert chisquare(observed, p / p.sum() * runs).pvalue > 1e-3
    assert chisquare(observed, q / q.sum() * runs).pvalue < 1e-3  # and the test can tell the two apart


def test_csd_sampling_records_the_residual_correction(target, drafts):
    mem = CorrectionMemory()
    run = run_method(
        "csd",
        target,
        prompt_of(9),
        {"max_new_tokens": 40, "temperature": 1.0, "seed": 1, "lam": 0, "tau": 0.05},
        draft=drafts["far"],
        memory=mem,
    )
    nodes = rejection_nodes(run)
    assert nodes and mem.total == len(nodes)
    for n in nodes:
        assert n.correction_id != n.token_id  # the residual has no mass on a rejected token
        gap = float(n.reason.split("z(x) − z(t*) ")[1].split(" ")[0])
        assert (n.decision == "rescued") == (gap >= math.log(0.05))


def test_the_confidence_threshold_is_tuned_to_the_roc_corner():
    from core.drafters.draft_model import START_CONFIDENCE, tune_threshold

    probs = [0.9, 0.8, 0.7, 0.3, 0.2, 0.1]
    assert tune_threshold(probs, [True, True, True, False, False, False]) == 0.7  # separable: the lowest accepted p
    assert tune_threshold(probs, [True] * 6) == START_CONFIDENCE  # one outcome only: nothing to tune
    assert tune_threshold([], []) == START_CONFIDENCE
    noisy = tune_threshold(probs, [True, False, True, True, False, False])
    assert 0.3 <= noisy <= 0.9


def quadratic_threshold(probs, accepted, current):
    """The O(n²) sweep tune_threshold replaced, kept as its reference: every distinct cut, counted afresh."""
    pos = sum(1 for a in accepted if a)
    neg = len(accepted) - pos
    if not pos or not neg:
        return current
    best, best_cost = current, float("inf")
    for cut in sorted(set(probs)):
        tpr = sum(1 for p, a in zip(probs, accepted) if a and p >= cut) / pos
        fpr = sum(1 for p, a in zip(probs, accepted) if not a and p >= cut) / neg
        cost = (1 - tpr) ** 2 + fpr**2
        if cost < best_cost:
            best, best_cost = cut, cost
    return best


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.4, 0.5, 0.9, 1.0]) | st.floats(0.0, 1.0), st.booleans()),
        max_size=80,
    )
)
def test_the_sorted_threshold_sweep_returns_the_quadratic_sweeps_threshold(history):
    """Random histories, with many tied probabilities (a few fixed values) and untied ones."""
    from core.drafters.draft_model import START_CONFIDENCE, tune_threshold

    probs, accepted = [p for p, _ in history], [a for _, a in history]
    assert tune_threshold(probs, accepted, START_CONFIDENCE) == quadratic_threshold(probs, accepted, START_CONFIDENCE)


def test_gamma_auto_drafts_what_it_is_confident_of_and_stays_lossless(target, drafts):
    lengths = set()
    for seed in range(2):
        prompt = prompt_of(seed, 5 + 9 * seed)
        ref = run_method("greedy", target, prompt, {"max_new_tokens": 40}).output_ids
        run = run_method("sd", target, prompt, {"max_new_tokens": 40, "gamma": "auto"}, draft=drafts["close"])
        assert run.output_ids == ref and run.params["gamma"] == 0
        lengths |= {s.tree_size for s in run.steps}
    assert len(lengths) >= 3  # the draft length follows the draft's confidence


def test_a_frozen_memory_is_read_not_written_and_runs_repeat(target, drafts):
    from core.memory import CorrectionMemory

    prompt = prompt_of(3, 12)
    mem = CorrectionMemory()
    run_method("csd", target, prompt, {"max_new_tokens": 40, "lam": 0, "tau": 0.05}, draft=drafts["far"], memory=mem)
    assert mem.total > 0  # online (the default): rejections were counted
    before = mem.snapshot()
    runs = [
        run_method(
            "csd",
            target,
            prompt,
            {"max_new_tokens": 40, "lam": 1, "tau": 0.05, "memory_mode": "frozen"},
            draft=drafts["far"],
            memory=mem,
        )
        for _ in range(2)
    ]
    assert mem.snapshot() == before  # frozen: read only
    assert runs[0].output_ids == runs[1].output_ids and runs[0].params["memory_mode"] == 1
    assert runs[0].params["memory_sha"] == mem.fingerprint() and runs[0].params["memory_pairs"] == len(mem)
    online = run_method(
        "csd", target, prompt, {"max_new_tokens": 40, "lam": 1, "tau": 0.05}, draft=drafts["far"], memory=mem
    )
    assert (
        mem.snapshot() != before and online.params["memory_sha"] == runs[0].params["memory_sha"]
    )  # recorded at the start
