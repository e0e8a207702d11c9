"""The engine on tiny random models: greedy equals transformers, any tree with strict verification
equals greedy, the cache adapter moves the right rows, and tree sampling is lossless."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import make_tiny

from core import cache as kv
from core.drafters import NoDraft, Proposal, TreeObserver
from core.engine import DecodeConfig, decode, forward_tree, prefill
from core.errors import InvalidInputError
from core.methods import get_method, make_verifier, resolve_params
from core.target_stats import sampling_processors
from core.tree import DraftTree


class AdversarialDrafter(NoDraft):
    """Knows the greedy continuation and hides it inside random trees: wrong tokens, deep chains,
    wide fans, the right token as a later sibling (so accepted rows are scattered in the cache)."""

    def __init__(self, reference: list[int], vocab: int, seed: int, max_nodes: int = 24):
        self.ref, self.vocab, self.rng, self.max_nodes = reference, vocab, random.Random(seed), max_nodes

    def begin(self, prompt_ids, prefill):
        self.n_prompt = len(prompt_ids)

    def propose(self, sequence):
        tree = DraftTree.root_only(sequence[-1])
        done = len(sequence) - self.n_prompt
        truth = self.ref[done : done + 12]
        style = self.rng.choice(["fan", "chain", "junk", "deep-wrong", "mixed"])
        frontier = [0]
        for depth, good in enumerate(truth):
            if tree.num_draft >= self.max_nodes:
                break
            parent = frontier[-1]
            wrong = [
                self.rng.randrange(self.vocab)
                for _ in range(self.rng.randint(0, 4 if style in ("fan", "mixed") else 1))
            ]
            for w in wrong:  # siblings first, so the true node lands at a later index
                if w != good and tree.num_draft < self.max_nodes:
                    junk = tree.add(parent, w, "context")
                    if style == "deep-wrong" and tree.num_draft < self.max_nodes:
                        tree.add_chain(
                            junk, [self.rng.randrange(self.vocab) for _ in range(3)], "context", budget=self.max_nodes
                        )
            if style == "junk" or (style == "mixed" and self.rng.random() < 0.2) or tree.num_draft >= self.max_nodes:
                break
            frontier.append(tree.add(parent, good, "generated"))
        return Proposal(tree)


def greedy_verifier():
    return make_verifier(get_method("greedy"), resolve_params("greedy", {"temperature": 0.0}))


def hf_greedy(tiny, prompt, n):
    out = tiny.model.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=[],
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
    )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_greedy_engine_equals_transformers_generate(seed):
    tiny = make_tiny(seed=seed)
    prompt = [random.Random(seed).randrange(2, 96) for _ in range(5 + 7 * seed)]
    ours = decode(
        tiny.model, tiny.tokenizer, [], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=40), 512
    )
    assert ours.output_ids == hf_greedy(tiny, prompt, 40)
    assert len(ours.steps) == 40 and all(len(s.emitted) == 1 for s in ours.steps)


@pytest.mark.parametrize("seed", range(12))
def test_adversarial_trees_reproduce_greedy(seed):
    tiny = make_tiny(seed=seed % 3)
    rng = random.Random(100 + seed)
    prompt = [rng.randrange(2, 96) for _ in range(rng.randint(1, 40))]
    reference = decode(
        tiny.model, tiny.tokenizer, [], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=48), 512
    ).output_ids
    res = decode(
        tiny.model,
        tiny.tokenizer,
        [],
        prompt,
        AdversarialDrafter(reference, 96, seed),
        greedy_verifier(),
        DecodeConfig(max_new_tokens=48),
        512,
    )
    assert res.output_ids == reference
    assert len(res.steps) < 48  # the hidden true tokens were accepted, so steps were saved
    scattered = [
        s for s in res.steps if s.accepted and any(n.decision == "accepted" and n.node != n.depth for n in s.nodes)
    ]
    assert scattered, "no step accepted a non-contiguous path: the cache gather went untested"


def test_keep_path_moves_the_right_rows(tiny):
    """Gather + crop equals the cache a plain forward over the accepted tokens would build."""
    prompt = [3, 4, 5, 6, 7, 8]
    cache = kv.new_cache(tiny.model)
    prefill(tiny.model, prompt[:-1], cache)
    tree = DraftTree.root_only(prompt[-1])
    a = tree.add(0, 10, "context")
    b = tree.add(0, 11, "context")
    c = tree.add(b, 12, "context")
    tree.add(a, 13, "context")
    d = tree.add(c, 14, "context")
    forward_tree(tiny.model, tree, len(prompt) - 1, cache)
    kv.keep_path(cache, len(prompt) - 1, [0, b, c, d])
    ref = kv.new_cache(tiny.model)
    prefill(tiny.model, prompt + [11, 12, 14], ref)
    assert kv.cache_length(cache) == kv.cache_length(ref) == len(prompt) + 3
    for got, want in zip(cache.layers, ref.layers):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-4, atol=1e-5)


def test_the_prompt_pass_gives_the_first_token(tiny):
    """The prompt's last row yields the first token, as in transformers' generate: greedy over n tokens
    runs n - 1 forwards of the model after the prompt pass, and a first step without drafts none."""
    calls = []
    hook = tiny.model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        res = decode(
            tiny.model,
            tiny.tokenizer,
            [],
            [3, 4, 5, 6],
            NoDraft(),
            greedy_verifier(),
            DecodeConfig(max_new_tokens=5),
            512,
        )
    finally:
        hook.remove()
    assert len(res.output_ids) == 5 and len(res.steps) == 5 and len(calls) == 4


class FixedDrafter(NoDraft):
    def __init__(self, chains):
        self.chains = chains

    def propose(self, sequence):
        tree = DraftTree.root_only(sequence[-1])
        for chain in self.chains:
            tree.add_chain(0, chain, "context")
        return Proposal(tree)


def test_no_draft_node_at_or_below_eos(tiny):
    """Drafting EOS (or past it) is wasted rows: the engine drops those nodes before the forward."""
    prompt = [3, 4, 5, 6]
    first = decode(
        tiny.model, tiny.tokenizer, [], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=1), 512
    ).output_ids[0]
    eos = (first + 1) % 96
    res = decode(
        tiny.model,
        tiny.tokenizer,
        [eos],
        prompt,
        FixedDrafter([[first, eos, 7], [eos, 8]]),
        greedy_verifier(),
        DecodeConfig(max_new_tokens=4),
        512,
    )
    assert res.steps[0].tree_size == 1 and [n.token_id for n in res.steps[0].nodes][:2] == [prompt[-1], first]


def test_stop_conditions(tiny):
    prompt = [5, 6, 7, 8, 9]
    full = decode(
        tiny.model, tiny.tokenizer, [], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=20), 512
    )
    eos = full.output_ids[6]
    cut = decode(
        tiny.model, tiny.tokenizer, [eos], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=20), 512
    )
    assert cut.stop_reason == "eos" and cut.output_ids == full.output_ids[: full.output_ids.index(eos) + 1]
    stop_text = f"t{full.output_ids[3]}"
    s = decode(
        tiny.model,
        tiny.tokenizer,
        [],
        prompt,
        NoDraft(),
        greedy_verifier(),
        DecodeConfig(max_new_tokens=20, stop_strings=[stop_text]),
        512,
    )
    assert s.stop_reason == "stop_string" and stop_text in tiny.tokenizer.decode(s.output_ids)
    assert len(s.output_ids) <= 4
    small = decode(
        tiny.model, tiny.tokenizer, [], prompt, NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=20), 12
    )
    assert small.stop_reason == "context_full" and len(prompt) + len(small.output_ids) <= 12


def test_bad_input_is_refused(tiny):
    args = (
        tiny.model,
        tiny.tokenizer,
        [],
    )
    with pytest.raises(InvalidInputError, match="empty"):
        decode(*args, [], NoDraft(), greedy_verifier(), DecodeConfig(), 512)
    with pytest.raises(InvalidInputError, match="the model reads at most 512"):
        decode(*args, list(range(2, 90)) * 6, NoDraft(), greedy_verifier(), DecodeConfig(), 512)
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        decode(*args, [3, 4], NoDraft(), greedy_verifier(), DecodeConfig(max_new_tokens=0), 512)


class RandomTreeDrafter(NoDraft):
    """Random deterministic trees over a small vocabulary, for the sampling test."""

    def __init__(self, vocab, seed):
        self.vocab, self.rng = vocab, random.Random(seed)

    def propose(self, sequence):
        tree = DraftTree.root_only(sequence[-1])
        for _ in range(self.rng.randint(0, 3)):
            tree.add_chain(0, [self.rng.randrange(self.vocab) for _ in range(2)], "context")
        return Proposal(tree)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 4, 0.9)])
def test_tree_sampling_matches_the_target_distribution(temperature, top_k, top_p):
    """Chi-square of the first two sampled tokens against the exact two-token distribution."""
    from scipy.stats import chisquare

    vocab = 6
    tiny = make_tiny(seed=3, vocab=vocab, layers=1, init=0.5)
    prompt = [2, 3, 4]
    procs = sampling_processors(temperature, top_k, top_p)
    with torch.no_grad():
        p1 = torch.softmax(procs(None, tiny.model(torch.tensor([prompt])).logits[:, -1].float()), -1)[0]
        rows = tiny.model(torch.tensor([prompt + [t] for t in range(vocab)])).logits[:, -1].float()
        p2 = torch.softmax(procs(None, rows), -1)
    exact = (p1[:, None] * p2).flatten().double().numpy()
    counts = np.zeros(vocab * vocab)
    n = 3000
    drafter = RandomTreeDrafter(vocab, seed=1)
    for i in range(n):
        verify = make_verifier(
            get_method("greedy"), {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": i}
        )
        out = decode(
            tiny.model, tiny.tokenizer, [], prompt, drafter, verify, DecodeConfig(max_new_tokens=2), 512
        ).output_ids
        counts[out[0] * vocab + out[1]] += 1
    keep = exact > 0
    assert counts[~keep].sum() == 0, "sampled a token the warpers exclude"
    expected = exact[keep] / exact[keep].sum() * n
    # pool cells with tiny expectations so the chi-square approximation holds
    big = expected >= 5
    obs = np.append(counts[keep][big], counts[keep][~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp / exp.sum() * obs.sum()
    assert chisquare(obs, exp).pvalue > 1e-3


class PredictionsDrafter(NoDraft):
    """Asks for prefill and per-token predictions, as alignment over generated text does."""

    prefill_topk = 3
    generated_topk = 2

    def commit(self, new_tokens, predictions):
        assert predictions.shape == (len(new_tokens), 2)


def test_the_result_keeps_the_prefill_predictions_when_generated_ones_are_kept_too(tiny):
    """DecodeResult.prefill is what the drafter got at the start: prompt length - 1 rows of prefill_topk ids
    (the engine once overwrote it with the last step's generated predictions)."""
    prompt = [3, 4, 5, 6, 7, 8]
    out = decode(
        tiny.model,
        tiny.tokenizer,
        [],
        prompt,
        PredictionsDrafter(),
        greedy_verifier(),
        DecodeConfig(max_new_tokens=6),
        512,
    )
    assert out.prefill.ids.shape == (len(prompt) - 1, 3)
    with torch.no_grad():
        logits = tiny.model(torch.tensor([prompt])).logits[0, :-1]
    assert out.prefill.ids[:, 0].tolist() == logits.argmax(-1).tolist()


class ObservingPredictionsDrafter(PredictionsDrafter, TreeObserver):
    """Declares both needs: every tree row's top-k (TreeObserver) and per-committed-token predictions."""

    tree_topk = 4

    def __init__(self):
        self.forwards, self.commits = [], []

    def observe_tree(self, forward):
        self.forwards.append(forward)

    def commit(self, new_tokens, predictions):
        self.commits.append(predictions)


def test_one_topk_serves_the_tree_observer_and_the_commit_predictions(tiny):
    """The engine computes the top max(tree_topk, generated_topk) ids of every row once: the commit's
    predictions are the path rows' first generated_topk columns, as when only they are wanted."""
    prompt = [3, 4, 5, 6, 7, 8] * 2
    d = ObservingPredictionsDrafter()
    out = decode(tiny.model, tiny.tokenizer, [], prompt, d, greedy_verifier(), DecodeConfig(max_new_tokens=8), 512)
    assert len(d.forwards) == len(d.commits) == len(out.steps)
    for fwd, preds, step in zip(d.forwards, d.commits, out.steps):
        assert fwd.ids.shape == (1, 4) and fwd.path == [0]  # root-only trees: one row
        assert preds.shape == (len(step.emitted), 2) and (preds == fwd.ids[fwd.path[: len(step.emitted)], :2]).all()
