"""Batched decoding: B prompts at once, each row with its own drafter, tree, verdict and trace.

The step of core.step (the same as core.engine's for one request) over B rows, one forward for the whole
batch (`PaddedRows`):
- prompts are left-padded; the cache holds, per row, every committed token but the pending root;
- each step pads the rows' trees to the widest, with one 4D mask per row (its valid cache slots, its
  tree's ancestors; padding slots see only themselves, so no row is fully masked);
- each row keeps its own accepted path (core.cache.keep_paths), leaving holes where it accepted fewer
  tokens than the longest row; holes are squeezed out once they waste more than REPACK_SLACK slots;
- a row that finishes leaves the batch: it stops costing compute, and with more prompts than `slots`
  the next waiting prompt takes its place (prefilled in a cache of its own, then appended: continuous
  batching, so the batch stays full until the queue runs dry);
- with max_nodes=auto all rows get one tree size (core.sizing.common_size): a row padded to the widest
  tree pays for nodes it does not have, so sizes are chosen for the batch's forward, not for each row.
Position ids count each row's real tokens, so a row sees what it would see alone (up to the rounding
of a wider matmul: in float32 strict methods give each row its batch-1 tokens, bar near-ties).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import Drafter, TopK
from core.errors import InvalidInputError
from core.hot_types import CausalLM, Tokenizer
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
from core.tree import DraftTree, ancestor_matrix

REPACK_SLACK = 64  # holes (slots per row beyond the longest row's real tokens) tolerated before compaction


def batch_bytes(config, dtype: torch.dtype, rows: int, prompt_len: int, max_new: int, width: int = 65) -> int:
    """What a batch adds to memory at its peak, roughly: the KV cache of `rows` rows of prompt + output +
    one tree + the tolerated holes, the prefill chunk's mask, and one step's logits. Pure."""
    elem = torch.finfo(dtype).bits // 8
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    slots = prompt_len + max_new + width + REPACK_SLACK
    cache = 2 * config.num_hidden_layers * heads * head_dim * elem * rows * slots
    chunk = min(prompt_len, kv.PREFILL_CHUNK)
    mask = rows * chunk * min(prompt_len, slots) * elem
    logits = rows * width * config.vocab_size * 4
    return cache + mask + logits


def free_bytes(device: torch.device) -> int:
    """Memory free for new tensors on `device` (CUDA: the driver's count; otherwise the system's available RAM)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


def check_batch_fits(model, prompts: Sequence[list[int]], max_new: int) -> None:
    """Refuse, before any work, a batch whose cache and masks would not fit in free memory."""
    need = batch_bytes(model.config, model.dtype, len(prompts), max(len(p) for p in prompts), max_new)
    free = free_bytes(model.device)
    if need > 0.9 * free:
        raise InvalidInputError(
            f"a batch of {len(prompts)} prompts of up to {max(len(p) for p in prompts)} tokens with {max_new} new tokens "
            f"needs about {need / 2**30:.1f} GiB for its cache, masks and logits, and {free / 2**30:.1f} GiB are free: "
            "use a smaller --batch-size, shorter prompts or fewer new tokens"
        )


