"""The decoding loop of one request: prefill the prompt, then take steps (core.step) until a stop.

Each step drafts a tree, verifies it in one target forward, keeps the accepted path in the KV cache and
emits its tokens plus one bonus token. Plain greedy decoding is this loop with root-only trees. A request
alone in its cache (`SingleRow`) takes the cheapest forward there is: a chain goes through the model with
its own causal mask, and no slot is ever a hole, so there is no validity mask.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import Drafter, TopK
from core.hot_types import CausalLM, KVCache, Tokenizer
from core.sizing import TreeSizer
from core.step import (
    Cancelled,
    DecodeConfig,
    DecodeResult,
    ProgressCallback,
    Request,
    StepEnv,
    Verifier,
    check_request,
    mark_stops,
    prefill_chunks,
    step,
    stop_requested,
    sync,
)
from core.trace import StepTrace
from core.tree import DraftTree, is_chain, position_ids, tree_attention_mask

__all__ = ["Cancelled", "DecodeConfig", "DecodeResult", "SingleRow", "Verifier", "decode", "forward_tree", "prefill"]

TOPK_CHUNK = 256  # prompt positions per lm-head chunk when keeping prefill top-k


def decode_cpu_clock(device) -> Callable[[], float] | None:
    """The clock of a run's decoding CPU time: on a CPU with one torch thread, this thread's CPU time (the forwards
    run in it); with more, the whole process's (`time.process_time`), so every torch thread's work counts (the
    decoding thread's alone was 0.44× the wall time on two threads, leaving out the other's work) and the app's
    other threads add a little; on a GPU none (this thread's time is launches and waits, not the work)."""
    if torch.device(device).type != "cpu":
        return None
    return time.thread_time if torch.get_num_threads() == 1 else time.process_time


@torch.inference_mode()
def decode(
    model: CausalLM,
    tokenizer: Tokenizer,
    eos_ids: Sequence[int],
    prompt_ids: list[int],
    drafter: Drafter,
    verifier: Verifier,
    cfg: DecodeConfig,
    max_context: int,
    on_step: Callable[[StepTrace], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    sizer: TreeSizer | None = None,
    on_prefill: ProgressCallback | None = None,
) -> DecodeResult:
    """Decode `prompt_ids` with the drafter's trees and the verifier's decisions; with a `sizer`
    (max_nodes=auto) each proposed tree is first cut to the size that pays most on this hardware.
    `on_prefill(done, total)` follows the prompt's prefill chunk by chunk; `should_stop` is asked between
    prefill chunks and before every step, and a Stop raises Cancelled with what was decoded."""
    check_request(prompt_ids, cfg, max_context)
    request, env = Request(list(prompt_ids), drafter, verifier, cfg, sizer), StepEnv(tokenizer, eos_ids, max_context)
    cache = kv.new_cache(model)
    t0 = time.perf_counter()
    try:
        # The whole prompt goes in here, its last row giving the first step's root distribution: one forward
        # fewer than feeding the last prompt token with the first draft, and what transformers' generate does.
        request.prefill, root_logits = prefill(model, prompt_ids, cache, drafter.prefill_topk, should_stop, on_prefill)
    except Cancelled:
        raise Cancelled(request.result(time.perf_counter() - t0)) from None
    drafter.begin(list(prompt_ids), request.prefill)  # a draft model prefills here too: time it as prefill
    sync(model.device)
    prefill_seconds = time.perf_counter() - t0

    rows = SingleRow(model, cache, root_logits)
    cpu_clock = decode_cpu_clock(model.device)  # RunTrace.decode_cpu_seconds' clock: time waited for a core is left out
    t_decode, cpu_decode = time.perf_counter(), cpu_clock() if cpu_clock else 0.0
    while request.stop_reason is None:
        mark_stops([request], env, stop_requested(should_stop))
        if request.stop_reason is None:
            [trace] = step(rows, [request], env)
            if on_step is not None:
                on_step(trace)
    request.decode_seconds = time.perf_counter() - t_decode
    request.decode_cpu_seconds = cpu_clock() - cpu_decode if cpu_clock else None
    if request.stop_reason == "cancelled":
        raise Cancelled(request.result(prefill_seconds))
    return request.result(prefill_seconds)


class SingleRow:
    """One request alone in its cache (core.step.Rows): its tree goes through the model with the cheapest
    mask that is exact, and its accepted path moves into place (core.cache.keep_path)."""

    def __init__(self, model: CausalLM, cache: KVCache, root_logits: torch.Tensor | None = None):
        self.model, self.cache = model, cache
        self.root_logits = root_logits  # the prompt pass's last row: the first step's root is already in the cache

    def forward(self, requests: Sequence[Request], trees: Sequence[DraftTree]) -> list[torch.Tensor]:
        logits = forward_tree(self.model, trees[0], requests[0].length, self.cache, self.root_logits)
        self.root_logits = None  # from the second step on, the root is the last step's bonus, not yet fed
        sync(self.model.device)
        return [logits]

    def keep(self, requests: Sequence[Request], paths: Sequence[Sequence[int]]) -> None:
        kv.keep_path(self.cache, requests[0].length, paths[0])


@torch.inference_mode()
def prefill(
    model: CausalLM,
    ids: list[int],
    cache: KVCache,
    keep_topk: int = 0,
    should_stop: Callable[[], bool] | None = None,
    on_prefill: ProgressCallback | None = None,
) -> tuple[TopK | None, torch.Tensor]:
    """Fill the cache with `ids` and return the logits that follow the last one, as (V,); optionally
    keep the top-k predictions at every earlier position (the rows that predict ids[1:]). Between chunks a
    Stop raises Cancelled(None), and `on_prefill` hears the progress (core.step.prefill_chunks).

    Runs the decoder without the LM head, then applies the head to the last row, and in small
    chunks to the others only when top-k is wanted: full logits of a long prompt take hundreds of MB.
    """
    device = model.device
    decoder = model.get_decoder()
    head = model.get_output_embeddings()
    ids_parts = []
    for start, end in prefill_chunks(len(ids), should_stop, on_prefill):
        chunk = torch.tensor([ids[start:end]], device=device)
        pos = torch.arange(start, end, device=device)[None]
        hidden = decoder(
            input_ids=chunk, position_ids=pos, use_cache=True, **kv.cache_arg(decoder, cache)
        ).last_hidden_state[0]
        rows = min(hidden.shape[0], len(ids) - 1 - start)  # the last id's row is the first step's root
        for s in range(0, rows, TOPK_CHUNK) if keep_topk else ():
            # Top-k of the logits is top-k of the probabilities: no softmax over the vocabulary needed.
            top = head(hidden[s : min(s + TOPK_CHUNK, rows)]).float().topk(keep_topk, dim=-1)
            ids_parts.append(top.indices.to(torch.int32).cpu().numpy())
    last_logits = head(hidden[-1:].contiguous())[0]
    if not keep_topk:
        return None, last_logits
    if not ids_parts:  # a one-token prompt: nothing before the pending token
        return TopK(np.zeros((0, keep_topk), np.int32)), last_logits
    return TopK(np.concatenate(ids_parts)), last_logits


@torch.inference_mode()
def forward_tree(
    model: CausalLM, tree: DraftTree, past_len: int, cache: KVCache, root_logits: torch.Tensor | None = None
) -> torch.Tensor:
    """One target forward over the tree; (Q, V) logits. Chains use the model's own causal mask.

    With `root_logits` the root is already in the cache (the prompt pass fed it, as transformers'
    generate does) and those are its logits: only the draft nodes go through the model, and a tree
    without drafts needs no forward at all.
    """
    device = model.device
    skip = 0 if root_logits is None else 1
    if root_logits is not None and tree.num_draft == 0:
        return root_logits[None]
    input_ids = torch.tensor([tree.tokens[skip:]], device=device)
    mask = (
        None
        if is_chain(tree.parents)
        else tree_attention_mask(tree.parents, past_len, model.dtype, device)[:, :, skip:]
    )
    out = model(
        input_ids=input_ids,
        position_ids=position_ids(tree.depths, past_len, device)[:, skip:],
        attention_mask=mask,
        use_cache=True,
        **kv.cache_arg(model, cache),
    )
    return out.logits[0] if root_logits is None else torch.cat([root_logits[None], out.logits[0]])
