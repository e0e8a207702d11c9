"""On a CUDA device: exactness, the host syncs of a step, and the 4D tree mask under SDPA.

These run only where torch sees a CUDA device (`pytest -m cuda` selects them); elsewhere each is skipped with the
reason. The CPU suite cannot show any of this: there a "transfer" is free and the SDPA kernels are CPU's.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import make_tiny, perturbed

from core import cache as kv
from core.engine import forward_tree
from core.methods import run_method
from core.tree import DraftTree

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none here)"),
]

PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]


def on_cuda(model):
    model.model = model.model.to("cuda")
    model.device = torch.device("cuda")
    return model


@pytest.fixture(scope="module")
def target():
    return on_cuda(make_tiny())


@pytest.fixture(scope="module")
def draft():
    return on_cuda(perturbed(0, 0.1))


@pytest.mark.parametrize("method", ["pld", "aasd-strict", "recycle", "sd"])
def test_strict_methods_equal_greedy_in_float32_on_cuda(target, draft, method):
    ref = run_method("greedy", target, PROMPT, {"max_new_tokens": 40}).output_ids
    run = run_method(method, target, PROMPT, {"max_new_tokens": 40}, draft=draft if method == "sd" else None)
    assert run.output_ids == ref


def test_sampling_runs_on_the_device(target, draft):
    """T > 0: the sampling walk and the draft model draw on the device (a CPU generator there would raise)."""
    run = run_method("sd", target, PROMPT, {"max_new_tokens": 24, "temperature": 0.8, "seed": 3}, draft=draft)
    assert len(run.output_ids) == 24 or run.stop_reason == "eos"


def syncs_per_step(method: str, target, draft=None) -> list[int]:
    """Host syncs between consecutive steps, as torch.cuda.set_sync_debug_mode("warn") reports them."""
    counts: list[int] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_method(
                method,
                target,
                PROMPT,
                {"max_new_tokens": 24},
                draft=draft,
                on_step=lambda trace: counts.append(sum("synchroniz" in str(w.message) for w in caught)),
            )
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [b - a for a, b in zip(counts, counts[1:])]


@pytest.mark.parametrize("method", ["greedy", "pld", "aasd", "recycle"])
def test_a_tree_step_syncs_once(target, method):
    assert max(syncs_per_step(method, target)) <= 1


def test_a_draft_model_step_syncs_twice(target, draft):
    assert max(syncs_per_step("sd", target, draft)) <= 2


def test_a_tree_forward_under_sdpa_matches_each_branch_fed_alone(target):
    """The 4D ancestor mask under SDPA: every node's logits equal those of its root path fed as a plain sequence."""
    assert target.model.config._attn_implementation == "sdpa"
    past = [3, 9, 4, 12, 7]
    tree = DraftTree.root_only(11)
    a = tree.add(0, 20, "context")
    tree.add(a, 21, "context")
    b = tree.add(0, 30, "context")
    tree.add(b, 31, "context")
    tree.add(b, 32, "context")
    with torch.inference_mode():
        cache = kv.new_cache(target.model)
        target.model(input_ids=torch.tensor([past], device="cuda"), use_cache=True, **kv.cache_arg(target.model, cache))
        logits = forward_tree(target.model, tree, len(past), cache)
        for node in range(len(tree)):
            path = tree.path_to(node)
            ids = past + [tree.tokens[n] for n in path]
            alone = target.model(input_ids=torch.tensor([ids], device="cuda")).logits[0, -1]
            torch.testing.assert_close(logits[node], alone, rtol=1e-4, atol=1e-4)