def padded_mask(valid: torch.Tensor, trees: Sequence[DraftTree], width: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, W, C + W) additive mask: row b's query i sees b's valid cache slots and its tree ancestors;
    a padding query (i >= len(tree b)) sees only itself. Pure: tested without a model."""
    b, c = valid.shape
    tree_part = torch.zeros((b, width, width), dtype=torch.bool)
    for r, tree in enumerate(trees):
        q = len(tree)
        tree_part[r, :q, :q] = ancestor_matrix(tree.parents)
        tree_part[r, range(q, width), range(q, width)] = True
    past = valid[:, None, :].expand(b, width, c).clone()
    for r, tree in enumerate(trees):
        past[r, len(tree) :] = False  # padding queries: themselves only
    allowed = torch.cat([past, tree_part.to(valid.device)], dim=-1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


@torch.inference_mode()
def decode_batch(
    model: CausalLM,
    tokenizer: Tokenizer,
    eos_ids: Sequence[int],
    prompts: Sequence[list[int]],
    drafters: Sequence[Drafter],
    verifiers: Sequence[Verifier],
    cfg: DecodeConfig | Sequence[DecodeConfig],
    max_context: int,
    sizers: Sequence[TreeSizer | None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    slots: int | None = None,
    on_prefill: ProgressCallback | None = None,
) -> list[DecodeResult]:
    """Decode every prompt with its drafter and verifier, batched; one DecodeResult per prompt, in order.
    `cfg` is one DecodeConfig for all rows or one per row.

    At most `slots` rows decode at once (all of them when None); a waiting prompt takes the place of a
    row that finished, so the batch stays full until the queue runs dry (continuous batching). Times are
    the stream's: a row's decode_seconds is the stream's decode time until that row finished (time spent
    prefilling admitted prompts excluded), prefill_seconds the stream's whole prefill time.
    `on_prefill(done, total)` follows the prefill of every admitted prompt, counted over the whole batch;
    `should_stop` is asked between prefill chunks and before every step (stopped rows end `cancelled`)."""
    if not prompts:
        raise InvalidInputError("the batch is empty: give at least one prompt")
    cfgs = [cfg] * len(prompts) if isinstance(cfg, DecodeConfig) else list(cfg)
    for p, c in zip(prompts, cfgs, strict=True):
        check_request(p, c, max_context)
    slots = len(prompts) if slots is None else slots
    if slots < 1:
        raise InvalidInputError(f"a batch needs at least one slot (got {slots})")
    longest = sorted(prompts, key=len, reverse=True)[:slots]
    check_batch_fits(model, longest, max(c.max_new_tokens for c in cfgs))
    sizers = list(sizers) if sizers is not None else [None] * len(prompts)
    requests = [
        Request(list(p), d, v, c, s) for p, d, v, s, c in zip(prompts, drafters, verifiers, sizers, cfgs, strict=True)
    ]
    env = StepEnv(tokenizer, eos_ids, max_context)
    rows = PaddedRows(model, pad_id=int(eos_ids[0]) if eos_ids else 0, prompt_tokens=sum(len(p) - 1 for p in prompts))
    waiting = deque(requests)
    active: list[Request] = []  # cache row b is active[b]
    while active or waiting:
        cancelled = stop_requested(should_stop)
        if waiting and len(active) < slots and not cancelled:
            admitted = [waiting.popleft() for _ in range(min(slots - len(active), len(waiting)))]
            try:
                rows.admit(active, admitted, should_stop, on_prefill)
                active += admitted
            except Cancelled:  # stopped during their prefill: they end with no step, like the rows still waiting
                cancelled = True
        mark_stops(active, env, cancelled)
        active = rows.drop_finished(active)
        if not active:
            if cancelled:
                break
            continue
        step(rows, active, env)
        active = rows.drop_finished(active)
    return [r.result(rows.prefill_seconds) for r in requests]


class PaddedRows:
    """B requests sharing one cache (core.step.Rows), aligned physically: slot j of every row holds a real token
    of that row or a hole that `valid` (B, C) hides. Prompts are left-padded; trees are padded to the widest
    with one 4D mask per row; each row keeps its own accepted path, leaving holes behind a shorter one."""

    def __init__(self, model: CausalLM, pad_id: int, prompt_tokens: int):
        self.model, self.pad_id = model, pad_id
        self.cache = kv.new_cache(model)
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=model.device)
        self.prompt_tokens, self.prefilled = prompt_tokens, 0  # what on_prefill counts
        self.prefill_seconds = 0.0  # spent prefilling admitted prompts
        self.started = time.perf_counter()

    def decode_seconds(self) -> float:
        return time.perf_counter() - self.started - self.prefill_seconds

    def forward(self, requests: Sequence[Request], trees: Sequence[DraftTree]) -> list[torch.Tensor]:
        width = max(len(t) for t in trees)
        ids = torch.full((len(trees), width), self.pad_id, dtype=torch.long)
        pos = torch.zeros((len(trees), width), dtype=torch.long)
        for b, (r, tree) in enumerate(zip(requests, trees)):
            ids[b, : len(tree)] = torch.tensor(tree.tokens)
            pos[b, : len(tree)] = torch.tensor(tree.depths) + r.length
            pos[b, len(tree) :] = r.length
        mask = padded_mask(self.valid, trees, width, self.model.dtype)
        device = self.model.device
        logits = self.model(
            input_ids=ids.to(device),
            position_ids=pos.to(device),
            attention_mask=mask.to(device),
            use_cache=True,
            **kv.cache_arg(self.model, self.cache),
        ).logits
        sync(device)
        return [logits[b, : len(tree)] for b, tree in enumerate(trees)]

    def keep(self, requests: Sequence[Request], paths: Sequence[Sequence[int]]) -> None:
        kv.keep_paths(self.cache, self.valid.shape[1], paths)
        grown = torch.zeros((len(paths), max(len(p) for p in paths)), dtype=torch.bool, device=self.valid.device)
        for b, path in enumerate(paths):
            grown[b, : len(path)] = True
        self.valid = _repack(self.cache, torch.cat([self.valid, grown], dim=1))

    def admit(
        self,
        active: Sequence[Request],
        admitted: list[Request],
        should_stop: Callable[[], bool] | None,
        on_prefill: ProgressCallback | None,
    ) -> None:
        """Prefill the admitted prompts in a cache of their own, then append their rows below the active ones."""
        t0 = time.perf_counter()
        try:
            keep_topk = max(r.drafter.prefill_topk for r in admitted)
            cache = kv.new_cache(self.model)
            valid = self._prefill(admitted, cache, keep_topk, should_stop, on_prefill)
            for r in admitted:
                want = r.drafter.prefill_topk
                r.drafter.begin(
                    list(r.prompt), TopK(r.prefill.ids[:, :want]) if want and r.prefill is not None else None
                )
            kv.append_rows(self.cache, cache, len(active), len(admitted))
            width = max(self.valid.shape[1], valid.shape[1])
            self.valid = torch.cat(
                [_left_pad_slots(self.valid[: len(active)], width), _left_pad_slots(valid, width)], dim=0
            )
            sync(self.model.device)
        finally:
            self.prefill_seconds += time.perf_counter() - t0

    def _prefill(
        self,
        requests: list[Request],
        cache,
        keep_topk: int,
        should_stop: Callable[[], bool] | None,
        on_prefill: ProgressCallback | None,
    ) -> torch.Tensor:
        """Feed every prompt but its last token, left-padded, in chunks; returns the validity mask (B, C)."""
        width = max(len(r.prompt) - 1 for r in requests)
        device, dtype = self.model.device, self.model.dtype
        valid = torch.zeros((len(requests), width), dtype=torch.bool)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        pos = torch.zeros((len(requests), width), dtype=torch.long)
        for b, r in enumerate(requests):
            n = len(r.prompt) - 1
            if n:
                valid[b, width - n :] = True
                ids[b, width - n :] = torch.tensor(r.prompt[:-1])
                pos[b, width - n :] = torch.arange(n)
        topk_parts: list[list[np.ndarray]] = [[] for _ in requests]
        decoder, head = self.model.get_decoder(), self.model.get_output_embeddings()
        done = self.prefilled
        for s, e in prefill_chunks(width, should_stop):
            causal = torch.ones((e - s, e), dtype=torch.bool).tril(s)
            allowed = valid[:, None, :e] & causal[None]
            diag = torch.arange(e - s)
            allowed[:, diag, s + diag] = True  # padding rows see themselves: never fully masked
            mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
            hidden = decoder(
                input_ids=ids[:, s:e].to(device),
                position_ids=pos[:, s:e].to(device),
                attention_mask=mask[:, None].to(device),
                use_cache=True,
                **kv.cache_arg(decoder, cache),
            ).last_hidden_state
            if keep_topk:
                for b in range(len(requests)):
                    real = valid[b, s:e].nonzero().flatten()
                    if len(real):
                        top = head(hidden[b, real.to(hidden.device)]).float().topk(keep_topk, dim=-1)
                        topk_parts[b].append(top.indices.to(torch.int32).cpu().numpy())
            self.prefilled = done + int(valid[:, :e].sum())
            if on_prefill is not None:
                on_prefill(self.prefilled, self.prompt_tokens)
        if keep_topk:
            for b, r in enumerate(requests):
                r.prefill = TopK(np.concatenate(topk_parts[b]) if topk_parts[b] else np.zeros((0, keep_topk), np.int32))
        return valid.to(device)

    def drop_finished(self, active: list[Request]) -> list[Request]:
        """The active requests without the finished ones, whose rows leave the cache (they stop costing compute)."""
        keep = [b for b, r in enumerate(active) if r.stop_reason is None]
        if len(keep) == len(active):
            return active
        for r in active:
            if r.stop_reason is not None:
                r.decode_seconds = self.decode_seconds()
        kv.select_rows(self.cache, keep)
        self.valid = self.valid[keep]
        return [active[b] for b in keep]


def _left_pad_slots(valid: torch.Tensor, width: int) -> torch.Tensor:
    """A (B, C) validity mask widened to `width` slots with invalid ones on the left, as kv.append_rows pads."""
    return torch.nn.functional.pad(valid, (width - valid.shape[1], 0), value=False)


def _repack(cache, valid: torch.Tensor) -> torch.Tensor:
    """Squeeze holes out once they waste more than REPACK_SLACK slots: each row's valid slots, in order,
    right-aligned (positions ids are per row, so moving a slot changes nothing the model sees)."""
    counts = valid.sum(dim=1)
    width = int(counts.max())
    if valid.shape[1] - width <= REPACK_SLACK:
        return valid
    index = torch.zeros((valid.shape[0], width), dtype=torch.long)
    packed = torch.zeros((valid.shape[0], width), dtype=torch.bool)
    for b in range(valid.shape[0]):
        slots = valid[b].nonzero().flatten().cpu()
        index[b, width - len(slots) :] = slots
        packed[b, width - len(slots) :] = True
    kv.gather_slots(cache, index)
    return packed.to(valid.device)
